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

Binds of one process waiting for the same node line up in arrival order; the first tries the lock again when the
node changes on the store's change feed (a release changes it: :mod:`.wakeups`), and in any case after a jittered
exponential backoff, until ``wait_s`` has passed (PodGroup members: every ``retry_every_s``, as HAMi's
``--node-lock-retry-timeout``), then :class:`LockTimeoutError`. Without wake-ups the backoff is the only retry.
A release after a failed bind that does not land
(API or Redis trouble) is retried in the background until it does, so a failed bind never leaves its lock behind
for the whole ``--node-lock-timeout``.

How long a bind may wait for the lock within ``--bind-timeout`` is :func:`lock_wait_budget`.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from vgpu_scheduler.services.extender.wakeups import NodeWakeups, wait_armed
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec.nodelock import encode_node_lock, parse_node_lock
from vgpu_scheduler.shared.coord import LockHeld, LockInfo, NodeLock, lock_owner, parse_lock_owner
from vgpu_scheduler.shared.domain.model import BindPhase
from vgpu_scheduler.shared.errors import ConflictError, DecodeError, NotFoundError
from vgpu_scheduler.shared.k8s import Api
from vgpu_scheduler.shared.k8s.objects import annotations_of, meta, resource_version_of

logger = logging.getLogger(__name__)

DEFAULT_LOCK_WAIT_S: Final = 3.0
"""How long a bind waits for a busy node lock with the default ``--bind-timeout`` of 4 s."""
_BIND_WORK_RESERVE_S: Final = 1.0
"""Of ``--bind-timeout``, what is kept for the calls after the lock (pod patch, Binding) and the answer."""


def lock_wait_budget(bind_timeout_s: float) -> float:
    """How long a bind may wait for a busy node lock within ``--bind-timeout``: all of it but the time the
    remaining calls need (a quarter of it when the timeout is short)."""
    return max(bind_timeout_s - min(_BIND_WORK_RESERVE_S, bind_timeout_s / 4), 0.0)


POD_GROUP_RETRY_S: Final = 0.1
"""PodGroup members retry a busy lock every 100 ms until ``--node-lock-retry-timeout`` (hami-wire §4.2)."""

_MAX_PATCH_CONFLICTS: Final = 5
"""resourceVersion conflicts on the node (kubelet, device plugin writing too) before a try counts as busy."""
_BACKOFF_INITIAL_S: Final = 0.02
_BACKOFF_MAX_S: Final = 0.1
_BACKOFF_INITIAL_WOKEN_S: Final = 0.2
_BACKOFF_MAX_WOKEN_S: Final = 0.5
"""The backoff when a release wakes the bind anyway: the poll is then only the fallback (a wake-up lost with the
follower's connection, a holder's lock that expired), and a lock is held for a whole Allocate: polling it every
few tens of milliseconds only tried and failed again (about three lock scripts per bound pod with binpack)."""
_RELEASE_RETRY_INITIAL_S: Final = 0.2
_RELEASE_RETRY_MAX_S: Final = 5.0
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


