"""What /bind writes onto a pod (difference 3) and what accounting reads back (difference 10)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.codec.strategies import mig_allocations, pod_devices
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec.podannotations import allocation_labels, decode_allocation
from vgpu_scheduler.shared.domain.model import ContainerDevice, MigAllocation, MigPlacement, PodDevices
from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.vendors.pods import allocation_annotations

G1 = ContainerDevice("GPU-1", 4864, 15)
MIG = (MigAllocation(1, 0, "GPU-1", "1g.5gb", MigPlacement(6, 1)),)


def pod(annotations: dict[str, Any] | None, init: int = 0, app: int = 1) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "default", "annotations": annotations},
        "spec": {
            "initContainers": [{"name": f"i{i}"} for i in range(init)],
            "containers": [{"name": f"c{i}"} for i in range(app)],
        },
    }


def test_mig_annotation_only_when_there_are_placements() -> None:
    with_mig = allocation_annotations("n1", ((), (G1,)), MIG, 100)
    assert with_mig[keys.MIG_ALLOCATIONS] == (
        '[{"containerIndex":1,"deviceIndex":0,"gpuUUID":"GPU-1","profile":"1g.5gb","placement":{"start":6,"size":1}}]'
    )
    assert keys.MIG_ALLOCATIONS not in allocation_annotations("n1", ((), (G1,)), (), 100)
    assert allocation_labels("n1") == {"hami.io/vgpu-node": "n1"}


def test_allocation_annotations_refusals() -> None:
    with pytest.raises(DecodeError):
        allocation_annotations("", ((G1,),), (), 1)
    with pytest.raises(DecodeError):
        allocation_annotations("n1", ((G1,),), (), -1)


def test_decode_allocation_cases() -> None:
    assert decode_allocation(pod(None)) is None
    assert decode_allocation(pod({keys.DEVICES_ALLOCATED: "GPU-1,NVIDIA,1,1:;"})) is None
    assert decode_allocation({"spec": {}}) is None  # no metadata: not placed
    assert decode_allocation(pod({keys.VGPU_NODE: "n1"}, init=1, app=2)) == (((), (), ()), ())
    # a ≤ v2.8 scheduler listed regular containers only: aligned behind the init container
    annos = {keys.VGPU_NODE: "n1", keys.DEVICES_ALLOCATED: "GPU-1,NVIDIA,4864,15:;"}
    assert decode_allocation(pod(annos, init=1, app=1)) == (((), (G1,)), ())
    # accounting reads the allocated list, not the consumed to-allocate one
    annos = {keys.VGPU_NODE: "n1", keys.DEVICES_ALLOCATED: "GPU-1,NVIDIA,4864,15:;", keys.DEVICES_TO_ALLOCATE: ";"}
    assert decode_allocation(pod(annos)) == (((G1,),), ())


@pytest.mark.parametrize(
    "value",
    [
        pytest.param([], id="pod-not-object"),
        pytest.param({"metadata": []}, id="metadata-not-object"),
        pytest.param({"metadata": {"annotations": "x"}}, id="annotations-not-object"),
        pytest.param(pod({keys.VGPU_NODE: 1}), id="node-not-string"),
        pytest.param(pod({keys.VGPU_NODE: "n1", keys.DEVICES_ALLOCATED: "GPU-1,NVIDIA,1:;"}), id="bad-list"),
        pytest.param(pod({keys.VGPU_NODE: "n1", keys.MIG_ALLOCATIONS: "[{}]"}), id="bad-mig"),
        pytest.param(
            pod({keys.VGPU_NODE: "n1", keys.DEVICES_ALLOCATED: "G,NVIDIA,1,1:;G,NVIDIA,1,1:;"}, app=1),
            id="more-entries-than-containers",
        ),
        pytest.param({"metadata": {"annotations": {keys.VGPU_NODE: "n1"}}}, id="placed-pod-without-spec"),
    ],
)
def test_decode_allocation_rejects(value: Any) -> None:
    with pytest.raises(DecodeError):
        decode_allocation(value)


@settings(deadline=None)
@given(pod_devices, mig_allocations(), st.integers(0, 2**40), st.integers(0, 3))
def test_bind_annotations_round_trip(devices: PodDevices, mig: tuple[MigAllocation, ...], now: int, split: int) -> None:
    annos = allocation_annotations("node-1", devices, mig, now)
    assert annos[keys.DEVICES_TO_ALLOCATE] == annos[keys.DEVICES_ALLOCATED]
    assert (annos[keys.BIND_PHASE], annos[keys.BIND_TIME], annos[keys.VGPU_TIME]) == ("allocating", str(now), str(now))
    init = min(split, len(devices))
    assert decode_allocation(pod(annos, init=init, app=len(devices) - init)) == (devices, mig)
