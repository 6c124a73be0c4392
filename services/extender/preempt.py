"""Preemption that understands device shares (docs/preemption.md).

Two ways in, because kube-scheduler v1.36 calls an extender's ``preemptVerb`` only with the candidates its own dry
run found, and that dry run (``SelectVictimsOnNode``: its filter plugins, never the extenders') finds none when
only device shares are short: the device resources are ``ignoredByScheduler``, its filters pass with or without
the lower-priority pods, and a node whose every victim is reprieved is no candidate.

* ``POST /preempt`` (:meth:`Preemptor.handle`): kube-scheduler found victims for its own resources (CPU,
  memory...). On each of its candidate nodes the victims it chose are kept, and the lower-priority pods whose
  devices must also go are added (``ProcessPreemption`` accepts any pod of the node by UID); a node where no set
  makes room for the pod's devices is dropped. Only the best node by kube-scheduler's own rules is answered, and
  the devices are held for the pod there (below).
* **Our own preemption** (:meth:`Preemptor.consider`): ``/filter`` found no node for a pod of positive priority
  that may preempt. Off the request path, the victims are chosen on the candidate nodes, the devices held for the
  pod, the victims marked ``DisruptionTarget`` and deleted, Events recorded, and the pod nominated
  (``status.nominatedNodeName``), as kube-scheduler's ``actuatePodPreemption`` does. kube-scheduler keeps that
  nomination: its own preemption attempt ends in an error status without a result, which leaves it unchanged.

**The hold.** The pod's reservation is made at once with the victims' charges counted as freed
(``Reservations.reserve(victims=...)``); their usage stays until the informer releases them as they go, so no
lower-priority pod filtered meanwhile takes the room. ``/filter`` answers the pod "waiting for N preempted pod(s)"
until the victims have left (:meth:`Preemptor.waiting`), then its node as usual.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web
from prometheus_client import Counter

from vgpu_scheduler.services.extender.snapshot import SnapshotCache
from vgpu_scheduler.shared.codec.gang import pod_group_name
from vgpu_scheduler.shared.codec.resources import ResourceRequestError
from vgpu_scheduler.shared.config import ExtenderSettings
from vgpu_scheduler.shared.domain.allocation import Allocation
from vgpu_scheduler.shared.domain.model import PodConstraints, PodRequest
from vgpu_scheduler.shared.domain.preempt import VictimSet
from vgpu_scheduler.shared.domain.scoring import Policies, effective_policy
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.errors import DecodeError, VgpuError
from vgpu_scheduler.shared.k8s.objects import pod_ref
from vgpu_scheduler.shared.preemption import (
    PodLister,
    Preemption,
    hold_devices,
    may_preempt,
    placed_pods,
    plan_preemption,
    pod_priority,
    terminating_on,
)
from vgpu_scheduler.shared.protocol.events import EventType
from vgpu_scheduler.shared.protocol.preemption import parse_preemption_args, preemption_result
from vgpu_scheduler.shared.runtime import cancel_until_done
from vgpu_scheduler.shared.store import QuotaExceeded, Reserved
from vgpu_scheduler.shared.vendors.pods import decode_vendor_constraints, vendors_pod_request

if TYPE_CHECKING:
    from vgpu_scheduler.services.extender.deps import ExtenderDeps

logger = logging.getLogger(__name__)

COOLDOWN_S = 10.0
"""A pod is considered for our own preemption at most once in this time per replica (kube-scheduler retries it),
measured on the event loop's clock (the simulator's simulated one)."""
MAX_RUNNING = 4
"""Preemptions worked out at once per replica; more unschedulable pods wait for the next retry."""
RECENT_PODS_S = 5.0
"""How long one list of the cluster's pods serves the preemptions worked out here (:class:`RecentPods`)."""
JSON = "application/json"


def _annotations(pod: Mapping[str, Any]) -> dict[str, str]:
    meta = pod.get("metadata")
    ann = meta.get("annotations") if isinstance(meta, Mapping) else None
    return {str(k): str(v) for k, v in ann.items()} if isinstance(ann, Mapping) else {}


