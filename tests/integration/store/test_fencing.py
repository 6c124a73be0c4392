"""Fenced writes: once the lease has moved on, a paused ex-holder's writes are refused, whatever they are."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from tests.integration.store.conftest import alloc, gpu, node
from vgpu_scheduler.shared.coord import Lease
from vgpu_scheduler.shared.domain.quota import QuotaLimits
from vgpu_scheduler.shared.store import Fence, PodQuotaCharge, StaleFenceError, Store, SyncMarker

Write = Callable[[Store, Fence], Awaitable[object]]

WRITES: dict[str, Write] = {
    "put-inventory": lambda s, f: s.inventory.put(node("n1", gpu("GPU-a"), gpu("GPU-b", index=1)), fence=f),
    "delete-inventory": lambda s, f: s.inventory.delete("n1", fence=f),
    "record": lambda s, f: s.reservations.record(alloc("p2", "n1", (("GPU-a", 1, 1),)), fence=f),
    "confirm": lambda s, f: s.reservations.confirm("p1", fence=f),
    "release": lambda s, f: s.reservations.release("p1", fence=f),
    "recount": lambda s, f: s.usage.recount("n1", fence=f),
    "quota-limits": lambda s, f: s.quota.set_limits("ns", QuotaLimits(mem_mib=1), fence=f),
    "quota-record": lambda s, f: s.quota.record("ns", "p1", 1, 1, fence=f),
    "record-observed": lambda s, f: s.record_observed(alloc("p1", "n1", (("GPU-a", 10, 1),)), PodQuotaCharge(2, 2), f),
    "quota-refund": lambda s, f: s.quota.refund("ns", "p1", fence=f),
    "quota-reset": lambda s, f: s.quota.reset_usage("ns", {"p9": PodQuotaCharge(1, 1)}, fence=f),
    "mark-synced": lambda s, f: s.meta.mark_synced(SyncMarker.INVENTORY, "any", fence=f),
}


@pytest.fixture
async def seeded(store: Store) -> Store:
    await store.inventory.put(node("n1", gpu("GPU-a")))
    await store.reservations.reserve(alloc("p1", "n1", (("GPU-a", 10, 1),)))
    await store.quota.charge("ns", "p1", 10, 1)
    return store


async def _state(s: Store) -> tuple[object, ...]:
    return (
        await s.inventory.get("n1"),
        await s.usage.raw("n1"),
        await s.reservations.list_all(),
        await s.quota.get("ns"),
        await s.quota.pod_charges("ns"),
        await s.meta.status(),
        await s.inventory.generations(["n1"]),
    )


@pytest.mark.parametrize("write", list(WRITES.values()), ids=list(WRITES))
async def test_current_holder_writes(seeded: Store, write: Write) -> None:
    lease = Lease(seeded.leases, "informer", "me", ttl_s=30)
    assert await lease.try_acquire()
    await write(seeded, lease.fence)


@pytest.mark.parametrize("write", list(WRITES.values()), ids=list(WRITES))
async def test_stale_token_is_refused_and_changes_nothing(seeded: Store, write: Write) -> None:
    old = Lease(seeded.leases, "informer", "old", ttl_s=30)
    assert await old.try_acquire()
    stale = old.fence
    await seeded.client.delete(seeded.keys.lease("informer"))  # the old holder's ttl lapsed while it was paused
    new = Lease(seeded.leases, "informer", "new", ttl_s=30)
    assert await new.try_acquire()
    before = await _state(seeded)

    with pytest.raises(StaleFenceError) as info:
        await write(seeded, stale)

    assert info.value.fence == stale
    assert await _state(seeded) == before


async def test_lapsed_lease_with_no_successor_refuses_too(seeded: Store) -> None:
    lease = Lease(seeded.leases, "registrar", "me", ttl_s=30)
    assert await lease.try_acquire()
    fence = lease.fence
    await seeded.client.delete(seeded.keys.lease("registrar"))
    with pytest.raises(StaleFenceError):
        await seeded.inventory.put(node("n1", gpu("GPU-z")), fence=fence)


async def test_token_never_issued_is_refused(seeded: Store) -> None:
    lease = Lease(seeded.leases, "informer", "me", ttl_s=30)
    assert await lease.try_acquire()
    forged = Fence(lease="informer", token=lease.fence.token + 1)
    with pytest.raises(StaleFenceError):
        await seeded.inventory.put(node("n1", gpu("GPU-z")), fence=forged)


async def test_a_token_from_before_a_flush_is_refused_after_it(store: Store) -> None:
    """FLUSHALL loses the lease epoch counter; the next holder must still get a token no pre-flush holder has."""
    old = Lease(store.leases, "registrar", "old-leader", ttl_s=30)
    assert await old.try_acquire()
    stale = old.fence
    assert stale is not None
    await store.client.flushall()
    new = Lease(store.leases, "registrar", "new-leader", ttl_s=30)
    assert await new.try_acquire()
    assert new.fence is not None and new.fence.token > stale.token
    with pytest.raises(StaleFenceError):
        await store.inventory.put(node("n1", gpu("GPU-a")), fence=stale)
    assert await store.inventory.get("n1") is None
    await store.inventory.put(node("n1", gpu("GPU-a")), fence=new.fence)
    assert await store.inventory.get("n1") is not None
