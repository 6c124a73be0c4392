"""``POST /filter``: plan from the process-local snapshot, then commit the reservation atomically in Redis.

Plan, then commit (docs/store.md, Consistency, hami-wire §5.1 with differences 3 and 6):

1. Parse the body (Go JSON rules, 1 MiB cap) and the pod's requests; a pod that asks for nothing we manage
   passes through unchanged. A managed resource with a bad value (``gpumem: 20Gi``, ``gpu: -1``: the webhook
   was bypassed) → every candidate refused with the message saying what to write, never a pass-through to a
   node without the GPU. Bad input, an invalid policy or weights annotation → an ``Error`` answer.
2. Full ``Nodes`` (autoscaler simulation): evaluate the given nodes' annotations with zero usage, reserve
   nothing, answer the best node plus the failed ones.
3. ``NodeNames``: refuse with an ``Error`` while the snapshot or the store is not ready (never guess). A pod that
   already holds a record (a re-filter, a duplicate from a second scheduler, a proxy retry) keeps it: its node is
   answered again when it is a candidate; otherwise a plain reservation is given back (atomically, only while no
   bind owns it) and the pod re-planned, and one a bind owns is never moved (an ``Error``). Then read the
   namespace quota and plan with the core.
4. Commit: charge the quota (when the namespace has limits; refused → ``ResourceQuotaNotFit`` everywhere), then
   reserve the devices with the store's capacity-checked script. A conflict refunds the quota, re-reads the
   node and re-plans, a bounded number of times. No API-server call on this path: events go to the sink.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from aiohttp import web

from vgpu_scheduler.services.extender.bindhint import bind_hint_for
from vgpu_scheduler.services.extender.deps import ExtenderDeps
from vgpu_scheduler.services.extender.events import pod_ref
from vgpu_scheduler.services.extender.metrics import ExtenderMetrics, FilterOutcome
from vgpu_scheduler.services.extender.nodes import NODE_UNREGISTERED, node_name, vendor_inventory_from_node
from vgpu_scheduler.services.extender.snapshot import SnapshotCache
from vgpu_scheduler.shared.codec.gang import coscheduling_group, pod_group_name
from vgpu_scheduler.shared.codec.resources import ResourceRequestError
from vgpu_scheduler.shared.config import ExtenderSettings
from vgpu_scheduler.shared.domain.model import Allocation, PodConstraints, PodRequest, QuotaState, Reason
from vgpu_scheduler.shared.domain.plan import Decision, Failure, plan, plan_ranked, plan_tiers
from vgpu_scheduler.shared.domain.scoring import Policies, effective_policy
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.errors import DecodeError, PermanentError, TransientError, VgpuError
from vgpu_scheduler.shared.protocol.constraints import pod_constraints
from vgpu_scheduler.shared.protocol.events import (
    filter_failure_events,
    filter_success_event,
    invalid_request_event,
    reason_types,
)
from vgpu_scheduler.shared.protocol.extender import (
    EMPTY_BODY_MESSAGE,
    MAX_BODY_BYTES,
    ExtenderArgs,
    ExtenderFilterResult,
    parse_extender_args,
)
from vgpu_scheduler.shared.store import (
    ConflictDimension,
    Owned,
    PodQuotaCharge,
    QuotaExceeded,
    ReserveConflict,
    Reserved,
    Unsettled,
)
from vgpu_scheduler.shared.vendors.pods import vendors_pod_request

if TYPE_CHECKING:
    from vgpu_scheduler.services.extender.gang import GangKeeper
    from vgpu_scheduler.services.extender.preempt import Preemptor

logger = logging.getLogger(__name__)

DEFAULT_MAX_ATTEMPTS = 5
_MAX_LOCAL_REPLANS = 50
"""Re-plans because the chosen node changed in this process before the commit (progress elsewhere; bounded)."""
JSON = "application/json"
_SEND_TURNS = 2
"""Event-loop turns a Redis read started as a task needs to be on the wire (redis-py 8; more do no harm)."""


@dataclass(frozen=True, slots=True)
class _Pod:
    """What the filter needs of the pod, decoded once."""

    namespace: str
    name: str
    uid: str
    request: PodRequest
    constraints: PodConstraints
    ref: Mapping[str, Any]
    bind_hint: str = ""
    """Stored with the reservation for the bind (:mod:`services.extender.bindhint`); empty: the bind reads the pod."""
    obj: Mapping[str, Any] | None = None
    """The pod as kube-scheduler sent it (for preemption, off the request path)."""
    group: str | None = None
    """The native PodGroup it belongs to (``spec.schedulingGroup.podGroupName``; docs/gangs.md)."""
    label_group: str | None = None
    """Else its coscheduling group (label ``scheduling.x-k8s.io/pod-group``)."""

    @property
    def gang(self) -> tuple[str, bool] | None:
        """(group, whether it is a coscheduling group), or None."""
        if self.group is not None:
            return self.group, False
        return (self.label_group, True) if self.label_group is not None else None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class _Kept:
    """The pod already holds devices on ``node``, a candidate: answer it again (design: ownership)."""

    node: str


@dataclass(frozen=True, slots=True)
class _Waiting:
    """The pod's devices on ``node`` are held for it by a preemption whose ``victims`` pods have not left yet."""

    node: str
    victims: int


