"""Quota limits from ResourceQuotas (§8): raw values, configured names, explicit 0, min of several, bad values."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.informer.builders import quota
from vgpu_scheduler.services.informer.quotas import combine, namespace_limits, read_quota
from vgpu_scheduler.shared.domain.model import NvidiaConfig
from vgpu_scheduler.shared.domain.quota import QuotaLimits

CFG = NvidiaConfig()


@pytest.mark.parametrize(
    ("hard", "limits"),
    [
        ({}, QuotaLimits()),
        ({"limits.nvidia.com/gpumem": "20000"}, QuotaLimits(mem_mib=20000)),
        ({"limits.nvidia.com/gpumem": "3k", "limits.nvidia.com/gpucores": "200"}, QuotaLimits(3000, 200)),
        ({"limits.nvidia.com/gpumem": 4096}, QuotaLimits(mem_mib=4096)),
        ({"limits.nvidia.com/gpumem": "0"}, QuotaLimits(mem_mib=0)),
        ({"limits.nvidia.com/gpucores": "0"}, QuotaLimits(cores_pct=0)),
        ({"requests.nvidia.com/gpumem": "100", "limits.nvidia.com/gpu": "2", "cpu": "4"}, QuotaLimits()),
        ({"nvidia.com/gpumem": "100"}, QuotaLimits()),
    ],
    ids=[
        "empty",
        "raw-mem",
        "suffix-and-cores",
        "json-number",
        "explicit-0-mem",
        "explicit-0-cores",
        "other-keys-ignored",
        "no-limits-prefix",
    ],
)
def test_read_quota(hard: dict[str, Any], limits: QuotaLimits) -> None:
    reading = read_quota(quota("q", "ns", hard), CFG)
    assert reading.limits == limits
    assert reading.problems == ()


def test_memory_limit_is_raw_whatever_the_memory_factor() -> None:
    cfg = NvidiaConfig(memory_factor=4)
    assert read_quota(quota("q", "ns", {"limits.nvidia.com/gpumem": "1000"}), cfg).limits.mem_mib == 1000


def test_configured_resource_names() -> None:
    cfg = NvidiaConfig(resource_memory_name="example.com/vmem", resource_core_name="example.com/vcores")
    hard = {"limits.example.com/vmem": "10", "limits.example.com/vcores": "20", "limits.nvidia.com/gpumem": "1"}
    assert read_quota(quota("q", "ns", hard), cfg).limits == QuotaLimits(10, 20)


@pytest.mark.parametrize(
    "value", ["1.5", "500m", "-3", "abc", ""], ids=["fraction", "milli", "negative", "garbage", "empty"]
)
def test_unreadable_values_set_no_limit_and_are_reported(value: str) -> None:
    hard = {"limits.nvidia.com/gpumem": value, "limits.nvidia.com/gpucores": "50"}
    reading = read_quota(quota("q", "ns", hard), CFG)
    assert reading.limits == QuotaLimits(cores_pct=50)
    assert len(reading.problems) == 1
    assert "limits.nvidia.com/gpumem" in str(reading.problems[0])


def test_quota_without_spec_has_no_limits() -> None:
    assert read_quota({"metadata": {"name": "q"}}, CFG).limits == QuotaLimits()


def test_combine_takes_the_minimum_per_key() -> None:
    assert combine([QuotaLimits(100, None), QuotaLimits(50, 300), QuotaLimits(None, 200)]) == QuotaLimits(50, 200)
    assert combine([QuotaLimits(100, 0), QuotaLimits(None, 10)]) == QuotaLimits(100, 0)
    assert combine([]) == QuotaLimits()


def test_namespace_limits_groups_by_namespace() -> None:
    quotas = [
        quota("a", "ns1", {"limits.nvidia.com/gpumem": "8000"}),
        quota("b", "ns1", {"limits.nvidia.com/gpumem": "6000", "limits.nvidia.com/gpucores": "100"}),
        quota("c", "ns2", {"cpu": "2"}),
    ]
    assert namespace_limits(quotas, CFG) == {"ns1": QuotaLimits(6000, 100), "ns2": QuotaLimits()}
