"""/bind use case against the API emulator and the real redis-server: the happy path, every refusal, the node
lock's states (Redis arbiter + hami.io/mutex.lock) and the undo on failure."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import pytest

from tests.integration.extender.bindkit import NOW, Harness, allocation, harness, pod_obj
from vgpu_scheduler.services.extender.bind import BindOutcome
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec.nodelock import encode_node_lock, parse_node_lock
from vgpu_scheduler.shared.coord import LockAcquired, LockHeld, NodeLock
from vgpu_scheduler.shared.emulator import WriteVerb
from vgpu_scheduler.shared.protocol.events import EventReason
from vgpu_scheduler.shared.protocol.extender import ExtenderBindingArgs
from vgpu_scheduler.shared.store import NodeLockStore, ReservationState

NODE = "gpu-node-1"


@pytest.fixture(params=[False, True], ids=["read-pod", "filter-hint"])
async def h(redis_url: str, request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    """Every test runs twice: with a reservation as an older replica wrote it (the bind reads the pod) and with
    the filter's bind hint (the bind does not read the pod; its patch is guarded by the hint's version)."""
    async with harness(redis_url) as hh:
        hh.hints = request.param
        await hh.seed_node(NODE)
        await hh.seed_node("gpu-node-2")
        yield hh


def args_for(pod: dict[str, Any], node: str = NODE) -> ExtenderBindingArgs:
    m = pod["metadata"]
    return ExtenderBindingArgs(pod_name=m["name"], pod_namespace=m["namespace"], pod_uid=m["uid"], node=node)


async def reserved_pod(h: Harness, name: str = "p1", node: str = NODE, **kw: Any) -> dict[str, Any]:
    pod = h.create_pod(pod_obj(name, **kw))
    await h.reserve_pod(pod, allocation(pod, node, (0, 1000, 10)))
    return pod


def lock_value(at: float, ns: str, name: str) -> str:
    return encode_node_lock(datetime.fromtimestamp(at).astimezone(), ns, name)


async def flushed(h: Harness) -> None:
    assert await h.sink.flush(5.0)


# ---- success ---------------------------------------------------------------------------------------------


async def test_bind_writes_the_lock_then_a_binding_carrying_the_annotations(h: Harness) -> None:
    pod = await reserved_pod(h)
    h.writes.clear()

    result = await h.binder().bind(args_for(pod))

    assert result.outcome is BindOutcome.BOUND and result.error == ""
    stored = h.pod("p1")
    assert stored["spec"]["nodeName"] == NODE
    annos = stored["metadata"]["annotations"]
    device_list = "GPU-gpu-node-1-0,NVIDIA,1000,10:;"
    assert {k: v for k, v in annos.items() if k.startswith("hami.io/")} == {
        keys.VGPU_NODE: NODE,
        keys.VGPU_TIME: str(int(NOW)),
        keys.DEVICES_TO_ALLOCATE: device_list,
        keys.DEVICES_ALLOCATED: device_list,
        keys.BIND_PHASE: "allocating",
        keys.BIND_TIME: str(int(NOW)),
    }
    assert stored["metadata"]["labels"][keys.VGPU_NODE_LABEL] == NODE
    lock = parse_node_lock(h.node(NODE)["metadata"]["annotations"][keys.NODE_LOCK])
    assert lock.owned_by("default", "p1") and lock.at.timestamp() == NOW
    info = await h.store.locks.inspect(NODE)
    assert info is not None and info.owner == "default/p1"
    # node lock, then the Binding carrying the annotations and the label: nothing else written
    assert [(w.verb, w.resource, w.subresource) for w in h.writes] == [
        (WriteVerb.PATCH, "nodes", None),
        (WriteVerb.BIND, "pods", "binding"),
    ]
    binding_meta = h.writes[1].body["metadata"]
    assert binding_meta["annotations"][keys.DEVICES_ALLOCATED] == device_list
    assert binding_meta["labels"] == {keys.VGPU_NODE_LABEL: NODE}
    assert binding_meta["uid"] == pod["metadata"]["uid"]
    # the reservation stays (the informer confirms it from the annotations)
    rec = await h.store.reservations.get(pod["metadata"]["uid"])
    assert rec is not None and rec.allocation.node == NODE
    assert h.outcome_count("bound") == 1
    await flushed(h)
    assert [(n, e.reason, e.message) for n, e in h.posted.events] == [
        ("p1", EventReason.BINDING_SUCCEED, f"Successfully binding node [{NODE}] to default/p1")
    ]


async def test_a_retried_bind_of_a_bound_pod_succeeds_without_writes(h: Harness) -> None:
    pod = await reserved_pod(h)
    binder = h.binder()
    assert (await binder.bind(args_for(pod))).outcome is BindOutcome.BOUND
    h.writes.clear()
    again = await binder.bind(args_for(pod))
    assert again.outcome is BindOutcome.ALREADY_BOUND and again.error == ""
    assert h.writes == []


async def test_concurrent_duplicate_binds_of_one_pod_both_succeed(h: Harness) -> None:
    pod = await reserved_pod(h)
    binder = h.binder()
    first, second = await asyncio.gather(binder.bind(args_for(pod)), binder.bind(args_for(pod)))
    assert {first.outcome, second.outcome} == {BindOutcome.BOUND, BindOutcome.ALREADY_BOUND}
    assert await h.store.locks.inspect(NODE) is not None


async def test_a_pod_without_device_requests_is_bound_plainly(h: Harness) -> None:
    pod = h.create_pod(pod_obj("plain", gpus=0))
    h.writes.clear()
    result = await h.binder().bind(args_for(pod))
    assert result.outcome is BindOutcome.PLAIN
    assert h.pod("plain")["spec"]["nodeName"] == NODE
    assert [(w.resource, w.subresource) for w in h.writes] == [("pods", "binding")]
    assert await h.store.locks.inspect(NODE) is None


async def test_mig_allocations_are_written_with_the_devices(h: Harness) -> None:
    from vgpu_scheduler.shared.domain.model import MigAllocation, MigPlacement

    pod = h.create_pod(pod_obj("mig"))
    base = allocation(pod, NODE, (0, 1000, 10))
    mig = (MigAllocation(0, 0, "GPU-gpu-node-1-0", "1g.10gb", MigPlacement(0, 1)),)
    alloc = dataclasses.replace(base, mig=mig)
    await h.store.reservations.record(alloc)  # recorded: no capacity check against a non-MIG test device
    result = await h.binder().bind(args_for(pod))
    assert result.outcome is BindOutcome.BOUND
    assert keys.MIG_ALLOCATIONS in h.pod("mig")["metadata"]["annotations"]


# ---- refusals before anything is written -----------------------------------------------------------------


async def test_no_reservation_is_an_error_and_writes_nothing(h: Harness) -> None:
    pod = h.create_pod(pod_obj("unfiltered"))
    h.writes.clear()
    result = await h.binder().bind(args_for(pod))
    assert result.outcome is BindOutcome.NO_RESERVATION
    assert "has no device reservation" in result.error and "default/unfiltered" in result.error
    assert h.writes == []
    assert h.outcome_count("no_reservation") == 1


async def test_reserved_on_another_node_is_an_error_and_keeps_the_reservation(h: Harness) -> None:
    pod = await reserved_pod(h, node="gpu-node-2")
    result = await h.binder().bind(args_for(pod, NODE))
    assert result.outcome is BindOutcome.WRONG_NODE
    assert "reserved on node gpu-node-2, not gpu-node-1" in result.error
    assert await h.store.reservations.get(pod["metadata"]["uid"]) is not None


@pytest.mark.parametrize(
    "change, outcome, text",
    [
        pytest.param("delete", BindOutcome.POD_GONE, "not found", id="pod-deleted"),
        pytest.param("recreate", BindOutcome.POD_GONE, "was re-created", id="pod-recreated"),
        pytest.param("terminating", BindOutcome.POD_GONE, "is being deleted", id="pod-terminating"),
        pytest.param(
            "bound-elsewhere", BindOutcome.BOUND_ELSEWHERE, "already bound to node gpu-node-2", id="elsewhere"
        ),
    ],
)
async def test_a_pod_that_cannot_be_bound_drops_its_reservation(
    h: Harness, change: str, outcome: BindOutcome, text: str
) -> None:
    pod = await reserved_pod(h)
    uid = pod["metadata"]["uid"]
    if change == "delete":
        h.em.delete("Pod", "default", "p1")
    elif change == "recreate":
        h.em.delete("Pod", "default", "p1")
        h.create_pod(pod_obj("p1"))
    elif change == "terminating":
        h.em.patch("Pod", "default", "p1", {"metadata": {"deletionTimestamp": "2027-01-01T00:00:00Z"}})
    else:
        h.em.patch("Pod", "default", "p1", {"spec": {"nodeName": "gpu-node-2"}})
    result = await h.binder().bind(args_for(pod))
    assert result.outcome is outcome
    assert text in result.error
    assert await h.store.reservations.get(uid) is None
    assert await h.store.quota.pod_charges("default") == {}
    assert await h.store.locks.inspect(NODE) is None


async def test_a_confirmed_allocation_is_left_to_the_informer(h: Harness) -> None:
    pod = await reserved_pod(h)
    uid = pod["metadata"]["uid"]
    assert await h.store.reservations.confirm(uid)
    h.em.delete("Pod", "default", "p1")
    result = await h.binder().bind(args_for(pod))
    assert result.outcome is BindOutcome.POD_GONE
    rec = await h.store.reservations.get(uid)
    assert rec is not None and rec.state is ReservationState.CONFIRMED


async def test_an_unknown_node_is_an_error_and_releases_everything(h: Harness) -> None:
    pod = h.create_pod(pod_obj("p1"))
    await h.store.inventory.put(dataclasses.replace(await _inv(h, NODE), node="ghost"))
    alloc = dataclasses.replace(allocation(pod, NODE, (0, 1000, 10)), node="ghost")
    await h.store.reservations.record(alloc)
    result = await h.binder().bind(args_for(pod, "ghost"))
    assert result.outcome is BindOutcome.NODE_GONE and "node ghost not found" in result.error
    assert await h.store.locks.inspect("ghost") is None
    assert await h.store.reservations.get(pod["metadata"]["uid"]) is None


async def _inv(h: Harness, node: str) -> Any:
    inv = await h.store.inventory.get(node)
    assert inv is not None
    return inv


# ---- the node lock -----------------------------------------------------------------------------------------


class SpyLocks:
    """Wraps the store's NodeLockStore; sets ``contended`` when an acquire finds the lock held."""

    def __init__(self, inner: NodeLockStore) -> None:
        self._inner = inner
        self.contended = asyncio.Event()

    async def acquire(self, *a: Any, **kw: Any) -> Any:
        result = await self._inner.acquire(*a, **kw)
        if isinstance(result, LockHeld):
            self.contended.set()
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


