"""Node-lock release (hami-wire §4, differences 4 and 5): on settle, annotation removal, pod end, node deletion and
timeout — and on timeout the holder is marked failed *before* the lock is free (HAMi #3096)."""

from __future__ import annotations

import dataclasses
import time
from datetime import UTC, datetime
from typing import Any

import pytest
import redis as sync_redis

from tests.integration.informer.conftest import TUNING, Harness, metric, settings
from tests.unit.informer.builders import pod
from tests.waiting import eventually
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec.nodelock import encode_node_lock
from vgpu_scheduler.shared.coord import lock_owner
from vgpu_scheduler.shared.emulator import WriteRecord, WriteVerb
from vgpu_scheduler.shared.store import Store

TIMEOUT_S = 300.0


def node_obj(name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "annotations": annotations or {}}}


async def lock_like_the_extender(h: Harness, name: str, node: str = "n1", ns: str = "default") -> dict[str, Any]:
    """What /bind leaves behind: the Redis lock, the node annotation, and the pod allocating on the node."""
    now = h.clock()
    await h.store.locks.acquire(node, lock_owner(ns, name), ttl_s=TIMEOUT_S)
    value = encode_node_lock(datetime.fromtimestamp(now, UTC), ns, name)
    if h.emulator.get("Node", None, node) is None:
        h.emulator.put(node_obj(node))
    h.emulator.patch("nodes", None, node, {"metadata": {"annotations": {keys.NODE_LOCK: value}}})
    return h.emulator.put(
        pod(name, ns, node=node, app=[[("GPU-1", 1000, 10)]], bind_phase="allocating", bind_time=int(now))
    )


def annotation(h: Harness, node: str = "n1") -> str | None:
    obj = h.emulator.get("Node", None, node)
    assert obj is not None
    value: str | None = obj["metadata"].get("annotations", {}).get(keys.NODE_LOCK)
    return value


def _cached_annotation(obj: dict[str, Any] | None, key: str) -> str | None:
    if obj is None:
        return None
    value: str | None = obj["metadata"].get("annotations", {}).get(key)
    return value


async def redis_free(store: Store, node: str = "n1") -> bool:
    return await store.locks.inspect(node) is None


async def all_free(h: Harness, node: str = "n1") -> bool:
    return annotation(h, node) is None and await redis_free(h.store, node)


@pytest.mark.parametrize(("phase", "cause"), [("success", "bind_success"), ("failed", "bind_failed")])
async def test_released_when_the_device_plugin_settles_the_bind_phase(harness: Harness, phase: str, cause: str) -> None:
    async with harness.run() as svc:
        await lock_like_the_extender(harness, "p1")
        await svc.term.locks.check("n1")
        assert annotation(harness) is not None and not await redis_free(harness.store)  # allocating: held

        harness.emulator.patch("pods", "default", "p1", {"metadata": {"annotations": {keys.BIND_PHASE: phase}}})
        await eventually(lambda: all_free(harness), what="lock released")
        await eventually(lambda: metric(svc, "vgpu_informer_locks_released_total", cause=cause) == 1)
        await harness.assert_audit()


async def test_a_settled_holder_s_annotation_is_left_to_the_device_plugin(harness: Harness) -> None:
    """HAMi's plugin settles the bind phase, then removes the annotation itself: within the grace the informer
    writes nothing to the node (no race with the plugin for the same annotation) and releases only the Redis lock
    once the plugin's removal shows up."""
    node_writes: list[Any] = []
    harness.emulator.hooks.append(
        lambda rec: node_writes.append(rec.body) if rec.resource == "nodes" and rec.verb is WriteVerb.PATCH else None
    )
    tuning = dataclasses.replace(TUNING, plugin_release_grace_s=60.0)
    async with harness.run(tuning=tuning) as svc:
        await lock_like_the_extender(harness, "p1")
        await eventually(lambda: _cached_annotation(svc.term.nodes.get("n1"), keys.NODE_LOCK) is not None)
        written = len(node_writes)
        harness.emulator.patch("pods", "default", "p1", {"metadata": {"annotations": {keys.BIND_PHASE: "success"}}})
        await eventually(lambda: _cached_annotation(svc.term.pods.get("p1", "default"), keys.BIND_PHASE) == "success")
        await svc.term.locks.check("n1")
        assert annotation(harness) is not None and not await redis_free(harness.store)  # the plugin's turn

        harness.emulator.patch("nodes", None, "n1", {"metadata": {"annotations": {keys.NODE_LOCK: None}}})
        await eventually(lambda: redis_free(harness.store), what="redis lock released")
        await eventually(lambda: metric(svc, "vgpu_informer_locks_released_total", cause="bind_success") == 1)
        assert len(node_writes) == written  # no node write through the API (the test's patch is direct)
        assert not svc.term.locks._settled_at and not svc.term.locks._grace_timers


