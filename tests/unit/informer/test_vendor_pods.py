"""What a pod holds when it uses several vendors: every enabled vendor's allocated annotation, merged per
container (a small fake vendor next to NVIDIA)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakevendor_node import FAKE, FAKE_ALLOCATED, FakeVendor
from tests.unit.informer.builders import pod
from vgpu_scheduler.services.informer.pods import pod_allocation
from vgpu_scheduler.shared.codec.podannotations import NVIDIA_READER, decode_allocation, merge_pod_devices
from vgpu_scheduler.shared.domain.model import ContainerDevice, DeviceCharge
from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.vendors.nvidia import NvidiaVendor

VENDORS = (NvidiaVendor(), FakeVendor())


def fake(uuid: str, mem: int, cores: int) -> ContainerDevice:
    return ContainerDevice(uuid, mem, cores, type=FAKE)


def two_vendor_pod(fake_list: str, **kw: Any) -> dict[str, Any]:
    """init-0 (GPU-1), app-0 (GPU-2), app-1 (no GPU); the fake vendor's list is ``fake_list``."""
    return pod(
        "p",
        uid="u1",
        node="n1",
        init=[[("GPU-1", 500, 5)]],
        app=[[("GPU-2", 1000, 10)], []],
        extra_annotations={FAKE_ALLOCATED: fake_list},
        **kw,
    )


def test_merge_keeps_vendor_order_per_container() -> None:
    nv = ((ContainerDevice("GPU-1", 1, 1),), ())
    fk = ((fake("FK-1", 2, 2),), (fake("FK-2", 3, 3),))
    assert merge_pod_devices([nv, fk]) == (
        (ContainerDevice("GPU-1", 1, 1), fake("FK-1", 2, 2)),
        (fake("FK-2", 3, 3),),
    )
    assert merge_pod_devices([nv]) is nv
    assert merge_pod_devices([]) == ()
    with pytest.raises(ValueError, match="same container count"):
        merge_pod_devices([nv, ((),)])


def test_every_vendor_list_is_read_and_merged_init_first() -> None:
    p = two_vendor_pod("FK-1,FAKE,4096,25:;;FK-2,FAKE,2048,50:FK-3,FAKE,1024,0:;")
    decoded = decode_allocation(p, VENDORS)
    assert decoded is not None
    devices, mig = decoded
    assert devices == (
        (ContainerDevice("GPU-1", 500, 5), fake("FK-1", 4096, 25)),
        (ContainerDevice("GPU-2", 1000, 10),),
        (fake("FK-2", 2048, 50), fake("FK-3", 1024, 0)),
    )
    assert mig == ()
    alloc = pod_allocation(p, vendors=VENDORS)
    assert alloc is not None
    assert alloc.charges == (
        DeviceCharge("GPU-1", 1, 500, 5),
        DeviceCharge("FK-1", 1, 4096, 25),
        DeviceCharge("GPU-2", 1, 1000, 10),
        DeviceCharge("FK-2", 1, 2048, 50),
        DeviceCharge("FK-3", 1, 1024, 0),
    )


def test_without_the_vendor_its_list_is_not_read() -> None:
    p = two_vendor_pod("FK-1,FAKE,4096,25:;;;")
    assert decode_allocation(p) == decode_allocation(p, (NVIDIA_READER,))
    alloc = pod_allocation(p)
    assert alloc is not None
    assert [c.uuid for c in alloc.charges] == ["GPU-1", "GPU-2"]


def test_a_pod_of_another_vendor_only() -> None:
    p = pod("p", uid="u1", node="n1", app=[[]], extra_annotations={FAKE_ALLOCATED: "FK-1,FAKE,100,10:;"})
    del p["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"]
    alloc = pod_allocation(p, vendors=VENDORS)
    assert alloc is not None
    assert alloc.devices == ((fake("FK-1", 100, 10),),)
    # read with the fake vendor alone, too (no NVIDIA annotation at all)
    assert decode_allocation(p, (FakeVendor(),)) == (((fake("FK-1", 100, 10),),), ())


def test_a_malformed_vendor_list_names_its_key() -> None:
    p = two_vendor_pod("FK-1,FAKE,lots,25:;")
    with pytest.raises(DecodeError, match=FAKE_ALLOCATED):
        pod_allocation(p, vendors=VENDORS)
    too_many = two_vendor_pod("FK-1,FAKE,1,1:;;;FK-9,FAKE,1,1:;")
    with pytest.raises(DecodeError, match=FAKE_ALLOCATED):
        pod_allocation(too_many, vendors=VENDORS)
