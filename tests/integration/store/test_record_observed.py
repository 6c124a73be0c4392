"""``Store.record_observed``: the informer's record and quota charge in one round trip, with the same effect as
``reservations.record`` followed by ``quota.record`` (one store does it one way, a second the other way, and
everything either holds is compared)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.integration.store.conftest import alloc, gpu, node
from vgpu_scheduler.shared.domain.allocation import Allocation
from vgpu_scheduler.shared.store import PodQuotaCharge, RecordResult, ReservationState, Store, connect


@pytest.fixture
async def twin(backend: str, request: pytest.FixtureRequest, store: Store) -> AsyncIterator[Store]:
    """A second store beside ``store`` (same server, another key prefix) that records the classic way."""
    if backend == "redis":
        s = Store.create(connect(request.getfixturevalue("redis_url")), prefix="twin")
    else:
        s = Store.create(store.client, prefix="twin")
    try:
        yield s
    finally:
        if backend == "redis":
            await s.aclose()


async def _seed(s: Store) -> None:
    await s.inventory.put(node("n1", gpu("GPU-a"), gpu("GPU-b", index=1)))
    await s.inventory.put(node("n2", gpu("GPU-c")))


async def _classic(s: Store, a: Allocation, charge: PodQuotaCharge) -> tuple[RecordResult, bool]:
    result = await s.reservations.record(a)
    changed = await s.quota.record(a.namespace, a.pod_uid, charge.mem_mib, charge.cores_pct, others=charge.others)
    return result, changed


async def _state(s: Store) -> tuple[object, ...]:
    by_node = await s.reservations.list_all()
    records = {n: sorted((r.allocation.pod_uid, r.allocation, r.state) for r in rs) for n, rs in by_node.items()}
    return (
        await s.usage.raw("n1"),
        await s.usage.raw("n2"),
        records,
        await s.quota.get("default"),
        await s.quota.pod_charges("default"),
        await s.inventory.generations(["n1", "n2"]),
    )


async def test_same_effect_as_record_then_quota_record(store: Store, twin: Store) -> None:
    steps = [
        # a reservation the extender made, then confirmed by the record (same content: usage unchanged)
        ("reserve", alloc("p1", "n1", (("GPU-a", 1000, 30),)), PodQuotaCharge(1000, 30)),
        ("record", alloc("p1", "n1", (("GPU-a", 1000, 30),)), PodQuotaCharge(1000, 30)),
        # a pod nobody reserved: recorded unconditionally
        ("record", alloc("p2", "n1", (("GPU-b", 500, 10),)), PodQuotaCharge(500, 10)),
        # the same again: nothing changes
        ("record", alloc("p2", "n1", (("GPU-b", 500, 10),)), PodQuotaCharge(500, 10)),
        # a pod still indexed on another node: moved there from n2
        ("reserve", alloc("p3", "n2", (("GPU-c", 100, 5),)), PodQuotaCharge(100, 5)),
        ("record", alloc("p3", "n1", (("GPU-a", 100, 5),)), PodQuotaCharge(100, 5)),
    ]
    for s in (store, twin):
        await _seed(s)
    for kind, a, charge in steps:
        if kind == "reserve":
            for s in (store, twin):
                await s.reservations.reserve(a)
                await s.quota.charge(a.namespace, a.pod_uid, charge.mem_mib, charge.cores_pct)
            continue
        got = await store.record_observed(a, charge)
        want = await _classic(twin, a, charge)
        assert got == want
        assert await _state(store) == await _state(twin)
    record = await store.reservations.get("p3")
    assert record is not None
    assert (record.allocation.node, record.state) == ("n1", ReservationState.CONFIRMED)


async def test_a_redis_without_the_scripts_loads_them(store: Store, backend: str) -> None:
    """The pipeline sends EVALSHA only; a Redis that does not know the scripts (restarted, or never asked) answers
    NOSCRIPT, and the calls are made again one by one, which loads them."""
    await _seed(store)
    await store.client.script_flush()
    a = alloc("p1", "n1", (("GPU-a", 1000, 30),))
    result, changed = await store.record_observed(a, PodQuotaCharge(1000, 30))
    assert (result.usage_changed, result.record_changed, changed) == (True, True, True)
    record = await store.reservations.get("p1")
    assert record is not None and record.state is ReservationState.CONFIRMED
    assert (await store.quota.get("default")).used_mem_mib == 1000
    # loaded now: the pipeline's EVALSHA runs them
    result, changed = await store.record_observed(alloc("p2", "n1", (("GPU-b", 10, 1),)), PodQuotaCharge(10, 1))
    assert (result.usage_changed, changed) == (True, True)
    assert (await store.quota.get("default")).used_mem_mib == 1010
