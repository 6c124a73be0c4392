"""The node lock of ``/bind``: a Redis arbiter between replicas, then HAMi's ``hami.io/mutex.lock`` annotation.

hami-wire §4 and differences 4-5. Taking the lock for pod ``<ns>/<name>`` on a node is two steps:

1. **Redis** (``NodeLock``, fencing token, owner ``<ns>/<name>``, ttl ``--node-lock-timeout``): replicas contend
   here, cheaply and atomically. Re-entrant for the same pod. An *expired* holder is first settled (its pod is
   marked ``hami.io/bind-phase: failed`` if it is still ``allocating``), then exactly that acquisition is
   released, then we lock: an expired lock is never handed on while its holder may still be allocated.
2. **Annotation** (GET node, then a ``resourceVersion``-guarded merge patch): the device plugin finds the pod
   through it. The current value decides:

   =====================================================  ===========================================
   value                                                  action
   =====================================================  ===========================================
   absent                                                 set it
   names this pod                                         ours already (a retried bind)
   malformed (the device plugin cannot use it either)     take it over (logged)
   legacy time-only, expired / fresh                      take it over / busy
   another pod, expired                                   settle that pod if ``allocating``, take over
   another pod that is gone, terminated, being deleted,   take it over (difference 4: such a lock is
   or whose bind phase is settled (``success``/``failed``) released anyway; HAMi #1271, #3047)
   another live pod still binding or allocating           busy: release the Redis lock, back off
   =====================================================  ===========================================

A busy lock is retried with jittered exponential backoff until ``wait_s`` has passed (PodGroup members: every
``retry_every_s``, as HAMi's ``--node-lock-retry-timeout``), then :class:`LockTimeoutError`.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from shared.codec import annotations as keys
from shared.codec.nodelock import encode_node_lock, parse_node_lock
from shared.coord import LockHeld, LockInfo, NodeLock, lock_owner, parse_lock_owner
from shared.domain.model import BindPhase
from shared.errors import ConflictError, DecodeError, NotFoundError
from shared.k8s import Api
from shared.k8s.objects import annotations_of, meta, resource_version_of

logger = logging.getLogger(__name__)

_MAX_PATCH_CONFLICTS: Final = 5
"""resourceVersion conflicts on the node (kubelet, device plugin writing too) before a try counts as busy."""
_BACKOFF_INITIAL_S: Final = 0.02
_BACKOFF_MAX_S: Final = 0.1
_TERMINAL_PHASES: Final = frozenset({"Succeeded", "Failed"})
_SETTLED_PHASES: Final = frozenset({BindPhase.SUCCESS.value, BindPhase.FAILED.value})


class LockBusyError(ConflictError):
    """Another live pod holds the node's lock (``where``: ``redis`` or ``annotation``); retry later."""

    def __init__(self, node: str, holder: str, where: str) -> None:
        super().__init__(f"node {node} is locked by {holder or 'an unknown holder'} ({where})")
        self.node = node
        self.holder = holder
        self.where = where


class LockTimeoutError(ConflictError):
    """The lock stayed busy for the whole wait; kube-scheduler retries the pod."""

    def __init__(self, busy: LockBusyError, waited_s: float) -> None:
        super().__init__(f"{busy}; gave up after waiting {waited_s:.2f}s, the pod will be retried")
        self.busy = busy
        self.waited_s = waited_s


@dataclass(frozen=True, slots=True)
class HeldNodeLock:
    """A node lock this bind holds: the Redis acquisition (``token``) and the annotation naming the pod."""

    node: str
    namespace: str
    name: str
    token: int
    waited_s: float

    @property
    def owner(self) -> str:
        return lock_owner(self.namespace, self.name)


class _Verdict(enum.Enum):
    MINE = "mine"
    TAKE_OVER = "take_over"
    BUSY = "busy"


def bind_phase(pod: Mapping[str, Any]) -> str | None:
    """The pod's ``hami.io/bind-phase`` annotation, or None."""
    value = annotations_of(pod).get(keys.BIND_PHASE)
    return value if isinstance(value, str) else None


