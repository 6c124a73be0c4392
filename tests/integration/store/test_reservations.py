"""Reserve / record / confirm / release: idempotent by pod UID, usage always equal to the stored charges."""

from __future__ import annotations

import pytest

from tests.integration.store.conftest import alloc, gpu, node
from vgpu_scheduler.shared.domain.model import DeviceUsage
from vgpu_scheduler.shared.domain.quota import QuotaLimits
from vgpu_scheduler.shared.store import (
    START_ID,
    ChangeKind,
    ReservationState,
    ReserveConflict,
    Reserved,
    Store,
    Unsettled,
)


@pytest.fixture
async def two_gpus(store: Store) -> Store:
    await store.inventory.put(node("n1", gpu("GPU-a"), gpu("GPU-b", index=1)))
    await store.inventory.put(node("n2", gpu("GPU-c")))
    return store


async def test_reserve_charges_usage_and_bumps_generation(two_gpus: Store) -> None:
    s = two_gpus
    result = await s.reservations.reserve(alloc("p1", "n1", (("GPU-a", 1000, 30),), (("GPU-a", 500, 10),)))

    assert result == Reserved(pod_uid="p1", node="n1", generation=2, changed=True)
    assert await s.usage.node_usage("n1") == {"GPU-a": DeviceUsage(used=2, used_mem_mib=1500, used_cores=40)}
    record = await s.reservations.get("p1")
    assert record is not None
    assert record.state is ReservationState.RESERVED
    assert record.allocation.node == "n1"
    events = (await s.feed.read(START_ID)).events
    assert (events[-1].node, events[-1].generation, events[-1].kind) == ("n1", 2, ChangeKind.USAGE)


async def test_same_reservation_twice_is_a_no_op(two_gpus: Store) -> None:
    s = two_gpus
    a = alloc("p1", "n1", (("GPU-a", 1000, 30),))
    await s.reservations.reserve(a)
    head = await s.feed.latest_id()
    again = await s.reservations.reserve(a)

    assert isinstance(again, Reserved)
    assert (again.changed, again.generation) == (False, 2)
    assert await s.usage.node_usage("n1") == {"GPU-a": DeviceUsage(used=1, used_mem_mib=1000, used_cores=30)}
    assert await s.feed.latest_id() == head


async def test_a_fresh_reserve_reserves_only_a_pod_without_record_or_quota(two_gpus: Store) -> None:
    s = two_gpus
    first = await s.reservations.reserve_fresh(alloc("p1", "n1", (("GPU-a", 1000, 30),)))
    assert first == Reserved(pod_uid="p1", node="n1", generation=2, changed=True)
    # the pod holds a record now (here or elsewhere): nothing is reserved, the answer names its node
    for node_name, device in (("n1", "GPU-b"), ("n2", "GPU-c")):
        again = await s.reservations.reserve_fresh(alloc("p1", node_name, ((device, 500, 10),)))
        assert again == Unsettled(pod_uid="p1", node="n1")
    assert await s.usage.node_usage("n1") == {"GPU-a": DeviceUsage(used=1, used_mem_mib=1000, used_cores=30)}
    assert await s.usage.node_usage("n2") == {}
    # a namespace with a quota envelope (even without limits) is read first, as before
    await s.quota.set_limits("default", QuotaLimits())
    quota_first = await s.reservations.reserve_fresh(alloc("p2", "n2", (("GPU-c", 500, 10),)))
    assert quota_first == Unsettled(pod_uid="p2", node=None)
    assert await s.reservations.node_of("p2") is None
    # a conflict is a conflict, as with reserve
    full = await s.reservations.reserve_fresh(alloc("p3", "n1", (("GPU-b", 10**6, 10),), namespace="other"))
    assert isinstance(full, ReserveConflict) and full.dimension.value == "memory"


async def test_different_reservation_replaces_the_old_one(two_gpus: Store) -> None:
    s = two_gpus
    await s.reservations.reserve(alloc("p1", "n1", (("GPU-a", 1000, 30),)))
    replaced = await s.reservations.reserve(alloc("p1", "n1", (("GPU-b", 2000, 50),)))

    assert isinstance(replaced, Reserved) and replaced.changed
    assert await s.usage.node_usage("n1") == {"GPU-b": DeviceUsage(used=1, used_mem_mib=2000, used_cores=50)}