async def test_a_settled_holder_s_annotation_the_plugin_leaves_is_removed_after_the_grace(harness: Harness) -> None:
    node_writes: list[Any] = []
    harness.emulator.hooks.append(
        lambda rec: node_writes.append(rec.body) if rec.resource == "nodes" and rec.verb is WriteVerb.PATCH else None
    )
    tuning = dataclasses.replace(TUNING, plugin_release_grace_s=0.5)
    async with harness.run(tuning=tuning) as svc:
        await lock_like_the_extender(harness, "p1")
        harness.emulator.patch("pods", "default", "p1", {"metadata": {"annotations": {keys.BIND_PHASE: "success"}}})
        await eventually(lambda: _cached_annotation(svc.term.pods.get("p1", "default"), keys.BIND_PHASE) == "success")
        await svc.term.locks.check("n1")
        assert annotation(harness) is not None  # still within the grace
        assert node_writes == []
        await eventually(lambda: all_free(harness), what="released once the grace is over")
        await eventually(lambda: metric(svc, "vgpu_informer_locks_released_total", cause="bind_success") == 1)
        assert len(node_writes) == 1  # the informer's removal
        assert not svc.term.locks._settled_at and not svc.term.locks._grace_timers


async def test_a_bind_s_lock_costs_one_redis_call_when_the_plugin_settles_and_removes_it(harness: Harness) -> None:
    """The path of every pod: /bind takes the lock and marks the pod allocating, the plugin settles the pod and
    removes the annotation. Taking the lock and settling release nothing, so they call nothing: only the removal
    calls Redis, once, to release the lock (no read of it first)."""
    tuning = dataclasses.replace(TUNING, plugin_release_grace_s=60.0, lock_sweep_s=3600.0)  # no sweep meanwhile
    async with harness.run(tuning=tuning) as svc:
        harness.emulator.put(node_obj("n1"))
        harness.emulator.put(pod("p1"))  # created, not placed yet
        await eventually(lambda: svc.term.pods.get("p1", "default") is not None and svc.term.nodes.get("n1"))
        locks = svc.term.locks._store.locks
        calls: list[tuple[str, str]] = []
        originals = {name: getattr(locks, name) for name in ("inspect", "release", "release_settled")}

        def counted(name: str) -> Any:
            async def call(node: str, *args: Any, **kwargs: Any) -> Any:
                calls.append((name, node))
                return await originals[name](node, *args, **kwargs)

            return call

        for name in originals:
            setattr(locks, name, counted(name))
        try:
            now = harness.clock()
            await harness.store.locks.acquire("n1", lock_owner("default", "p1"), ttl_s=TIMEOUT_S)
            value = encode_node_lock(datetime.fromtimestamp(now, UTC), "default", "p1")
            harness.emulator.patch("nodes", None, "n1", {"metadata": {"annotations": {keys.NODE_LOCK: value}}})
            placed = pod("p1", node="n1", app=[[("GPU-1", 1000, 10)]], bind_phase="allocating", bind_time=int(now))
            harness.emulator.patch(
                "pods", "default", "p1", {"metadata": {"annotations": placed["metadata"]["annotations"]}}
            )
            await eventually(
                lambda: _cached_annotation(svc.term.pods.get("p1", "default"), keys.BIND_PHASE) == "allocating"
            )
            harness.emulator.patch("pods", "default", "p1", {"metadata": {"annotations": {keys.BIND_PHASE: "success"}}})
            await eventually(
                lambda: _cached_annotation(svc.term.pods.get("p1", "default"), keys.BIND_PHASE) == "success"
            )
            assert calls == []  # neither the lock's arrival nor the settling needed Redis
            assert not svc.term.locks._pending
            harness.emulator.patch("nodes", None, "n1", {"metadata": {"annotations": {keys.NODE_LOCK: None}}})
            await eventually(lambda: metric(svc, "vgpu_informer_locks_released_total", cause="bind_success") == 1)
        finally:
            for name in originals:
                delattr(locks, name)
        assert calls == [("release_settled", "n1")]
        assert await redis_free(harness.store)
        assert not svc.term.locks._settled_at and not svc.term.locks._grace_timers
        assert "n1" not in svc.term.locks._seen


