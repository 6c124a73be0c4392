"""The codecs across enabled vendors: requests, constraints and the pod annotations of a bind."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakevendor import FakeVendor
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec.podannotations import split_by_vendor
from vgpu_scheduler.shared.codec.resources import ResourceRequestError, pod_request
from vgpu_scheduler.shared.codec.selectors import decode_pod_constraints
from vgpu_scheduler.shared.domain.model import (
    EMPTY_REQUEST,
    MEM_PCT_UNSET,
    ContainerDevice,
    ContainerRequest,
    NvidiaConfig,
    Selectors,
)
from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.vendors.catalog import NVIDIA_ONLY_VENDORS
from vgpu_scheduler.shared.vendors.nvidia import NvidiaVendor
from vgpu_scheduler.shared.vendors.pods import (
    allocation_annotations,
    decode_vendor_constraints,
    device_list_annotations,
    vendors_manage_pod,
    vendors_pod_request,
)
from vgpu_scheduler.shared.vendors.registry import Vendors

DCU = FakeVendor("DCU")
MLU = FakeVendor("MLU", has_to_allocate=False)
VENDORS = Vendors((NvidiaVendor(), DCU, MLU))


def _ctr(name: str, limits: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name, "resources": {"limits": limits or {}}}


def _pod(*containers: dict[str, Any], init: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    return {"spec": {"initContainers": list(init), "containers": list(containers)}}


# ---- requests ---------------------------------------------------------------------------------------------------


def test_nvidia_only_pod_gives_the_same_request_as_before() -> None:
    pod = _pod(
        _ctr("a", {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000}),
        _ctr("b"),
        init=(_ctr("prep", {"nvidia.com/gpu": 2}),),
    )
    assert vendors_pod_request(pod, VENDORS) == pod_request(pod, NvidiaConfig())
    assert vendors_pod_request(pod, NVIDIA_ONLY_VENDORS) == pod_request(pod, NvidiaConfig())


def test_each_container_gets_its_vendor_entry() -> None:
    pod = _pod(_ctr("a", {"dcu.com/num": 1, "dcu.com/mem": 2000}), _ctr("b", {"nvidia.com/gpu": 1}), _ctr("c"))
    got = vendors_pod_request(pod, VENDORS)
    assert got.owners == ()
    assert got.containers[0] == ContainerRequest(1, 2000, MEM_PCT_UNSET, 0, "DCU")
    assert got.containers[1].type == "NVIDIA"
    assert got.containers[1].nums == 1
    assert got.containers[2] == EMPTY_REQUEST
    assert got.container_count == 3


def test_a_container_asking_two_vendors_gets_two_entries_with_owners() -> None:
    pod = _pod(
        _ctr("a"),
        _ctr("b", {"nvidia.com/gpu": 1, "mlu.com/num": 2}),
        init=(_ctr("i", {"dcu.com/num": 1}),),
    )
    got = vendors_pod_request(pod, VENDORS)
    assert [(r.type, r.nums) for r in got.containers] == [("DCU", 1), ("NVIDIA", 0), ("NVIDIA", 1), ("MLU", 2)]
    assert got.owners == (0, 1, 2, 2)
    assert got.init_count == 1
    assert got.container_count == 3
    assert [got.owner(i) for i in range(4)] == [0, 1, 2, 2]


def test_strict_errors_of_every_vendor_are_reported_together() -> None:
    pod = _pod(_ctr("a", {"nvidia.com/gpumem": "20Gi", "dcu.com/num": "1.5"}), _ctr("b", {"mlu.com/num": "x"}))
    with pytest.raises(ResourceRequestError) as e:
        vendors_pod_request(pod, VENDORS)
    text = str(e.value)
    assert "nvidia.com/gpumem" in text
    assert "dcu.com/num" in text
    assert "mlu.com/num" in text
    assert len(e.value.problems) == 3


def test_a_container_of_the_wrong_shape_is_a_decode_error() -> None:
    with pytest.raises(DecodeError, match="resources"):
        vendors_pod_request({"spec": {"containers": [{"name": "a", "resources": []}]}}, VENDORS)


def test_is_the_pod_ours_across_vendors() -> None:
    assert vendors_manage_pod(_pod(_ctr("a", {"mlu.com/cores": 10})), VENDORS)
    assert vendors_manage_pod(_pod(_ctr("a"), init=(_ctr("i", {"nvidia.com/gpu": 0}),)), VENDORS)
    assert not vendors_manage_pod(_pod(_ctr("a", {"cpu": 1})), VENDORS)
    assert not vendors_manage_pod(_pod(_ctr("a", {"mlu.com/num": 1})), NVIDIA_ONLY_VENDORS)


# ---- constraints -----------------------------------------------------------------------------------------------


def test_vendor_selectors_are_decoded_for_every_other_vendor() -> None:
    annos = {"dcu.com/use-uuid": "DCU-a, DCU-b", "nvidia.com/use-gputype": "A100", "mlu.com/nouse-uuid": "m1"}
    got = decode_vendor_constraints(annos, VENDORS)
    assert got.use_types == ("A100",)
    assert got.selectors("DCU") == Selectors(use_uuids=frozenset({"DCU-a", "DCU-b"}))
    assert got.selectors("MLU") == Selectors(nouse_uuids=frozenset({"m1"}))
    assert "NVIDIA" not in got.vendor_selectors


def test_no_vendor_selectors_leaves_the_constraints_as_nvidia_decodes_them() -> None:
    annos = {"nvidia.com/use-gpuuuid": "GPU-1"}
    assert decode_vendor_constraints(annos, VENDORS) == decode_pod_constraints(annos)
    assert decode_vendor_constraints(annos, VENDORS).vendor_selectors == {}


# ---- pod annotations -------------------------------------------------------------------------------------------


def _dev(uuid: str, vendor: str, mem: int = 1000, cores: int = 0) -> ContainerDevice:
    return ContainerDevice(uuid=uuid, used_mem_mib=mem, used_cores=cores, type=vendor)


def test_nvidia_annotations_are_byte_identical_with_or_without_vendors() -> None:
    devices = ((), (_dev("GPU-a", "NVIDIA", 3000, 30),), (_dev("GPU-b", "NVIDIA", 5000), _dev("GPU-c", "NVIDIA", 5000)))
    before = allocation_annotations("node67", devices, (), 1705054796)
    after = allocation_annotations("node67", devices, (), 1705054796, VENDORS)
    assert list(before.items()) == list(after.items())
    assert after[keys.DEVICES_TO_ALLOCATE] == ";GPU-a,NVIDIA,3000,30:;GPU-b,NVIDIA,5000,0:GPU-c,NVIDIA,5000,0:;"


def test_each_vendor_gets_its_pair_with_every_container_kept() -> None:
    devices = (
        (_dev("DCU-0", "DCU", 2000),),
        (),
        (_dev("GPU-a", "NVIDIA", 3000, 30), _dev("MLU-0", "MLU", 4096, 10)),
    )
    got = allocation_annotations("n1", devices, (), 100, VENDORS)
    assert got == {
        keys.VGPU_NODE: "n1",
        keys.VGPU_TIME: "100",
        "hami.io/dcu-devices-to-allocate": "DCU-0,DCU,2000,0:;;;",
        "hami.io/dcu-devices-allocated": "DCU-0,DCU,2000,0:;;;",
        keys.DEVICES_TO_ALLOCATE: ";;GPU-a,NVIDIA,3000,30:;",
        keys.DEVICES_ALLOCATED: ";;GPU-a,NVIDIA,3000,30:;",
        "hami.io/mlu-devices-allocated": ";;MLU-0,MLU,4096,10:;",  # no to-allocate key for this vendor
        keys.BIND_PHASE: "allocating",
        keys.BIND_TIME: "100",
    }


def test_a_vendor_only_pod_writes_no_nvidia_keys() -> None:
    got = device_list_annotations(((_dev("DCU-0", "DCU"),),), VENDORS)
    assert set(got) == {"hami.io/dcu-devices-to-allocate", "hami.io/dcu-devices-allocated"}


def test_a_device_of_no_enabled_vendor_is_refused() -> None:
    with pytest.raises(DecodeError, match="XPU"):
        device_list_annotations(((_dev("x", "XPU"),),), VENDORS)


def test_split_by_vendor_keeps_empty_containers() -> None:
    devices = ((_dev("a", "DCU"), _dev("b", "NVIDIA")), ())
    assert split_by_vendor(devices, "NVIDIA") == ((_dev("b", "NVIDIA"),), ())
    assert split_by_vendor(devices, "MLU") == ((), ())


class _Profiled(FakeVendor):
    def extra_pod_annotations(self, devices: tuple[tuple[ContainerDevice, ...], ...], now_unix: int) -> dict[str, str]:
        del now_unix
        first = next(d for ctr in devices for d in ctr)
        return {"PROFILE": f"{first.used_cores}_{first.used_mem_mib // 256}"}


def test_a_vendor_may_add_its_own_annotations() -> None:
    vendors = Vendors((NvidiaVendor(), _Profiled("MLU")))
    got = device_list_annotations(((), (_dev("MLU-0", "MLU", 1024, 20),)), vendors)
    assert got["PROFILE"] == "20_4"
    assert got["hami.io/mlu-devices-allocated"] == ";MLU-0,MLU,1024,20:;"


def test_bind_annotations_of_real_vendors_carry_their_extra_keys() -> None:
    from vgpu_scheduler.shared.vendors import ascend, cambricon

    npu = ascend.build(None)[1]  # a 910B chip of the default config
    mlu = cambricon.build(None)[0]
    vendors = Vendors((NvidiaVendor(), npu, mlu))
    devices = (
        (_dev("npu-0", npu.name, 65536, 0),),
        (_dev("n-cambricon-mlu-2", "MLU", 1024, 20),),
    )
    got = allocation_annotations("n", devices, (), 1_700_000_000, vendors)
    assert got[npu.allocated_key] == got[npu.to_allocate_key] == f"npu-0,{npu.name},65536,0:;;"
    assert got[f"huawei.com/{npu.name}"].startswith('[{"UUID":"npu-0"')
    assert got["predicate-time"] == "1700000000"
    assert got["CAMBRICON_DSMLU_PROFILE"] == "2_20_4"
    assert got["CAMBRICON_DSMLU_ASSIGHED"] == got["CAMBRICON_DSMLU_ASSIGNED"] == "false"
    assert "hami.io/vgpu-devices-allocated" not in got  # no NVIDIA device: no NVIDIA keys