async def test_a_busy_redis_lock_times_out_and_undoes_the_reservation(h: Harness) -> None:
    pod = await reserved_pod(h)
    held = await h.store.locks.acquire(NODE, "other/holder", 300)
    assert isinstance(held, LockAcquired)
    h.writes.clear()
    result = await h.binder(lock_wait_s=0.05).bind(args_for(pod))
    assert result.outcome is BindOutcome.LOCK_TIMEOUT
    assert "locked by other/holder" in result.error and "will be retried" in result.error
    assert h.writes == []
    assert await h.store.reservations.get(pod["metadata"]["uid"]) is None
    assert await h.store.quota.pod_charges("default") == {}
    info = await h.store.locks.inspect(NODE)
    assert info is not None and info.owner == "other/holder"
    assert h.registry.get_sample_value("vgpu_node_lock_wait_seconds_count") in (None, 0.0)
    await flushed(h)
    assert [e.reason for _, e in h.posted.events] == [EventReason.BINDING_FAILED]


@pytest.mark.parametrize(
    "labels, lock_wait_s, pod_group_wait_s",
    [
        pytest.param({}, 30.0, 0.0, id="ordinary-pod-ordinary-wait"),
        # with no ordinary wait, only the PodGroup retry timeout lets the member wait
        pytest.param({keys.POD_GROUP_LABEL: "gang-1"}, 0.0, 30.0, id="pod-group-member-retry-timeout"),
        # 0: no PodGroup retry, the ordinary wait applies
        pytest.param({keys.POD_GROUP_LABEL: "gang-1"}, 30.0, 0.0, id="pod-group-member-zero-retry-ordinary-wait"),
    ],
)
async def test_a_bind_waits_for_the_lock_and_proceeds_when_it_is_released(
    h: Harness, labels: dict[str, str], lock_wait_s: float, pod_group_wait_s: float
) -> None:
    pod = await reserved_pod(h, labels=labels)
    held = await h.store.locks.acquire(NODE, "other/holder", 300)
    assert isinstance(held, LockAcquired)
    spy = SpyLocks(h.store.locks)
    binder = h.binder(lock_wait_s=lock_wait_s, pod_group_wait_s=pod_group_wait_s)
    binder.locker._locks = NodeLock(spy, ttl_s=300)  # type: ignore[arg-type]

    async def release_when_contended() -> None:
        await spy.contended.wait()
        await h.store.locks.release(NODE, "other/holder", held.token)

    releaser = asyncio.create_task(release_when_contended(), name="releaser")
    result = await binder.bind(args_for(pod))
    await releaser
    assert result.outcome is BindOutcome.BOUND
    assert h.registry.get_sample_value("vgpu_node_lock_wait_seconds_count") == 1.0