@pytest.mark.parametrize("phase", ["success", "failed"])
async def test_a_newer_lock_of_the_same_pod_survives_the_removal_of_an_older_annotation(
    harness: Harness, phase: str
) -> None:
    """The annotation the plugin removed, and the pod's settled phase, belong to an earlier bind attempt (100 s
    ago); the pod's Redis lock was taken again just now (a retried bind whose annotation is not written
    yet). Releasing it in the same call as reading it must keep it, as reading it first and then deciding does."""
    tuning = dataclasses.replace(TUNING, plugin_release_grace_s=60.0)  # the plugin, not the informer, removes it
    async with harness.run(tuning=tuning) as svc:
        then = harness.clock() - 100  # older than the new lock, younger than the timeout
        harness.emulator.put(node_obj("n1"))
        value = encode_node_lock(datetime.fromtimestamp(then, UTC), "default", "p1")
        harness.emulator.patch("nodes", None, "n1", {"metadata": {"annotations": {keys.NODE_LOCK: value}}})
        harness.emulator.put(pod("p1", node="n1", app=[[("GPU-1", 1000, 10)]], bind_phase=phase, bind_time=int(then)))
        await eventually(lambda: svc.term.locks._seen.get("n1") is not None and svc.term.pods.get("p1", "default"))
        await harness.store.locks.acquire("n1", lock_owner("default", "p1"), ttl_s=TIMEOUT_S)
        harness.emulator.patch("nodes", None, "n1", {"metadata": {"annotations": {keys.NODE_LOCK: None}}})
        await eventually(lambda: _cached_annotation(svc.term.nodes.get("n1"), keys.NODE_LOCK) is None)
        await svc.term.locks.check("n1")
        assert not await redis_free(harness.store)
        assert metric(svc, "vgpu_informer_locks_released_total", cause=f"bind_{phase}") == 0
        assert metric(svc, "vgpu_informer_locks_released_total", cause="annotation_removed") == 0
        harness.clock.advance(TIMEOUT_S + 1)  # it still ends by the timeout
        await eventually(lambda: redis_free(harness.store), what="timed out")
        await eventually(lambda: metric(svc, "vgpu_informer_locks_released_total", cause="timeout") == 1)


async def test_another_pod_s_lock_survives_the_removal_of_the_annotation(harness: Harness) -> None:
    """The plugin removed p1's annotation, but the Redis lock is p2's (taken since, its annotation not written
    yet): nothing is released, and p1's settling changes nothing either."""
    async with harness.run() as svc:
        await lock_like_the_extender(harness, "p1")
        await eventually(lambda: _cached_annotation(svc.term.nodes.get("n1"), keys.NODE_LOCK) is not None)
        await harness.store.locks.force_release("n1")
        harness.emulator.put(pod("p2", app=[[("GPU-1", 1, 1)]]))
        await harness.store.locks.acquire("n1", lock_owner("default", "p2"), ttl_s=TIMEOUT_S)
        harness.emulator.patch("pods", "default", "p1", {"metadata": {"annotations": {keys.BIND_PHASE: "success"}}})
        harness.emulator.patch("nodes", None, "n1", {"metadata": {"annotations": {keys.NODE_LOCK: None}}})
        await eventually(lambda: _cached_annotation(svc.term.nodes.get("n1"), keys.NODE_LOCK) is None)
        await eventually(lambda: _cached_annotation(svc.term.pods.get("p1", "default"), keys.BIND_PHASE) == "success")
        await svc.term.locks.check("n1")
        held = await harness.store.locks.inspect("n1")
        assert held is not None and held.owner == lock_owner("default", "p2")
        assert metric(svc, "vgpu_informer_locks_released_total", cause="bind_success") == 0


