"""Inventory writes: generation moves only on real change, every change leaves an event, snapshots agree."""

from __future__ import annotations

import dataclasses

from tests.integration.store.conftest import gpu, node
from vgpu_scheduler.shared.store import START_ID, ChangeKind, Store


async def test_put_bumps_generation_only_when_content_changes(store: Store) -> None:
    inv = node("gpu-1", gpu("GPU-a"), gpu("GPU-b", index=1))
    first = await store.inventory.put(inv)
    again = await store.inventory.put(inv)
    changed = await store.inventory.put(dataclasses.replace(inv, cordoned=frozenset({"GPU-b"})))

    assert (first.changed, first.generation) == (True, 1)
    assert (again.changed, again.generation) == (False, 1)
    assert (changed.changed, changed.generation) == (True, 2)
    batch = await store.feed.read(START_ID)
    assert [(e.node, e.generation, e.kind) for e in batch.events] == [
        ("gpu-1", 1, ChangeKind.INVENTORY),
        ("gpu-1", 2, ChangeKind.INVENTORY),
    ]


async def test_get_list_and_generations(store: Store) -> None:
    a = node("gpu-a", gpu("GPU-1"))
    b = node("gpu-b", gpu("GPU-2"), gpu("GPU-3", index=1))
    await store.inventory.put(a)
    await store.inventory.put(b)

    assert await store.inventory.get("gpu-a") == a
    assert await store.inventory.get("missing") is None
    assert await store.inventory.get_many(["gpu-b", "missing", "gpu-a"]) == {"gpu-b": b, "gpu-a": a}
    assert await store.inventory.list_nodes() == ["gpu-a", "gpu-b"]
    assert await store.inventory.generations(["gpu-a", "missing"]) == {"gpu-a": 1, "missing": 0}


async def test_delete_bumps_generation_and_survives_readd(store: Store) -> None:
    inv = node("gpu-1", gpu("GPU-a"))
    await store.inventory.put(inv)
    deleted = await store.inventory.delete("gpu-1")
    again = await store.inventory.delete("gpu-1")
    readded = await store.inventory.put(inv)

    assert (deleted.changed, deleted.generation) == (True, 2)
    assert (again.changed, again.generation) == (False, 2)
    # the generation never goes back, so a cache keyed by generation cannot confuse old and new
    assert (readded.changed, readded.generation) == (True, 3)
    kinds = [e.kind for e in (await store.feed.read(START_ID)).events]
    assert kinds == [ChangeKind.INVENTORY, ChangeKind.DELETED, ChangeKind.INVENTORY]


async def test_deleted_node_is_gone_from_reads(store: Store) -> None:
    await store.inventory.put(node("gpu-1", gpu("GPU-a")))
    await store.inventory.delete("gpu-1")
    assert await store.inventory.get("gpu-1") is None
    assert await store.inventory.list_nodes() == []
    snap = (await store.snapshots.load(["gpu-1"]))["gpu-1"]
    assert snap.inventory is None
    assert snap.generation == 2


async def test_snapshot_of_unknown_node_is_empty(store: Store) -> None:
    snap = (await store.snapshots.load(["nowhere"]))["nowhere"]
    assert (snap.inventory, dict(snap.usage), snap.generation) == (None, {}, 0)


async def test_empty_requests_need_no_round_trip(store: Store) -> None:
    assert await store.inventory.get_many([]) == {}
    assert await store.inventory.generations([]) == {}
    assert await store.snapshots.load([]) == {}


async def test_state_converts_to_the_cores_snapshot(store: Store) -> None:
    inv = node("n1", gpu("GPU-a"), gpu("GPU-b", index=1))
    await store.inventory.put(inv)
    state = await store.snapshots.load(["n1", "n2"])
    snap = state["n1"].snapshot()
    assert snap is not None and snap.inventory == inv and snap.name == "n1"
    assert state["n2"].snapshot() is None


async def test_a_mixed_vendor_inventory_round_trips_and_a_vendor_change_is_a_change(store: Store) -> None:
    nv = gpu("GPU-a")
    other = dataclasses.replace(gpu("DCU-a", index=0), vendor="DCU")
    inv = dataclasses.replace(node("mix", nv, other), vendor="NVIDIA,DCU")
    assert (await store.inventory.put(inv)).changed
    got = await store.inventory.get("mix")
    assert got == inv
    assert got is not None and [d.vendor for d in got.devices] == ["NVIDIA", "DCU"]
    assert not (await store.inventory.put(inv)).changed
    # the same device under another vendor is another inventory
    relabelled = dataclasses.replace(inv, devices=(nv, dataclasses.replace(other, vendor="MLU")))
    assert (await store.inventory.put(relabelled)).changed


async def test_snapshots_load_in_one_round_trip_and_survive_a_lost_script_cache(store: Store, backend: str) -> None:
    """The pipelined node reads send EVALSHA themselves: no SCRIPT EXISTS round trip before them, and a Redis that
    lost its scripts (restart, SCRIPT FLUSH) gets the script loaded and is read again."""
    inv = node("n1", gpu("GPU-a"))
    await store.inventory.put(inv)
    await store.snapshots.load(["n1"])
    if backend == "redis":
        await store.client.config_resetstat()
        await store.snapshots.load(["n1", "n2"])
        stats = await store.client.info("commandstats")
        assert not [k for k in stats if k.startswith("cmdstat_script")]
        assert stats["cmdstat_evalsha"]["calls"] == 2
    await store.client.script_flush()
    state = await store.snapshots.load(["n1", "n2"])
    assert state["n1"].inventory == inv and state["n2"].inventory is None
