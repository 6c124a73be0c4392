"""Quota limits of every enabled vendor from ResourceQuotas: each vendor's own resource names, memory × its unit."""

from __future__ import annotations

import pytest

from tests.unit.informer.builders import quota
from vgpu_scheduler.services.informer.quotas import (
    VENDOR_MEM_LIMIT_MAX_MIB,
    combine,
    limited_namespaces,
    namespace_limits,
    read_quota,
)
from vgpu_scheduler.shared.domain.model import NvidiaConfig
from vgpu_scheduler.shared.domain.quota import QuotaLimits, VendorLimits, quota_limits
from vgpu_scheduler.shared.vendors.catalog import enabled_vendors

CFG = NvidiaConfig()
ALL = enabled_vendors(CFG, {"vnpus": None}, {"enable-ascend"})
"""NVIDIA plus every other vendor with HAMi's default names."""


@pytest.mark.parametrize(
    ("hard", "word", "expected"),
    [
        # Hygon: hygon.com/dcumem in units of memoryFactor (1 by default), hygon.com/dcucores in %
        ({"limits.hygon.com/dcumem": "8000", "limits.hygon.com/dcucores": "150"}, "DCU", VendorLimits(8000, 150)),
        # Cambricon: one unit of cambricon.com/mlu.smlu.vmemory is 256 MiB (HAMi's Fit: limit × 256)
        ({"limits.cambricon.com/mlu.smlu.vmemory": "10"}, "MLU", VendorLimits(mem_mib=2560)),
        ({"limits.cambricon.com/mlu.smlu.vcore": "0"}, "MLU", VendorLimits(cores_pct=0)),
        ({"limits.amd.com/gpumem": "16Ki", "limits.amd.com/gpucores": "200"}, "AMD", VendorLimits(16384, 200)),
        ({"limits.huawei.com/Ascend910B3-memory": "65536"}, "Ascend910B3", VendorLimits(mem_mib=65536)),
    ],
    ids=["hygon", "cambricon-units", "cambricon-zero-cores", "amd", "ascend"],
)
def test_vendor_limits_use_their_own_names(hard: dict[str, str], word: str, expected: VendorLimits) -> None:
    reading = read_quota(quota("q", "ns", hard), CFG, ALL)
    assert reading.problems == ()
    assert reading.limits == quota_limits(VendorLimits(), {word: expected})
    assert reading.limits.of("NVIDIA") == VendorLimits()


def test_without_the_vendor_enabled_its_keys_are_ignored() -> None:
    hard = {"limits.hygon.com/dcumem": "8000", "limits.nvidia.com/gpumem": "100"}
    assert read_quota(quota("q", "ns", hard), CFG).limits == QuotaLimits(mem_mib=100)
    assert read_quota(quota("q", "ns", hard), CFG, ALL).limits == quota_limits(
        VendorLimits(100), {"DCU": VendorLimits(8000)}
    )


def test_hygon_memory_factor_scales_the_limit_to_mib() -> None:
    vendors = enabled_vendors(CFG, {"hygon": {"memoryFactor": 4}})
    got = read_quota(quota("q", "ns", {"limits.hygon.com/dcumem": "1000"}), CFG, vendors).limits
    assert got.of("DCU") == VendorLimits(mem_mib=4000)


def test_huge_vendor_memory_limit_is_capped() -> None:
    hard = {"limits.cambricon.com/mlu.smlu.vmemory": str(2**62)}
    assert read_quota(quota("q", "ns", hard), CFG, ALL).limits.of("MLU").mem_mib == VENDOR_MEM_LIMIT_MAX_MIB


def test_unreadable_vendor_value_is_reported_and_sets_no_limit() -> None:
    hard = {"limits.hygon.com/dcumem": "1.5", "limits.hygon.com/dcucores": "50"}
    reading = read_quota(quota("q", "ns", hard), CFG, ALL)
    assert reading.limits.of("DCU") == VendorLimits(cores_pct=50)
    assert len(reading.problems) == 1
    assert "limits.hygon.com/dcumem" in str(reading.problems[0])


def test_several_quotas_take_the_minimum_per_vendor() -> None:
    a = quota_limits(VendorLimits(100), {"DCU": VendorLimits(8000, None), "MLU": VendorLimits(None, 50)})
    b = quota_limits(VendorLimits(None, 10), {"DCU": VendorLimits(6000, 300)})
    assert combine([a, b]) == quota_limits(
        VendorLimits(100, 10), {"DCU": VendorLimits(6000, 300), "MLU": VendorLimits(None, 50)}
    )


def test_namespace_limits_and_the_gauge_count_vendor_only_namespaces() -> None:
    quotas = [
        quota("q1", "a", {"limits.hygon.com/dcumem": "8000"}),
        quota("q2", "a", {"limits.hygon.com/dcumem": "6000"}),
        quota("q3", "b", {"cpu": "4"}),
    ]
    got = namespace_limits(quotas, CFG, ALL)
    assert got == {"a": quota_limits(VendorLimits(), {"DCU": VendorLimits(6000)}), "b": QuotaLimits()}
    assert limited_namespaces(got) == 1