@dataclass(slots=True)
class _NodeQueue:
    """The binds of this process waiting for one node's lock, in arrival order."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


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
        wakeups: NodeWakeups | None = None,
    ) -> None:
        self._api = api
        self._locks = locks
        self._wakeups = wakeups
        self._timeout_s = timeout_s
        self._clock = clock
        self._call_timeout_s = call_timeout_s
        self._rng = rng or random.Random()
        self._queues: dict[str, _NodeQueue] = {}
        self._queued_holder: dict[str, str] = {}
        """The last holder seen per node, for the message of a bind that timed out in the local queue."""
        self._undo_tasks: set[asyncio.Task[None]] = set()

    # ---- acquire -------------------------------------------------------------------------------------------

    async def acquire(
        self, node: str, namespace: str, name: str, *, wait_s: float, retry_every_s: float | None = None
    ) -> HeldNodeLock:
        """Take the node lock for the pod, waiting up to ``wait_s`` while it is busy.

        Binds of this process waiting for the same node line up in arrival order (one polls the lock at a time);
        ``retry_every_s`` fixes the retry period (PodGroup members); otherwise jittered exponential backoff.
        Raises :class:`LockTimeoutError` when still busy at the deadline; API/Redis errors propagate (nothing is
        left held).
        """
        loop = asyncio.get_running_loop()
        start = loop.time()
        deadline = start + wait_s
        queue = self._queues.setdefault(node, _NodeQueue())
        queue.users += 1
        try:
            try:
                async with asyncio.timeout_at(deadline):
                    await queue.lock.acquire()
            except TimeoutError:
                holder = self._queued_holder.get(node, "another bind of this replica")
                raise LockTimeoutError(LockBusyError(node, holder, "queue"), loop.time() - start) from None
            try:
                return await self._acquire_polling(node, namespace, name, (start, deadline), retry_every_s)
            finally:
                queue.lock.release()
        finally:
            queue.users -= 1
            if queue.users == 0:
                del self._queues[node]
                self._queued_holder.pop(node, None)

    async def _acquire_polling(
        self, node: str, namespace: str, name: str, window: tuple[float, float], retry_every_s: float | None
    ) -> HeldNodeLock:
        """Poll the lock until it is ours or ``window`` (start, deadline on the loop clock) has passed."""
        start, deadline = window
        loop = asyncio.get_running_loop()
        delay = _BACKOFF_INITIAL_S if self._wakeups is None else _BACKOFF_INITIAL_WOKEN_S
        ceiling = _BACKOFF_MAX_S if self._wakeups is None else _BACKOFF_MAX_WOKEN_S
        while True:
            changed = self._wakeups.arm(node) if self._wakeups is not None else None
            try:
                held = await self._try_acquire(node, namespace, name, loop.time() - start)
            except LockBusyError as busy:
                self._queued_holder[node] = busy.holder
                now = loop.time()
                if now >= deadline:
                    raise LockTimeoutError(busy, now - start) from busy
                if retry_every_s is not None:
                    pause = retry_every_s
                else:
                    pause = delay / 2 + self._rng.uniform(0, delay / 2)  # equal jitter
                    delay = min(delay * 2, ceiling)
                if changed is None:
                    await asyncio.sleep(min(pause, deadline - now))
                else:  # the node's next change (a release among them) ends the wait early
                    await wait_armed(changed, min(pause, deadline - now))
            else:
                self._queued_holder[node] = held.owner
                return held

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
        """Set ``hami.io/mutex.lock`` for the pod (or find it already ours).

        First one call that sets it only if absent (the common case: the device plugin released the last one);
        otherwise read the node and judge the current value (the table of the module docstring)."""
        value = encode_node_lock(datetime.fromtimestamp(self._clock()).astimezone(), namespace, name)
        try:
            if await self._api.add_node_annotation_if_absent(
                node, keys.NODE_LOCK, value, timeout_s=self._call_timeout_s
            ):
                return
        except ConflictError:
            pass  # the node changed under the patch: read it and judge, as below
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
        (exactly our acquisition; kept while the annotation may still name the pod). Never raises: a release that
        fails is retried in the background until it lands or the lock times out anyway (``drain`` at shutdown)."""
        if not await self._release_once(held):
            task = asyncio.create_task(self._release_until_done(held), name=f"node-lock-release:{held.node}")
            self._undo_tasks.add(task)
            task.add_done_callback(self._undo_tasks.discard)

    @property
    def releases_pending(self) -> int:
        """Failed releases still being retried in the background."""
        return len(self._undo_tasks)

    async def drain(self, timeout_s: float) -> int:
        """Let background releases finish for up to ``timeout_s``, then cancel the rest; how many were cancelled
        (their locks expire after ``--node-lock-timeout``, reclaimed by the informer)."""
        tasks = set(self._undo_tasks)
        if not tasks:
            return 0
        _, pending = await asyncio.wait(tasks, timeout=timeout_s)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)
            logger.warning("node lock releases abandoned at shutdown", extra={"pending": len(pending)})
        return len(pending)

    async def _release_once(self, held: HeldNodeLock) -> bool:
        try:
            await self._release_annotation(held)
            await self._locks.release(held.node, held.owner, held.token)
        except Exception as e:  # any failure is retried; the error is logged once per try
            logger.warning(
                "node lock not released: will retry", extra={"node": held.node, "owner": held.owner, "error": str(e)}
            )
            return False
        return True

    async def _release_until_done(self, held: HeldNodeLock) -> None:
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self._timeout_s
        delay = _RELEASE_RETRY_INITIAL_S
        while loop.time() < give_up:
            await asyncio.sleep(min(delay, max(give_up - loop.time(), 0.0)))
            if await self._release_once(held):
                logger.info("node lock released on retry", extra={"node": held.node, "owner": held.owner})
                return
            delay = min(delay * 2, _RELEASE_RETRY_MAX_S)
        logger.warning(
            "node lock release given up: the lock timeout reclaims it", extra={"node": held.node, "owner": held.owner}
        )

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
        raise ConflictError(f"node {held.node} kept changing while its lock annotation was released")

    async def _release_redis(self, node: str, owner: str, token: int) -> None:
        try:
            await self._locks.release(node, owner, token)
        except Exception as e:
            logger.warning("node lock not released in redis", extra={"node": node, "owner": owner, "error": str(e)})