async def test_an_expired_redis_lock_settles_its_allocating_holder_first(h: Harness) -> None:
    holder = h.create_pod(pod_obj("holder", annotations={keys.BIND_PHASE: "allocating"}))
    assert holder
    await h.store.locks.acquire(NODE, "default/holder", 0.001)
    pod = await reserved_pod(h)
    result = await h.binder().bind(args_for(pod))
    assert result.outcome is BindOutcome.BOUND
    assert h.pod("holder")["metadata"]["annotations"][keys.BIND_PHASE] == "failed"
    info = await h.store.locks.inspect(NODE)
    assert info is not None and info.owner == "default/p1"


def _annotation_cases() -> list[Any]:
    fresh, old = NOW - 10, NOW - 3600
    return [
        # (lock value, holder pod annotations or None for no holder pod, expected outcome, holder's phase after)
        pytest.param(lock_value(fresh, "default", "gone"), None, BindOutcome.BOUND, None, id="holder-gone"),
        pytest.param(
            lock_value(fresh, "default", "holder"),
            {"hami.io/bind-phase": "allocating"},
            BindOutcome.LOCK_TIMEOUT,
            "allocating",
            id="fresh-live-holder-busy",
        ),
        pytest.param(
            lock_value(fresh, "default", "holder"),
            {},
            BindOutcome.LOCK_TIMEOUT,
            None,
            id="fresh-holder-not-yet-annotated-busy",
        ),
        pytest.param(
            lock_value(fresh, "default", "holder"),
            {"hami.io/bind-phase": "success"},
            BindOutcome.BOUND,
            "success",
            id="holder-settled-success",
        ),
        pytest.param(
            lock_value(fresh, "default", "holder"),
            {"hami.io/bind-phase": "failed"},
            BindOutcome.BOUND,
            "failed",
            id="holder-settled-failed",
        ),
        pytest.param(
            lock_value(old, "default", "holder"),
            {"hami.io/bind-phase": "allocating"},
            BindOutcome.BOUND,
            "failed",
            id="expired-allocating-holder-marked-failed",
        ),
        pytest.param(
            lock_value(old, "default", "holder"),
            {"hami.io/bind-phase": "success"},
            BindOutcome.BOUND,
            "success",
            id="expired-settled-holder-untouched",
        ),
        pytest.param(
            encode_node_lock(datetime.fromtimestamp(fresh).astimezone()),
            None,
            BindOutcome.LOCK_TIMEOUT,
            None,
            id="legacy-fresh-busy",
        ),
        pytest.param(
            encode_node_lock(datetime.fromtimestamp(old).astimezone()),
            None,
            BindOutcome.BOUND,
            None,
            id="legacy-expired",
        ),
        pytest.param("not-a-lock", None, BindOutcome.BOUND, None, id="malformed"),
        pytest.param(lock_value(fresh, "default", "p1"), None, BindOutcome.BOUND, None, id="already-ours"),
    ]