async def test_redis_lock_released_when_the_device_plugin_removes_the_annotation(harness: Harness) -> None:
    async with harness.run() as svc:
        await lock_like_the_extender(harness, "p1")
        await eventually(lambda: _cached_annotation(svc.term.nodes.get("n1"), keys.NODE_LOCK) is not None)
        harness.emulator.patch("nodes", None, "n1", {"metadata": {"annotations": {keys.NODE_LOCK: None}}})
        await eventually(lambda: redis_free(harness.store), what="redis lock released")
        await eventually(lambda: metric(svc, "vgpu_informer_locks_released_total", cause="annotation_removed") == 1)


@pytest.mark.parametrize("how", ["deleted", "terminated"])
async def test_released_at_once_when_the_holder_ends(harness: Harness, how: str) -> None:
    """HAMi #1130 / #1271 (deleted holder), #3047 (terminated holder): no waiting for the timeout."""
    async with harness.run() as svc:
        await lock_like_the_extender(harness, "p1")
        await svc.term.locks.check("n1")
        if how == "deleted":
            harness.emulator.delete("pods", "default", "p1")
        else:
            harness.emulator.patch("pods", "default", "p1", {"status": {"phase": "Failed"}})
        await eventually(lambda: all_free(harness), what="lock released")
        cause = "pod_deleted" if how == "deleted" else "pod_terminated"
        await eventually(lambda: metric(svc, "vgpu_informer_locks_released_total", cause=cause) == 1)
        await harness.assert_audit()


async def test_timeout_marks_the_holder_failed_before_releasing(harness: Harness, redis_url: str) -> None:
    """HAMi #3096: an expired lock is never handed on while its holder may still be allocated."""
    em, store = harness.emulator, harness.store
    lock_key = store.keys.node_lock("n1")
    probe = sync_redis.Redis.from_url(redis_url)
    seen: list[tuple[str, Any]] = []

    def hook(rec: WriteRecord) -> None:
        if rec.verb is WriteVerb.PATCH and rec.resource == "pods":
            phase = rec.result["metadata"]["annotations"].get(keys.BIND_PHASE)
            # at the moment the holder is marked failed, both locks must still be held
            seen.append(("pod", (phase, annotation(harness) is not None, probe.get(lock_key) is not None)))
        if rec.verb is WriteVerb.PATCH and rec.resource == "nodes":
            seen.append(("node", annotation(harness)))

    try:
        async with harness.run(settings(lock_timeout_s=TIMEOUT_S)) as svc:
            await lock_like_the_extender(harness, "p1")
            await svc.term.locks.check("n1")
            assert not await all_free(harness)
            em.hooks.append(hook)

            harness.clock.advance(TIMEOUT_S + 1)
            await eventually(lambda: all_free(harness), what="lock released after the timeout")
            p1 = em.get("Pod", "default", "p1")
            assert p1 is not None and p1["metadata"]["annotations"][keys.BIND_PHASE] == "failed"
            assert seen[0] == ("pod", ("failed", True, True)), seen
            assert seen[1] == ("node", None), seen
            await eventually(lambda: metric(svc, "vgpu_informer_locks_released_total", cause="timeout") == 1)
            assert metric(svc, "vgpu_informer_pods_marked_failed_total") == 1
    finally:
        probe.close()