async def test_replacement_does_not_count_the_pod_against_itself(store: Store) -> None:
    await store.inventory.put(node("n1", gpu("GPU-a", count=1, mem=1000)))
    await store.reservations.reserve(alloc("p1", "n1", (("GPU-a", 1000, 100),)))
    # a full card: only the same pod can re-reserve it with different numbers
    assert isinstance(await store.reservations.reserve(alloc("p1", "n1", (("GPU-a", 900, 90),))), Reserved)
    other = await store.reservations.reserve(alloc("p2", "n1", (("GPU-a", 10, 0),)))
    assert isinstance(other, ReserveConflict)


async def test_reserving_on_another_node_releases_the_first(two_gpus: Store) -> None:
    s = two_gpus
    await s.reservations.reserve(alloc("p1", "n1", (("GPU-a", 1000, 30),)))
    moved = await s.reservations.reserve(alloc("p1", "n2", (("GPU-c", 1000, 30),)))

    assert isinstance(moved, Reserved)
    assert await s.usage.node_usage("n1") == {}
    assert await s.reservations.node_of("p1") == "n2"
    assert list((await s.reservations.list_all()).keys()) == ["n2"]


async def test_conflict_keeps_the_previous_reservation(store: Store) -> None:
    await store.inventory.put(node("n1", gpu("GPU-a", mem=2000)))
    await store.reservations.reserve(alloc("p1", "n1", (("GPU-a", 1000, 30),)))
    refused = await store.reservations.reserve(alloc("p1", "n1", (("GPU-a", 3000, 30),)))

    assert isinstance(refused, ReserveConflict)
    assert await store.usage.node_usage("n1") == {"GPU-a": DeviceUsage(used=1, used_mem_mib=1000, used_cores=30)}
    assert await store.inventory.generations(["n1"]) == {"n1": 2}


async def test_release_returns_what_was_released(two_gpus: Store) -> None:
    s = two_gpus
    a = alloc("p1", "n1", (("GPU-a", 1000, 30),))
    await s.reservations.reserve(a)
    released = await s.reservations.release("p1")

    assert released == a
    assert await s.usage.node_usage("n1") == {}
    assert await s.reservations.get("p1") is None
    assert await s.reservations.node_of("p1") is None
    assert await s.reservations.list_all() == {}
    assert await s.reservations.release("p1") is None
    assert await s.reservations.release("never-seen", node="n1") is None


async def test_record_confirms_a_matching_reservation_without_touching_usage(two_gpus: Store) -> None:
    s = two_gpus
    a = alloc("p1", "n1", (("GPU-a", 1000, 30),))
    await s.reservations.reserve(a)
    result = await s.reservations.record(a)

    assert (result.usage_changed, result.record_changed, result.generation) == (False, True, 2)
    record = await s.reservations.get("p1")
    assert record is not None and record.state is ReservationState.CONFIRMED
    again = await s.reservations.record(a)
    assert (again.usage_changed, again.record_changed) == (False, False)


async def test_record_is_unconditional(store: Store) -> None:
    # the API server is the truth: an over-committed or unknown node is recorded as it is
    await store.inventory.put(node("n1", gpu("GPU-a", count=1, mem=1000)))
    await store.reservations.record(alloc("p1", "n1", (("GPU-a", 1000, 100),)))
    over = await store.reservations.record(alloc("p2", "n1", (("GPU-a", 1000, 100),)))
    unknown = await store.reservations.record(alloc("p3", "unregistered", (("GPU-x", 1, 1),)))

    assert over.usage_changed and unknown.usage_changed
    assert await store.usage.node_usage("n1") == {"GPU-a": DeviceUsage(used=2, used_mem_mib=2000, used_cores=200)}
    assert await store.usage.node_usage("unregistered") == {"GPU-x": DeviceUsage(used=1, used_mem_mib=1, used_cores=1)}


async def test_confirm(two_gpus: Store) -> None:
    s = two_gpus
    await s.reservations.reserve(alloc("p1", "n1", (("GPU-a", 1000, 30),)))
    assert await s.reservations.confirm("p1") is True
    record = await s.reservations.get("p1")
    assert record is not None and record.state is ReservationState.CONFIRMED
    assert await s.reservations.confirm("p1") is True
    assert await s.reservations.confirm("nobody") is False
    assert await s.reservations.confirm("nobody", node="n1") is False


