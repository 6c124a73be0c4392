"""``POST /filter``: plan from the process-local snapshot, then commit the reservation atomically in Redis.

Plan, then commit (docs/store.md, Consistency, hami-wire §5.1 with differences 3 and 6):

1. Parse the body (Go JSON rules, 1 MiB cap) and the pod's requests; a pod that asks for nothing we manage
   passes through unchanged. A managed resource with a bad value (``gpumem: 20Gi``, ``gpu: -1``: the webhook
   was bypassed) → every candidate refused with the message saying what to write, never a pass-through to a
   node without the GPU. Bad input, an invalid policy or weights annotation → an ``Error`` answer.
2. Full ``Nodes`` (autoscaler simulation): evaluate the given nodes' annotations with zero usage, reserve
   nothing, answer the best node plus the failed ones.
3. ``NodeNames``: refuse with an ``Error`` while the snapshot or the store is not ready (never guess), and close the
   connection after that answer (kube-scheduler's next call may then reach another replica). A pod that
   already holds a record (a re-filter, a duplicate from a second scheduler, a proxy retry) keeps it: its node is
   answered again when it is a candidate; otherwise a plain reservation is given back (atomically, only while no
   bind owns it) and the pod re-planned, and one a bind owns is never moved (an ``Error``). Then read the
   namespace quota and plan with the core.
4. Commit: charge the quota (when the namespace has limits; refused → ``ResourceQuotaNotFit`` everywhere), then
   reserve the devices with the store's capacity-checked script. A conflict refunds the quota, re-reads the
   node and re-plans, a bounded number of times. No API-server call on this path: events go to the sink.

Parsing is :mod:`.filterpod`, planning :mod:`.filterplan`, the commit :mod:`.filtercommit`; this module is the
endpoint: it answers, retries a conflict, counts the outcomes and writes the decision's log line and events.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from aiohttp import web

from vgpu_scheduler.services.extender.deps import ExtenderDeps
from vgpu_scheduler.services.extender.filtercommit import Committer, Kept, Waiting, owned_error
from vgpu_scheduler.services.extender.filterplan import Planner
from vgpu_scheduler.services.extender.filterpod import FilterError, FilterPod, body_too_large_message, decode_pod
from vgpu_scheduler.services.extender.metrics import ExtenderMetrics, FilterOutcome
from vgpu_scheduler.services.extender.nodes import NODE_UNREGISTERED, node_name, vendor_inventory_from_node
from vgpu_scheduler.services.extender.preempt import Unplaced
from vgpu_scheduler.services.extender.snapshot import SnapshotCache
from vgpu_scheduler.shared.codec.resources import ResourceRequestError
from vgpu_scheduler.shared.config import ExtenderSettings
from vgpu_scheduler.shared.domain.model import Reason
from vgpu_scheduler.shared.domain.plan import Decision, Failure, plan
from vgpu_scheduler.shared.domain.quota import QuotaState
from vgpu_scheduler.shared.domain.scoring import Policies
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.errors import DecodeError, PermanentError, TransientError
from vgpu_scheduler.shared.k8s.objects import pod_ref
from vgpu_scheduler.shared.protocol.events import (
    filter_failure_events,
    filter_success_event,
    invalid_request_event,
    reason_types,
)
from vgpu_scheduler.shared.protocol.extender import (
    EMPTY_BODY_MESSAGE,
    ExtenderArgs,
    ExtenderFilterResult,
    parse_extender_args,
)
from vgpu_scheduler.shared.store import (
    ConflictDimension,
    Owned,
    QuotaExceeded,
    ReserveConflict,
    Reserved,
    Unsettled,
)

if TYPE_CHECKING:
    from vgpu_scheduler.services.extender.autodefrag import AutoDefrag
    from vgpu_scheduler.services.extender.gang import GangKeeper
    from vgpu_scheduler.services.extender.preempt import Preemptor

logger = logging.getLogger(__name__)

NOT_READY = "extender not ready: "
"""How every "not ready" answer begins; its HTTP connection is closed after it."""

DEFAULT_MAX_ATTEMPTS = 5
_MAX_LOCAL_REPLANS = 50
"""Re-plans because the chosen node changed in this process before the commit (progress elsewhere; bounded)."""
JSON = "application/json"


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
        defrag: AutoDefrag | None = None,
        gangs: GangKeeper | None = None,
        on_reserved: Callable[[str], None] | None = None,
    ) -> None:
        self._unplaced = defrag or preemptor
        """Told of each pod that fits nowhere: automatic defragmentation first (it preempts when no plan exists),
        else preemption."""
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
        planner = Planner(cache, self._policies, self._nvidia, self._rules, bind_aware=self._bind_aware)
        committer = Committer(
            deps.store,
            cache,
            planner,
            nvidia=self._nvidia,
            vendors=self._vendors,
            policies=self._policies,
            preemptor=preemptor,
            on_reserved=on_reserved,
        )
        # bound once: the request path calls them as it called its own methods
        self._plan = planner.plan
        self._commit = committer.commit
        self._first_plan = committer.first_plan

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
        result = await self.filter_body(body)
        response = _answer(result)
        if result.error.startswith(NOT_READY):
            # This replica cannot serve (a store it cannot reach, a snapshot not loaded): close the connection, so
            # that kube-scheduler's next call opens a new one, which the Service may send to a replica that can.
            # Kept open, kube-scheduler would send every pod here over it until this replica recovers.
            response.force_close()
        return response

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
                pod = decode_pod(args, self._vendors, self._allocated_keys)
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
            return ExtenderFilterResult.from_error(f"{NOT_READY}{e}")
        except PermanentError as e:
            self._metrics.filter_outcome(FilterOutcome.ERROR)
            logger.error("filter failed", extra={"error": str(e)})
            return ExtenderFilterResult.from_error(f"extender error: {e}")

    # ---- a request that cannot be honoured -----------------------------------------------------------------------

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
        return ExtenderFilterResult.refusal(dict.fromkeys(names, message))

    # ---- full Nodes: simulation, nothing reserved ---------------------------------------------------------------

    def _simulate(self, pod: FilterPod, nodes: Sequence[Mapping[str, Any]]) -> ExtenderFilterResult:
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

    async def _schedule(self, pod: FilterPod, names: Sequence[str]) -> ExtenderFilterResult:
        reason = self._cache.not_ready_reason()
        if reason is not None:
            raise FilterError(f"{NOT_READY}{reason}", FilterOutcome.NOT_READY)
        if not pod.uid:
            raise FilterError("extender args: Pod.metadata.uid is missing", FilterOutcome.BAD_REQUEST)
        gang = pod.gang
        if gang is not None and self._gangs is not None:
            why = await self._gangs.blocked(pod.namespace, gang[0], label=gang[1])
            if why is not None:  # the group cannot be placed whole now: reserve nothing for it (docs/gangs.md)
                self._metrics.filter_outcome(FilterOutcome.UNSCHEDULABLE)
                return ExtenderFilterResult.refusal(dict.fromkeys(names, why))
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
            if isinstance(context_plan, Kept):
                return self._kept(pod, context_plan.node)
            if isinstance(context_plan, Waiting):
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
                if logger.isEnabledFor(logging.DEBUG):  # nodes where the assignment search gave up (core.md)
                    capped = sum(1 for r in result.rejections.values() if r.search_capped)
                    if capped:
                        logger.debug("assignment search stopped at its bound", extra={"pod": pod.key, "nodes": capped})
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
                if isinstance(context_plan, Kept):
                    return self._kept(pod, context_plan.node)
                if isinstance(context_plan, Waiting):
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

    def _waiting(self, pod: FilterPod, names: Sequence[str], waiting: Waiting) -> ExtenderFilterResult:
        self._metrics.filter_outcome(FilterOutcome.UNSCHEDULABLE)
        text = f"waiting for {waiting.victims} preempted pod(s) to leave node {waiting.node}"
        logger.info(
            "pod waits for its preemption", extra={"pod": pod.key, "node": waiting.node, "victims": waiting.victims}
        )
        # FailedNodes, not unresolvable: kube-scheduler then sees the victims terminating on the nominated node and
        # leaves the nomination our preemption made (unresolvable, it would clear it)
        return ExtenderFilterResult.failure(dict.fromkeys(names, text))

    def _gang_fitted(self, pod: FilterPod) -> None:
        gang = pod.gang
        if gang is not None and self._gangs is not None:
            self._gangs.fitted(pod.namespace, gang[0], pod.name, label=gang[1])

    def _kept(self, pod: FilterPod, node: str) -> ExtenderFilterResult:
        self._gang_fitted(pod)
        self._metrics.filter_outcome(FilterOutcome.KEPT)
        logger.info("pod already holds devices: node kept", extra={"pod": pod.key, "pod_uid": pod.uid, "node": node})
        return ExtenderFilterResult.fit(node)

    def _owned(self, pod: FilterPod, node: str, state: str, names: Sequence[str]) -> ExtenderFilterResult:
        """A reserve found the pod's record already owned (a concurrent duplicate of this pod won)."""
        if node in names:
            return self._kept(pod, node)
        raise owned_error(pod, node, state)

    async def _conflict(self, pod: FilterPod, conflict: ReserveConflict, *, charged: bool) -> None:
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
                raise FilterError(f"{NOT_READY}{reason}", FilterOutcome.NOT_READY)
        await self._cache.refresh([conflict.node])

    def _scheduled(self, pod: FilterPod, decision: Decision, reserved: Reserved, retries: int) -> ExtenderFilterResult:
        self._gang_fitted(pod)
        self._metrics.filter_outcome(FilterOutcome.SCHEDULED)
        # The decision's log line and event are for people, not for kube-scheduler: they are made in the loop's next
        # turn, after the answer went out (the handler writes it in this one).
        asyncio.get_running_loop().call_soon(self._announce_scheduled, pod, decision, retries)
        return ExtenderFilterResult.fit(decision.node)

    def _announce_scheduled(self, pod: FilterPod, decision: Decision, retries: int) -> None:
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
        self, pod: FilterPod, names: Sequence[str], failed: dict[str, str], outcome: FilterOutcome, retries: int
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
        if outcome is FilterOutcome.UNSCHEDULABLE and self._unplaced is not None and pod.obj is not None:
            self._unplaced.consider(Unplaced(pod.obj, pod.request, pod.constraints, names, pod.bind_hint))
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
        return ExtenderFilterResult.refusal(failed)

    def _count_reasons(self, failed: Mapping[str, str]) -> dict[str, int]:
        counts: collections.Counter[str] = collections.Counter()
        for text, nodes in collections.Counter(failed.values()).items():  # few distinct texts: parse each once
            for reason in reason_types(text):
                counts[reason] += nodes
        for reason, n in counts.items():
            self._metrics.filter_reasons.labels(reason).inc(n)
        return dict(counts)


def _answer(result: ExtenderFilterResult) -> web.Response:
    return web.Response(body=result.to_json(), content_type=JSON)
