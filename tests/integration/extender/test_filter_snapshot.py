"""The process-local snapshot behind /filter: one full load, then only changed nodes; feed gaps and store flushes
reload; generations never go backwards; a node Redis cannot decode is skipped."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from tests.integration.extender.filter_harness import FAST_CACHE, node, seed
from vgpu_scheduler.services.extender.snapshot import CacheSettings, SnapshotCache
from vgpu_scheduler.services.extender.wakeups import NodeWakeups
from vgpu_scheduler.shared.domain.allocation import Allocation
from vgpu_scheduler.shared.domain.model import ContainerDevice, DeviceUsage, NodePolicy
from vgpu_scheduler.shared.domain.plan import Decision, rank_key
from vgpu_scheduler.shared.store import ChangeBatch, LockAcquired, Reserved, Store, SyncMarker

WAIT_S = 10.0


@asynccontextmanager
async def following(store: Store, settings: CacheSettings = FAST_CACHE) -> AsyncIterator[SnapshotCache]:
    cache = SnapshotCache(store, settings)
    task = asyncio.create_task(cache.run(), name="snapshot-follower")
    try:
        async with asyncio.timeout(WAIT_S):
            await cache.loaded.wait()
        yield cache
    finally:
        cache.close()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def one_gpu(uid: str, node_name: str, mem: int = 1000, cores: int = 10, gpu: int = 0) -> Allocation:
    from vgpu_scheduler.shared.domain.accounting import collapse

    devices = ((ContainerDevice(f"GPU-{node_name}-{gpu}", mem, cores),),)
    return Allocation(uid, "default", uid, node_name, devices, collapse(devices, 0))


async def test_the_first_load_holds_every_registered_node_and_is_ready(store: Store) -> None:
    await seed(store, [node("a", 2), node("b", 4)])
    async with following(store) as cache:
        assert sorted(cache.snapshots()) == ["a", "b"]
        assert cache.not_ready_reason() is None
        snaps, missing = cache.lookup(["b", "ghost", "a"])
        assert [s.name for s in snaps] == ["b", "a"] and missing == ["ghost"]
        assert cache.stats.full_loads == 1


async def test_changes_made_elsewhere_arrive_through_the_feed(store: Store, other_store: Store) -> None:
    await seed(store, [node("a", 2), node("b", 2)])
    async with following(store) as cache:
        reads_before = cache.stats.node_reads
        result = await other_store.reservations.reserve(one_gpu("p1", "a"))
        assert isinstance(result, Reserved)
        await cache.wait_until(lambda: cache.generation("a") == result.generation, WAIT_S)
        snap = cache.get("a")
        assert snap is not None
        assert snap.device_usage("GPU-a-0") == DeviceUsage(used=1, used_mem_mib=1000, used_cores=10)
        assert cache.stats.node_reads == reads_before + 1  # only the changed node was read again

        await other_store.inventory.put(node("c", 1))  # a new node registers
        await cache.wait_until(lambda: cache.get("c") is not None, WAIT_S)
        await other_store.inventory.delete("b")  # and one goes away
        await cache.wait_until(lambda: cache.get("b") is None, WAIT_S)
        assert sorted(cache.snapshots()) == ["a", "c"]


async def test_apply_local_installs_our_own_reservation_only_on_the_next_generation(store: Store) -> None:
    await seed(store, [node("a", 2)])
    async with following(store, CacheSettings(feed_block_s=0.05, feed_min_interval_s=60.0)) as cache:
        snap = cache.get("a")
        generation = cache.generation("a")
        assert snap is not None and generation is not None
        alloc = one_gpu("p1", "a", mem=2000, cores=20, gpu=1)
        decision = Decision(node="a", devices=alloc.devices, mig=(), charges=alloc.charges, score=0.0)
        assert not cache.apply_local(decision, generation + 2)  # something else happened in between: wait for it
        assert cache.apply_local(decision, generation + 1)
        after = cache.get("a")
        assert after is not None and cache.generation("a") == generation + 1
        assert after.device_usage("GPU-a-1") == DeviceUsage(used=1, used_mem_mib=2000, used_cores=20)
        assert snap.device_usage("GPU-a-1") == DeviceUsage()  # snapshots are immutable; the old one is untouched


def assert_ranked(cache: SnapshotCache) -> None:
    """``ranked`` walks every registered node in each policy's order, and splits them by bind in flight."""
    snaps = cache.snapshots()
    everything = set(snaps) | {"ghost"}
    for policy in NodePolicy:
        expected = [s.name for s in sorted(snaps.values(), key=rank_key(policy))]
        assert [s.name for s in cache.ranked(policy, everything)] == expected
        assert [s.name for s in cache.ranked(policy, {expected[-1]} if expected else set())] == expected[-1:]
        free = [s.name for s in cache.ranked(policy, everything, False)]
        taken = [s.name for s in cache.ranked(policy, everything, True)]
        assert free == [n for n in expected if n not in cache.busy]
        assert taken == [n for n in expected if n in cache.busy]