def holder_is_done(pod: Mapping[str, Any]) -> bool:
    """A lock holder that can no longer be allocated or is allocated already: terminated, being deleted, or its
    bind phase settled by the device plugin."""
    status = pod.get("status") or {}
    return (
        status.get("phase") in _TERMINAL_PHASES
        or meta(pod).get("deletionTimestamp") is not None
        or bind_phase(pod) in _SETTLED_PHASES
    )


class NodeLocker:
    """Takes and gives back ``/bind``'s node lock (see the module docstring).

    ``timeout_s`` is ``--node-lock-timeout``; ``clock`` the wall clock (lock timestamps, expiry of annotation
    locks); ``call_timeout_s`` the deadline of each API call.
    """

    def __init__(
        self,
        api: Api,
        locks: NodeLock,
        *,
        timeout_s: float,
        clock: Callable[[], float],
        call_timeout_s: float = 4.0,
        rng: random.Random | None = None,
    ) -> None:
        self._api = api
        self._locks = locks
        self._timeout_s = timeout_s
        self._clock = clock
        self._call_timeout_s = call_timeout_s
        self._rng = rng or random.Random()

    # ---- acquire -------------------------------------------------------------------------------------------

    async def acquire(
        self, node: str, namespace: str, name: str, *, wait_s: float, retry_every_s: float | None = None
    ) -> HeldNodeLock:
        """Take the node lock for the pod, waiting up to ``wait_s`` while it is busy.

        ``retry_every_s`` fixes the retry period (PodGroup members); otherwise jittered exponential backoff.
        Raises :class:`LockTimeoutError` when still busy at the deadline; API/Redis errors propagate (nothing is
        left held).
        """
        loop = asyncio.get_running_loop()
        start = loop.time()
        deadline = start + wait_s
        delay = _BACKOFF_INITIAL_S
        while True:
            try:
                return await self._try_acquire(node, namespace, name, loop.time() - start)
            except LockBusyError as busy:
                now = loop.time()
                if now >= deadline:
                    raise LockTimeoutError(busy, now - start) from busy
                if retry_every_s is not None:
                    pause = retry_every_s
                else:
                    pause = delay / 2 + self._rng.uniform(0, delay / 2)  # equal jitter
                    delay = min(delay * 2, _BACKOFF_MAX_S)
                await asyncio.sleep(min(pause, deadline - now))

    async def _try_acquire(self, node: str, namespace: str, name: str, waited_s: float) -> HeldNodeLock:
        owner = lock_owner(namespace, name)
        result = await self._locks.acquire_settling_expired(node, owner, self._settle_redis_holder)
        if isinstance(result, LockHeld):
            raise LockBusyError(node, result.info.owner, "redis")
        try:
            await self._lock_annotation(node, namespace, name)
        except BaseException:
            if not result.reentered:
                await self._release_redis(node, owner, result.token)
            raise
        return HeldNodeLock(node=node, namespace=namespace, name=name, token=result.token, waited_s=waited_s)

    async def _lock_annotation(self, node: str, namespace: str, name: str) -> None:
        """Set ``hami.io/mutex.lock`` for the pod (or find it already ours)."""
        for _ in range(_MAX_PATCH_CONFLICTS):
            node_obj = await self._api.get_node(node, timeout_s=self._call_timeout_s)
            current = annotations_of(node_obj).get(keys.NODE_LOCK)
            if current is not None:
                verdict, holder = await self._judge(node, str(current), namespace, name)
                if verdict is _Verdict.MINE:
                    return
                if verdict is _Verdict.BUSY:
                    raise LockBusyError(node, holder, "annotation")
            value = encode_node_lock(datetime.fromtimestamp(self._clock()).astimezone(), namespace, name)
            try:
                await self._api.patch_node_metadata(
                    node,
                    annotations={keys.NODE_LOCK: value},
                    resource_version=resource_version_of(node_obj) or None,
                    timeout_s=self._call_timeout_s,
                )
            except ConflictError:
                continue  # the node changed under us: read it again
            if current is not None:
                logger.info("node lock annotation taken over", extra={"node": node, "previous": current})
            return
        raise LockBusyError(node, "concurrent node updates", "annotation")

    async def _judge(self, node: str, current: str, namespace: str, name: str) -> tuple[_Verdict, str]:
        try:
            lock = parse_node_lock(current)
        except DecodeError as e:
            logger.warning("malformed node lock annotation replaced", extra={"node": node, "error": str(e)})
            return _Verdict.TAKE_OVER, ""
        if lock.owned_by(namespace, name):
            return _Verdict.MINE, ""
        expired = self._clock() - lock.at.timestamp() > self._timeout_s
        if lock.namespace is None or lock.name is None:  # legacy: a time, no owner
            return (_Verdict.TAKE_OVER if expired else _Verdict.BUSY), current
        holder = lock_owner(lock.namespace, lock.name)
        try:
            pod = await self._api.get_pod(lock.namespace, lock.name, timeout_s=self._call_timeout_s)
        except NotFoundError:
            return _Verdict.TAKE_OVER, holder
        if expired:
            await self._settle_pod(lock.namespace, lock.name, pod)
            return _Verdict.TAKE_OVER, holder
        if holder_is_done(pod):
            return _Verdict.TAKE_OVER, holder
        return _Verdict.BUSY, holder

    # ---- settling an expired holder (difference 5) -----------------------------------------------------------

    async def _settle_redis_holder(self, info: LockInfo) -> None:
        owner = parse_lock_owner(info.owner)
        if owner is not None:
            await self._settle_pod(*owner, None)

    async def _settle_pod(self, namespace: str, name: str, pod: Mapping[str, Any] | None) -> None:
        """Mark an expired lock holder ``bind-phase: failed`` if it is still ``allocating``, so the device plugin
        cannot allocate it after the lock moved on. A gone pod needs nothing."""
        for _ in range(_MAX_PATCH_CONFLICTS):
            if pod is None:
                try:
                    pod = await self._api.get_pod(namespace, name, timeout_s=self._call_timeout_s)
                except NotFoundError:
                    return
            if bind_phase(pod) != BindPhase.ALLOCATING.value:
                return
            try:
                await self._api.patch_pod_metadata(
                    namespace,
                    name,
                    annotations={keys.BIND_PHASE: BindPhase.FAILED.value},
                    resource_version=resource_version_of(pod) or None,
                    timeout_s=self._call_timeout_s,
                )
            except NotFoundError:
                return
            except ConflictError:
                pod = None  # re-read: the device plugin may just have settled it
                continue
            logger.warning(
                "expired node lock: holder marked bind-phase failed", extra={"pod": lock_owner(namespace, name)}
            )
            return
        raise ConflictError(f"pod {namespace}/{name} kept changing while marking its expired bind failed")

    # ---- release -------------------------------------------------------------------------------------------

    async def release(self, held: HeldNodeLock) -> None:
        """Give the lock back after a failed bind: the annotation if it still names the pod, then the Redis lock
        (exactly our acquisition). Best effort: errors are logged, never raised."""
        try:
            await self._release_annotation(held)
        except Exception as e:
            logger.warning("node lock annotation not released", extra={"node": held.node, "error": str(e)})
        await self._release_redis(held.node, held.owner, held.token)

    async def _release_annotation(self, held: HeldNodeLock) -> None:
        for _ in range(_MAX_PATCH_CONFLICTS):
            node_obj = await self._api.get_node(held.node, timeout_s=self._call_timeout_s)
            current = annotations_of(node_obj).get(keys.NODE_LOCK)
            if current is None:
                return
            try:
                if not parse_node_lock(str(current)).owned_by(held.namespace, held.name):
                    return
            except DecodeError:
                return
            try:
                await self._api.patch_node_metadata(
                    held.node,
                    annotations={keys.NODE_LOCK: None},
                    resource_version=resource_version_of(node_obj) or None,
                    timeout_s=self._call_timeout_s,
                )
            except ConflictError:
                continue
            return

    async def _release_redis(self, node: str, owner: str, token: int) -> None:
        try:
            await self._locks.release(node, owner, token)
        except Exception as e:
            logger.warning("node lock not released in redis", extra={"node": node, "owner": owner, "error": str(e)})
