"""The API server's Priority admission as the simulator plays it (services/simulate/priority.py)."""

from __future__ import annotations

from typing import Any

from vgpu_scheduler.services.simulate.priority import Forbidden, PriorityAdmission


def pc(name: str, value: int, **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        **extra,
    }


def pod(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}], **spec}}


def admitted(result: dict[str, Any] | Forbidden) -> dict[str, Any]:
    assert not isinstance(result, Forbidden), result
    spec: dict[str, Any] = result["spec"]
    return spec


def test_a_class_gives_its_value_and_preemption_policy() -> None:
    adm = PriorityAdmission([pc("high", 1000), pc("polite", 500, preemptionPolicy="Never")])
    assert admitted(adm.admit(pod(priorityClassName="high")))["priority"] == 1000
    spec = admitted(adm.admit(pod(priorityClassName="polite")))
    assert (spec["priority"], spec["preemptionPolicy"]) == (500, "Never")
    assert admitted(adm.admit(pod(priorityClassName="system-cluster-critical")))["priority"] == 2_000_000_000


def test_no_class_takes_the_global_default_else_zero() -> None:
    assert admitted(PriorityAdmission().admit(pod()))["priority"] == 0
    adm = PriorityAdmission([pc("a", 30, globalDefault=True), pc("b", 20, globalDefault=True)])
    spec = admitted(adm.admit(pod()))
    assert (spec["priority"], spec["priorityClassName"]) == (20, "b")  # the lowest default, as the plugin picks


def test_what_the_plugin_forbids() -> None:
    adm = PriorityAdmission([pc("high", 1000, preemptionPolicy="Never")])
    assert adm.admit(pod(priorityClassName="nope")) == Forbidden(
        'pods "p" is forbidden: no PriorityClass with name nope was found'
    )
    refused = adm.admit(pod(priority=5))
    assert isinstance(refused, Forbidden) and "priority (5) must not be provided" in refused.message
    assert "computed 0" in refused.message
    assert admitted(adm.admit(pod(priorityClassName="high", priority=1000)))["priority"] == 1000  # agreeing: kept
    refused = adm.admit(pod(priorityClassName="high", preemptionPolicy="PreemptLowerPriority"))
    assert isinstance(refused, Forbidden) and "PreemptionPolicy (PreemptLowerPriority)" in refused.message
    original = pod(priorityClassName="high")
    adm.admit(original)
    assert "priority" not in original["spec"]  # the input is not changed
