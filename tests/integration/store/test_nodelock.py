"""Node locks: one holder per node, re-entrant per pod, owner-checked release, expiry reported not handed on."""

from __future__ import annotations

import asyncio

import pytest

from vgpu_scheduler.shared.coord import NodeLock, lock_owner
from vgpu_scheduler.shared.store import LockAcquired, LockHeld, LockInfo, Store


@pytest.fixture
def locks(store: Store) -> NodeLock:
    return NodeLock(store.locks, ttl_s=300)


async def _expire(locks: NodeLock, node: str) -> LockInfo:
    """Await the (1 ms) logical expiry of ``node``'s lock. Only the server clock can tell, so poll it."""
    for _ in range(1000):
        info = await locks.inspect(node)
        assert info is not None
        if info.expired:
            return info
        await asyncio.sleep(0.001)
    raise AssertionError("the lock never expired")


async def test_one_holder_per_node(locks: NodeLock) -> None:
    first = await locks.acquire("n1", lock_owner("default", "pod-a"))
    other = await locks.acquire("n1", "default/pod-b")
    elsewhere = await locks.acquire("n2", "default/pod-b")

    assert isinstance(first, LockAcquired) and not first.reentered
    assert isinstance(other, LockHeld)
    assert (other.info.owner, other.info.token, other.info.expired) == ("default/pod-a", first.token, False)
    assert other.info.expires_ms - other.info.acquired_ms == 300_000
    assert isinstance(elsewhere, LockAcquired)


async def test_same_owner_reenters_with_the_same_token(locks: NodeLock) -> None:
    first = await locks.acquire("n1", "default/pod-a")
    again = await locks.acquire("n1", "default/pod-a")
    assert isinstance(first, LockAcquired) and isinstance(again, LockAcquired)
    assert again.reentered and again.token == first.token
    assert again.info.expires_ms == first.info.expires_ms


async def test_release_checks_the_owner(locks: NodeLock) -> None:
    first = await locks.acquire("n1", "default/pod-a")
    assert isinstance(first, LockAcquired)
    assert await locks.release("n1", "default/pod-b") is False
    assert await locks.release("n1", "default/pod-a", token=first.token + 1) is False
    assert await locks.release("n1", "default/pod-a", token=first.token) is True
    assert await locks.inspect("n1") is None
    assert await locks.release("n1", "default/pod-a") is False

    second = await locks.acquire("n1", "default/pod-b")
    assert isinstance(second, LockAcquired) and second.token > first.token


async def test_force_release(locks: NodeLock) -> None:
    held = await locks.acquire("n1", "default/pod-a")
    assert isinstance(held, LockAcquired)
    assert await locks.force_release("n1", token=held.token + 1) is False
    assert await locks.force_release("n1", token=held.token) is True
    await locks.acquire("n1", "default/pod-b")
    assert await locks.force_release("n1") is True
    assert await locks.force_release("n1") is False


async def test_expired_lock_is_reported_not_handed_on(locks: NodeLock) -> None:
    await locks.acquire("n1", "default/pod-a", ttl_s=0.001)
    expired = await _expire(locks, "n1")

    contender = await locks.acquire("n1", "default/pod-b")

    assert isinstance(contender, LockHeld)
    assert contender.info.expired and contender.info.owner == "default/pod-a"
    assert contender.info.token == expired.token


async def test_acquire_settling_expired_settles_first(locks: NodeLock) -> None:
    old = await locks.acquire("n1", "default/pod-a", ttl_s=0.001)
    assert isinstance(old, LockAcquired)
    await _expire(locks, "n1")
    settled: list[LockInfo] = []

    async def mark_failed(info: LockInfo) -> None:
        # still locked by the old pod while we mark it failed
        current = await locks.inspect("n1")
        assert current is not None and current.owner == "default/pod-a"
        settled.append(info)

    result = await locks.acquire_settling_expired("n1", "default/pod-b", mark_failed)

    assert [i.owner for i in settled] == ["default/pod-a"]
    assert isinstance(result, LockAcquired) and result.token > old.token
    info = await locks.inspect("n1")
    assert info is not None and info.owner == "default/pod-b"


async def test_failed_settle_keeps_the_old_holder(locks: NodeLock) -> None:
    await locks.acquire("n1", "default/pod-a", ttl_s=0.001)
    await _expire(locks, "n1")

    async def cannot(info: LockInfo) -> None:
        raise RuntimeError("API server unavailable")

    with pytest.raises(RuntimeError):
        await locks.acquire_settling_expired("n1", "default/pod-b", cannot)
    info = await locks.inspect("n1")
    assert info is not None and info.owner == "default/pod-a"


async def test_live_lock_is_not_settled(locks: NodeLock) -> None:
    await locks.acquire("n1", "default/pod-a")

    async def never(info: LockInfo) -> None:
        raise AssertionError("a live lock must not be settled")

    result = await locks.acquire_settling_expired("n1", "default/pod-b", never)
    assert isinstance(result, LockHeld) and not result.info.expired


async def test_hard_ttl_lets_redis_drop_a_forgotten_lock(store: Store) -> None:
    locks = NodeLock(store.locks, ttl_s=300, hard_ttl_s=0.02)
    await locks.acquire("n1", "default/pod-a")
    for _ in range(1000):  # Redis expires the key on its own clock: poll it
        if await locks.inspect("n1") is None:
            break
        await asyncio.sleep(0.005)
    assert isinstance(await locks.acquire("n1", "default/pod-b"), LockAcquired)


async def test_many_contenders_one_winner(locks: NodeLock) -> None:
    results = await asyncio.gather(*(locks.acquire("n1", f"default/pod-{i}") for i in range(50)))
    winners = [r for r in results if isinstance(r, LockAcquired)]
    assert len(winners) == 1
    assert all(isinstance(r, LockHeld) and r.info.token == winners[0].token for r in results if r is not winners[0])


async def test_release_settled_checks_owner_and_acquisition_time(store: Store) -> None:
    """One round trip that releases the lock if the named pod took it no later than a given time, and otherwise
    answers the lock as ``inspect`` would have."""
    owner = lock_owner("default", "pod-a")
    assert await store.locks.release_settled("n1", owner, None) == (False, None)  # free
    taken = await store.locks.acquire("n1", owner, ttl_s=300)
    assert isinstance(taken, LockAcquired)
    acquired_ms = taken.info.acquired_ms

    for other, bound in ((lock_owner("default", "pod-b"), None), (owner, acquired_ms - 1)):
        released, seen = await store.locks.release_settled("n1", other, bound)
        assert not released
        assert seen is not None and seen.owner == owner and seen.token == taken.info.token
        assert seen.acquired_ms == acquired_ms and seen.now_ms >= acquired_ms
        assert await store.locks.inspect("n1") is not None

    released, seen = await store.locks.release_settled("n1", owner, acquired_ms)
    assert released and seen is not None and seen.token == taken.info.token
    assert await store.locks.inspect("n1") is None
    await store.locks.acquire("n1", owner, ttl_s=300)
    assert (await store.locks.release_settled("n1", owner, None))[0]
