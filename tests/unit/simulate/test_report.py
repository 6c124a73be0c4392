"""The report: device state from API objects, the audit, the summary figures and their definitions."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import gpu
from vgpu_scheduler.services.simulate.report import (
    ADMISSION,
    PodResult,
    Preemption,
    audit,
    controllers_json,
    device_states,
    reason_types,
    summarize,
)
from vgpu_scheduler.shared.codec.register import encode_register_json


def node(name: str, *devices: Any, allocatable: str = "10", cordon: str | None = None) -> dict[str, Any]:
    annotations = {"hami.io/node-nvidia-register": encode_register_json(list(devices))}
    if cordon is not None:
        annotations["hami.io/device-cordon"] = cordon
    return {
        "metadata": {"name": name, "annotations": annotations},
        "status": {"allocatable": {"nvidia.com/gpu": allocatable}},
    }


def pod(name: str, node_name: str, allocated: str, *, phase: str = "Running", init: int = 0) -> dict[str, Any]:
    containers = [{"name": f"c{i}"} for i in range(allocated.count(";") - init)]
    spec: dict[str, Any] = {"containers": containers, "nodeName": node_name}
    if init:
        spec["initContainers"] = [{"name": f"i{i}"} for i in range(init)]
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "annotations": {"hami.io/vgpu-node": node_name, "hami.io/vgpu-devices-allocated": allocated},
        },
        "spec": spec,
        "status": {"phase": phase},
    }


NODES = [
    node("n1", gpu("A", mem=10000), gpu("B", index=1, mem=10000)),
    node("n2", gpu("C", mem=20000), gpu("D", index=1, mem=20000, health=False), cordon="E"),
    node("dead", gpu("F", mem=5000), allocatable="0"),
]


def test_device_states_charge_holding_pods_and_mark_usable_devices() -> None:
    pods = [
        pod("a", "n1", "A,NVIDIA,4000,30:;"),
        pod("b", "n1", "A,NVIDIA,1000,10:B,NVIDIA,2000,0:;"),
        pod("done", "n1", "B,NVIDIA,9000,90:;", phase="Succeeded"),
        pod("init", "n2", "C,NVIDIA,5000,50:;C,NVIDIA,3000,20:;", init=1),
    ]
    states = device_states(NODES, pods)
    a, b, c = states[("n1", "A")], states[("n1", "B")], states[("n2", "C")]
    assert (a.used, a.used_mem_mib, a.used_cores) == (2, 5000, 40)
    assert (b.used, b.used_mem_mib, b.used_cores) == (1, 2000, 0)
    assert (c.used, c.used_mem_mib, c.used_cores) == (1, 5000, 50)  # max(init peak, app sum), one slot
    assert [k for k, s in sorted(states.items()) if s.usable] == [("n1", "A"), ("n1", "B"), ("n2", "C")]
    assert audit(states) == []


def test_the_audit_names_every_device_over_capacity() -> None:
    pods = [
        pod("a", "n1", "A,NVIDIA,8000,60:;"),
        pod("b", "n1", "A,NVIDIA,4000,60:;"),
        pod("x", "n9", "Z,NVIDIA,1,0:;"),
    ]
    problems = audit(device_states(NODES, pods))
    assert problems == ["n1 A: memory 12000/10000 MiB, cores 120/100%", "n9 Z: slots 1/0, memory 1/0 MiB"]


def test_summary_figures_follow_their_definitions() -> None:
    pods = [pod("a", "n1", "A,NVIDIA,4000,30:;"), pod("w", "n2", "C,NVIDIA,20000,100:;")]
    states = device_states(NODES, pods)
    results = [
        PodResult("ns", "w", "n2", node_policy="binpack", gpu_policy="spread"),
        PodResult(
            "ns",
            "x",
            None,
            reasons={"n1": "2/2 CardInsufficientMemory", "n2": "node unregistered"},
            node_policy="spread",
            gpu_policy="spread",
        ),
        PodResult(
            "ns",
            "y",
            None,
            reasons={ADMISSION: "admission denied: exceeding resource quota"},
            node_policy="binpack",
            gpu_policy="spread",
        ),
    ]
    s = summarize(results, states, node_policy="binpack", gpu_policy="spread")
    assert (s["pods"], s["placed"], s["pending"]) == (3, 1, 2)
    assert s["by_policy"] == {
        "binpack/spread": {"pods": 2, "placed": 1, "pending": 1},
        "spread/spread": {"pods": 1, "placed": 0, "pending": 1},
    }
    # usable: A (10000), B (10000), C (20000); allocated 4000 on A and 20000 on C
    assert s["gpu"]["memory_mib"] == 40000 and s["gpu"]["memory_allocated_mib"] == 24000
    assert s["gpu"]["memory_utilisation"] == 0.6
    assert s["gpu"]["cores"] == 300 and s["gpu"]["core_utilisation"] == round(130 / 300, 4)
    # free: A 6000 (partly used: stranded), B 10000 (idle), C 0
    assert s["fragmentation"] == {
        "free_memory_mib": 16000,
        "stranded_memory_mib": 6000,
        "ratio": 0.375,
        "idle_devices": 1,
    }
    assert s["nodes_touched"] == 1 and s["nodes_in_use"] == 2
    assert s["pending_reasons"] == {
        "CardInsufficientMemory": 1,
        "admission denied: exceeding resource quota": 1,
        "node unregistered": 1,
    }
    assert s["over_capacity"] == []


def test_pod_result_json_has_exactly_the_interface_keys() -> None:
    r = PodResult("ns", "p", None, {"hami.io/b": "2", "hami.io/a": "1"}, {"n2": "x", "n1": "y"}, "binpack", "spread")
    out = r.to_json()
    # the original five keys first, in order; then the keys added with priorities and gangs (issue 26), then with
    # controllers and evictions (issue 37)
    assert list(out) == [
        "namespace", "name", "node", "annotations", "reasons", "priority", "pod_group", "preempted_by",
        "evicted", "owner", "replaces", "replaced_by",
    ]  # fmt: skip
    assert (out["priority"], out["pod_group"], out["preempted_by"]) == (0, None, None)
    assert (out["evicted"], out["owner"], out["replaces"], out["replaced_by"]) == (False, None, None, None)
    assert list(out["annotations"]) == ["hami.io/a", "hami.io/b"] and list(out["reasons"]) == ["n1", "n2"]


@pytest.mark.parametrize(
    ("reasons", "expected"),
    [
        pytest.param({}, set(), id="none"),
        pytest.param(
            {"n": "1/4 CardNotHealth, 3/4 CardInsufficientCore"},
            {"CardNotHealth", "CardInsufficientCore"},
            id="genreason",
        ),
        pytest.param({"n": "node unregistered"}, {"node unregistered"}, id="plain"),
        pytest.param(
            {ADMISSION: "admission denied: pod has no containers"},
            {"admission denied: pod has no containers"},
            id="admission",
        ),
    ],
)
def test_reason_types(reasons: dict[str, str], expected: set[str]) -> None:
    assert reason_types(reasons) == expected


def test_a_replacement_that_preempts_is_named_with_its_priority_and_node_and_counted_by_its_end() -> None:
    """A controller's replacement is a pod like any other: it may preempt in turn, and the report finds it."""
    victim = PodResult("ml", "v", None, {}, {"n1": "preempted"}, evicted=True, preempted_by="ml/web-2", owner="Job/j")
    web = PodResult("ml", "web-1", None, {}, {"n2": "preempted"}, evicted=True, owner="ReplicaSet/web")
    new = PodResult("ml", "web-2", "n1", priority=100, owner="ReplicaSet/web", replaces="ml/web-1")
    pending = PodResult("ml", "j-2", None, {}, {"n1": "x"}, owner="Job/j", replaces="ml/v")
    gone = Preemption("ml/v", "n1", "ml/web-2", 10, 5.0, workload=True)
    recreations = [
        {"pod": "ml/web-1", "owner": "ReplicaSet/web", "at_s": 1.0, "replacement": "ml/web-2", "skipped": None},
        {"pod": "ml/v", "owner": "Job/j", "at_s": 6.0, "replacement": "ml/j-2", "skipped": None},
    ]
    s = summarize(
        [victim, web],
        {},
        node_policy="binpack",
        gpu_policy="spread",
        preemptions=[gone],
        replacements=[new, pending],
        controllers=controllers_json([victim, web], [new, pending], recreations),
    )
    assert s["preemption"]["preemptors"] == {"ml/web-2": {"priority": 100, "node": "n1", "victims": ["ml/v"]}}
    assert s["controllers"]["replacements"] == {"placed": 1, "pending": 1, "preempted": 0, "evicted": 0}
    assert (s["controllers"]["owned_pods"], s["controllers"]["deleted"], s["controllers"]["recreated"]) == (2, 2, 2)
    assert (s["pods"], s["placed"], s["pending"], s["preempted"], s["evicted"]) == (2, 0, 0, 2, 0)
    assert s["evictions"] == {"requested": 0, "evicted": 0, "refused": 0, "requests": []}