class FilterError(VgpuError):
    """A filter call that ends in an ``Error`` answer; ``outcome`` says which kind for the metrics."""

    def __init__(self, message: str, outcome: FilterOutcome) -> None:
        super().__init__(message)
        self.outcome = outcome


def _annotations(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = pod.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    if annotations is None:
        return {}
    if not isinstance(annotations, dict):
        raise DecodeError("extender args", "Pod.metadata.annotations must be an object")
    return annotations


def body_too_large_message(limit: int = MAX_BODY_BYTES) -> str:
    return f"extender args: request body exceeds {limit} bytes"


class FilterHandler:
    """The ``/filter`` endpoint. ``handle`` is the aiohttp handler; ``filter`` the same on a parsed request."""

    def __init__(
        self,
        settings: ExtenderSettings,
        deps: ExtenderDeps,
        metrics: ExtenderMetrics,
        cache: SnapshotCache,
        *,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        preemptor: Preemptor | None = None,
        gangs: GangKeeper | None = None,
    ) -> None:
        self._preemptor = preemptor
        self._gangs = gangs
        self._settings = settings
        self._deps = deps
        self._store = deps.store
        self._nvidia = deps.nvidia
        self._vendors = deps.vendor_set
        self._rules = self._vendors.rules
        self._allocated_keys = tuple(dict.fromkeys(v.allocated_key for v in self._vendors))
        self._metrics = metrics
        self._cache = cache
        self._policies = Policies(node=settings.node_policy, gpu=settings.gpu_policy)
        self._max_attempts = max(1, max_attempts)
        self._bind_aware = settings.bind_aware_placement
        self._node_locks: collections.defaultdict[str, asyncio.Lock] = collections.defaultdict(asyncio.Lock)

    async def handle(self, request: web.Request) -> web.Response:
        """Read the body (HTTP 400 only for a missing body, as HAMi) and answer an ``ExtenderFilterResult``."""
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            self._metrics.filter_outcome(FilterOutcome.BAD_REQUEST)
            return _answer(ExtenderFilterResult.from_error(body_too_large_message()))
        if not body:
            self._metrics.filter_outcome(FilterOutcome.BAD_REQUEST)
            return web.Response(status=400, text=EMPTY_BODY_MESSAGE + "\n")
        return _answer(await self.filter_body(body))

    async def filter_body(self, body: bytes) -> ExtenderFilterResult:
        """Decode ``body`` and filter; every failure becomes an ``Error`` answer (the process keeps serving)."""
        try:
            args = parse_extender_args(body)
        except DecodeError as e:
            self._metrics.filter_outcome(FilterOutcome.BAD_REQUEST)
            logger.info("bad filter request", extra={"error": str(e)})
            return ExtenderFilterResult.from_error(str(e))
        return await self.filter(args)

    async def filter(self, args: ExtenderArgs) -> ExtenderFilterResult:
        """Answer one parsed ``ExtenderArgs``."""
        try:
            try:
                pod = self._decode_pod(args)
            except ResourceRequestError as e:
                return self._invalid_request(args, e)
            if pod is None:
                self._metrics.filter_outcome(FilterOutcome.PASSTHROUGH)
                return ExtenderFilterResult.passthrough(args)
            if args.nodes is not None:
                return self._simulate(pod, args.nodes)
            if args.node_names is None:
                raise FilterError("extender args: neither NodeNames nor Nodes given", FilterOutcome.BAD_REQUEST)
            return await self._schedule(pod, args.node_names)
        except FilterError as e:
            self._metrics.filter_outcome(e.outcome)
            logger.info("filter refused", extra={"outcome": e.outcome.value, "error": str(e)})
            return ExtenderFilterResult.from_error(str(e))
        except DecodeError as e:
            self._metrics.filter_outcome(FilterOutcome.BAD_REQUEST)
            logger.info("bad filter request", extra={"error": str(e)})
            return ExtenderFilterResult.from_error(str(e))
        except TransientError as e:
            self._metrics.filter_outcome(FilterOutcome.NOT_READY)
            logger.warning("filter failed: store unavailable", extra={"error": str(e)})
            return ExtenderFilterResult.from_error(f"extender not ready: {e}")
        except PermanentError as e:
            self._metrics.filter_outcome(FilterOutcome.ERROR)
            logger.error("filter failed", extra={"error": str(e)})
            return ExtenderFilterResult.from_error(f"extender error: {e}")

    # ---- decoding ----------------------------------------------------------------------------------------------

    def _decode_pod(self, args: ExtenderArgs) -> _Pod | None:
        """The pod's identity, requests and constraints; None when it requests no managed resource."""
        request = vendors_pod_request(args.pod, self._vendors)
        if not request.any:
            return None
        namespace, name, uid = args.pod_namespace, args.pod_name, args.pod_uid
        constraints = pod_constraints(_annotations(args.pod), self._vendors)  # the webhook's decoding too
        metadata = args.pod.get("metadata")
        rv = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
        ref = pod_ref(namespace, name, uid, rv if isinstance(rv, str) else "")
        hint = bind_hint_for(args.pod, self._allocated_keys)
        return _Pod(
            namespace,
            name,
            uid,
            request,
            constraints,
            ref,
            hint,
            args.pod,
            pod_group_name(args.pod),
            coscheduling_group(args.pod),
        )

    def _invalid_request(self, args: ExtenderArgs, error: ResourceRequestError) -> ExtenderFilterResult:
        """A pod whose GPU request cannot be honoured as written: every candidate refused with what to write.

        The webhook denies such a pod at creation; this is the same refusal when it was bypassed (not installed,
        or a pod created before it was). Nothing is reserved; the Warning event carries the message."""
        if args.node_names is not None:
            names = list(args.node_names)
        elif args.nodes is not None:
            names = [node_name(node) for node in args.nodes]
        else:
            raise FilterError("extender args: neither NodeNames nor Nodes given", FilterOutcome.BAD_REQUEST)
        message = str(error)
        self._metrics.filter_outcome(FilterOutcome.INVALID_REQUEST)
        key = f"{args.pod_namespace}/{args.pod_name}"
        logger.info("pod refused: invalid GPU request", extra={"pod": key, "nodes": len(names), "error": message})
        ref = pod_ref(args.pod_namespace, args.pod_name, args.pod_uid, "")
        self._deps.event_sink.submit(
            ref, [invalid_request_event(message)], once_key=(args.pod_uid or key, "invalid_request", message)
        )
        return ExtenderFilterResult.failure(dict.fromkeys(names, message))

    # ---- full Nodes: simulation, nothing reserved ---------------------------------------------------------------

    def _simulate(self, pod: _Pod, nodes: Sequence[Mapping[str, Any]]) -> ExtenderFilterResult:
        snaps: list[NodeSnapshot] = []
        objects: dict[str, Mapping[str, Any]] = {}
        failed: dict[str, str] = {}
        for node in nodes:
            name = node_name(node)
            objects[name] = node
            try:
                snaps.append(NodeSnapshot(vendor_inventory_from_node(node, self._vendors, self._deps.clock())))
            except DecodeError as e:
                logger.debug("simulated node unregistered", extra={"node": name, "error": str(e)})
                failed[name] = NODE_UNREGISTERED
        result = plan(
            pod.request, pod.constraints, snaps, policies=self._policies, config=self._nvidia, rules=self._rules
        )
        self._metrics.filter_outcome(FilterOutcome.SIMULATED)
        if isinstance(result, Failure):
            failed.update(result.reasons)
            self._count_reasons(failed)
            logger.info("simulated filter: no node fits", extra={"pod": pod.key, "nodes": len(nodes)})
            return ExtenderFilterResult.failure(failed)
        for snap in snaps:
            if snap.name == result.node:
                continue
            alone = plan(
                pod.request, pod.constraints, [snap], policies=self._policies, config=self._nvidia, rules=self._rules
            )
            if isinstance(alone, Failure):
                failed.update(alone.reasons)
        logger.info("simulated filter", extra={"pod": pod.key, "node": result.node, "nodes": len(nodes)})
        return ExtenderFilterResult(nodes=[objects[result.node]], failed_nodes=failed)

    # ---- NodeNames: plan and commit ----------------------------------------------------------------------------

    async def _schedule(self, pod: _Pod, names: Sequence[str]) -> ExtenderFilterResult:
        reason = self._cache.not_ready_reason()
        if reason is not None:
            raise FilterError(f"extender not ready: {reason}", FilterOutcome.NOT_READY)
        if not pod.uid:
            raise FilterError("extender args: Pod.metadata.uid is missing", FilterOutcome.BAD_REQUEST)
        gang = pod.gang
        if gang is not None and self._gangs is not None:
            why = await self._gangs.blocked(pod.namespace, gang[0], label=gang[1])
            if why is not None:  # the group cannot be placed whole now: reserve nothing for it (docs/gangs.md)
                self._metrics.filter_outcome(FilterOutcome.UNSCHEDULABLE)
                return ExtenderFilterResult.failure(dict.fromkeys(names, why))
        # Plan first: most pods hold no record and their namespace no quota, and then the reservation checks that
        # in the same atomic step (one round trip); a pod no node fits reads its context now (it may hold a record).
        planned = self._plan(pod, names, None)
        quota_state: QuotaState | None = None
        first: tuple[Decision | Failure, int | None] | None
        missing: list[str] = []
        fresh = isinstance(planned[0], Decision)
        if isinstance(planned[0], Decision):
            first = (planned[0], self._cache.generation(planned[0].node))
        else:
            quota_state, context_plan, missing = await self._first_plan(pod, names, planned)
            if isinstance(context_plan, _Kept):
                return self._kept(pod, context_plan.node)
            if isinstance(context_plan, _Waiting):
                return self._waiting(pod, names, context_plan)
            first = context_plan
        retries = replans = 0
        while True:
            if first is not None:
                (result, planned_at), first = first, None
            else:
                result, missing = self._plan(pod, names, quota_state)
                planned_at = self._cache.generation(result.node) if isinstance(result, Decision) else None
            if isinstance(result, Failure):
                failed = dict(result.reasons)
                failed.update(dict.fromkeys(missing, NODE_UNREGISTERED))
                return self._unschedulable(pod, names, failed, FilterOutcome.UNSCHEDULABLE, retries)
            unsettled = False
            async with self._node_locks[result.node]:
                # Requests of this process commit one node at a time: one that planned on an older view of the node
                # (another request here reserved on it meanwhile, or the feed moved it) plans again instead of
                # losing a race it can see coming. Races with other replicas are settled by the store's script.
                if self._cache.generation(result.node) != planned_at and replans < _MAX_LOCAL_REPLANS:
                    replans += 1
                    continue
                outcome = await self._commit(pod, result, quota_state, fresh=fresh)
                fresh = False  # once the context is known (no record, no quota), reserve as usual
                if isinstance(outcome, Unsettled):
                    unsettled = True  # the pod holds a record or its namespace a quota: read them (below)
                elif isinstance(outcome, Reserved):
                    return self._scheduled(pod, result, outcome, retries)
                elif isinstance(outcome, Owned):  # a concurrent filter or bind of this pod got there first
                    return self._owned(pod, outcome.node, outcome.state.value, names)
                elif isinstance(outcome, QuotaExceeded):
                    failed = dict.fromkeys(names, Reason.RESOURCE_QUOTA_NOT_FIT.value)
                    logger.debug(
                        "quota refused the charge",
                        extra={
                            "pod": pod.key,
                            "vendor": outcome.vendor,
                            "dimension": outcome.dimension.value,
                            "limit": outcome.limit,
                        },
                    )
                    return self._unschedulable(pod, names, failed, FilterOutcome.QUOTA_EXCEEDED, retries)
                else:
                    await self._conflict(pod, outcome, charged=quota_state is not None)
            if unsettled:
                quota_state, context_plan, missing = await self._first_plan(pod, names)
                if isinstance(context_plan, _Kept):
                    return self._kept(pod, context_plan.node)
                if isinstance(context_plan, _Waiting):
                    return self._waiting(pod, names, context_plan)
                first = context_plan
                continue
            if retries + 1 >= self._max_attempts:
                self._metrics.filter_outcome(FilterOutcome.CONFLICTS)
                logger.warning(
                    "filter gave up after reservation conflicts", extra={"pod": pod.key, "attempts": retries + 1}
                )
                return ExtenderFilterResult.from_error(
                    f"reservation conflicts on {retries + 1} attempts (nodes are changing fast): retry the pod"
                )
            retries += 1
            self._metrics.reservation_retries.inc()

    async def _commit(
        self, pod: _Pod, decision: Decision, quota: QuotaState | None, *, fresh: bool = False
    ) -> Reserved | ReserveConflict | QuotaExceeded | Owned | Unsettled:
        """Charge the quota (when the namespace has limits), then reserve the devices (docs/store.md). ``fresh``:
        the pod's context was not read; reserve only if it holds no record and its namespace no quota."""
        allocation = _allocation(pod, decision)
        if quota is not None:
            owed = quota_charge(allocation, self._vendors.names)
            charge = await self._store.quota.charge(
                pod.namespace,
                pod.uid,
                owed.mem_mib,
                owed.cores_pct,
                mem_limit_factor=max(self._nvidia.memory_factor, 1),
                others=owed.others,
            )
            if isinstance(charge, QuotaExceeded):
                return charge
        # mutex (§6.4 step 7) needs idle devices: the store re-checks it atomically, as the charges cannot say so
        mutex = effective_policy(self._policies, pod.constraints).mutex
        # planned on the snapshot of one store epoch: a flush or a new Redis primary since refuses (not ready)
        epoch = self._cache.epoch
        if fresh:
            reserved = await self._store.reservations.reserve_fresh(
                allocation, mutex=mutex, epoch=epoch, hint=pod.bind_hint
            )
        else:
            reserved = await self._store.reservations.reserve(allocation, mutex=mutex, epoch=epoch, hint=pod.bind_hint)
        if isinstance(reserved, Reserved) and reserved.changed:
            self._cache.apply_local(decision, reserved.generation)
            self._cache.mark_busy(decision.node)  # its bind is coming: the next pods may prefer other nodes
        return reserved

    def _plan(self, pod: _Pod, names: Sequence[str], quota: QuotaState | None) -> tuple[Decision | Failure, list[str]]:
        """Plan on the snapshot of ``names``: nodes without a bind in flight first (``--bind-aware-placement``).
        Also returns the candidates missing from the snapshot (only with a failure: a decision needs none)."""
        decision = self._plan_ranked(pod, names, quota)
        if isinstance(decision, Decision):
            return decision, []
        none_fit = decision  # every candidate was walked: only the reasons remain to be found
        if self._bind_aware:
            free, busy, missing = self._cache.lookup_tiers(names)
            tiers = (free, busy) if busy else (free,)
        else:
            snaps, missing = self._cache.lookup(names)
            tiers = (snaps,)
        result = plan_tiers(
            pod.request,
            pod.constraints,
            tiers,
            policies=self._policies,
            quota=quota,
            config=self._nvidia,
            none_fit=none_fit,
            rules=self._rules,
        )
        return result, missing

    def _plan_ranked(self, pod: _Pod, names: Sequence[str], quota: QuotaState | None) -> Decision | bool:
        """``_plan``'s decision found by walking the cache's nodes in order of preference, as far as the first that
        fits (no per-request sort, no lookup of every name). Otherwise whether every candidate was walked: True
        when none fits (``_plan`` then only looks for the reasons), False when ``names`` repeats a name (``plan``
        counts repeats in ``passed_over``: it plans them itself)."""
        candidates = set(names)
        if len(candidates) != len(names):
            return False
        policy = effective_policy(self._policies, pod.constraints).node

        def walk(busy: bool | None) -> Decision | None:
            ranked = self._cache.ranked(policy, candidates, busy)
            return plan_ranked(
                pod.request,
                pod.constraints,
                ranked,
                policies=self._policies,
                quota=quota,
                config=self._nvidia,
                rules=self._rules,
            )

        if not self._bind_aware or self._cache.busy.isdisjoint(candidates):
            return walk(None) or True
        free = walk(False)
        if free is not None:
            return free
        taken = walk(True)
        if taken is None:
            return True
        passed = sum(1 for _ in self._cache.ranked(policy, candidates, False))  # as plan_tiers counts the free tier
        return replace(taken, passed_over=taken.passed_over + passed)

    async def _first_plan(
        self, pod: _Pod, names: Sequence[str], planned: tuple[Decision | Failure, list[str]] | None = None
    ) -> tuple[QuotaState | None, tuple[Decision | Failure, int | None] | _Kept | _Waiting | None, list[str]]:
        """Read where the pod's earlier reservation is and its namespace quota (one round trip), and plan while
        that read is in flight (unless ``planned`` already holds the plan without quota): most pods have neither,
        and then that plan stands.

        Returns the quota to plan with (None: the namespace has no limits), the plan with the chosen node's
        generation if it still holds (else None: plan again) and the candidates missing from the snapshot.
        """
        context = asyncio.create_task(
            self._store.reservations.node_and_quota(pod.uid, pod.namespace), name=f"filter-context:{pod.uid}"
        )
        try:
            if planned is None:
                # Let the task reach the socket first (redis-py takes a pooled connection, then sends: two loop
                # turns); without this the read would only be sent once planning is done, and nothing would overlap.
                for _ in range(_SEND_TURNS):
                    await asyncio.sleep(0)
                planned = self._plan(pod, names, None)
            result, missing = planned
            planned_at = self._cache.generation(result.node) if isinstance(result, Decision) else None
        finally:
            previous, quota = await context
        if previous is not None:
            kept = await self._settle_previous(pod, previous, names)
            if kept is not None:
                return None, kept, missing
            quota = await self._store.quota.get(pod.namespace)
            return (quota if quota.limited else None), None, missing
        if quota.limited:
            return quota, None, missing
        return None, (result, planned_at), missing

    async def _settle_previous(self, pod: _Pod, node: str, names: Sequence[str]) -> _Kept | _Waiting | None:
        """The pod already holds a record on ``node`` (docs/extender-bind.md, ownership): keep that decision when
        ``node`` is a registered candidate; otherwise give a plain reservation back (with its quota charge) and
        plan again. A record a bind owns is never released here: :class:`FilterError` (``owned_elsewhere``).
        A preemption hold whose victims have not left yet is kept, and the pod waits (docs/preemption.md)."""
        if self._preemptor is not None:
            victims = await self._preemptor.waiting(pod.uid, node)
            if victims:
                return _Waiting(node, victims)
        if node in names and self._cache.get(node) is not None:
            # answered again: the informer's expiry counts from now, so it cannot take the devices before the bind
            await self._store.reservations.renew(pod.uid, node)
            return _Kept(node)
        released = await self._store.reservations.release_unowned(pod.uid, node)
        if isinstance(released, Owned):
            raise self._owned_error(pod, node, released.state.value)
        if released:
            await self._store.quota.refund(pod.namespace, pod.uid)
        await self._cache.refresh([node])
        logger.debug("previous reservation dropped", extra={"pod": pod.key, "node": node})
        return None

    def _waiting(self, pod: _Pod, names: Sequence[str], waiting: _Waiting) -> ExtenderFilterResult:
        self._metrics.filter_outcome(FilterOutcome.UNSCHEDULABLE)
        text = f"waiting for {waiting.victims} preempted pod(s) to leave node {waiting.node}"
        logger.info(
            "pod waits for its preemption", extra={"pod": pod.key, "node": waiting.node, "victims": waiting.victims}
        )
        return ExtenderFilterResult.failure(dict.fromkeys(names, text))

    def _gang_fitted(self, pod: _Pod) -> None:
        gang = pod.gang
        if gang is not None and self._gangs is not None:
            self._gangs.fitted(pod.namespace, gang[0], pod.name, label=gang[1])

    def _kept(self, pod: _Pod, node: str) -> ExtenderFilterResult:
        self._gang_fitted(pod)
        self._metrics.filter_outcome(FilterOutcome.KEPT)
        logger.info("pod already holds devices: node kept", extra={"pod": pod.key, "pod_uid": pod.uid, "node": node})
        return ExtenderFilterResult.fit(node)

    def _owned(self, pod: _Pod, node: str, state: str, names: Sequence[str]) -> ExtenderFilterResult:
        """A reserve found the pod's record already owned (a concurrent duplicate of this pod won)."""
        if node in names:
            return self._kept(pod, node)
        raise self._owned_error(pod, node, state)

    @staticmethod
    def _owned_error(pod: _Pod, node: str, state: str) -> FilterError:
        return FilterError(
            f"pod {pod.key} already holds devices on node {node} ({state}), which is not among the candidate "
            "nodes: they are not moved while a bind owns them",
            FilterOutcome.OWNED_ELSEWHERE,
        )

    async def _conflict(self, pod: _Pod, conflict: ReserveConflict, *, charged: bool) -> None:
        self._metrics.reservation_conflicts.inc()
        logger.debug(
            "reservation conflict",
            extra={
                "pod": pod.key,
                "node": conflict.node,
                "dimension": conflict.dimension.value,
                "device": conflict.device,
                "detail": conflict.detail,
            },
        )
        # the quota charge is per pod UID: while a concurrent filter of the same pod holds a record, it is theirs
        if charged and await self._store.reservations.node_of(pod.uid) is None:
            await self._store.quota.refund(pod.namespace, pod.uid)
        if conflict.dimension is ConflictDimension.NODE_UNKNOWN:
            reason = await self._cache.verify()
            if reason is not None:
                raise FilterError(f"extender not ready: {reason}", FilterOutcome.NOT_READY)
        await self._cache.refresh([conflict.node])

    def _scheduled(self, pod: _Pod, decision: Decision, reserved: Reserved, retries: int) -> ExtenderFilterResult:
        self._gang_fitted(pod)
        self._metrics.filter_outcome(FilterOutcome.SCHEDULED)
        # The decision's log line and event are for people, not for kube-scheduler: they are made in the loop's next
        # turn, after the answer went out (the handler writes it in this one).
        asyncio.get_running_loop().call_soon(self._announce_scheduled, pod, decision, retries)
        return ExtenderFilterResult.fit(decision.node)

    def _announce_scheduled(self, pod: _Pod, decision: Decision, retries: int) -> None:
        logger.info(
            "pod scheduled",
            extra={
                "pod": pod.key,
                "pod_uid": pod.uid,
                "node": decision.node,
                "devices": [[d.uuid for d in ctr] for ctr in decision.devices],
                "retries": retries,
            },
        )
        # HAMi's FilteringSucceed text. The fast path stops at the first node that fits, so the counts cover the
        # nodes the policy prefers over the chosen one (none of which fit) and the chosen node itself.
        event = filter_success_event(decision.node, [(decision.node, decision.score)], decision.passed_over + 1)
        self._deps.event_sink.submit(pod.ref, [event], once_key=(pod.uid or pod.key, "scheduled", decision.node))

    def _unschedulable(
        self, pod: _Pod, names: Sequence[str], failed: dict[str, str], outcome: FilterOutcome, retries: int
    ) -> ExtenderFilterResult:
        self._metrics.filter_outcome(outcome)
        kinds = self._count_reasons(failed)
        logger.info(
            "no node fits pod",
            extra={"pod": pod.key, "pod_uid": pod.uid, "nodes": len(names), "reasons": kinds, "retries": retries},
        )
        if logger.isEnabledFor(logging.DEBUG):
            for node, text in sorted(failed.items()):
                logger.debug("node refused pod", extra={"pod": pod.key, "node": node, "reason": text})
        if outcome is FilterOutcome.UNSCHEDULABLE and self._preemptor is not None and pod.obj is not None:
            self._preemptor.consider(pod.obj, pod.request, pod.constraints, names, pod.bind_hint)
        gang = pod.gang
        if outcome is FilterOutcome.UNSCHEDULABLE and self._gangs is not None and gang is not None:
            self._gangs.failed(
                pod.namespace,
                gang[0],
                pod.name,
                ", ".join(f"{k}: {n}" for k, n in sorted(kinds.items())),
                label=gang[1],
            )
        once_key = (pod.uid or pod.key, outcome.value, ",".join(sorted(kinds)))
        if not self._deps.event_sink.suppressed(once_key):  # kube-scheduler retries: build the events once
            self._deps.event_sink.submit(pod.ref, filter_failure_events(failed, len(names)), once_key=once_key)
        return ExtenderFilterResult.failure(failed)

    def _count_reasons(self, failed: Mapping[str, str]) -> dict[str, int]:
        counts: collections.Counter[str] = collections.Counter()
        for text, nodes in collections.Counter(failed.values()).items():  # few distinct texts: parse each once
            for reason in reason_types(text):
                counts[reason] += nodes
        for reason, n in counts.items():
            self._metrics.filter_reasons.labels(reason).inc(n)
        return dict(counts)


def _allocation(pod: _Pod, decision: Decision) -> Allocation:
    return Allocation(
        pod_uid=pod.uid,
        namespace=pod.namespace,
        name=pod.name,
        node=decision.node,
        devices=decision.devices,
        charges=decision.charges,
        mig=decision.mig,
    )


def quota_charge(allocation: Allocation, vendors: Collection[str]) -> PodQuotaCharge:
    """What the allocation charges to its namespace's quota: memory and cores of its NVIDIA devices (the quota's
    ``nvidia.com/gpumem`` / ``gpucores``), then every other enabled vendor's devices by common word (that vendor's
    ``limits.<memory resource>`` / ``limits.<core resource>``); the informer records the same."""
    return PodQuotaCharge(allocation.quota_mem_mib, allocation.quota_cores_pct, allocation.quota_others_of(vendors))


def _answer(result: ExtenderFilterResult) -> web.Response:
    return web.Response(body=result.to_json(), content_type=JSON)