def _meta(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = pod.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class Unplaced:
    """A pod ``/filter`` found no node for, as ``/filter`` read it: its object, requests and constraints, the
    candidate nodes kube-scheduler sent, and its bind hint."""

    pod: Mapping[str, Any]
    request: PodRequest
    constraints: PodConstraints
    names: Sequence[str]
    bind_hint: str


class Cooldown:
    """Admits a pod at most once per ``seconds`` (kube-scheduler retries it), on the running loop's clock (the
    simulator's simulated one); forgets pods admitted longer ago once it remembers many."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._recent: dict[str, float] = {}

    def admit(self, uid: str) -> bool:
        now = asyncio.get_running_loop().time()
        if now - self._recent.get(uid, -self.seconds) < self.seconds:
            return False
        self._recent[uid] = now
        if len(self._recent) > 10_000:
            self._recent = {k: t for k, t in self._recent.items() if now - t < self.seconds}
        return True


class RecentPods:
    """The cluster's pods for the preemptions worked out at once here: one list serves every caller for
    ``max_age_s`` (on a full cluster of lower-priority pods each preemption would otherwise list every pod). A pod
    bound since the list is no victim (its record's charges stay counted: the hold only errs on the safe side); one
    deleted since fails its eviction harmlessly. Once stale the list is let go (thousands of decoded pods are not
    kept between preemptions)."""

    def __init__(self, list_pods: PodLister, max_age_s: float) -> None:
        self._list_pods = list_pods
        self.max_age_s = max_age_s
        self._listing: asyncio.Task[Sequence[Mapping[str, Any]]] | None = None
        self._at = 0.0

    async def get(self) -> Sequence[Mapping[str, Any]]:
        now = asyncio.get_running_loop().time()
        task = self._listing
        stale = task is None or (
            task.done() and (task.cancelled() or task.exception() is not None or now - self._at > self.max_age_s)
        )
        if stale:
            self._at = now
            task = self._listing = asyncio.get_running_loop().create_task(self._fetch(), name="preemption-pods")
        assert task is not None
        return await asyncio.shield(task)  # a caller cancelled does not cancel the list the others await

    async def _fetch(self) -> Sequence[Mapping[str, Any]]:
        pods = await self._list_pods()
        listing = self._listing
        asyncio.get_running_loop().call_later(self.max_age_s, self._let_go, listing)
        return pods

    def _let_go(self, listing: asyncio.Task[Sequence[Mapping[str, Any]]] | None) -> None:
        if self._listing is listing:
            self._listing = None


class Preemptor:
    """Device-aware preemption for one extender replica (module docstring)."""

    def __init__(self, settings: ExtenderSettings, deps: ExtenderDeps, cache: SnapshotCache) -> None:
        self._deps = deps
        self._store = deps.store
        self._api = deps.api
        self._cache = cache
        self._vendors = deps.vendor_set
        self._policies = Policies(node=settings.node_policy, gpu=settings.gpu_policy)
        self._cooldown = Cooldown(COOLDOWN_S)
        self._owner = deps.instance_id
        self._tasks: set[asyncio.Task[None]] = set()
        self._pods = RecentPods(lambda: placed_pods(self._api), RECENT_PODS_S)
        self.victims = Counter(
            "vgpu_preemption_victims_total",
            "Pods evicted so that a higher-priority pod's device share fits, by who evicted them",
            ["by"],
            registry=deps.registry,
        )
        self.attempts = Counter(
            "vgpu_preemption_attempts_total",
            "Preemptions worked out, by outcome",
            ["outcome"],
            registry=deps.registry,
        )

    async def aclose(self) -> None:
        """Cancel the preemptions still being worked out (the replica is stopping)."""
        await cancel_until_done(list(self._tasks))

    async def idle(self) -> None:
        """Wait until no preemption is being worked out here (the simulator's kube-scheduler, which shares this
        process, waits for them so that a run does not depend on timing)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # ---- /filter's side ----------------------------------------------------------------------------------------

    async def waiting(self, pod_uid: str, node: str) -> int:
        """How many pods preempted for ``pod_uid``'s hold on ``node`` still hold their devices (0: go ahead)."""
        return await self._store.reservations.preemption_waiting(pod_uid, node)

    def consider(self, unplaced: Unplaced) -> None:
        """``/filter`` found no node for the pod: preempt for it off the request path, if it may and no attempt for
        it ran in the last :data:`COOLDOWN_S` here. Never waits, never raises."""
        pod = unplaced.pod
        priority = pod_priority(pod)
        uid = str(_meta(pod).get("uid") or "")
        if priority <= 0 or not uid or not may_preempt(pod) or len(self._tasks) >= MAX_RUNNING:
            return
        if pod_group_name(pod) is not None:
            return  # a gang member: evicting for one member cannot tell whether the gang can be whole (docs)
        if not self._cooldown.admit(uid):
            return
        task = asyncio.get_running_loop().create_task(
            self._preempt(
                pod,
                request=unplaced.request,
                constraints=unplaced.constraints,
                names=list(unplaced.names),
                bind_hint=unplaced.bind_hint,
                priority=priority,
            ),
            name=f"preempt:{uid}",
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _preempt(
        self,
        pod: Mapping[str, Any],
        *,
        request: PodRequest,
        constraints: PodConstraints,
        names: list[str],
        bind_hint: str,
        priority: int,
    ) -> None:
        meta = _meta(pod)
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        uid = str(meta.get("uid"))
        try:
            if not await self._store.reservations.begin_preemption(uid, self._owner, COOLDOWN_S):
                self.attempts.labels("elsewhere").inc()
                return  # another replica is on it
            outcome = await self._attempt(
                pod, request=request, constraints=constraints, names=names, bind_hint=bind_hint, priority=priority
            )
            if outcome != "preempted":
                # nobody evicted: the right goes back, so that the pod's next try (this replica's cooldown
                # permitting) is not refused because of an attempt that changed nothing
                await self._store.reservations.end_preemption(uid, self._owner)
        except VgpuError as e:
            self.attempts.labels("error").inc()
            logger.warning("preemption failed", extra={"pod": key, "error": str(e)})
        except Exception:
            self.attempts.labels("error").inc()
            logger.exception("preemption failed", extra={"pod": key})

    async def _attempt(
        self,
        pod: Mapping[str, Any],
        *,
        request: PodRequest,
        constraints: PodConstraints,
        names: list[str],
        bind_hint: str,
        priority: int,
    ) -> str:
        """One preemption attempt; its outcome (the ``vgpu_preemption_attempts_total`` label)."""
        meta = _meta(pod)
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        status = pod.get("status") if isinstance(pod.get("status"), Mapping) else {}
        assert isinstance(status, Mapping)
        nominated = status.get("nominatedNodeName")
        if (
            isinstance(nominated, str)
            and nominated
            and terminating_on(await self._api.list_pods(node_name=nominated), nominated)
        ):
            return self._outcome("victims_terminating")  # an earlier preemption for it is under way
        found = await self._plan(pod, request, constraints, names, priority)
        if found.best is None:
            logger.info(
                "preemption found no victim set",
                extra={"pod": key, "priority": priority, "reasons": dict(sorted(found.reasons.items())[:20])},
            )
            return self._outcome("no_victims")
        if not await self._hold(pod, constraints, found.best, bind_hint):
            return self._outcome("hold_refused")
        await self._evict(pod, found.best, by="extender")
        await self._api.patch_pod_status(
            str(meta.get("namespace")), str(meta.get("name")), {"nominatedNodeName": found.best.node}
        )
        return self._outcome("preempted")

    def _outcome(self, outcome: str) -> str:
        self.attempts.labels(outcome).inc()
        return outcome

    async def _plan(
        self,
        pod: Mapping[str, Any],
        request: PodRequest,
        constraints: PodConstraints,
        names: Sequence[str],
        priority: int,
        *,
        required: Mapping[str, Sequence[str]] | None = None,
    ) -> Preemption:
        snaps: dict[str, NodeSnapshot] = {}
        for n in names:
            snap = self._cache.get(n)
            if snap is not None:
                snaps[n] = snap
        return await plan_preemption(
            self._store,
            self._api,
            request,
            constraints,
            snaps,
            priority=priority,
            policies=self._policies,
            config=self._deps.nvidia,
            rules=self._vendors.rules,
            required=required,
            list_all=self._pods.get,
        )

    async def _hold(self, pod: Mapping[str, Any], constraints: PodConstraints, best: VictimSet, bind_hint: str) -> bool:
        """Reserve the devices of ``best.decision`` for the pod, its victims' charges counted as freed."""
        meta = _meta(pod)
        namespace, name, uid = str(meta.get("namespace")), str(meta.get("name")), str(meta.get("uid"))
        decision = best.decision
        allocation = Allocation(
            pod_uid=uid,
            namespace=namespace,
            name=name,
            node=decision.node,
            devices=decision.devices,
            charges=decision.charges,
            mig=decision.mig,
        )
        held = await hold_devices(
            self._store,
            allocation,
            victims=[v.uid for v in best.victims],
            mutex=effective_policy(self._policies, constraints).mutex,
            mem_limit_factor=self._deps.nvidia.memory_factor,
            vendor_names=self._vendors.names,
            epoch=self._cache.epoch,
            hint=bind_hint,
        )
        if isinstance(held, QuotaExceeded):
            logger.info("preemption: the pod's quota refuses it", extra={"pod": f"{namespace}/{name}"})
            return False
        if not isinstance(held, Reserved):
            logger.info("preemption: the hold was refused", extra={"pod": f"{namespace}/{name}", "answer": repr(held)})
            return False
        await self._cache.refresh([decision.node])
        logger.info(
            "devices held for a preempting pod",
            extra={
                "pod": f"{namespace}/{name}",
                "node": decision.node,
                "devices": [[d.uuid for d in ctr] for ctr in decision.devices],
                "victims": [v.key for v in best.victims],
                "pdb_violations": best.pdb_violations,
            },
        )
        return True

    async def _evict(self, pod: Mapping[str, Any], best: VictimSet, *, by: str) -> None:
        """Mark each victim ``DisruptionTarget``, record who preempted it for whom, and delete it (its own grace)."""
        meta = _meta(pod)
        preemptor = f"{meta.get('namespace')}/{meta.get('name')}"
        uid = str(meta.get("uid") or "")
        devices = sorted({c.uuid for v in best.victims for c in v.charges})
        for v in best.victims:
            ref = pod_ref(v.namespace, v.name, v.uid)
            message = (
                f"Preempted by pod {preemptor} (uid {uid}, priority {pod_priority(pod)}) on node {best.node}: "
                f"its GPU share is needed ({', '.join(devices)})"
            )
            try:
                await self._api.patch_pod_status(
                    v.namespace,
                    v.name,
                    {
                        "conditions": [
                            {
                                "type": "DisruptionTarget",
                                "status": "True",
                                "reason": "PreemptionByScheduler",
                                "message": f"{self._api.component}: preempting to accommodate a higher priority pod",
                                "lastTransitionTime": _now_rfc3339(),
                            }
                        ]
                    },
                )
            except VgpuError as e:
                logger.info("preemption: could not mark the victim", extra={"victim": v.key, "error": str(e)})
            await self._api.delete_pod(v.namespace, v.name, uid=v.uid)
            self.victims.labels(by).inc()
            await self._post(ref, "Preempted", message)
            logger.info("pod preempted", extra={"victim": v.key, "preemptor": preemptor, "node": best.node})
        victims = ", ".join(v.key for v in best.victims)
        await self._post(
            pod_ref(str(meta.get("namespace")), str(meta.get("name")), uid),
            "Preempting",
            f"Preempting {victims} on node {best.node} to free {', '.join(devices)}"
            + (f" ({best.pdb_violations} PodDisruptionBudget violation(s))" if best.pdb_violations else ""),
        )

    async def _post(self, ref: Mapping[str, Any], reason: str, message: str) -> None:
        try:
            await self._api.pod_event(ref, reason=reason, message=message, event_type=EventType.NORMAL)
        except VgpuError as e:
            logger.info("preemption: event not recorded", extra={"reason": reason, "error": str(e)})

    # ---- kube-scheduler's preemptVerb ------------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.Response:
        """``POST /preempt``: ``ExtenderPreemptionArgs`` in, ``ExtenderPreemptionResult`` out (module docstring)."""
        body = await request.read()
        try:
            args = parse_preemption_args(body)
        except DecodeError as e:
            logger.info("bad preemption request", extra={"error": str(e)})
            return web.Response(status=400, text=f"{e}\n")
        kube = {node: (list(v.uids), v.pdb_violations) for node, v in args.victims.items()}
        try:
            request_ = vendors_pod_request(args.pod, self._vendors)
            constraints = decode_vendor_constraints(_annotations(args.pod), self._vendors)
        except (ResourceRequestError, DecodeError) as e:
            self.attempts.labels("invalid_pod").inc()
            logger.info("preemption for a pod we cannot place", extra={"error": str(e)})
            return web.Response(body=preemption_result({}), content_type=JSON)
        if not request_.any or pod_group_name(args.pod) is not None:
            # no device asked for, or a gang member (its group is kube-scheduler's to judge): its answer stands
            self.attempts.labels("passthrough").inc()
            return web.Response(body=preemption_result(kube), content_type=JSON)
        priority = pod_priority(args.pod)
        found = await self._plan(
            args.pod,
            request_,
            constraints,
            list(kube),
            priority,
            required={node: uids for node, (uids, _) in kube.items()},
        )
        answer: dict[str, tuple[list[str], int]] = {}
        for node, (uids, violations) in kube.items():
            vs = found.sets.get(node)
            if vs is not None:
                extra = [v for v in vs.victims if v.uid not in uids]
                answer[node] = (uids + [v.uid for v in extra], violations + sum(v.pdb_violating for v in extra))
            elif found.reasons.get(node) == "the pod fits without evicting anyone":
                answer[node] = (uids, violations)  # kube-scheduler's victims are enough for our devices too
        key = f"{_meta(args.pod).get('namespace')}/{_meta(args.pod).get('name')}"
        best = found.best if found.best is not None and found.best.node in answer else None
        if best is not None:
            # answer only the node whose devices we hold: kube-scheduler must pick it
            answer = {best.node: answer[best.node]}
            if await self._hold(args.pod, constraints, best, ""):
                self.victims.labels("kube-scheduler").inc(len(answer[best.node][0]))
        self.attempts.labels("answered" if answer else "no_victims").inc()
        logger.info(
            "preemption answered",
            extra={
                "pod": key,
                "nodes_in": len(kube),
                "nodes_out": sorted(answer),
                "reasons": dict(sorted(found.reasons.items())[:20]),
            },
        )
        return web.Response(body=preemption_result(answer), content_type=JSON)
