"""Releasing node locks (hami-wire §4, differences 4 and 5; docs/store.md, Coordination).

The extender takes a node's Redis lock and then writes the ``hami.io/mutex.lock`` annotation in ``/bind``, and
leaves both held. The informer releases them when:

* the device plugin settles the holder's ``hami.io/bind-phase`` (``success``/``failed``) — counted only if the
  pod's ``hami.io/bind-time`` is not older than the lock (a bind phase left from an earlier attempt does not
  release a new lock). HAMi's device plugin removes the annotation itself right after it settles the phase, so
  while the annotation is still there the informer leaves it to the plugin for ``plugin_grace_s`` (the pod event
  usually arrives a moment before the node event): when the plugin's removal shows up, only the Redis lock is
  released, with no API call; once the grace has passed, the informer removes the annotation itself;
* the device plugin removes the annotation (the Redis lock of the pod it named is released);
* the holder is deleted or terminated (Succeeded/Failed) — at once, not after the timeout (HAMi #1130, #1271,
  #3047);
* the node is deleted;
* the lock is older than ``--node-lock-timeout``: if the holder is still ``allocating`` it is first patched
  ``hami.io/bind-phase: failed`` (so the device plugin cannot allocate it later), and only then are the
  annotation and the Redis lock released (HAMi #3096). A legacy (time-only) or unreadable annotation names no
  pod and is removed after the timeout.

Order of release: annotation first (resourceVersion-guarded merge patch, re-read and retried on conflict), then
the Redis lock (owner- and token-checked), so the next holder never finds a stale annotation. Nodes are
checked one at a time by a single worker, fed by pod and node events and by a periodic sweep.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from vgpu_scheduler.services.informer.metrics import InformerMetrics, LockCause, Malformed
from vgpu_scheduler.services.informer.pods import PodFacts, pod_facts
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec.nodelock import parse_node_lock
from vgpu_scheduler.shared.coord import lock_owner, parse_lock_owner
from vgpu_scheduler.shared.domain.model import BindPhase
from vgpu_scheduler.shared.errors import ConflictError, DecodeError, NotFoundError, TransientError
from vgpu_scheduler.shared.k8s import Api, KubeObject
from vgpu_scheduler.shared.k8s.objects import annotations_of, name_of, resource_version_of
from vgpu_scheduler.shared.store import LockInfo, Store

logger = logging.getLogger(__name__)

Owner = tuple[str, str]  # (namespace, name) of the pod a lock names
_PATCH_ATTEMPTS = 5
_CLOCK_SLACK_S = 1.0  # RFC 3339 lock times and bind-time are whole seconds


@dataclass
class _Held:
    """One holder of a node's lock: the annotation naming it and/or the Redis lock it owns."""

    owner: Owner | None  # None: a legacy or unreadable annotation, or a Redis owner that names no pod
    annotation: str | None
    redis: LockInfo | None
    since_s: float


@dataclass(frozen=True)
class _Seen:
    owner: Owner
    at_s: float


def _pod_cause(facts: PodFacts | None, since_s: float) -> LockCause | None:
    """What ends a lock taken at ``since_s`` (seconds) by a pod with ``facts`` (None: the pod is gone), when the
    pod alone decides: gone, terminated, or settled by a bind not older than the lock. None: the pod still holds
    it as far as the pod tells."""
    if facts is None:
        return LockCause.POD_DELETED
    if facts.terminated:
        return LockCause.POD_TERMINATED
    if facts.settled and (facts.bind_time_s is None or facts.bind_time_s >= since_s - _CLOCK_SLACK_S):
        return LockCause.BIND_SUCCESS if facts.bind_phase is BindPhase.SUCCESS else LockCause.BIND_FAILED
    return None