async def test_unconfirmed_reservations_by_age(two_gpus: Store) -> None:
    s = two_gpus
    await s.reservations.reserve(alloc("p1", "n1", (("GPU-a", 100, 1),)))
    await s.reservations.reserve(alloc("p2", "n2", (("GPU-c", 100, 1),)))
    await s.reservations.reserve(alloc("p3", "n1", (("GPU-b", 100, 1),)))
    await s.reservations.confirm("p3")

    stale = await s.reservations.list_unconfirmed_older_than(0)
    assert sorted(r.allocation.pod_uid for r in stale) == ["p1", "p2"]
    assert await s.reservations.list_unconfirmed_older_than(3600) == []


async def test_unconfirmed_records_are_listed_without_the_confirmed_ones(two_gpus: Store) -> None:
    s = two_gpus
    assert await s.reservations.list_unconfirmed() == []
    await s.reservations.reserve(alloc("p1", "n1", (("GPU-a", 100, 1),)))
    await s.reservations.reserve(alloc("p2", "n2", (("GPU-c", 100, 1),)))
    await s.reservations.record(alloc("p3", "n1", (("GPU-b", 100, 1),)))  # the informer's: confirmed
    listed = await s.reservations.list_unconfirmed()
    assert sorted(r.allocation.pod_uid for r in listed) == ["p1", "p2"]
    assert all(r.state is ReservationState.RESERVED for r in listed)
    expected = [r for records in (await s.reservations.list_all()).values() for r in records if r.state.unconfirmed]
    assert sorted(listed, key=lambda r: r.allocation.pod_uid) == sorted(expected, key=lambda r: r.allocation.pod_uid)
    await s.reservations.confirm("p1")
    await s.reservations.confirm("p2")
    assert await s.reservations.list_unconfirmed() == []


async def test_listing(two_gpus: Store) -> None:
    s = two_gpus
    a1 = alloc("p1", "n1", (("GPU-a", 100, 1),))
    a2 = alloc("p2", "n1", (("GPU-b", 100, 1),))
    a3 = alloc("p3", "n2", (("GPU-c", 100, 1),))
    for a in (a2, a1, a3):
        await s.reservations.reserve(a)

    assert [r.allocation for r in await s.reservations.list_by_node("n1")] == [a1, a2]
    assert await s.reservations.list_by_node("n3") == []
    everything = await s.reservations.list_all()
    assert {n: [r.allocation.pod_uid for r in rs] for n, rs in everything.items()} == {"n1": ["p1", "p2"], "n2": ["p3"]}


async def test_init_and_app_containers_are_collapsed(store: Store) -> None:
    await store.inventory.put(node("n1", gpu("GPU-a")))
    # init peak 3000 vs app sum 1000 + 1500: memory 3000, slots 2 (two app containers)
    a = alloc("p1", "n1", (("GPU-a", 3000, 50),), (("GPU-a", 1000, 10),), (("GPU-a", 1500, 20),), init_count=1)
    await store.reservations.reserve(a)
    assert await store.usage.node_usage("n1") == {"GPU-a": DeviceUsage(used=2, used_mem_mib=3000, used_cores=50)}


async def test_recount_finds_no_drift_and_repairs_tampering(store: Store) -> None:
    await store.inventory.put(node("n1", gpu("GPU-a"), gpu("GPU-b", index=1)))
    await store.reservations.reserve(alloc("p1", "n1", (("GPU-a", 1000, 30),)))
    await store.reservations.reserve(alloc("p2", "n1", (("GPU-a", 500, 10), ("GPU-b", 700, 5))))
    before = await store.usage.node_usage("n1")
    clean = await store.usage.recount("n1")
    assert clean.drift == 0

    # simulate a bug: a counter drifts and a stray field appears
    await store.client.hset(store.keys.usage("n1"), "u|GPU-a", "9,9,9,0")
    await store.client.hset(store.keys.usage("n1"), "u|GPU-z", "1,1,1,0")
    repaired = await store.usage.recount("n1")
    assert repaired.drift == 2
    assert repaired.generation == clean.generation + 1
    assert await store.usage.node_usage("n1") == before
