"""Store epoch and synced markers (flush detection), and the change feed (blocking reads, gap detection)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from tests.integration.store.conftest import alloc, gpu, node
from vgpu_scheduler.shared.store import START_ID, ChangeKind, Store, StoreStatus, SyncMarker, meta


async def test_ping_times_a_round_trip_to_redis(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    # a clock that moves only while Redis answers PING: the time ping() gives is that round trip's, and only a
    # PING the server answered can give it
    now = [100.0]
    monkeypatch.setattr(meta, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    answer = store.client.ping

    async def ping_taking_a_quarter_second(**options: Any) -> Any:
        pong = await answer(**options)
        now[0] += 0.25
        return pong

    monkeypatch.setattr(store.client, "ping", ping_taking_a_quarter_second)
    assert await store.meta.ping() == 0.25


async def test_epoch_is_stable_until_a_flush(store: Store) -> None:
    assert await store.meta.status() == StoreStatus(epoch=None)
    epoch = await store.meta.ensure_epoch()
    assert await store.meta.ensure_epoch() == epoch
    assert await store.meta.mark_synced(SyncMarker.INVENTORY, epoch)

    status = await store.meta.status()
    assert status.epoch == epoch
    assert status.is_synced(SyncMarker.INVENTORY)
    assert not status.is_synced(SyncMarker.ALLOCATIONS)

    await store.client.flushall()
    assert await store.meta.status() == StoreStatus(epoch=None)
    fresh = await store.meta.ensure_epoch()
    assert fresh != epoch
    # a load that started before the flush cannot claim the new epoch
    assert await store.meta.mark_synced(SyncMarker.INVENTORY, epoch) is False
    assert not (await store.meta.status()).is_synced(SyncMarker.INVENTORY)


async def test_latest_id_then_read_only_later_changes(store: Store) -> None:
    assert await store.feed.latest_id() == START_ID
    await store.inventory.put(node("n1", gpu("GPU-a")))
    head = await store.feed.latest_id()
    await store.reservations.reserve(alloc("p1", "n1", (("GPU-a", 10, 1),)))
    await store.reservations.release("p1")

    batch = await store.feed.read(head)
    assert [(e.node, e.generation, e.kind) for e in batch.events] == [
        ("n1", 2, ChangeKind.USAGE),
        ("n1", 3, ChangeKind.USAGE),
    ]
    assert batch.last_id == await store.feed.latest_id()
    assert not batch.gap
    assert (await store.feed.read(batch.last_id)).events == ()


async def test_blocking_read_wakes_on_a_change(store: Store) -> None:
    head = await store.feed.latest_id()
    reader = asyncio.create_task(store.feed.read(head, block_s=2.0), name="feed-reader")
    await store.inventory.put(node("n1", gpu("GPU-a")))
    batch = await asyncio.wait_for(reader, timeout=5)
    assert [(e.node, e.kind) for e in batch.events] == [("n1", ChangeKind.INVENTORY)]


async def test_blocking_read_times_out_empty(store: Store) -> None:
    await store.inventory.put(node("n1", gpu("GPU-a")))
    head = await store.feed.latest_id()
    batch = await store.feed.read(head, block_s=0.05)
    assert (batch.events, batch.last_id, batch.gap) == ((), head, False)


async def test_flush_is_a_gap(store: Store) -> None:
    await store.inventory.put(node("n1", gpu("GPU-a")))
    head = await store.feed.latest_id()
    await store.client.flushall()
    assert (await store.feed.read(head)).gap
    await store.inventory.put(node("n1", gpu("GPU-a")))
    batch = await store.feed.read(head)
    assert batch.gap
    assert [e.generation for e in batch.events] == [1]


async def test_trimmed_stream_is_a_gap(store: Store) -> None:
    small = Store.create(store.client, prefix="trim", stream_maxlen=10)
    await small.inventory.put(node("n0", gpu("GPU-a")))
    first = await small.feed.latest_id()
    for i in range(1, 400):
        await small.inventory.put(node(f"n{i}", gpu("GPU-a")))
    batch = await small.feed.read(first)
    assert batch.gap
    # a reader that kept up sees no gap
    head = await small.feed.latest_id()
    await small.inventory.put(node("late", gpu("GPU-a")))
    assert not (await small.feed.read(head)).gap