async def test_the_ranking_follows_every_change(store: Store, other_store: Store) -> None:
    await seed(store, [node("a", 2), node("b", 2), node("c", 2)])
    async with following(store) as cache:
        assert_ranked(cache)
        assert [s.name for s in cache.ranked(NodePolicy.SPREAD, {"a", "b", "c"})] == ["a", "b", "c"]
        result = await other_store.reservations.reserve(one_gpu("p1", "b", mem=4000, cores=50))
        assert isinstance(result, Reserved)
        await cache.wait_until(lambda: cache.generation("b") == result.generation, WAIT_S)
        assert_ranked(cache)
        assert [s.name for s in cache.ranked(NodePolicy.BINPACK, {"a", "b", "c"})] == ["b", "a", "c"]
        assert [s.name for s in cache.ranked(NodePolicy.BINPACK, {"a", "b", "c"}, False)] == ["a", "c"]
        snap, generation = cache.get("c"), cache.generation("c")
        assert snap is not None and generation is not None
        mine = await store.reservations.reserve(one_gpu("p2", "c", mem=8000, cores=60))
        assert isinstance(mine, Reserved) and mine.generation == generation + 1
        alloc = one_gpu("p2", "c", mem=8000, cores=60)
        decision = Decision(node="c", devices=alloc.devices, mig=(), charges=alloc.charges, score=snap.score)
        assert cache.apply_local(decision, mine.generation)
        assert_ranked(cache)
        assert [s.name for s in cache.ranked(NodePolicy.BINPACK, {"a", "b", "c"})] == ["c", "b", "a"]
        await other_store.inventory.put(node("d", 1))
        await other_store.inventory.delete("a")
        await cache.wait_until(lambda: cache.get("d") is not None and cache.get("a") is None, WAIT_S)
        assert_ranked(cache)
        await store.client.flushall()
        await cache.wait_until(lambda: cache.get("b") is None, WAIT_S)
        assert_ranked(cache)
        assert list(cache.ranked(NodePolicy.SPREAD, {"b", "c", "d"})) == []


async def test_a_late_read_never_replaces_a_newer_generation(store: Store, other_store: Store) -> None:
    await seed(store, [node("a", 1)])
    async with following(store) as cache:
        first = await other_store.reservations.reserve(one_gpu("p1", "a"))
        assert isinstance(first, Reserved)
        await cache.wait_until(lambda: cache.generation("a") == first.generation, WAIT_S)
        stale = {"a": await store.snapshots.load(["a"])}
        second = await other_store.reservations.reserve(one_gpu("p2", "a"))
        assert isinstance(second, Reserved)
        await cache.refresh(["a"])
        assert cache.generation("a") == second.generation
        cache._install("a", stale["a"]["a"])  # an old read arriving late (internal hook, on purpose)
        assert cache.generation("a") == second.generation


