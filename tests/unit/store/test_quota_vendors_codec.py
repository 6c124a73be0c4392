"""Per-vendor quota records: the limits envelope (version 1 for NVIDIA only, 2 with other vendors), a pod's charge
string, and what an allocation charges to each vendor."""

from __future__ import annotations

import msgpack  # type: ignore[import-untyped]
import pytest

from vgpu_scheduler.shared.codec.envelope import decode_quota_limits, encode_quota_limits
from vgpu_scheduler.shared.domain.allocation import Allocation
from vgpu_scheduler.shared.domain.model import ContainerDevice, DeviceCharge
from vgpu_scheduler.shared.domain.quota import QuotaLimits, QuotaUse, VendorLimits, quota_limits
from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.store import PodQuotaCharge
from vgpu_scheduler.shared.store.quota import decode_charge, encode_charge

DCU_MLU = quota_limits(VendorLimits(4000), {"MLU": VendorLimits(None, 50), "DCU": VendorLimits(8192, None)})


def test_nvidia_only_limits_stay_version_1() -> None:
    body = msgpack.unpackb(encode_quota_limits(QuotaLimits(4000, 100)))
    assert body == {"k": "quota-limits", "v": 1, "d": {"mem_mib": 4000, "cores_pct": 100}}
    # a vendor without any limit is dropped, so the record stays NVIDIA's version 1
    assert encode_quota_limits(quota_limits(VendorLimits(4000, 100), {"DCU": VendorLimits()})) == encode_quota_limits(
        QuotaLimits(4000, 100)
    )


def test_vendor_limits_are_version_2_and_round_trip() -> None:
    data = encode_quota_limits(DCU_MLU)
    body = msgpack.unpackb(data)
    assert body["v"] == 2
    assert body["d"]["others"] == {
        "DCU": {"mem_mib": 8192, "cores_pct": None},
        "MLU": {"mem_mib": None, "cores_pct": 50},
    }
    assert decode_quota_limits(data) == DCU_MLU
    assert DCU_MLU.of("DCU") == VendorLimits(8192, None)
    assert DCU_MLU.of("NVIDIA") == VendorLimits(4000, None)
    assert DCU_MLU.of("AMD") == VendorLimits()


@pytest.mark.parametrize(
    ("others", "fragment"),
    [
        pytest.param([], "'others' must be a map", id="not-a-map"),
        pytest.param({"NVIDIA": {"mem_mib": 1, "cores_pct": None}}, "common word", id="nvidia-key"),
        pytest.param({"D;CU": {"mem_mib": 1, "cores_pct": None}}, "common word", id="bad-word"),
        pytest.param({"DCU": {"mem_mib": "1", "cores_pct": None}}, "mem_mib", id="bad-figure"),
        pytest.param({"DCU": 5}, "expected a map", id="entry-not-a-map"),
    ],
)
def test_bad_vendor_limits_are_a_decode_error(others: object, fragment: str) -> None:
    data = msgpack.packb({"k": "quota-limits", "v": 2, "d": {"mem_mib": None, "cores_pct": None, "others": others}})
    with pytest.raises(DecodeError, match=fragment):
        decode_quota_limits(data)


def test_charge_string() -> None:
    assert encode_charge(PodQuotaCharge(3000, 50)) == "3000,50"
    both = PodQuotaCharge(0, 0, (("DCU", QuotaUse(1024, 30)), ("MLU", QuotaUse(256, 0))))
    assert encode_charge(both) == "0,0;DCU=1024,30;MLU=256,0"
    assert decode_charge(b"0,0;DCU=1024,30;MLU=256,0") == both
    assert decode_charge(b"3000,50") == PodQuotaCharge(3000, 50)  # an old record: NVIDIA's only
    # zero charges are left out, vendors sorted
    assert encode_charge(PodQuotaCharge(1, 1, (("MLU", QuotaUse(1, 0)), ("AMD", QuotaUse(0, 0))))) == "1,1;MLU=1,0"


@pytest.mark.parametrize("raw", [b"", b"1", b"a,b", b"1,2;DCU", b"1,2;DCU=1", b"1,2;=1,2", b"1,2;DCU=x,1"])
def test_bad_charge_string_is_a_decode_error(raw: bytes) -> None:
    with pytest.raises(DecodeError, match="quota pod charge"):
        decode_charge(raw)


def test_allocation_charges_each_vendor_its_own_devices() -> None:
    devices = (
        (ContainerDevice("gpu-0", 2000, 10, "NVIDIA"), ContainerDevice("dcu-0", 4096, 30, "DCU")),
        (ContainerDevice("dcu-1", 1024, 20, "DCU"), ContainerDevice("mlu-0", 0, 0, "MLU")),
    )
    charges = (
        DeviceCharge("gpu-0", 1, 2000, 10),
        DeviceCharge("dcu-0", 1, 4096, 30),
        DeviceCharge("dcu-1", 1, 1024, 20),
        DeviceCharge("mlu-0", 1, 0, 0),
    )
    alloc = Allocation("u", "ns", "p", "n1", devices, charges)
    assert (alloc.quota_mem_mib, alloc.quota_cores_pct) == (2000, 10)
    assert alloc.quota_others == (("DCU", QuotaUse(5120, 50)),)
    assert alloc.quota_others_of({"NVIDIA", "DCU"}) == (("DCU", QuotaUse(5120, 50)),)
    assert alloc.quota_others_of({"NVIDIA", "MLU"}) == ()  # a type no enabled vendor has is charged nowhere
