"""The simulated device plugins across vendors: each reads its own to-allocate key, and the lock kinds."""

from __future__ import annotations

from typing import Any

from tests.fakevendor import FakeVendor
from vgpu_scheduler.services.simulate.devplugin import allocation_problems, lock_kinds_of, vendor_allocation_problems
from vgpu_scheduler.shared.vendors.base import NodeLockKind
from vgpu_scheduler.shared.vendors.nvidia import NvidiaVendor
from vgpu_scheduler.shared.vendors.registry import Vendors

VENDORS = Vendors(
    (NvidiaVendor(), FakeVendor("DCU"), FakeVendor("AWS", NodeLockKind.NONE), FakeVendor("MLU", NodeLockKind.CAMBRICON))
)


def _pod(annotations: dict[str, str], *limits: dict[str, Any]) -> dict[str, Any]:
    containers = [{"name": f"c{i}", "resources": {"limits": lim}} for i, lim in enumerate(limits)]
    return {"metadata": {"annotations": annotations}, "spec": {"containers": containers}}


def test_each_vendor_reads_its_own_list() -> None:
    pod = _pod(
        {
            "hami.io/vgpu-devices-to-allocate": ";GPU-1,NVIDIA,1000,0:;",
            "hami.io/dcu-devices-to-allocate": "DCU-1,DCU,1000,0:;;",
        },
        {"dcu.com/num": 1},
        {"nvidia.com/gpu": 1},
    )
    assert vendor_allocation_problems(pod, VENDORS) == []
    # NVIDIA's reader alone sees no problem either: it never looks at the DCU list
    assert allocation_problems(pod, "nvidia.com/gpu") == []


def test_a_vendor_list_that_does_not_match_its_containers_is_reported() -> None:
    pod = _pod({"hami.io/dcu-devices-to-allocate": ";DCU-1,DCU,1000,0:;"}, {"dcu.com/num": 1}, {"cpu": 1})
    assert vendor_allocation_problems(pod, VENDORS) == [
        "DCU: container c0: the next device entry is #1, not #0",
    ]


def test_a_vendor_without_to_allocate_key_is_read_from_its_allocated_key() -> None:
    vendors = Vendors((NvidiaVendor(), FakeVendor("AWS", NodeLockKind.NONE, has_to_allocate=False)))
    pod = _pod({"hami.io/aws-devices-allocated": "AWS-1,AWS,0,0:AWS-2,AWS,0,0:;"}, {"aws.com/num": 1})
    assert vendor_allocation_problems(pod, vendors) == ["AWS: container c0: device number not matched (2 != 1)"]


def test_lock_kinds_of_a_pod() -> None:
    assert lock_kinds_of(_pod({}, {"nvidia.com/gpu": 1}), VENDORS) == {NodeLockKind.HAMI}
    assert lock_kinds_of(_pod({}, {"aws.com/num": 1}), VENDORS) == frozenset()
    assert lock_kinds_of(_pod({}, {"mlu.com/num": 1}, {"dcu.com/num": 1}), VENDORS) == {
        NodeLockKind.CAMBRICON,
        NodeLockKind.HAMI,
    }
    assert lock_kinds_of(_pod({}, {"cpu": 1}), VENDORS) == {NodeLockKind.HAMI}
