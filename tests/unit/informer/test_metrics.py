"""The pure parts of the informer's scrape-time HAMi gauges: GPU indices from the register annotation, the
per-container and MIG-instance series, and the collector's families."""

from __future__ import annotations

import dataclasses

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from tests.builders import gpu
from tests.unit.informer.builders import devices, mig_alloc
from vgpu_scheduler.services.informer.metrics import (
    AllocationView,
    DeviceIndex,
    PodAllocationCollector,
    mig_series,
    vgpu_series,
)
from vgpu_scheduler.shared.codec.register import encode_register_json
from vgpu_scheduler.shared.domain.accounting import collapse
from vgpu_scheduler.shared.domain.allocation import Allocation
from vgpu_scheduler.shared.domain.model import MigAllocation

REGISTER = encode_register_json([gpu("GPU-x", index=0), gpu("GPU-y", index=5)])


def alloc(name: str, *containers: list[tuple[str, int, int]], mig: tuple[MigAllocation, ...] = ()) -> Allocation:
    devs = devices(*containers)
    return Allocation(
        pod_uid=f"uid-{name}", namespace="ns", name=name, node="n1", devices=devs, charges=collapse(devs, 0), mig=mig
    )


def ready(m: MigAllocation, gi: int = 3) -> MigAllocation:
    return dataclasses.replace(m, mig_uuid=f"MIG-{gi}", gpu_instance_id=gi, compute_instance_id=0)


@pytest.mark.parametrize(
    ("updates", "expected"),
    [
        pytest.param([REGISTER], {"n1": {"GPU-x": 0, "GPU-y": 5}}, id="decoded"),
        pytest.param([REGISTER, None], {}, id="annotation-removed-or-node-deleted"),
        pytest.param([REGISTER, "not a register value"], {}, id="unreadable-maps-nothing"),
        pytest.param(["not a register value", REGISTER], {"n1": {"GPU-x": 0, "GPU-y": 5}}, id="fixed-later"),
        pytest.param([REGISTER, encode_register_json([gpu("GPU-z", index=2)])], {"n1": {"GPU-z": 2}}, id="changed"),
    ],
)
def test_device_index_follows_the_register_annotation(
    updates: list[str | None], expected: dict[str, dict[str, int]]
) -> None:
    index = DeviceIndex()
    for value in updates:
        index.update("n1", value)
    assert index.indices == expected


def test_vgpu_series_per_container_and_device() -> None:
    a = alloc("p", [("GPU-x", 1000, 10)], [], [("GPU-x", 2000, 20), ("GPU-y", 2000, 0)])
    assert vgpu_series([a]) == {
        ("ns", "n1", "p", "0", "GPU-x"): (1000, 10),
        ("ns", "n1", "p", "2", "GPU-x"): (2000, 20),
        ("ns", "n1", "p", "2", "GPU-y"): (2000, 0),
    }


def test_vgpu_series_sums_a_label_set_met_twice() -> None:
    a = alloc("p", [("GPU-x", 1000, 10), ("GPU-x", 500, 5)])
    assert vgpu_series([a]) == {("ns", "n1", "p", "0", "GPU-x"): (1500, 15)}


def test_mig_series_only_created_instances_on_registered_gpus() -> None:
    created = ready(mig_alloc(0, 0, "GPU-y", 4, 2), gi=7)
    pending = mig_alloc(1, 0, "GPU-y", 0, 1)
    unregistered = ready(mig_alloc(2, 0, "GPU-unknown", 0, 1))
    a = alloc("p", [("GPU-y", 9000, 28)], [("GPU-y", 4000, 14)], [("GPU-unknown", 4000, 14)])
    a = dataclasses.replace(a, mig=(created, pending, unregistered))
    assert mig_series([a], {"n1": {"GPU-y": 5}}) == {
        ("n1", "GPU-y", "5", "MIG-7", "2g.10gb", "7", "0", "4", "2"),
    }


@pytest.mark.parametrize("legacy", [False, True], ids=["current", "legacy"])
def test_standing_by_exports_empty_families(legacy: bool) -> None:
    registry = CollectorRegistry()
    registry.register(PodAllocationCollector(lambda: None, legacy=legacy))
    text = generate_latest(registry).decode()
    assert "# TYPE hami_vgpu_memory_allocated_bytes gauge" in text
    assert ("# TYPE vGPUCoreAllocated gauge" in text) is legacy
    assert [line for line in text.splitlines() if not line.startswith("#")] == []


def test_leading_exports_the_view() -> None:
    a = alloc("p", [("GPU-x", 1000, 10)])
    registry = CollectorRegistry()
    registry.register(PodAllocationCollector(lambda: AllocationView({a.pod_uid: a}, {"n1": {"GPU-x": 0}})))
    labels = {"namespace": "ns", "node": "n1", "pod": "p", "container_index": "0", "device_uuid": "GPU-x"}
    labels["zone"] = "vGPU"
    assert registry.get_sample_value("hami_vgpu_memory_allocated_bytes", labels) == 1000 * 1048576
    assert registry.get_sample_value("hami_vgpu_core_allocated_ratio", labels) == 10.0