@pytest.mark.parametrize("value, holder_annos, outcome, holder_phase", _annotation_cases())
async def test_the_lock_annotation_decides(
    h: Harness, value: str, holder_annos: dict[str, str] | None, outcome: BindOutcome, holder_phase: str | None
) -> None:
    if holder_annos is not None:
        h.create_pod(pod_obj("holder", annotations=holder_annos))
    h.em.patch("Node", None, NODE, {"metadata": {"annotations": {keys.NODE_LOCK: value}}})
    pod = await reserved_pod(h)
    result = await h.binder(lock_wait_s=0.05).bind(args_for(pod))
    assert result.outcome is outcome, result.error
    current = h.node(NODE)["metadata"]["annotations"][keys.NODE_LOCK]
    if outcome is BindOutcome.BOUND:
        assert parse_node_lock(current).owned_by("default", "p1")
        info = await h.store.locks.inspect(NODE)
        assert info is not None and info.owner == "default/p1"
    else:
        assert current == value  # untouched, and our Redis lock was given back
        assert await h.store.locks.inspect(NODE) is None
        assert "annotation" in result.error
    if holder_phase is not None:
        assert h.pod("holder")["metadata"]["annotations"].get(keys.BIND_PHASE) == holder_phase


async def test_two_pods_racing_for_one_node_one_binds_the_other_times_out(h: Harness) -> None:
    p1 = await reserved_pod(h, "p1")
    p2 = h.create_pod(pod_obj("p2"))
    await h.reserve_pod(p2, allocation(p2, NODE, (1, 1000, 10)))
    b1, b2 = h.binder(lock_wait_s=0.2), h.binder(lock_wait_s=0.2)  # two replicas
    r1, r2 = await asyncio.gather(b1.bind(args_for(p1)), b2.bind(args_for(p2)))
    assert sorted([r1.outcome.value, r2.outcome.value]) == ["bound", "lock_timeout"]
    winner = "p1" if r1.outcome is BindOutcome.BOUND else "p2"
    assert parse_node_lock(h.node(NODE)["metadata"]["annotations"][keys.NODE_LOCK]).owned_by("default", winner)


