"""``POST /bind``: turn the pod's Redis reservation into a Binding (hami-wire §5.2, differences 3-5).

The request is ``ExtenderBindingArgs`` (``PodName``, ``PodNamespace``, ``PodUID``, ``Node``; no pod object). The
devices come from the pod's reservation in Redis, made by whichever replica filtered the pod. Steps:

1. claim the pod's record on the node for this bind (one atomic script: reserved → binding, a random token
   with an expiry; docs/extender-bind.md, ownership). A plain reservation with the filter's bind hint
   (:mod:`services.extender.bindhint`) is not followed by a read of the pod: the hint's resourceVersion guards
   the Binding, and a pod that changed since the filter saw it makes the Binding conflict (then it is read
   and checked as below). Without a hint the pod is read under the claim;
2. any other record (none, another node's, another bind's, bound, confirmed): GET the pod first, as a bind
   always did. Gone, re-created (other UID), being deleted or bound elsewhere → Error; already bound to this
   node → success (a retried bind). Then claim: none → Error, or a plain bind for a pod asking for nothing we
   manage; on another node → Error; another bind's live claim → Error (``not_owner``; kube-scheduler retries,
   and finds the pod bound once that bind is done). The devices written are the ones claimed;
3. the node lock (:mod:`services.extender.bindlock`): Redis arbiter, then ``hami.io/mutex.lock``, waiting a
   bounded time while another pod holds it;
4. the Binding, carrying every pod annotation and the ``hami.io/vgpu-node`` label: the API server sets the
   node and merges them into the pod in one update (``BindingREST``), guarded by the pod's UID and
   resourceVersion (the hint's or the one read, so the pod we checked is the pod we write). A stale version
   reads the pod, checks it and tries again; 409 already bound to this node by another bind = already bound.
   HAMi's scheduler patches the pod and then binds it: two requests, and a window where the pod carries an
   allocation but no node. The device plugin only ever sees the bound pod, so it reads the same annotations.
   Labels on a Binding are copied from v1.35 (``PodTopologyLabelsAdmission``, on by default); on an older
   server the informer adds the label (:mod:`services.informer.labels`).

Any failure undoes in reverse what this bind wrote itself: the lock (annotation, then Redis, by owner and token),
the reservation and its quota charge only while its claim still holds; the pod itself was not written. The
answer is ``{"Error": "..."}``. The claim is re-checked before each Binding attempt; on success the record
becomes ``bound``. A Binding whose outcome is unknown (timeout) is checked with a GET; if it stays unknown
nothing is undone (a bound pod must keep its lock) and the answer is an Error. On success the lock stays held:
the device plugin (or the informer, when the bind phase settles or the lock times out) releases it. Calls on
success: node lock patch and Binding (and a GET of the pod first when the reservation has no hint).

This module is the use case (:class:`Binder`); :mod:`.bindresult` holds its outcomes and the checks that end it,
:mod:`.bindwrites` the Binding it writes and how it recognises its own write, :mod:`.bindhttp` the HTTP
endpoint, :mod:`.bindlock` and :mod:`.vendorlock` the node locks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import secrets
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from vgpu_scheduler.services.extender.bindhint import is_pod_group_member, parse_bind_hint
from vgpu_scheduler.services.extender.bindlock import (
    DEFAULT_LOCK_WAIT_S,
    POD_GROUP_RETRY_S,
    HeldNodeLock,
    LockTimeoutError,
    NodeLocker,
    holder_is_done,
)
from vgpu_scheduler.services.extender.bindresult import (
    BindFailed,
    BindOutcome,
    BindResult,
    check_pod,
    claim_lost,
    claim_refused,
    requests_devices,
)
from vgpu_scheduler.services.extender.bindwrites import (
    BINDING_ATTEMPTS,
    BindingUnknown,
    create_binding,
    foreign_allocation,
)
from vgpu_scheduler.services.extender.events import EventSink
from vgpu_scheduler.services.extender.metrics import ExtenderMetrics
from vgpu_scheduler.services.extender.vendorlock import (
    DSMLU_LOCK,
    HeldTimedLock,
    TimedLockRules,
    TimedNodeLocker,
    lock_kinds,
)
from vgpu_scheduler.services.extender.wakeups import NodeWakeups
from vgpu_scheduler.shared.codec.podannotations import allocation_labels
from vgpu_scheduler.shared.coord import NodeLock
from vgpu_scheduler.shared.domain.allocation import Allocation
from vgpu_scheduler.shared.domain.model import NvidiaConfig
from vgpu_scheduler.shared.errors import ConflictError, NotFoundError, VgpuError
from vgpu_scheduler.shared.k8s import Api, KubeObject, StaleVersionError
from vgpu_scheduler.shared.k8s.objects import pod_ref, resource_version_of
from vgpu_scheduler.shared.protocol.events import PodEvent, bind_failure_event, bind_success_event
from vgpu_scheduler.shared.protocol.extender import ExtenderBindingArgs
from vgpu_scheduler.shared.store import Claimed, ClaimRefused, Store
from vgpu_scheduler.shared.vendors.base import NodeLockKind
from vgpu_scheduler.shared.vendors.nvidia import NvidiaVendor
from vgpu_scheduler.shared.vendors.pods import allocation_annotations, needs_inventory
from vgpu_scheduler.shared.vendors.registry import Vendors

__all__ = ["BindOutcome", "BindResult", "Binder"]
"""``BindOutcome`` and ``BindResult`` live in :mod:`.bindresult`; they stay importable from here."""

logger = logging.getLogger(__name__)
_Wait = tuple[float, float | None]  # how long a bind waits for a busy node lock, how often it retries (see _wait)


class Binder:
    """The bind use case over explicit dependencies (the HTTP handler is a thin wrapper around :meth:`bind`)."""

    def __init__(
        self,
        *,
        store: Store,
        api: Api,
        nvidia: NvidiaConfig,
        node_lock_timeout_s: float,
        pod_group_wait_s: float,
        lock_wait_s: float = DEFAULT_LOCK_WAIT_S,
        call_timeout_s: float = 4.0,
        clock: Callable[[], float],
        events: EventSink | None = None,
        metrics: ExtenderMetrics | None = None,
        rng: random.Random | None = None,
        vendors: Vendors | None = None,
        timed_lock: TimedLockRules = DSMLU_LOCK,
        on_lock_wait: Callable[[float, bool], None] | None = None,
        on_lock_queue: Callable[[str], None] | None = None,
        wakeups: NodeWakeups | None = None,
    ) -> None:
        self._store = store
        self._api = api
        self._nvidia = nvidia
        self._vendors = vendors if vendors is not None else Vendors((NvidiaVendor(nvidia),))
        self._allocated_keys = tuple(dict.fromkeys(v.allocated_key for v in self._vendors))
        self._lock_wait_s = lock_wait_s
        self._pod_group_wait_s = pod_group_wait_s
        self._call_timeout_s = call_timeout_s
        self._clock = clock
        self._events = events
        self._metrics = metrics
        self._on_lock_wait, self._on_lock_queue = on_lock_wait, on_lock_queue
        """The bind limit's hooks (ordinary pods): each HAMi node-lock wait's ``(waited_s, timed_out)``, its pod UID."""
        self.locker = NodeLocker(
            api,
            NodeLock(store.locks, ttl_s=node_lock_timeout_s),
            timeout_s=node_lock_timeout_s,
            clock=clock,
            call_timeout_s=call_timeout_s,
            rng=rng,
            wakeups=wakeups,
        )
        self.timed_locker = TimedNodeLocker(api, timed_lock, clock=clock, call_timeout_s=call_timeout_s)
        """Cambricon's ``cambricon.com/dsmlu.lock``, for pods given devices of a vendor with that lock kind."""
        self._inflight: dict[str, tuple[asyncio.Lock, int]] = {}
        self.claim_ttl_s = 2 * call_timeout_s + 1.0
        """How long a claim holds after its re-check before the pod patch: longer than the patch and the Binding
        can take. The first claim adds the bind's lock wait and the lock's calls. A bind whose replica died holds
        the pod's devices that long at most; then a retry takes the claim over."""

    async def bind(self, args: ExtenderBindingArgs) -> BindResult:
        """Bind the pod (see the module docstring); never raises for expected failures."""
        pod_key = args.pod_key
        async with self._one_at_a_time(args.pod_uid):
            pod: Mapping[str, Any] | None = None
            try:
                result, pod = await self._bind(args)
            except BindFailed as f:
                result = BindResult(f.outcome, str(f))
            except LockTimeoutError as e:
                result = BindResult(BindOutcome.LOCK_TIMEOUT, f"bind {pod_key} to {args.node}: {e}")
            except VgpuError as e:
                result = BindResult(BindOutcome.ERROR, f"bind {pod_key} to {args.node}: {e}")
        self._report(args, result, pod)
        return result

    # ---- the steps -----------------------------------------------------------------------------------------

    async def _bind(self, args: ExtenderBindingArgs) -> tuple[BindResult, Mapping[str, Any] | None]:
        ns, name, node = args.pod_namespace, args.pod_name, args.node
        token = secrets.token_hex(8)
        started = await self._start(args, token)
        if not isinstance(started, _Started):
            return started
        alloc, pod, wait = started.claim.allocation, started.pod, started.wait
        claim = started.claim
        if claim.took_over:
            logger.warning("bind took over an expired claim", extra={"pod": f"{ns}/{name}", "node": node})

        held = await self._lock(args, alloc, token, wait)

        try:
            inventory, named = None, pod
            if needs_inventory(alloc.devices, self._vendors):  # a vendor's annotations name registered details
                inventory = await self._store.inventory.get(node)
                if named is None:  # and the containers' names: read the pod (Enflame's DRS pods only)
                    named = await self._read_pod(ns, name)
            annos = allocation_annotations(
                node, alloc.devices, alloc.mig, int(self._clock()), self._vendors, pod=named, inventory=inventory
            )
            if not await self._bind_annotated(pod, started.resource_version, args, annos, token):
                # a concurrent bind of this pod got there first
                await self._finish(args, token)
                await self._release_if_settled(args, held)
                return BindResult(BindOutcome.ALREADY_BOUND), pod
        except BindingUnknown as e:
            # maybe bound: keep lock, reservation and claim (a retry takes it over once it expires)
            raise BindFailed(BindOutcome.ERROR, str(e)) from e
        except BaseException:
            await self._undo(args, alloc, held, token)
            raise
        await self._finish(args, token)
        return BindResult(BindOutcome.BOUND), pod

    def _wait(self, gang: bool) -> _Wait:
        """How long the bind waits for a busy node lock, and how often it retries (None: backoff). PodGroup members
        retry every 100 ms until --node-lock-retry-timeout (0 disables that, as in HAMi)."""
        if gang and self._pod_group_wait_s > 0:
            return self._pod_group_wait_s, POD_GROUP_RETRY_S
        return self._lock_wait_s, None

    def _claim_ttl(self, wait: _Wait) -> float:
        return wait[0] + 2 * self._call_timeout_s + self.claim_ttl_s

    async def _start(
        self, args: ExtenderBindingArgs, token: str
    ) -> _Started | tuple[BindResult, Mapping[str, Any] | None]:
        """Claim the pod's record and learn the pod (:class:`_Started`), or the bind's result when it ends here.

        A plain reservation is claimed first; when it carries the filter's hint (:mod:`services.extender.bindhint`)
        the pod is not read: its patch is guarded by the hint's resourceVersion. Without a hint the pod is read
        under the claim. Anything else (no record, another node's, another bind's, bound, confirmed) reads the pod
        first and then claims, as a bind always did."""
        uid, node = args.pod_uid, args.node
        normal = self._wait(False)
        claim = await self._store.reservations.claim(uid, node, token, self._claim_ttl(normal), only_reserved=True)
        if isinstance(claim, ClaimRefused):
            return await self._read_then_claim(args, token)
        hint = parse_bind_hint(claim.hint)
        if hint is not None:
            wait = self._wait(hint.pod_group)
            await self._extend(args, claim, token, wait, normal)
            return _Started(claim, None, hint.resource_version, wait)
        try:
            pod = await self._api.get_pod(args.pod_namespace, args.pod_name, timeout_s=self._call_timeout_s)
            bound = check_pod(pod, args)
        except BaseException as e:
            await self._drop_claimed(claim.allocation, token)  # it was a plain reservation: what _drop_unowned drops
            if isinstance(e, NotFoundError):
                raise BindFailed(BindOutcome.POD_GONE, f"pod {args.pod_key} not found") from None
            raise
        if bound:
            await self._finish(args, token)
            return BindResult(BindOutcome.ALREADY_BOUND), pod
        wait = self._wait(is_pod_group_member(pod))
        await self._extend(args, claim, token, wait, normal)
        return _Started(claim, pod, resource_version_of(pod), wait)

    async def _extend(self, args: ExtenderBindingArgs, claim: Claimed, token: str, wait: _Wait, was: _Wait) -> None:
        """Extend the claim (made for ``was``) to a gang's wait; a store error drops it (kept, it refused retries)."""
        if wait == was:
            return
        try:
            if await self._store.reservations.check_claim(args.pod_uid, args.node, token, self._claim_ttl(wait)):
                return
        except BaseException:
            await self._drop_claimed(claim.allocation, token)
            raise
        raise claim_lost(args)

    async def _read_then_claim(
        self, args: ExtenderBindingArgs, token: str
    ) -> _Started | tuple[BindResult, Mapping[str, Any] | None]:
        """The pod's record is not a plain reservation on this node: read the pod, check it, then claim."""
        ns, name, uid, node = args.pod_namespace, args.pod_name, args.pod_uid, args.node
        try:
            pod = await self._api.get_pod(ns, name, timeout_s=self._call_timeout_s)
        except NotFoundError:
            await self._drop_unowned(uid, ns, node)
            raise BindFailed(BindOutcome.POD_GONE, f"pod {ns}/{name} not found") from None
        try:
            if check_pod(pod, args):
                return BindResult(BindOutcome.ALREADY_BOUND), pod
        except BindFailed:
            await self._drop_unowned(uid, ns, node)
            raise
        wait = self._wait(is_pod_group_member(pod))
        claim = await self._store.reservations.claim(uid, node, token, self._claim_ttl(wait))
        if isinstance(claim, ClaimRefused):
            if claim.reason == "absent" and not requests_devices(pod, self._vendors):
                await create_binding(
                    self._api, args, timeout_s=self._call_timeout_s, allocated_keys=self._allocated_keys
                )
                return BindResult(BindOutcome.PLAIN), pod
            raise claim_refused(args, claim)
        return _Started(claim, pod, resource_version_of(pod), wait)

    async def _lock(self, args: ExtenderBindingArgs, alloc: Allocation, token: str, wait: _Wait) -> _Held:
        """Take the node locks the pod's devices need (:func:`lock_kinds`): HAMi's ``hami.io/mutex.lock`` when a
        vendor of the pod uses it, Cambricon's ``cambricon.com/dsmlu.lock`` when one uses that, none otherwise. On
        failure nothing stays held and the claimed reservation is dropped."""
        kinds = lock_kinds(alloc.devices, self._vendors)
        node, ns, name = args.node, args.pod_namespace, args.pod_name
        wait_s, retry_s = wait
        hami: HeldNodeLock | None = None
        timed: HeldTimedLock | None = None
        try:
            if NodeLockKind.HAMI in kinds:
                if self._on_lock_queue is not None and retry_s is None:
                    self._on_lock_queue(alloc.pod_uid)
                try:
                    hami = await self.locker.acquire(node, ns, name, wait_s=wait_s, retry_every_s=retry_s)
                except LockTimeoutError:
                    if self._on_lock_wait is not None and retry_s is None:
                        self._on_lock_wait(wait_s, True)
                    raise
                if self._on_lock_wait is not None and retry_s is None:
                    self._on_lock_wait(hami.waited_s, False)
            if NodeLockKind.CAMBRICON in kinds:
                timed = await self.timed_locker.acquire(node, wait_s=wait_s)
        except BaseException as e:
            if hami is not None:
                await self.locker.release(hami)
            await self._drop_claimed(alloc, token)
            if isinstance(e, NotFoundError):
                raise BindFailed(BindOutcome.NODE_GONE, f"node {node} not found") from None
            raise
        held = _Held(hami, timed)
        if self._metrics is not None and (hami is not None or timed is not None):
            self._metrics.node_lock_wait.observe(held.waited_s)
        return held

    async def _release_locks(self, held: _Held) -> None:
        if held.timed is not None:
            await self.timed_locker.release(held.timed)
        if held.hami is not None:
            await self.locker.release(held.hami)

    async def _release_if_settled(self, args: ExtenderBindingArgs, held: _Held) -> None:
        """This bind took the node lock for a pod another bind has bound meanwhile. While the device plugin has
        not settled that pod, the lock is the one it allocates through: keep it (the plugin or the informer
        releases it). Once settled, nobody else would: give it back, or it stays until ``--node-lock-timeout``."""
        if held.hami is None and held.timed is None:
            return
        try:
            pod = await self._api.get_pod(args.pod_namespace, args.pod_name, timeout_s=self._call_timeout_s)
        except NotFoundError:
            await self._release_locks(held)
            return
        except VgpuError:
            return  # unknown: keep it; the informer's lock timeout is the backstop
        if holder_is_done(pod):
            await self._release_locks(held)

    async def _finish(self, args: ExtenderBindingArgs, token: str) -> None:
        """The Binding exists: the record becomes ``bound`` and the claim goes (best effort: the informer confirms
        the record from the pod's annotations either way)."""
        try:
            await self._store.reservations.finish_claim(args.pod_uid, args.node, token)
        except VgpuError as e:
            logger.warning("bind claim not finished", extra={"pod": args.pod_key, "error": str(e)})

    async def _bind_annotated(
        self,
        pod: Mapping[str, Any] | None,
        resource_version: str,
        args: ExtenderBindingArgs,
        annos: Mapping[str, str],
        token: str,
    ) -> bool:
        """Create the Binding carrying every allocation annotation and the label, guarded by the pod's UID and
        ``resource_version``, while this bind's claim still owns the pod's record (re-checked just before each
        attempt). ``pod`` None: not read; the filter saw it at ``resource_version`` with no allocation, so a
        Binding at that version finds none either. A stale version (the pod changed, or the hint was stale) reads
        the pod, checks it, and tries again at its version.

        True when this Binding bound the pod; False when the pod was found bound to this node by another bind
        (a concurrent bind of the same pod). ``BindFailed(NOT_OWNER)`` when the claim was lost or another
        decision's allocation is on the pod."""
        ns, name = args.pod_namespace, args.pod_name
        labels = allocation_labels(args.node)
        for _ in range(BINDING_ATTEMPTS):
            if not await self._store.reservations.check_claim(args.pod_uid, args.node, token, self.claim_ttl_s):
                raise claim_lost(args)
            foreign = "" if pod is None else foreign_allocation(pod, annos, self._allocated_keys)
            if foreign:
                raise BindFailed(
                    BindOutcome.NOT_OWNER, f"pod {ns}/{name} already carries another bind's allocation ({foreign})"
                )
            try:
                return await create_binding(
                    self._api,
                    args,
                    timeout_s=self._call_timeout_s,
                    allocated_keys=self._allocated_keys,
                    resource_version=resource_version,
                    annotations=annos,
                    labels=labels,
                )
            except StaleVersionError:
                pod = await self._read_pod(ns, name)
                if check_pod(pod, args):
                    return False
                resource_version = resource_version_of(pod)
        raise ConflictError(f"pod {ns}/{name} kept changing while it was bound")

    async def _read_pod(self, ns: str, name: str) -> KubeObject:
        try:
            return await self._api.get_pod(ns, name, timeout_s=self._call_timeout_s)
        except NotFoundError:
            raise BindFailed(BindOutcome.POD_GONE, f"pod {ns}/{name} not found") from None

    # ---- undo ----------------------------------------------------------------------------------------------

    async def _undo(self, args: ExtenderBindingArgs, alloc: Allocation, held: _Held, token: str) -> None:
        """Reverse order, each step only what this bind holds itself: the node lock (by owner and token), then the
        reservation and its quota while the claim still holds. The pod was not written (its annotations travel
        with the Binding, which failed). Best effort."""
        await self._release_locks(held)
        await self._drop_claimed(alloc, token)

    async def _drop_unowned(self, uid: str, namespace: str, node: str) -> None:
        """The pod is gone or bound elsewhere: drop its plain reservation on ``node`` and the quota charge (never
        a record a bind owns or the informer confirmed: that is theirs). Best effort."""
        try:
            if await self._store.reservations.release_unowned(uid, node) is True:
                await self._store.quota.refund(namespace, uid)
        except VgpuError as e:
            logger.warning("bind: reservation not released", extra={"pod_uid": uid, "node": node, "error": str(e)})

    async def _drop_claimed(self, alloc: Allocation, token: str) -> None:
        """Release the reservation and refund its quota charge while this bind's claim owns it. Best effort (the
        informer collects leftovers)."""
        try:
            if await self._store.reservations.release_claimed(alloc.pod_uid, alloc.node, token):
                await self._store.quota.refund(alloc.namespace, alloc.pod_uid)
        except VgpuError as e:
            logger.warning(
                "bind undo: reservation not released",
                extra={"pod_uid": alloc.pod_uid, "node": alloc.node, "error": str(e)},
            )

    # ---- bookkeeping ---------------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _one_at_a_time(self, pod_uid: str) -> AsyncIterator[None]:
        """Serialise concurrent binds of the same pod in this process (a retried request overlapping the first)."""
        lock, users = self._inflight.get(pod_uid, (asyncio.Lock(), 0))
        self._inflight[pod_uid] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._inflight[pod_uid]
            if users <= 1:
                del self._inflight[pod_uid]
            else:
                self._inflight[pod_uid] = (lock, users - 1)

    def _report(self, args: ExtenderBindingArgs, result: BindResult, pod: Mapping[str, Any] | None) -> None:
        if self._metrics is not None:
            self._metrics.bind_outcomes.labels(result.outcome.value).inc()
        extra = {"pod": args.pod_key, "pod_uid": args.pod_uid, "node": args.node, "outcome": result.outcome.value}
        event: PodEvent
        if result.outcome.success:
            logger.info("pod bound", extra=extra)
            if result.outcome is BindOutcome.ALREADY_BOUND:
                return
            event = bind_success_event(args.node, args.pod_namespace, args.pod_name)
        else:
            logger.info("bind failed", extra={**extra, "error": result.error})
            event = bind_failure_event(result.error)
        if self._events is not None:
            target = pod if pod is not None else pod_ref(args.pod_namespace, args.pod_name, args.pod_uid)
            self._events.submit(target, [event])


@dataclass(frozen=True, slots=True)
class _Started:
    """A bind that owns the pod's record: ``pod`` as read (None: not read, the reservation's hint vouched for it),
    ``resource_version`` the pod's patch is guarded by, ``wait`` its node-lock wait and retry period."""

    claim: Claimed
    pod: Mapping[str, Any] | None
    resource_version: str
    wait: _Wait


@dataclass(frozen=True, slots=True)
class _Held:
    """The node locks one bind holds (None: that kind was not needed)."""

    hami: HeldNodeLock | None
    timed: HeldTimedLock | None

    @property
    def waited_s(self) -> float:
        return sum(h.waited_s for h in (self.hami, self.timed) if h is not None)