async def test_a_stale_bind_phase_does_not_release_a_new_lock(harness: Harness) -> None:
    """A pod whose earlier bind attempt failed is bound again: its old `failed` must not free the new lock."""
    async with harness.run() as svc:
        await lock_like_the_extender(harness, "p1")
        old = str(int(harness.clock()) - 600)
        harness.emulator.patch(
            "pods", "default", "p1", {"metadata": {"annotations": {keys.BIND_PHASE: "failed", keys.BIND_TIME: old}}}
        )
        await eventually(lambda: _cached_annotation(svc.term.pods.get("p1", "default"), keys.BIND_TIME) == old)
        await svc.term.locks.check("n1")
        assert annotation(harness) is not None and not await redis_free(harness.store)


async def test_redis_lock_without_annotation_yet_is_kept(harness: Harness) -> None:
    """Between the Redis lock and the annotation write of /bind, nothing is released."""
    async with harness.run() as svc:
        harness.emulator.put(node_obj("n1"))
        harness.emulator.put(pod("p1", app=[[("GPU-1", 1, 1)]]))
        await harness.store.locks.acquire("n1", lock_owner("default", "p1"), ttl_s=TIMEOUT_S)
        await eventually(lambda: svc.term.pods.get("p1", "default") is not None)
        await svc.term.locks.check("n1")
        assert not await redis_free(harness.store)
        harness.clock.advance(TIMEOUT_S + 1)  # ... unless it times out
        await eventually(lambda: redis_free(harness.store), what="timed out")


async def test_legacy_lock_annotation_is_removed_after_the_timeout_only(harness: Harness) -> None:
    legacy = encode_node_lock(datetime.fromtimestamp(time.time(), UTC))
    harness.emulator.put(node_obj("n1", {keys.NODE_LOCK: legacy}))
    async with harness.run() as svc:
        await svc.term.locks.check("n1")
        assert annotation(harness) == legacy
        harness.clock.advance(TIMEOUT_S + 1)
        await eventually(lambda: annotation(harness) is None, what="legacy lock removed")
        await eventually(lambda: metric(svc, "vgpu_informer_locks_released_total", cause="timeout") == 1)


async def test_unreadable_lock_annotation_is_counted_and_removed_after_the_timeout(harness: Harness) -> None:
    harness.emulator.put(node_obj("n1", {keys.NODE_LOCK: "yesterday,default"}))
    async with harness.run() as svc:
        await eventually(lambda: metric(svc, "vgpu_informer_malformed_total", kind="node_lock") == 1)
        assert annotation(harness) == "yesterday,default"
        harness.clock.advance(TIMEOUT_S + 1)
        await eventually(lambda: annotation(harness) is None, what="unreadable lock removed")


async def test_redis_lock_of_a_deleted_node_is_released(harness: Harness) -> None:
    async with harness.run() as svc:
        await lock_like_the_extender(harness, "p1", node="gone")
        await eventually(lambda: svc.term.nodes.get("gone") is not None)
        harness.emulator.delete("nodes", None, "gone")
        await eventually(lambda: redis_free(harness.store, "gone"), what="released")
        await eventually(lambda: metric(svc, "vgpu_informer_locks_released_total", cause="node_deleted") == 1)


async def test_locks_held_gauge(harness: Harness) -> None:
    async with harness.run() as svc:
        await lock_like_the_extender(harness, "p1", node="n1")
        await lock_like_the_extender(harness, "p2", node="n2")
        await eventually(lambda: metric(svc, "vgpu_informer_locks_held") == 2)
        harness.emulator.patch("pods", "default", "p1", {"metadata": {"annotations": {keys.BIND_PHASE: "success"}}})
        await eventually(lambda: metric(svc, "vgpu_informer_locks_held") == 1)


async def test_a_garbage_node_name_in_a_pod_does_not_stop_the_worker(harness: Harness) -> None:
    bad = pod("bad", node="n1", app=[[("GPU-1", 1, 1)]], bind_phase="success")
    bad["metadata"]["annotations"][keys.VGPU_NODE] = "no such{node}"
    async with harness.run() as svc:
        harness.emulator.put(bad)
        harness.emulator.delete("pods", "default", "bad")
        await lock_like_the_extender(harness, "p1")
        harness.emulator.patch("pods", "default", "p1", {"metadata": {"annotations": {keys.BIND_PHASE: "success"}}})
        await eventually(lambda: all_free(harness), what="the worker still releases locks")
        assert svc.leading