async def test_a_node_patch_conflict_is_retried(h: Harness) -> None:
    pod = await reserved_pod(h)
    h.em.inject_error(409, method="PATCH", path="/nodes/", times=2)
    result = await h.binder().bind(args_for(pod))
    assert result.outcome is BindOutcome.BOUND


# ---- failures after the lock: undo ------------------------------------------------------------------------


async def _assert_undone(h: Harness, pod: dict[str, Any]) -> None:
    stored = h.pod(pod["metadata"]["name"])
    assert "nodeName" not in stored["spec"]
    assert not {k for k in stored["metadata"].get("annotations", {}) if k.startswith("hami.io/")}
    assert keys.VGPU_NODE_LABEL not in stored["metadata"].get("labels", {})
    assert keys.NODE_LOCK not in h.node(NODE)["metadata"].get("annotations", {})
    assert await h.store.locks.inspect(NODE) is None
    assert await h.store.reservations.get(pod["metadata"]["uid"]) is None
    assert await h.store.quota.pod_charges("default") == {}


@pytest.mark.parametrize(
    "status, outcome",
    [
        pytest.param(403, BindOutcome.ERROR, id="forbidden"),
        pytest.param(500, BindOutcome.ERROR, id="server-error-then-not-bound"),
        pytest.param(409, BindOutcome.POD_GONE, id="uid-precondition"),
    ],
)
async def test_a_failed_binding_undoes_everything(h: Harness, status: int, outcome: BindOutcome) -> None:
    pod = await reserved_pod(h)
    h.em.inject_error(status, method="POST", path="/binding", times=1)
    result = await h.binder().bind(args_for(pod))
    assert result.outcome is outcome
    assert result.error
    await _assert_undone(h, pod)


async def test_a_binding_already_made_to_this_node_is_success(h: Harness) -> None:
    pod = await reserved_pod(h)

    def bind_behind_our_back(rec: Any) -> None:
        if rec.resource == "pods" and rec.verb is WriteVerb.PATCH and rec.subresource is None:
            h.em.patch("Pod", "default", "p1", {"spec": {"nodeName": NODE}})

    h.em.hooks.append(bind_behind_our_back)
    result = await h.binder().bind(args_for(pod))
    assert result.outcome is BindOutcome.BOUND
    assert keys.NODE_LOCK in h.node(NODE)["metadata"]["annotations"]


