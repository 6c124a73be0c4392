"""The reservation state machine behind pod ownership: reserved → binding (one bind's claim) → bound →
confirmed, and the conditional releases that keep a second decision from moving or dropping a claimed record."""

from __future__ import annotations

import pytest

from shared.domain.model import DeviceUsage
from shared.store import Claimed, ClaimRefused, Owned, ReservationState, Reserved, Store
from tests.integration.store.conftest import alloc, gpu, node

A = alloc("p1", "n1", (("GPU-a", 1000, 30),))


@pytest.fixture
async def s(store: Store) -> Store:
    await store.inventory.put(node("n1", gpu("GPU-a"), gpu("GPU-b", index=1)))
    await store.inventory.put(node("n2", gpu("GPU-c")))
    assert isinstance(await store.reservations.reserve(A), Reserved)
    return store


async def _state(s: Store) -> ReservationState | None:
    rec = await s.reservations.get("p1")
    return None if rec is None else rec.state


async def test_a_claim_takes_the_record_and_returns_what_to_write(s: Store) -> None:
    claimed = await s.reservations.claim("p1", "n1", "tok-a", 60)
    assert claimed == Claimed(allocation=A, previous=ReservationState.RESERVED, took_over=False)
    assert await _state(s) is ReservationState.BINDING
    assert await s.reservations.check_claim("p1", "n1", "tok-a", 60)
    assert not await s.reservations.check_claim("p1", "n1", "tok-b", 60)
    assert await s.reservations.finish_claim("p1", "n1", "tok-a")
    assert await _state(s) is ReservationState.BOUND
    assert not await s.reservations.check_claim("p1", "n1", "tok-a", 60)  # finished: nobody's claim any more


async def test_a_second_bind_is_refused_while_the_first_holds_the_claim(s: Store) -> None:
    assert isinstance(await s.reservations.claim("p1", "n1", "tok-a", 60), Claimed)
    busy = await s.reservations.claim("p1", "n1", "tok-b", 60)
    assert isinstance(busy, ClaimRefused) and busy.reason == "busy" and 0 < busy.remaining_ms <= 60_000
    assert await s.reservations.claim("p1", "n2", "tok-b", 60) == ClaimRefused("elsewhere", node="n1")
    assert await s.reservations.claim("p9", "n1", "tok-b", 60) == ClaimRefused("absent", node="n1")
    # the same bind may claim again (idempotent)
    again = await s.reservations.claim("p1", "n1", "tok-a", 60)
    assert isinstance(again, Claimed) and again.previous is ReservationState.BINDING and not again.took_over


async def test_an_expired_claim_is_taken_over_and_the_old_holder_has_lost_it(s: Store) -> None:
    assert isinstance(await s.reservations.claim("p1", "n1", "tok-a", 0.001), Claimed)
    taken = await s.reservations.claim("p1", "n1", "tok-b", 60)
    for _ in range(100):  # the server clock must pass the 1 ms expiry; each try is a round trip
        if isinstance(taken, Claimed):
            break
        taken = await s.reservations.claim("p1", "n1", "tok-b", 60)
    assert isinstance(taken, Claimed) and taken.took_over
    assert not await s.reservations.check_claim("p1", "n1", "tok-a", 60)
    assert not await s.reservations.release_claimed("p1", "n1", "tok-a")  # its undo writes nothing
    assert await _state(s) is ReservationState.BINDING


async def test_a_reserve_never_replaces_or_moves_an_owned_record(s: Store) -> None:
    assert isinstance(await s.reservations.claim("p1", "n1", "tok-a", 60), Claimed)
    other_devices = alloc("p1", "n1", (("GPU-b", 2000, 50),))
    assert await s.reservations.reserve(other_devices) == Owned("p1", "n1", ReservationState.BINDING)
    elsewhere = alloc("p1", "n2", (("GPU-c", 2000, 50),))
    assert await s.reservations.reserve(elsewhere) == Owned("p1", "n1", ReservationState.BINDING)
    assert await s.usage.node_usage("n1") == {"GPU-a": DeviceUsage(used=1, used_mem_mib=1000, used_cores=30)}
    assert await s.usage.node_usage("n2") == {}
    assert await s.reservations.release_unowned("p1", "n1") == Owned("p1", "n1", ReservationState.BINDING)
    assert await s.reservations.node_of("p1") == "n1"


async def test_a_plain_reservation_is_moved_and_released_by_a_refilter(s: Store) -> None:
    elsewhere = alloc("p1", "n2", (("GPU-c", 2000, 50),))
    assert isinstance(await s.reservations.reserve(elsewhere), Reserved)
    assert await s.usage.node_usage("n1") == {}
    assert await s.reservations.release_unowned("p1", "n2") is True
    assert await s.reservations.release_unowned("p1", "n2") is False
    assert await s.usage.node_usage("n2") == {}


async def test_only_the_claim_holder_releases_and_the_informer_waits_for_a_live_claim(s: Store) -> None:
    assert isinstance(await s.reservations.claim("p1", "n1", "tok-a", 60), Claimed)
    assert not await s.reservations.release_unclaimed("p1", "n1")
    assert not await s.reservations.release_claimed("p1", "n1", "tok-b")
    assert await s.reservations.release_claimed("p1", "n1", "tok-a")
    assert await s.reservations.get("p1") is None
    assert await s.usage.node_usage("n1") == {}


async def test_the_apis_truth_confirms_or_replaces_and_a_replacement_ends_the_claim(s: Store) -> None:
    assert isinstance(await s.reservations.claim("p1", "n1", "tok-a", 60), Claimed)
    await s.reservations.record(A)  # the informer saw exactly these annotations: confirmed, the bind goes on
    assert await _state(s) is ReservationState.CONFIRMED
    assert await s.reservations.check_claim("p1", "n1", "tok-a", 60)
    assert await s.reservations.finish_claim("p1", "n1", "tok-a")
    assert await _state(s) is ReservationState.CONFIRMED  # finish never downgrades a confirmed record

    assert isinstance(await s.reservations.claim("p1", "n1", "tok-b", 60), Claimed)
    await s.reservations.record(alloc("p1", "n1", (("GPU-b", 2000, 50),)))  # the API says other devices
    assert not await s.reservations.check_claim("p1", "n1", "tok-b", 60)
    assert await s.usage.node_usage("n1") == {"GPU-b": DeviceUsage(used=1, used_mem_mib=2000, used_cores=50)}


async def test_unconfirmed_listing_includes_records_mid_bind(s: Store) -> None:
    assert isinstance(await s.reservations.claim("p1", "n1", "tok-a", 60), Claimed)
    stale = await s.reservations.list_unconfirmed_older_than(0)
    assert [(r.allocation.pod_uid, r.state) for r in stale] == [("p1", ReservationState.BINDING)]
