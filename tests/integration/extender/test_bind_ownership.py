"""/bind acts only on the record it claimed and undoes only what it wrote itself (two replicas, one pod)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.integration.extender.bindkit import Harness, allocation, harness, pod_obj
from tests.integration.extender.test_bind import args_for
from vgpu_scheduler.services.extender.bind import BindOutcome
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.emulator import WriteRecord
from vgpu_scheduler.shared.errors import TransientError
from vgpu_scheduler.shared.store import Claimed, ReservationState

NODE = "gpu-node-1"


@pytest.fixture(params=[False, True], ids=["read-pod", "filter-hint"])
async def h(redis_url: str, request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    async with harness(redis_url) as hh:
        hh.hints = request.param
        await hh.seed_node(NODE)
        await hh.seed_node("gpu-node-2")
        yield hh


async def _reserved(h: Harness) -> dict[str, Any]:
    pod = h.create_pod(pod_obj("p1"))
    await h.reserve_pod(pod, allocation(pod, NODE, (0, 1000, 10)))
    return pod


def _hami(obj: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in (obj["metadata"].get("annotations") or {}).items() if k.startswith("hami.io/")}


async def test_a_bind_another_replica_is_running_writes_nothing(h: Harness) -> None:
    pod = await _reserved(h)
    uid = pod["metadata"]["uid"]
    assert isinstance(await h.store.reservations.claim(uid, NODE, "replica-a", 60), Claimed)
    h.writes.clear()
    result = await h.binder().bind(args_for(pod))
    assert result.outcome is BindOutcome.NOT_OWNER
    assert "another bind of it owns its devices" in result.error
    assert h.writes == []  # no lock, no patch, no Binding
    record = await h.store.reservations.get(uid)
    assert record is not None and record.state is ReservationState.BINDING
    assert await h.store.quota.pod_charges("default") != {}


async def test_two_replicas_binding_one_pod_at_once_bind_it_once(h: Harness) -> None:
    pod = await _reserved(h)
    import asyncio

    first, second = await asyncio.gather(h.binder().bind(args_for(pod)), h.binder().bind(args_for(pod)))
    outcomes = sorted([first.outcome.value, second.outcome.value])
    assert outcomes in (["bound", "not_owner"], ["already_bound", "bound"])
    stored = h.pod("p1")
    assert stored["spec"]["nodeName"] == NODE
    assert _hami(stored)[keys.VGPU_NODE] == NODE  # the loser removed nothing
    record = await h.store.reservations.get(pod["metadata"]["uid"])
    assert record is not None and record.state is ReservationState.BOUND


async def test_undo_leaves_another_decisions_annotations_alone(h: Harness) -> None:
    """The issue's mechanism: between this bind's view of the pod (its read, or the filter's hint) and its patch,
    another decision annotates and binds the pod elsewhere. The losing bind must not strip the winner's
    annotations (it used to)."""
    pod = await _reserved(h)
    winner = {keys.VGPU_NODE: "gpu-node-2", keys.DEVICES_ALLOCATED: "GPU-x,NVIDIA,1000,10:;", keys.VGPU_TIME: "1"}
    raced = False

    def race(rec: WriteRecord) -> None:
        nonlocal raced
        if rec.resource == "nodes" and not raced:  # this bind's node lock: its pod patch comes next
            raced = True
            bound_elsewhere = {"metadata": {"annotations": winner}, "spec": {"nodeName": "gpu-node-2"}}
            h.em.patch("Pod", "default", "p1", bound_elsewhere)

    h.em.hooks.append(race)
    result = await h.binder().bind(args_for(pod))
    assert raced
    assert result.outcome is BindOutcome.BOUND_ELSEWHERE
    assert _hami(h.pod("p1")) == winner
    assert keys.NODE_LOCK not in (h.node(NODE)["metadata"].get("annotations") or {})
    assert await h.store.reservations.get(pod["metadata"]["uid"]) is None  # its own claimed record: released


async def test_a_bind_whose_claim_vanished_writes_no_annotations(h: Harness) -> None:
    """Redis restarted (or the record released) between the claim and the pod patch: the bind stops before
    writing the pod, and gives back only its own lock."""
    pod = await _reserved(h)
    uid = pod["metadata"]["uid"]
    binder = h.binder()
    real_acquire = binder.locker.acquire

    async def acquire_then_lose(*a: Any, **kw: Any) -> Any:
        held = await real_acquire(*a, **kw)
        await h.store.reservations.release(uid, node=NODE)  # as a flushed store or the informer would
        return held

    binder.locker.acquire = acquire_then_lose  # type: ignore[method-assign]
    result = await binder.bind(args_for(pod))
    assert result.outcome is BindOutcome.NOT_OWNER
    stored = h.pod("p1")
    assert _hami(stored) == {} and "nodeName" not in stored["spec"]
    assert keys.NODE_LOCK not in (h.node(NODE)["metadata"].get("annotations") or {})
    assert await h.store.locks.inspect(NODE) is None


async def test_a_retry_after_an_expired_claim_takes_over_and_binds(h: Harness) -> None:
    pod = await _reserved(h)
    uid = pod["metadata"]["uid"]
    assert isinstance(await h.store.reservations.claim(uid, NODE, "crashed-replica", 0.001), Claimed)
    binder = h.binder()
    result = await binder.bind(args_for(pod))
    while result.outcome is BindOutcome.NOT_OWNER:  # the 1 ms expiry is on the server clock
        result = await binder.bind(args_for(pod))
    assert result.outcome is BindOutcome.BOUND
    assert h.pod("p1")["spec"]["nodeName"] == NODE


async def test_a_gang_member_whose_claim_cannot_be_extended_gives_its_reservation_back(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PodGroup member's bind extends its claim to the gang's longer lock wait. When the store fails right then
    (a replica not acknowledging in time), the bind gives the reservation back as any failed bind does: kept
    claimed, every retry of the pod was refused ("another bind owns its devices") until the claim expired (the
    chaos run: 900 retries of one gang member in 45 s)."""
    pod = h.create_pod(pod_obj("p1", labels={keys.POD_GROUP_LABEL: "gang-1"}))
    alloc = allocation(pod, NODE, (0, 1000, 10))
    await h.reserve_pod(pod, alloc)

    async def shortfall(*args: Any, **kwargs: Any) -> bool:
        raise TransientError("0 of 1 Redis replicas acknowledged it within 250 ms")

    monkeypatch.setattr(h.store.reservations, "check_claim", shortfall)
    failed = await h.binder().bind(args_for(pod))
    monkeypatch.undo()
    assert failed.outcome is BindOutcome.ERROR
    assert await h.store.reservations.get(pod["metadata"]["uid"]) is None
    await h.reserve_pod(pod, alloc)  # kube-scheduler filters the pod again
    assert (await h.binder().bind(args_for(pod))).outcome is BindOutcome.BOUND