async def test_a_binding_to_another_node_made_meanwhile_is_an_error_and_undone(h: Harness) -> None:
    pod = await reserved_pod(h)

    def bind_elsewhere(rec: Any) -> None:  # after the node lock, before the Binding
        if rec.resource == "nodes" and rec.verb is WriteVerb.PATCH:
            h.em.patch("Pod", "default", "p1", {"spec": {"nodeName": "gpu-node-2"}})

    h.em.hooks.append(bind_elsewhere)
    result = await h.binder().bind(args_for(pod))
    assert result.outcome is BindOutcome.BOUND_ELSEWHERE
    assert keys.NODE_LOCK not in h.node(NODE)["metadata"].get("annotations", {})
    assert await h.store.locks.inspect(NODE) is None


async def test_an_unknown_binding_outcome_keeps_everything(h: Harness) -> None:
    pod = await reserved_pod(h)

    def fail_after_the_node_lock(rec: Any) -> None:
        if rec.resource == "nodes" and rec.verb is WriteVerb.PATCH:
            h.em.inject_error(503, method="POST", path="/binding", times=1)
            h.em.inject_error(503, method="GET", path="/pods/p1", times=1)

    h.em.hooks.append(fail_after_the_node_lock)
    result = await h.binder().bind(args_for(pod))
    assert result.outcome is BindOutcome.ERROR and "outcome unknown" in result.error
    # the pod may have been bound with its annotations: the lock and the reservation stay
    assert keys.NODE_LOCK in h.node(NODE)["metadata"]["annotations"]
    assert await h.store.locks.inspect(NODE) is not None
    assert await h.store.reservations.get(pod["metadata"]["uid"]) is not None


async def test_a_pod_changed_before_its_binding_is_read_again_and_bound(h: Harness) -> None:
    pod = await reserved_pod(h)

    def change_pod(rec: Any) -> None:  # after the node lock: the version the bind knows is stale now
        if rec.resource == "nodes" and rec.verb is WriteVerb.PATCH:
            h.em.patch("Pod", "default", "p1", {"metadata": {"labels": {"changed": "yes"}}})

    h.em.hooks.append(change_pod)
    h.writes.clear()
    result = await h.binder().bind(args_for(pod))
    assert result.outcome is BindOutcome.BOUND
    stored = h.pod("p1")
    assert stored["spec"]["nodeName"] == NODE and stored["metadata"]["labels"]["changed"] == "yes"
    assert keys.DEVICES_ALLOCATED in stored["metadata"]["annotations"]
    [binding] = [w for w in h.writes if w.verb is WriteVerb.BIND]  # the refused attempt wrote nothing
    assert binding.body["metadata"]["resourceVersion"] != pod["metadata"]["resourceVersion"]


async def test_a_pod_deleted_before_the_patch_is_undone(h: Harness) -> None:
    pod = await reserved_pod(h)

    def delete_pod(rec: Any) -> None:
        if rec.resource == "nodes" and rec.verb is WriteVerb.PATCH:
            h.em.delete("Pod", "default", "p1")

    h.em.hooks.append(delete_pod)
    result = await h.binder().bind(args_for(pod))
    assert result.outcome is BindOutcome.POD_GONE
    assert keys.NODE_LOCK not in h.node(NODE)["metadata"].get("annotations", {})
    assert await h.store.locks.inspect(NODE) is None
    assert await h.store.reservations.get(pod["metadata"]["uid"]) is None


async def test_an_expired_settle_uses_the_lock_timeout(h: Harness) -> None:
    h.create_pod(pod_obj("holder", annotations={keys.BIND_PHASE: "allocating"}))
    at = NOW - 120  # two minutes old
    h.em.patch("Node", None, NODE, {"metadata": {"annotations": {keys.NODE_LOCK: lock_value(at, "default", "holder")}}})
    pod = await reserved_pod(h)
    busy = await h.binder(node_lock_timeout_s=300, lock_wait_s=0.0).bind(args_for(pod))
    assert busy.outcome is BindOutcome.LOCK_TIMEOUT
    pod = await reserved_pod(h, "p2")
    taken = await h.binder(node_lock_timeout_s=60, lock_wait_s=0.0).bind(args_for(pod))
    assert taken.outcome is BindOutcome.BOUND
    assert h.pod("holder")["metadata"]["annotations"][keys.BIND_PHASE] == "failed"
