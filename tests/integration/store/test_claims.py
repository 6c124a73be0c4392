"""The reservation state machine behind pod ownership: reserved → binding (one bind's claim) → bound →
confirmed, and the conditional releases that keep a second decision from moving or dropping a claimed record."""

from __future__ import annotations

import asyncio

import pytest

from tests.integration.store.conftest import alloc, gpu, node
from vgpu_scheduler.shared.domain.model import DeviceUsage
from vgpu_scheduler.shared.store import Claimed, ClaimRefused, Owned, ReservationState, Reserved, Store

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


# ---- the bind hint and the claim of a plain reservation only ---------------------------------------------------


async def _hint(s: Store, uid: str = "p1", node_name: str = "n1") -> bytes | None:
    raw = await s.client.hget(s.keys.bind_hints(node_name), uid)
    return raw.encode() if isinstance(raw, str) else raw


async def test_a_reservation_carries_its_bind_hint_to_the_claim_and_the_finish_drops_it(s: Store) -> None:
    assert isinstance(await s.reservations.reserve(A, hint="1|-|42"), Reserved)  # same content: the hint is set
    claimed = await s.reservations.claim("p1", "n1", "tok-a", 60, only_reserved=True)
    assert claimed == Claimed(allocation=A, previous=ReservationState.RESERVED, took_over=False, hint="1|-|42")
    assert await s.reservations.finish_claim("p1", "n1", "tok-a")
    assert await _hint(s) is None


async def test_a_reserve_without_a_hint_clears_an_older_one(s: Store) -> None:
    assert isinstance(await s.reservations.reserve(A, hint="1|-|42"), Reserved)
    assert await _hint(s) == b"1|-|42"
    assert isinstance(await s.reservations.reserve(A), Reserved)  # an older replica's filter, or an unhinted pod
    assert await _hint(s) is None
    claimed = await s.reservations.claim("p1", "n1", "tok-a", 60)
    assert isinstance(claimed, Claimed) and claimed.hint == ""


@pytest.mark.parametrize("how", ["release", "release_unowned", "release_claimed", "record"])
async def test_the_hint_goes_with_the_record(s: Store, how: str) -> None:
    assert isinstance(await s.reservations.reserve(A, hint="1|g|42"), Reserved)
    if how == "release":
        await s.reservations.release("p1", "n1")
    elif how == "release_unowned":
        assert await s.reservations.release_unowned("p1", "n1") is True
    elif how == "release_claimed":
        assert isinstance(await s.reservations.claim("p1", "n1", "tok-a", 60), Claimed)
        assert await s.reservations.release_claimed("p1", "n1", "tok-a")
    else:
        await s.reservations.record(A)  # the informer's truth: the bind that needed the hint is over
    assert await _hint(s) is None


@pytest.mark.parametrize(
    "prepare, state",
    [
        pytest.param("claim-expired", ReservationState.BINDING, id="binding"),
        pytest.param("finish", ReservationState.BOUND, id="bound"),
        pytest.param("confirm", ReservationState.CONFIRMED, id="confirmed"),
    ],
)
async def test_a_claim_of_a_plain_reservation_only_leaves_any_other_record_untouched(
    s: Store, prepare: str, state: ReservationState
) -> None:
    if prepare == "confirm":
        assert await s.reservations.confirm("p1", "n1")
    else:
        assert isinstance(
            await s.reservations.claim("p1", "n1", "tok-a", 0.001 if prepare != "finish" else 60), Claimed
        )
        if prepare == "finish":
            assert await s.reservations.finish_claim("p1", "n1", "tok-a")
    if prepare == "claim-expired":
        await asyncio.sleep(0.05)  # the 1 ms expiry is on the server clock
    refused = await s.reservations.claim("p1", "n1", "tok-b", 60, only_reserved=True)
    assert refused == ClaimRefused("owned", node="n1", state=state.value)
    assert await _state(s) is state
    assert not await s.reservations.check_claim("p1", "n1", "tok-b", 60)  # no claim was taken
    # the ordinary claim still takes it (a bind that read the pod first)
    assert isinstance(await s.reservations.claim("p1", "n1", "tok-b", 60), Claimed)


async def test_a_claim_of_a_plain_reservation_only_refuses_absent_and_elsewhere_as_before(s: Store) -> None:
    assert await s.reservations.claim("nobody", "n1", "tok", 60, only_reserved=True) == ClaimRefused(
        "absent", node="n1"
    )
    assert await s.reservations.claim("p1", "n2", "tok", 60, only_reserved=True) == ClaimRefused("elsewhere", node="n1")
