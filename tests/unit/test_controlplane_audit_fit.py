"""The control-plane audit's liveness check (tests/controlplane/audit.py): a pending pod that something fits is
reported, one that nothing fits is not, and pending pods of one shape on one state are planned once (the chaos run
audits hundreds of pending pods on 1,000 nodes every 30 s)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.controlplane import audit as audit_module
from tests.controlplane.harness import NodeShape, gpu_node, gpu_pod
from vgpu_scheduler.shared.domain.plan import plan as real_plan


def nodes(count: int) -> list[dict[str, Any]]:
    return [gpu_node(f"n{i}", NodeShape(gpus=2), {}) for i in range(count)]


def pending(name: str, **kwargs: Any) -> dict[str, Any]:
    pod = gpu_pod(name, **kwargs)
    pod["metadata"].update(namespace="ns", uid=f"uid-{name}")
    return pod


def counting_plan(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []

    def plan(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real_plan(*args, **kwargs)

    monkeypatch.setattr(audit_module, "plan", plan)
    return calls


def test_pending_pods_of_one_shape_are_planned_once_and_each_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = counting_plan(monkeypatch)
    pods = [pending(f"p{i}", mem=2000, cores=10) for i in range(5)] + [pending("q", mem=3000, cores=10)]
    report = audit_module.audit(pods, nodes(3))
    fits = sorted(f.split(" ", 1)[0] for f in report.liveness if " pending, but fits on " in f)
    assert fits == ["ns/p0", "ns/p1", "ns/p2", "ns/p3", "ns/p4", "ns/q"]
    assert sorted(report.fits) == fits and all(len(on) == 1 for on in report.fits.values())
    assert len(calls) == 2


def test_a_pod_nothing_fits_is_unschedulable_not_a_finding(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = counting_plan(monkeypatch)
    pods = [pending("big", gpus=3), pending("big2", gpus=3), pending("small", gpus=1)]
    report = audit_module.audit(pods, nodes(2))
    assert [f.split(" ", 1)[0] for f in report.liveness] == ["ns/small"]
    assert report.unschedulable == 2
    assert len(calls) == 2


def test_pods_under_a_quota_are_planned_with_their_namespace_quota(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = counting_plan(monkeypatch)
    quota = {"metadata": {"namespace": "ns", "name": "q"}, "spec": {"hard": {"limits.nvidia.com/gpumem": "1000"}}}
    pods = [pending("a", mem=2000), pending("b", mem=2000)]
    report = audit_module.audit(pods, nodes(1), [quota])
    assert report.liveness == []
    assert report.unschedulable == 2
    assert len(calls) == 1


def gang(group: str, size: int, **kwargs: Any) -> list[dict[str, Any]]:
    members = [pending(f"{group}-{i}", **kwargs) for i in range(size)]
    for pod in members:
        pod["spec"]["schedulingGroup"] = {"podGroupName": group}
    return members


def test_pending_gangs_of_one_shape_are_placed_once_and_each_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = counting_plan(monkeypatch)
    pods = [pod for g in ("g1", "g2", "g3", "g4") for pod in gang(g, 3, gpus=1)]
    report = audit_module.audit(pods, nodes(2))
    groups = ("g1", "g2", "g3", "g4")
    assert report.liveness == [f"gang ns/{g} of 3 pending, but its members fit together" for g in groups]
    assert set(report.fits) == {f"ns/{g}" for g in groups}
    assert all(len(on) == 3 and set(on) <= {"n0", "n1"} for on in report.fits.values())  # each member's node
    assert len(calls) == 3  # the three members of one gang, placed one after another, once


def test_a_gang_whose_last_member_does_not_fit_is_unschedulable(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = counting_plan(monkeypatch)
    whole = {"gpus": 2, "mem": None, "cores": 100}
    pods = gang("g1", 3, **whole) + gang("g2", 3, **whole) + gang("g3", 1, **whole)
    report = audit_module.audit(pods, nodes(2))
    assert report.liveness == ["gang ns/g3 of 1 pending, but its members fit together"]
    assert list(report.fits) == ["ns/g3"]
    assert report.unschedulable == 6
    assert sorted(n for n in report.notes if n.startswith("gang")) == [
        "gang of 3 pending: ns/g1-2 does not fit with the others placed",
        "gang of 3 pending: ns/g2-2 does not fit with the others placed",
    ]
    assert len(calls) == 3 + 1
