"""Leases: exclusive, fencing tokens only grow, compare-and-extend renewals, expiry and takeover, keeper."""

from __future__ import annotations

import asyncio

import pytest

from vgpu_scheduler.shared.coord import Lease, LeaseKeeper, LeaseNotHeldError
from vgpu_scheduler.shared.errors import TransientError
from vgpu_scheduler.shared.store import LeaseInfo, Store


async def test_acquire_is_exclusive_and_reentrant(store: Store) -> None:
    a = Lease(store.leases, "registrar", "a", ttl_s=30)
    b = Lease(store.leases, "registrar", "b", ttl_s=30)
    assert await a.try_acquire()
    first = a.token
    assert await a.try_acquire()  # same holder again: same token
    assert a.token == first
    assert not await b.try_acquire()
    assert b.token is None
    with pytest.raises(LeaseNotHeldError):
        _ = b.fence
    info = await b.current()
    assert info is not None and (info.holder, info.token) == ("a", first)
    assert 0 < info.ttl_ms <= 30_000
    held = await store.leases.acquire("registrar", "b", 30)  # the refusal names the holder, as inspect does
    assert isinstance(held, LeaseInfo) and (held.holder, held.token) == ("a", first)
    assert 0 < held.ttl_ms <= 30_000


async def test_tokens_grow_with_each_acquisition(store: Store) -> None:
    tokens = []
    for holder in ("a", "b", "a"):
        lease = Lease(store.leases, "informer", holder, ttl_s=30)
        assert await lease.try_acquire()
        assert lease.token is not None
        tokens.append(lease.token)
        assert await lease.current_token() == lease.token
        assert await lease.release()
    assert tokens == sorted(tokens) and len(set(tokens)) == 3


async def test_renew_and_release_only_by_the_holder(store: Store) -> None:
    a = Lease(store.leases, "registrar", "a", ttl_s=30)
    assert await a.try_acquire()
    assert await a.renew()
    await store.client.delete(store.keys.lease("registrar"))
    b = Lease(store.leases, "registrar", "b", ttl_s=30)
    assert await b.try_acquire()

    assert not await a.renew()  # compare-and-extend: b's lease is untouched
    assert a.token is None
    assert not await a.release()
    info = await b.current()
    assert info is not None and info.holder == "b"
    assert await b.release()
    assert await b.current() is None
    assert await b.current_token() is None


async def test_standby_takes_over_when_the_ttl_lapses(store: Store) -> None:
    a = Lease(store.leases, "informer", "a", ttl_s=0.2)
    b = Lease(store.leases, "informer", "b", ttl_s=0.2)
    assert await a.try_acquire()
    stop = asyncio.Event()
    # b waits as a standby; nobody renews a, so Redis expires it and b gets it
    assert await asyncio.wait_for(b.acquire(stop, retry_s=0.02), timeout=5)
    assert a.token is not None and b.token is not None and b.token > a.token
    assert not await a.renew()


async def test_standby_gives_up_when_stopped(store: Store) -> None:
    a = Lease(store.leases, "informer", "a", ttl_s=30)
    b = Lease(store.leases, "informer", "b", ttl_s=30)
    assert await a.try_acquire()
    stop = asyncio.Event()
    waiting = asyncio.create_task(b.acquire(stop, retry_s=0.01), name="standby")
    stop.set()
    assert await asyncio.wait_for(waiting, timeout=5) is False


class CountingLeases:
    """Wraps the lease store to signal after ``n`` renewals."""

    def __init__(self, inner: object, n: int) -> None:
        self._inner = inner
        self.renewed = 0
        self.enough = asyncio.Event()
        self._n = n

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)

    async def renew(self, name: str, holder: str, token: int, ttl_s: float) -> bool:
        ok: bool = await self._inner.renew(name, holder, token, ttl_s)  # type: ignore[attr-defined]
        self.renewed += 1
        if self.renewed >= self._n:
            self.enough.set()
        return ok


async def test_keeper_holds_the_lease_past_its_ttl_and_releases_on_exit(store: Store) -> None:
    counting = CountingLeases(store.leases, n=6)
    lease = Lease(counting, "registrar", "a", ttl_s=0.15)  # type: ignore[arg-type]
    assert await lease.try_acquire()
    token = lease.token
    async with LeaseKeeper(lease, renew_every_s=0.04) as keeper:
        await asyncio.wait_for(counting.enough.wait(), timeout=5)  # 6 renewals ≥ 0.24 s > ttl
        info = await lease.current()
        assert isinstance(info, LeaseInfo) and (info.holder, info.token) == ("a", token)
        assert not keeper.lost.is_set()
    assert await lease.current() is None


async def test_keeper_signals_loss(store: Store) -> None:
    lease = Lease(store.leases, "informer", "a", ttl_s=30)
    assert await lease.try_acquire()
    async with LeaseKeeper(lease, renew_every_s=0.01) as keeper:
        await store.client.delete(store.keys.lease("informer"))
        thief = Lease(store.leases, "informer", "b", ttl_s=30)
        assert await thief.try_acquire()
        await asyncio.wait_for(keeper.lost.wait(), timeout=5)
    info = await thief.current()
    assert info is not None and info.holder == "b"  # the keeper's exit did not release the thief's lease


async def test_keeper_gives_up_after_a_ttl_of_failed_renewals(store: Store) -> None:
    lease = Lease(store.leases, "informer", "a", ttl_s=0.1)
    assert await lease.try_acquire()

    async def unavailable() -> bool:
        raise TransientError("redis down", 0.01)

    lease.renew = unavailable  # type: ignore[method-assign]
    async with LeaseKeeper(lease, renew_every_s=0.01) as keeper:
        await asyncio.wait_for(keeper.lost.wait(), timeout=5)


async def test_ttl_must_be_positive(store: Store) -> None:
    with pytest.raises(ValueError, match="positive"):
        Lease(store.leases, "x", "a", ttl_s=0)