class NodeLockReleaser:
    """Decides and performs node-lock releases. ``pod``/``node`` read the informers' caches (None if unknown);
    ``node_names`` lists every known node; ``still_leader`` re-checks the lease before a pod is marked failed."""

    def __init__(
        self,
        *,
        store: Store,
        api: Api,
        metrics: InformerMetrics,
        clock: Callable[[], float],
        timeout_s: float,
        pod: Callable[[str, str], KubeObject | None],
        node: Callable[[str], KubeObject | None],
        node_names: Callable[[], list[str]],
        still_leader: Callable[[], Awaitable[bool]],
        plugin_grace_s: float = 0.0,
    ) -> None:
        self._store = store
        self._api = api
        self._metrics = metrics
        self._clock = clock
        self._timeout_s = timeout_s
        self._pod = pod
        self._node = node
        self._node_names = node_names
        self._still_leader = still_leader
        self._plugin_grace_s = plugin_grace_s
        self._settled_at: dict[tuple[str, Owner], float] = {}
        """(node, holder) → when the holder was first seen settled while its annotation stood (the plugin's grace)."""
        self._grace_timers: dict[str, asyncio.TimerHandle] = {}
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._pending: set[str] = set()
        self._annotation: dict[str, str] = {}  # node → last seen lock annotation value
        self._seen: dict[str, _Seen] = {}  # node → last holder its annotation named (kept after removal)
        self._first_seen: dict[tuple[str, str], float] = {}  # (node, unreadable value) → when first seen
        self._watched: dict[Owner, str] = {}  # pods seen allocating → their node (may hold a Redis-only lock)

    # ---- inputs ------------------------------------------------------------------------------------------------

    def enqueue(self, node: str) -> None:
        if node and node not in self._pending:
            self._pending.add(node)
            self._queue.put_nowait(node)

    def on_node(self, node_obj: KubeObject, deleted: bool) -> None:
        """A node event: re-check the node when its lock annotation changed or the node went away (not when the
        annotation was just taken by a pod that is still to be allocated: there is nothing to release then)."""
        name = name_of(node_obj)
        value = None if deleted else annotations_of(node_obj).get(keys.NODE_LOCK)
        taken_by: Owner | None = None
        if value is not None:
            try:
                lock = parse_node_lock(value)
                if not lock.legacy:
                    assert lock.namespace is not None and lock.name is not None
                    taken_by = (lock.namespace, lock.name)
                    self._seen[name] = _Seen(taken_by, lock.at.timestamp())
            except DecodeError:
                pass  # reported by check()
        previous = self._annotation.get(name)
        if deleted or previous != value:
            if value is None:
                self._annotation.pop(name, None)
            else:
                self._annotation[name] = value
            if previous is None and taken_by is not None and self._still_to_allocate(taken_by):
                return  # its settling, the plugin's removal, its deletion or the sweep bring the node back
            self.enqueue(name)

    def _still_to_allocate(self, owner: Owner) -> bool:
        """Whether the pod is known, not terminated, and not settled by the device plugin (a lock it has just
        taken is then one no check would release)."""
        pod = self._pod(*owner)
        if pod is None:
            return False
        facts = pod_facts(pod)
        return not facts.terminated and facts.bind_phase in (None, BindPhase.ALLOCATING)

    def on_pod(self, facts: PodFacts, deleted: bool) -> None:
        """A pod event: re-check its node when a lock it may hold could now be released."""
        key = (facts.namespace, facts.name)
        if facts.node is None:
            return
        if not deleted and not facts.terminated and facts.bind_phase is BindPhase.ALLOCATING:
            self._watched[key] = facts.node
            return
        node = self._watched.pop(key, None)
        if not deleted and not facts.terminated and facts.settled and self._waits_for_plugin(facts, key):
            return  # the plugin's removal of the annotation (or the grace's end) brings the node back
        if node is not None or deleted or facts.terminated:
            self.enqueue(node or facts.node)
        elif facts.settled and self._annotation_owner(facts.node) == key:
            self.enqueue(facts.node)

    def _waits_for_plugin(self, facts: PodFacts, key: Owner) -> bool:
        """A settled pod whose lock annotation still stands: the device plugin removes it itself, so a check now
        would only start the plugin's grace. Start it here, without reading Redis. False (check the node) when
        there is no grace, the annotation names another pod, or the settled phase is older than the lock."""
        node = facts.node
        if node is None or self._plugin_grace_s <= 0 or self._annotation_owner(node) != key:
            return False
        seen = self._seen.get(node)
        if seen is None or (facts.bind_time_s is not None and facts.bind_time_s < seen.at_s - _CLOCK_SLACK_S):
            return False
        return self._plugin_may_still_release(node, key, self._clock())

    def _annotation_owner(self, node: str) -> Owner | None:
        """The pod the node's current lock annotation names (None: no annotation, legacy or unreadable)."""
        value = self._annotation.get(node)
        seen = self._seen.get(node)
        if value is None or seen is None:
            return None
        try:
            lock = parse_node_lock(value)
        except DecodeError:
            return None
        return seen.owner if not lock.legacy and seen.owner == (lock.namespace, lock.name) else None

    # ---- the worker and the sweep ------------------------------------------------------------------------------

    async def run(self) -> None:
        """Check queued nodes one at a time, until cancelled. Transient failures wait for the next sweep."""
        while True:
            node = await self._queue.get()
            self._pending.discard(node)
            try:
                await self.check(node)
            except TransientError as e:
                logger.warning("node lock check failed, will retry", extra={"node": node, "error": str(e)})
            except DecodeError as e:  # a node name no Redis key can carry (from a pod's hami.io/vgpu-node)
                logger.warning("node lock check skipped", extra={"node": node, "error": str(e)})

    async def sweep(self) -> int:
        """Queue every node whose lock is held (Redis or annotation); returns how many are held."""
        names = self._node_names()
        watched = set(self._watched.values())
        redis_held = await self._store.locks.inspect_many(sorted(set(names) | watched))
        held = set(redis_held) | set(self._annotation)
        self._metrics.locks_held.set(len(held))
        for n in sorted(held):
            self.enqueue(n)
        return len(held)

    # ---- deciding ----------------------------------------------------------------------------------------------

    def _holders(self, node: str, value: str | None, redis: LockInfo | None, now: float) -> list[_Held]:
        out: dict[Owner | None, _Held] = {}
        if value is not None:
            try:
                lock = parse_node_lock(value)
            except DecodeError as e:
                if (node, value) not in self._first_seen:
                    self._metrics.malformed.labels(Malformed.NODE_LOCK.value).inc()
                    logger.warning("node lock annotation unreadable", extra={"node": node, "error": str(e)})
                since = self._first_seen.setdefault((node, value), now)
                out[None] = _Held(None, value, None, since)
            else:
                owner = None if lock.legacy else (lock.namespace or "", lock.name or "")
                out[owner] = _Held(owner, value, None, lock.at.timestamp())
        if redis is not None:
            owner = parse_lock_owner(redis.owner)
            acquired_s = redis.acquired_ms / 1000
            held = out.get(owner) if owner is not None else None
            if held is not None:
                held.redis = redis
                held.since_s = min(held.since_s, acquired_s)
            else:
                out[("", redis.owner) if owner is None else owner] = _Held(owner, None, redis, acquired_s)
        return list(out.values())

    async def _get_pod(self, owner: Owner) -> KubeObject | None:
        cached = self._pod(*owner)
        if cached is not None:
            return cached
        try:
            return await self._api.get_pod(*owner)
        except NotFoundError:
            return None

    async def _decide(self, node: str, held: _Held, now: float) -> tuple[LockCause, PodFacts | None] | None:
        timed_out = now - held.since_s >= self._timeout_s
        if held.owner is None:
            return (LockCause.TIMEOUT, None) if timed_out else None
        pod = await self._get_pod(held.owner)
        facts = pod_facts(pod) if pod is not None else None
        cause = _pod_cause(facts, held.since_s)
        if cause is not None:
            settled = cause in (LockCause.BIND_SUCCESS, LockCause.BIND_FAILED)
            annotated = held.annotation is not None and not timed_out
            if settled and annotated and self._plugin_may_still_release(node, held.owner, now):
                return None
            return cause, facts
        if held.annotation is None and held.redis is not None:
            seen = self._seen.get(node)
            if (
                seen is not None
                and seen.owner == held.owner
                and seen.at_s >= held.redis.acquired_ms / 1000 - _CLOCK_SLACK_S
            ):
                return LockCause.ANNOTATION_REMOVED, facts
        if timed_out:
            return LockCause.TIMEOUT, facts
        return None

    def _plugin_may_still_release(self, node: str, owner: Owner, now: float) -> bool:
        """Whether the device plugin still has time to remove the settled holder's annotation itself; if so, the
        node is checked again when that time is up (or sooner, on the node event of the removal)."""
        if self._plugin_grace_s <= 0:
            return False
        first = self._settled_at.setdefault((node, owner), now)
        left = first + self._plugin_grace_s - now
        if left <= 0:
            return False
        if node not in self._grace_timers:
            loop = asyncio.get_running_loop()
            self._grace_timers[node] = loop.call_later(left + 0.01, self._grace_over, node)
        return True

    def _grace_over(self, node: str) -> None:
        self._grace_timers.pop(node, None)
        self.enqueue(node)

    def _forget_grace(self, node: str, owner: Owner | None) -> None:
        if owner is not None:
            self._settled_at.pop((node, owner), None)
        if not any(n == node for n, _ in self._settled_at):
            timer = self._grace_timers.pop(node, None)
            if timer is not None:
                timer.cancel()

    async def check(self, node: str) -> None:
        """Evaluate ``node``'s lock holders and release those whose lock is over."""
        node_obj = self._node(node)
        settled = self._settled_release(node, node_obj)
        if settled is not None:
            # the usual end of a bind (the device plugin settled the pod and removed the annotation): release and
            # read in one round trip; a lock that turns out to be another's, or newer, is decided as usual below
            owner, latest_ms = settled
            released, redis = await self._store.locks.release_settled(node, lock_owner(*owner), latest_ms)
            if released:
                assert redis is not None
                self._released_settled(node, owner, redis)
                return
        else:
            redis = await self._store.locks.inspect(node)
        if node_obj is None:
            if redis is not None and not await self._exists(node):
                held = _Held(parse_lock_owner(redis.owner), None, redis, 0.0)
                await self._release(node, held, LockCause.NODE_DELETED)
            self._seen.pop(node, None)
            return
        value = annotations_of(node_obj).get(keys.NODE_LOCK)
        now = self._clock()
        holders = self._holders(node, value, redis, now)
        owners = {h.owner for h in holders}
        for gone in [k for k in self._settled_at if k[0] == node and k[1] not in owners]:
            self._forget_grace(node, gone[1])  # its lock went another way (taken over, removed)
        for held in holders:
            decision = await self._decide(node, held, now)
            if decision is not None:
                await self._release(node, held, decision[0])

    def _settled_release(self, node: str, node_obj: KubeObject | None) -> tuple[Owner, int | None] | None:
        """When ``node`` has no lock annotation any more and the pod its last one named is known: that pod, and
        the latest acquisition time (server ms, None = any) for which :meth:`_decide` releases a Redis lock that
        pod holds without an annotation (terminated, settled by a bind not older than the lock, or the annotation
        removed after the lock was taken). None when :meth:`check` must read the lock first (an annotation
        stands, the holder is unknown or not cached, or only a timeout could release it)."""
        if node_obj is None or annotations_of(node_obj).get(keys.NODE_LOCK) is not None:
            return None
        seen = self._seen.get(node)
        if seen is None:
            return None
        pod = self._pod(*seen.owner)
        if pod is None:
            return None  # deleted, or not cached: check() asks the API
        facts = pod_facts(pod)
        if facts.terminated or (facts.settled and facts.bind_time_s is None):
            return seen.owner, None
        # the bounds of _decide's `fresh` and annotation-removed tests, in server milliseconds
        latest_s = seen.at_s + _CLOCK_SLACK_S
        if facts.settled and facts.bind_time_s is not None:
            latest_s = max(latest_s, facts.bind_time_s + _CLOCK_SLACK_S)
        return seen.owner, math.floor(latest_s * 1000)

    def _released_settled(self, node: str, owner: Owner, redis: LockInfo) -> None:
        """Book a release :meth:`check` made through :meth:`_settled_release`, with the cause :meth:`_decide`
        gives the lock that was released, and as :meth:`_release` books it."""
        pod = self._pod(*owner)
        since_s = redis.acquired_ms / 1000
        # the script released it, so one of _decide's causes held: the pod's own, else the annotation's removal
        cause = _pod_cause(pod_facts(pod) if pod is not None else None, since_s) or LockCause.ANNOTATION_REMOVED
        for key in [k for k in self._settled_at if k[0] == node]:
            self._forget_grace(node, key[1])  # no holder is left on the node
        held = _Held(owner, None, redis, since_s)
        self._book_release(node, held, cause)

    async def _exists(self, node: str) -> bool:
        try:
            await self._api.get_node(node)
        except NotFoundError:
            return False
        return True

    # ---- releasing ---------------------------------------------------------------------------------------------

    async def _release(self, node: str, held: _Held, cause: LockCause) -> None:
        if cause is LockCause.TIMEOUT and held.owner is not None:
            if not await self._still_leader():
                return
            if not await self._mark_failed(held.owner):
                return  # never release while the holder may still be allocated (difference 5)
        if held.annotation is not None:
            await self._remove_annotation(node, held.annotation)
        if held.redis is not None:
            await self._store.locks.release(node, held.redis.owner, token=held.redis.token)
        self._book_release(node, held, cause)

    def _book_release(self, node: str, held: _Held, cause: LockCause) -> None:
        seen = self._seen.get(node)
        if seen is not None and seen.owner == held.owner:
            self._seen.pop(node, None)
        if held.owner is not None:
            self._watched.pop(held.owner, None)
        self._forget_grace(node, held.owner)
        self._metrics.locks_released.labels(cause.value).inc()
        logger.info(
            "node lock released",
            extra={
                "node": node,
                "pod": "/".join(held.owner) if held.owner else None,
                "cause": cause.value,
                "annotation": held.annotation is not None,
                "redis": held.redis is not None,
            },
        )

    async def _mark_failed(self, owner: Owner) -> bool:
        """Patch the holder ``bind-phase: failed`` if it is still allocating. True when it is not (any more)."""
        ns, name = owner
        for _ in range(_PATCH_ATTEMPTS):
            try:
                pod = await self._api.get_pod(ns, name)
            except NotFoundError:
                return True
            facts = pod_facts(pod)
            if facts.bind_phase is not BindPhase.ALLOCATING or facts.terminated:
                return True
            try:
                await self._api.patch_pod_metadata(
                    ns,
                    name,
                    annotations={keys.BIND_PHASE: BindPhase.FAILED.value},
                    resource_version=resource_version_of(pod),
                )
            except ConflictError:
                continue
            except NotFoundError:
                return True
            self._metrics.pods_marked_failed.inc()
            logger.warning("node lock timed out while allocating: pod marked failed", extra={"pod": f"{ns}/{name}"})
            return True
        logger.warning("could not mark pod failed after conflicts", extra={"pod": f"{ns}/{name}"})
        return False

    async def _remove_annotation(self, node: str, value: str) -> None:
        """Remove ``hami.io/mutex.lock`` if it still reads ``value`` (resourceVersion-guarded, retried)."""
        for _ in range(_PATCH_ATTEMPTS):
            try:
                node_obj = await self._api.get_node(node)
            except NotFoundError:
                return
            if annotations_of(node_obj).get(keys.NODE_LOCK) != value:
                return  # removed or replaced meanwhile: not ours to touch
            try:
                await self._api.patch_node_metadata(
                    node, annotations={keys.NODE_LOCK: None}, resource_version=resource_version_of(node_obj)
                )
            except ConflictError:
                continue
            except NotFoundError:
                return
            return
        raise TransientError(f"node {node}: lock annotation not removed after {_PATCH_ATTEMPTS} conflicts")