async def test_a_feed_gap_reloads_everything(store: Store, other_store: Store) -> None:
    await seed(store, [node("a", 1), node("b", 1)])
    async with following(store) as cache:
        await other_store.client.delete(other_store.keys.changes())  # the stream is gone: events were lost
        await other_store.reservations.reserve(one_gpu("p1", "b"))
        await cache.wait_until(lambda: cache.stats.gaps >= 1 and cache.stats.full_loads >= 2, WAIT_S)
        snap = cache.get("b")
        assert snap is not None and snap.device_usage("GPU-b-0").used == 1
        assert cache.not_ready_reason() is None


async def test_a_flush_drops_the_cache_until_the_store_is_rebuilt(store: Store) -> None:
    await seed(store, [node("a", 1)])
    async with following(store) as cache:
        await store.client.flushall()
        await cache.wait_until(lambda: cache.not_ready_reason() is not None and cache.get("a") is None, WAIT_S)
        epoch = await store.meta.ensure_epoch()
        await store.inventory.put(node("z", 1))
        await store.meta.mark_synced(SyncMarker.INVENTORY, epoch)
        missing = "store not synced yet (missing: allocations, quotas)"
        await cache.wait_until(lambda: cache.get("z") is not None and cache.not_ready_reason() == missing, WAIT_S)
        for marker in (SyncMarker.ALLOCATIONS, SyncMarker.QUOTAS):
            await store.meta.mark_synced(marker, epoch)
        await cache.wait_until(lambda: cache.not_ready_reason() is None, WAIT_S)
        assert sorted(cache.snapshots()) == ["z"]


async def test_a_node_whose_data_does_not_decode_is_skipped_and_counted(store: Store) -> None:
    await seed(store, [node("a", 1), node("b", 1)])
    await store.client.set(store.keys.inventory("b"), b"\xc1 not msgpack")
    async with following(store) as cache:
        assert sorted(cache.snapshots()) == ["a"]
        assert cache.stats.corrupt_nodes == 1


async def test_close_stops_the_follower_even_without_cancellation(store: Store) -> None:
    await seed(store, [node("a", 1)])
    cache = SnapshotCache(store, FAST_CACHE)
    task = asyncio.create_task(cache.run(), name="snapshot-follower")
    await cache.loaded.wait()
    cache.close()
    async with asyncio.timeout(WAIT_S):
        await task


def _epoch_records(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if "store epoch" in r.getMessage()]


