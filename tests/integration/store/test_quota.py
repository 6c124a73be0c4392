"""Namespace quota: charge-then-reserve, idempotent per pod, explicit 0 blocks, reconcile by reset."""

from __future__ import annotations

import pytest

from vgpu_scheduler.shared.domain.quota import QuotaLimits, QuotaState
from vgpu_scheduler.shared.store import PodQuotaCharge, QuotaCharged, QuotaDimension, QuotaExceeded, Store


async def test_unknown_namespace_has_no_limits_and_no_usage(store: Store) -> None:
    assert await store.quota.get("nobody") == QuotaState()
    assert await store.quota.namespaces() == []


@pytest.mark.parametrize(
    ("limits", "mem", "cores", "expected"),
    [
        pytest.param(QuotaLimits(), 10**6, 10**4, QuotaCharged(True), id="no-limits"),
        pytest.param(QuotaLimits(mem_mib=4000), 4000, 500, QuotaCharged(True), id="exact-memory-fit"),
        pytest.param(
            QuotaLimits(mem_mib=4000), 4001, 0, QuotaExceeded(QuotaDimension.MEMORY, 4000, 0, 4001), id="memory-over"
        ),
        pytest.param(
            QuotaLimits(cores_pct=100), 1, 101, QuotaExceeded(QuotaDimension.CORES, 100, 0, 101), id="cores-over"
        ),
        pytest.param(
            QuotaLimits(mem_mib=0), 1, 0, QuotaExceeded(QuotaDimension.MEMORY, 0, 0, 1), id="explicit-zero-blocks"
        ),
        pytest.param(QuotaLimits(mem_mib=0, cores_pct=0), 0, 0, QuotaCharged(True), id="explicit-zero-admits-nothing"),
        pytest.param(QuotaLimits(mem_mib=0), 0, 100, QuotaCharged(True), id="zero-memory-limit-ignores-cores"),
    ],
)
async def test_charge_against_limits(
    store: Store, limits: QuotaLimits, mem: int, cores: int, expected: QuotaCharged | QuotaExceeded
) -> None:
    await store.quota.set_limits("ns", limits)
    assert await store.quota.charge("ns", "p1", mem, cores) == expected
    state = await store.quota.get("ns")
    assert state.limits == limits
    charged = isinstance(expected, QuotaCharged)
    assert (state.used_mem_mib, state.used_cores_pct) == ((mem, cores) if charged else (0, 0))


async def test_usage_accumulates_and_the_limit_counts_others(store: Store) -> None:
    await store.quota.set_limits("ns", QuotaLimits(mem_mib=10_000, cores_pct=200))
    assert await store.quota.charge("ns", "p1", 6000, 100) == QuotaCharged(True)
    assert await store.quota.charge("ns", "p2", 5000, 50) == QuotaExceeded(QuotaDimension.MEMORY, 10_000, 6000, 5000)
    assert await store.quota.charge("ns", "p2", 4000, 100) == QuotaCharged(True)
    assert await store.quota.get("ns") == QuotaState(QuotaLimits(10_000, 200), 10_000, 200)


async def test_charge_is_idempotent_and_replaces(store: Store) -> None:
    await store.quota.set_limits("ns", QuotaLimits(mem_mib=5000))
    assert await store.quota.charge("ns", "p1", 3000, 10) == QuotaCharged(True)
    assert await store.quota.charge("ns", "p1", 3000, 10) == QuotaCharged(False)
    # the pod's own earlier charge does not count against its new one
    assert await store.quota.charge("ns", "p1", 5000, 10) == QuotaCharged(True)
    assert (await store.quota.get("ns")).used_mem_mib == 5000
    # shrinking is always allowed, even over a lowered limit
    await store.quota.set_limits("ns", QuotaLimits(mem_mib=1000))
    assert await store.quota.charge("ns", "p1", 4000, 10) == QuotaCharged(True)


async def test_refund(store: Store) -> None:
    await store.quota.charge("ns", "p1", 3000, 10)
    await store.quota.charge("ns", "p2", 1000, 5)
    assert await store.quota.refund("ns", "p1") == PodQuotaCharge(3000, 10)
    assert await store.quota.refund("ns", "p1") is None
    state = await store.quota.get("ns")
    assert (state.used_mem_mib, state.used_cores_pct) == (1000, 5)
    assert await store.quota.pod_charges("ns") == {"p2": PodQuotaCharge(1000, 5)}


async def test_record_ignores_limits(store: Store) -> None:
    await store.quota.set_limits("ns", QuotaLimits(mem_mib=0))
    assert await store.quota.record("ns", "p1", 8000, 50) is True
    assert await store.quota.record("ns", "p1", 8000, 50) is False
    assert (await store.quota.get("ns")).used_mem_mib == 8000


async def test_limits_can_be_lifted(store: Store) -> None:
    await store.quota.set_limits("ns", QuotaLimits(mem_mib=0, cores_pct=0))
    await store.quota.set_limits("ns", QuotaLimits())
    assert await store.quota.charge("ns", "p1", 100, 100) == QuotaCharged(True)


async def test_reset_usage_replaces_every_charge(store: Store) -> None:
    await store.quota.charge("ns", "p1", 3000, 10)
    await store.quota.charge("ns", "p2", 1000, 5)
    drift = await store.quota.reset_usage("ns", {"p2": PodQuotaCharge(1000, 5), "p3": PodQuotaCharge(200, 1)})
    assert drift == 2  # p1 gone, p3 new; p2 unchanged
    assert await store.quota.pod_charges("ns") == {"p2": PodQuotaCharge(1000, 5), "p3": PodQuotaCharge(200, 1)}
    state = await store.quota.get("ns")
    assert (state.used_mem_mib, state.used_cores_pct) == (1200, 6)
    assert await store.quota.reset_usage("ns", {}) == 2
    assert await store.quota.get("ns") == QuotaState()
    assert await store.quota.namespaces() == ["ns"]


async def test_negative_charge_is_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="negative"):
        await store.quota.charge("ns", "p1", -1, 0)
