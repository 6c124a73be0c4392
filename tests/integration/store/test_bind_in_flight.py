"""A node's "bind in flight" flag: its bind lock is held, or a reservation there is not yet confirmed. Lock changes
move the node's generation and reach the change feed with the node's new count of binds in flight, so every
extender replica learns it without reading the node again."""

from __future__ import annotations

from collections.abc import Awaitable

from tests.integration.store.conftest import alloc, gpu, node
from vgpu_scheduler.shared.store import START_ID, ChangeKind, Store


async def _busy(store: Store, name: str) -> bool:
    return (await store.snapshots.load([name]))[name].bind_in_flight


async def test_a_reservation_is_in_flight_until_confirmed(store: Store) -> None:
    await store.inventory.put(node("n1", gpu("GPU-a")))
    assert await _busy(store, "n1") is False
    await store.reservations.reserve(alloc("p1", "n1", (("GPU-a", 1000, 30),)))
    assert await _busy(store, "n1") is True
    reserved_at = (await store.snapshots.load(["n1"]))["n1"].generation
    assert await store.reservations.confirm("p1") is True
    assert await _busy(store, "n1") is False
    # the end of the bind in flight reaches the feed: replicas re-read the node
    assert (await store.snapshots.load(["n1"]))["n1"].generation == reserved_at + 1


async def test_a_confirmation_under_a_held_lock_changes_nothing_visible(store: Store) -> None:
    await store.inventory.put(node("n1", gpu("GPU-a")))
    await store.reservations.reserve(alloc("p1", "n1", (("GPU-a", 1000, 30),)))
    await store.locks.acquire("n1", "default/p1", ttl_s=60)
    locked_at = (await store.snapshots.load(["n1"]))["n1"].generation
    assert await store.reservations.confirm("p1") is True
    assert await _busy(store, "n1") is True
    assert (await store.snapshots.load(["n1"]))["n1"].generation == locked_at


async def test_a_held_lock_is_in_flight_and_its_changes_reach_the_feed(store: Store) -> None:
    await store.inventory.put(node("n1", gpu("GPU-a")))
    before = (await store.snapshots.load(["n1"]))["n1"].generation
    head = await store.feed.latest_id()

    taken = await store.locks.acquire("n1", "default/pod-a", ttl_s=60)
    assert await _busy(store, "n1") is True
    again = await store.locks.acquire("n1", "default/pod-a", ttl_s=60)  # re-entry changes nothing
    assert again.info.token == taken.info.token
    assert await store.locks.release("n1", "default/pod-b") is False  # not the holder: nothing changes
    assert await store.locks.release("n1", "default/pod-a") is True
    assert await _busy(store, "n1") is False

    events = (await store.feed.read(head)).events
    assert [(e.node, e.generation, e.kind) for e in events] == [
        ("n1", before + 1, ChangeKind.USAGE),
        ("n1", before + 2, ChangeKind.USAGE),
    ]
    assert (await store.snapshots.load(["n1"]))["n1"].generation == before + 2


async def test_locks_and_reservations_of_other_nodes_do_not_count(store: Store) -> None:
    await store.inventory.put(node("n1", gpu("GPU-a")))
    await store.inventory.put(node("n2", gpu("GPU-b")))
    await store.locks.acquire("n2", "default/pod-a", ttl_s=60)
    await store.reservations.reserve(alloc("p2", "n2", (("GPU-b", 1000, 30),)))
    loaded = await store.snapshots.load(["n1", "n2"])
    assert (loaded["n1"].bind_in_flight, loaded["n2"].bind_in_flight) == (False, True)
    assert len((await store.feed.read(START_ID)).events) >= 3


async def test_binds_in_flight_are_counted(store: Store) -> None:
    await store.inventory.put(node("n1", gpu("GPU-a")))
    await store.reservations.reserve(alloc("p1", "n1", (("GPU-a", 1000, 10),)))
    await store.reservations.reserve(alloc("p2", "n1", (("GPU-a", 1000, 10),)))
    assert (await store.snapshots.load(["n1"]))["n1"].binds_in_flight == 2
    await store.reservations.confirm("p1")
    await store.reservations.confirm("p2")
    await store.locks.acquire("n1", "default/p2", ttl_s=60)  # its device plugin has not settled it yet
    assert (await store.snapshots.load(["n1"]))["n1"].binds_in_flight == 1
    await store.locks.release("n1", "default/p2")
    assert (await store.snapshots.load(["n1"]))["n1"].binds_in_flight == 0


async def _after_each(store: Store, name: str, steps: list[tuple[str, Awaitable[object]]]) -> None:
    """Run each step; the feed entries it wrote must carry, when they say the change moved only the binds in
    flight, exactly the count a read of the node gives right after, and follow the generation held before."""
    head = await store.feed.latest_id()
    held = (await store.snapshots.load([name]))[name]
    for what, step in steps:
        await step
        state = (await store.snapshots.load([name]))[name]
        batch = await store.feed.read(head)
        head = batch.last_id
        assert len(batch.events) <= 1, what
        for event in batch.events:
            if event.binds_in_flight is not None:
                assert event.generation == held.generation + 1 == state.generation, what
                assert event.binds_in_flight == state.binds_in_flight, what
                assert (state.usage, state.inventory) == (held.usage, held.inventory), what
        held = state


async def test_changes_of_binds_in_flight_alone_carry_the_new_count(store: Store) -> None:
    await store.inventory.put(node("n1", gpu("GPU-a")))
    head = await store.feed.latest_id()
    await _after_each(
        store,
        "n1",
        [
            ("reserve p1", store.reservations.reserve(alloc("p1", "n1", (("GPU-a", 1000, 10),)))),
            ("reserve p2", store.reservations.reserve(alloc("p2", "n1", (("GPU-a", 1000, 10),)))),
            ("lock p1", store.locks.acquire("n1", "default/p1", ttl_s=60)),
            ("confirm p1 under the lock", store.reservations.confirm("p1")),
            ("release p1", store.locks.release("n1", "default/p1")),
            ("confirm p2", store.reservations.confirm("p2")),
            ("lock p3, nothing reserved", store.locks.acquire("n1", "default/p3", ttl_s=60)),
            ("release p3 once settled", store.locks.release_settled("n1", "default/p3", None)),
        ],
    )
    events = (await store.feed.read(head)).events
    # the reservations changed usage: no count, the node is read; every lock change and the last confirmation
    # (which ended the binds in flight) carry theirs
    assert [e.binds_in_flight for e in events] == [None, None, 2, 1, 0, 1, 0]
    assert [e.lock_released for e in events] == [False, False, False, True, False, False, True]
    # a fresh acquisition is marked too: with the release it times the node's lock cycle (the bind limit)
    assert [e.lock_taken for e in events] == [False, False, True, False, False, True, False]