async def test_a_first_start_logs_the_new_epoch_at_info_and_a_real_change_warns(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """Every normal start loads the snapshot before the registrar creates the store epoch: that is no change
    worth a WARNING. A flush (an epoch replaced by another) is."""
    with caplog.at_level(logging.INFO, logger="vgpu_scheduler.services.extender.snapshot"):
        async with following(store) as cache:  # an empty store: no epoch yet
            first = await seed(store, [node("a", 1)])
            await cache.wait_until(lambda: cache.get("a") is not None and cache.not_ready_reason() is None, WAIT_S)
            assert _epoch_records(caplog) == [(logging.INFO, "store epoch established: reloading the node snapshot")]
            await store.client.flushall()
            await cache.wait_until(lambda: cache.get("a") is None, WAIT_S)
            second = await seed(store, [node("b", 1)])
            assert second != first
            await cache.wait_until(lambda: cache.get("b") is not None and cache.not_ready_reason() is None, WAIT_S)
    established = (logging.INFO, "store epoch established: reloading the node snapshot")
    changed = (logging.WARNING, "store epoch changed: dropping the node snapshot")
    # the flush warns once; the rebuilt store's new epoch is then established again
    assert _epoch_records(caplog) == [established, changed, established]


async def test_not_ready_until_the_snapshot_holds_the_registrars_nodes(store: Store, other_store: Store) -> None:
    """A load made before the registrar's full sync (a Redis restarted empty, a fresh install) is repeated once
    the sync marker appears: never "ready" with the nodes still in the feed. A slow follower makes the window
    wide: without the reload, the status check alone would say ready with 0 nodes."""
    epoch = await store.meta.ensure_epoch()
    for marker in (SyncMarker.ALLOCATIONS, SyncMarker.QUOTAS):
        await store.meta.mark_synced(marker, epoch)
    slow = CacheSettings(feed_block_s=0.05, feed_min_interval_s=1.0, status_interval_s=30.0)
    async with following(store, slow) as cache:
        assert len(cache) == 0 and cache.not_ready_reason() is not None
        # the registrar registers its nodes, then marks its full sync
        await other_store.inventory.put(node("a", 2))
        await other_store.inventory.put(node("b", 2))
        await other_store.meta.mark_synced(SyncMarker.INVENTORY, epoch)
        reason = await cache.verify()  # what /readyz asks
        assert reason == "node snapshot was loaded before the registrar's sync: reloading it"
        await cache.wait_until(lambda: cache.not_ready_reason() is None, WAIT_S)
        assert sorted(cache.snapshots()) == ["a", "b"]
        assert cache.stats.full_loads == 2
        assert await cache.verify() is None


async def test_only_a_lock_release_wakes_the_binds_waiting_for_the_node(store: Store, other_store: Store) -> None:
    """Reservations and lock acquisitions on a node reach the follower as changes too, but a bind waiting for the
    node's lock would only try and fail again: the follower wakes it for the release alone (or the node's
    deletion)."""
    await seed(store, [node("a", 2), node("b", 2)])
    wakeups = NodeWakeups()
    cache = SnapshotCache(store, FAST_CACHE, wakeups=wakeups)
    task = asyncio.create_task(cache.run(), name="snapshot-follower")
    try:
        async with asyncio.timeout(WAIT_S):
            await cache.loaded.wait()
        armed = wakeups.arm("a")
        reserved = await other_store.reservations.reserve(one_gpu("p1", "a"))
        assert isinstance(reserved, Reserved)
        await cache.wait_until(lambda: cache.generation("a") == reserved.generation, WAIT_S)
        held = await other_store.locks.acquire("a", "default/p1", 30.0)
        assert isinstance(held, LockAcquired)
        await cache.wait_until(lambda: cache.generation("a") == reserved.generation + 1, WAIT_S)
        assert not armed.is_set()  # a reservation and an acquisition: no wake-up
        assert await other_store.locks.release("a", "default/p1", held.token)
        async with asyncio.timeout(WAIT_S):
            await armed.wait()
        # the informer's release of a settled bind's lock wakes them too
        again = await other_store.locks.acquire("a", "default/p2", 30.0)
        assert isinstance(again, LockAcquired)
        settled = wakeups.arm("a")
        released, _ = await other_store.locks.release_settled("a", "default/p2", None)
        assert released
        async with asyncio.timeout(WAIT_S):
            await settled.wait()
        deleted = wakeups.arm("b")
        await other_store.inventory.delete("b")
        async with asyncio.timeout(WAIT_S):
            await deleted.wait()
    finally:
        cache.close()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_changes_of_binds_in_flight_alone_are_applied_without_reading_the_node(
    store: Store, other_store: Store
) -> None:
    """A lock taken or released, or the confirmation that ends a node's binds in flight, carries the new count in
    its feed entry: a follower holding the generation before applies it without a read, and ends where a fresh
    load of the node would (the test below: one that missed a generation reads the node)."""
    await seed(store, [node("a", 2), node("b", 2)])
    async with following(store, CacheSettings(feed_block_s=0.05, feed_min_interval_s=0.0)) as cache:
        reserved = await other_store.reservations.reserve(one_gpu("p1", "a"))
        assert isinstance(reserved, Reserved)
        await cache.wait_until(lambda: cache.generation("a") == reserved.generation, WAIT_S)
        snap, reads = cache.get("a"), cache.stats.node_reads
        assert "a" in cache.busy  # the reservation is a bind in flight (the node was read for it)

        async def applied(step: object, generation: int, busy: bool) -> None:
            await cache.wait_until(lambda: cache.generation("a") == generation, WAIT_S)
            assert ("a" in cache.busy) is busy
            assert cache.get("a") is snap and cache.stats.node_reads == reads  # no read, same usage
            fresh = (await store.snapshots.load(["a"]))["a"]
            assert fresh.generation == generation and fresh.bind_in_flight is busy, step

        held = await other_store.locks.acquire("a", "default/p1", 30.0)
        assert isinstance(held, LockAcquired)
        await applied("lock", reserved.generation + 1, True)
        assert await other_store.reservations.confirm("p1")  # under the lock: nothing visible changes
        assert await other_store.locks.release("a", "default/p1", held.token)
        await applied("release", reserved.generation + 2, False)
        assert cache.stats.applied == 2


async def test_a_change_of_binds_in_flight_after_a_missed_generation_reads_the_node(store: Store) -> None:
    """The entry's count is applied only on top of the generation just before it: a follower that missed one (here
    the reservation, read as one batch with the lock) reads the node, which gives the count and the usage."""
    await seed(store, [node("b", 2)])
    cache = SnapshotCache(store, FAST_CACHE)  # not running: its steps are taken by hand (internal hooks, on purpose)
    await cache._full_load("test")
    before = cache.generation("b")
    assert before is not None
    head = await store.feed.latest_id()
    await store.reservations.reserve(one_gpu("p2", "b"))
    await store.locks.acquire("b", "default/p2", 30.0)
    batch = await store.feed.read(head)
    lock_only = ChangeBatch(events=batch.events[1:], last_id=batch.last_id, gap=False)
    assert [e.binds_in_flight for e in lock_only.events] == [1]
    reads = cache.stats.node_reads
    await cache._follow(lock_only)
    assert cache.generation("b") == before + 2 and "b" in cache.busy
    assert cache.stats.applied == 0 and cache.stats.node_reads == reads + 1
    snap = cache.get("b")
    assert snap is not None and snap.device_usage("GPU-b-0").used == 1


async def test_every_lock_taken_then_released_on_the_feed_is_timed_as_one_cycle(
    store: Store, other_store: Store
) -> None:
    """The bind limit's measure (services/extender/bindlimit.py): every replica times each node's lock from the
    acquisition to the release as the feed shows them, whoever held it; a release whose acquisition came before
    the follower started counts nothing."""
    await seed(store, [node("a", 2), node("b", 2)])
    early = await other_store.locks.acquire("b", "default/early", 30.0)
    assert isinstance(early, LockAcquired)
    cycles: list[float] = []
    cache = SnapshotCache(store, FAST_CACHE, on_lock_cycle=cycles.append)
    task = asyncio.create_task(cache.run(), name="snapshot-follower")
    try:
        async with asyncio.timeout(WAIT_S):
            await cache.loaded.wait()
        before = cache.generation("b") or 0
        assert await other_store.locks.release("b", "default/early", early.token)
        await cache.wait_until(lambda: (cache.generation("b") or 0) > before, WAIT_S)
        assert cycles == []  # its acquisition was before the follower: not a cycle
        taken = cache.generation("a") or 0  # read before: the follower may apply the acquisition before it returns
        held = await other_store.locks.acquire("a", "default/p1", 30.0)
        assert isinstance(held, LockAcquired)
        await cache.wait_until(lambda: (cache.generation("a") or 0) > taken, WAIT_S)
        await asyncio.sleep(0.05)  # the lock is held for a while after the follower saw it taken: the cycle covers it
        assert await other_store.locks.release("a", "default/p1", held.token)
        await cache.wait_until(lambda: len(cycles) == 1, WAIT_S)
        assert cycles[0] >= 0.05
        again = await other_store.locks.acquire("a", "default/p2", 30.0)
        assert isinstance(again, LockAcquired)
        released, _ = await other_store.locks.release_settled("a", "default/p2", None)
        assert released
        await cache.wait_until(lambda: len(cycles) == 2, WAIT_S)  # the informer's release of a settled bind too
    finally:
        cache.close()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
