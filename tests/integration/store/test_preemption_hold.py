"""A preemption hold: the preemptor's reservation counts the victims' charges as freed, the usage keeps them until
the informer releases the victims, nobody else fits in between, and the hold says when the victims are gone."""

from __future__ import annotations

import pytest

from tests.integration.store.conftest import alloc, gpu, node
from vgpu_scheduler.shared.store import ReserveConflict, Reserved, Store

LOW_A = alloc("low-a", "n1", (("GPU-a", 16384, 100),))
LOW_B = alloc("low-b", "n1", (("GPU-b", 8000, 50),))
HIGH = alloc("high", "n1", (("GPU-a", 16384, 100),))
OTHER = alloc("other", "n1", (("GPU-a", 1000, 10),))


@pytest.fixture
async def s(store: Store) -> Store:
    await store.inventory.put(node("n1", gpu("GPU-a"), gpu("GPU-b", index=1)))
    for a in (LOW_A, LOW_B):
        await store.reservations.record(a)
    return store


async def test_a_hold_reserves_the_victims_room_before_they_are_gone(s: Store) -> None:
    # an ordinary reserve does not fit: GPU-a is full
    assert isinstance(await s.reservations.reserve(HIGH), ReserveConflict)
    held = await s.reservations.reserve(HIGH, victims=["low-a"])
    assert isinstance(held, Reserved)
    usage = await s.usage.node_usage("n1")
    assert usage["GPU-a"].used_mem_mib == 2 * 16384  # the victim's charge stays until it is released
    assert await s.reservations.preemption_waiting("high", "n1") == 1
    # nobody else fits in the room the victim leaves, before or after it is gone
    assert isinstance(await s.reservations.reserve(OTHER), ReserveConflict)
    assert await s.reservations.release("low-a", "n1") is not None
    assert isinstance(await s.reservations.reserve(OTHER), ReserveConflict)
    assert await s.reservations.preemption_waiting("high", "n1") == 0
    assert (await s.usage.node_usage("n1"))["GPU-a"].used_mem_mib == 16384
    assert (await s.usage.recount("n1")).drift == 0


async def test_a_hold_is_still_capacity_checked(s: Store) -> None:
    # freeing low-b (GPU-b) does not make room on GPU-a
    refused = await s.reservations.reserve(HIGH, victims=["low-b"])
    assert isinstance(refused, ReserveConflict) and refused.device == "GPU-a"
    assert await s.reservations.preemption_waiting("high", "n1") == 0


async def test_releasing_the_preemptor_drops_its_hold(s: Store) -> None:
    assert isinstance(await s.reservations.reserve(HIGH, victims=["low-a"]), Reserved)
    await s.reservations.release("high", "n1")
    raw = await s.client.hget(s.keys.bind_hints("n1"), "w|high")
    assert raw is None


async def test_renew_restarts_a_plain_reservations_clock_only(s: Store) -> None:
    assert isinstance(await s.reservations.reserve(OTHER_B := alloc("p", "n1", (("GPU-b", 100, 1),))), Reserved)
    before = await s.reservations.get("p")
    assert before is not None
    assert await s.reservations.renew("p", "n1")
    after = await s.reservations.get("p")
    assert after is not None and after.reserved_at_ms >= before.reserved_at_ms
    assert after.allocation == OTHER_B
    assert not await s.reservations.renew("low-a", "n1")  # confirmed by the informer: not a reservation
    assert not await s.reservations.renew("nobody", "n1")


async def test_a_failed_gang_is_remembered_for_a_while(s: Store) -> None:
    assert await s.reservations.gang_failed("ns", "g") is None
    await s.reservations.mark_gang_failed("ns", "g", "member m7 fits nowhere", 60)
    assert await s.reservations.gang_failed("ns", "g") == "member m7 fits nowhere"
    assert await s.reservations.gang_failed("ns", "other") is None


async def test_one_replica_at_a_time_preempts_for_a_pod(s: Store) -> None:
    assert await s.reservations.begin_preemption("high", "replica-a", 60)
    assert not await s.reservations.begin_preemption("high", "replica-b", 60)
    assert await s.reservations.begin_preemption("other", "replica-b", 60)
    assert await s.reservations.renew_preemption("high", "replica-a", 120)
    assert not await s.reservations.renew_preemption("high", "replica-b", 120)
    await s.reservations.end_preemption("high", "replica-a")
    assert not await s.reservations.renew_preemption("high", "replica-a", 120)
