"""Store operations added for the extender's /filter: the one-round-trip pre-plan read, and quota charges checked
against limit × memoryFactor."""

from __future__ import annotations

import pytest

from tests.integration.store.conftest import alloc, gpu, node
from vgpu_scheduler.shared.domain.quota import QuotaLimits, QuotaState
from vgpu_scheduler.shared.store import QuotaCharged, QuotaDimension, QuotaExceeded, Store


async def test_node_and_quota_of_an_unknown_pod_and_namespace(store: Store) -> None:
    assert await store.reservations.node_and_quota("nobody", "empty-ns") == (None, QuotaState())


async def test_node_and_quota_reads_the_pod_index_and_the_namespace_quota(store: Store) -> None:
    await store.inventory.put(node("n1", gpu("GPU-a")))
    await store.reservations.reserve(alloc("p1", "n1", (("GPU-a", 1000, 30),), namespace="team"))
    await store.quota.set_limits("team", QuotaLimits(mem_mib=8000, cores_pct=None))
    await store.quota.charge("team", "p1", 1000, 30)

    where, quota = await store.reservations.node_and_quota("p1", "team")

    assert where == "n1"
    assert quota == QuotaState(limits=QuotaLimits(mem_mib=8000, cores_pct=None), used_mem_mib=1000, used_cores_pct=30)
    assert quota == await store.quota.get("team")


@pytest.mark.parametrize(
    ("factor", "mem", "expected"),
    [
        pytest.param(1, 1001, QuotaExceeded(QuotaDimension.MEMORY, 1000, 0, 1001), id="factor-1-over"),
        pytest.param(1, 1000, QuotaCharged(True), id="factor-1-exact"),
        pytest.param(4, 4000, QuotaCharged(True), id="factor-4-scaled-limit"),
        pytest.param(4, 4001, QuotaExceeded(QuotaDimension.MEMORY, 1000, 0, 4001), id="factor-4-over"),
    ],
)
async def test_charge_compares_scaled_memory_with_the_raw_limit_times_the_factor(
    store: Store, factor: int, mem: int, expected: object
) -> None:
    await store.quota.set_limits("ns", QuotaLimits(mem_mib=1000, cores_pct=None))
    assert await store.quota.charge("ns", "p1", mem, 10, mem_limit_factor=factor) == expected


async def test_the_factor_does_not_scale_the_cores_limit(store: Store) -> None:
    await store.quota.set_limits("ns", QuotaLimits(mem_mib=None, cores_pct=100))
    assert await store.quota.charge("ns", "p1", 0, 101, mem_limit_factor=4) == QuotaExceeded(
        QuotaDimension.CORES, 100, 0, 101
    )


async def test_a_factor_below_one_is_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="mem_limit_factor"):
        await store.quota.charge("ns", "p1", 1, 1, mem_limit_factor=0)
