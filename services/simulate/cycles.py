"""One workload pod's way through the driver, step by step: the API server's side of its creation (Priority
admission, the webhook's mutation, validation), one kube-scheduler scheduling cycle (its own filters, then the
extender's ``/filter``), one binding cycle (``/bind``), the device plugin's settle, and the record of its eviction.

:class:`PodCycles` holds what these steps share (the API server and extender clients, the ledger of kube-scheduler's
cache, the contention counters) and answers a scheduling cycle with a :data:`CycleOutcome`. The order in which pods
take these steps (the scheduling queue, backoffs, the unschedulable pool, gang passes, the kubelet of deleted pods)
is :class:`~services.simulate.driver.Driver`'s. The labels of a :class:`PodResult` (effective policies, the
scheduler's annotations) are here too.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from vgpu_scheduler.services.simulate.admission import Admit
from vgpu_scheduler.services.simulate.controllers import ControllerSpec, owner_of
from vgpu_scheduler.services.simulate.disruption import ScheduledEviction
from vgpu_scheduler.services.simulate.documents import POD_GROUP_APIS
from vgpu_scheduler.services.simulate.kcm import DEFAULT_CONTROLLER_DELAY_S, ControllerManager
from vgpu_scheduler.services.simulate.kubehttp import DriverError, Extenders, KubeHttp
from vgpu_scheduler.services.simulate.nodeside import NodeSide
from vgpu_scheduler.services.simulate.pools import ALL_VENDORS
from vgpu_scheduler.services.simulate.priority import Forbidden, PriorityAdmission
from vgpu_scheduler.services.simulate.report import ADMISSION, PodResult, Preemption
from vgpu_scheduler.services.simulate.timing import LOCK_WAIT_THRESHOLD_S, Contention, SchedulerTiming, error_kind
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec.gang import gang_min_count, pod_group_name
from vgpu_scheduler.shared.codec.resources import pod_requests_managed_resource
from vgpu_scheduler.shared.codec.selectors import decode_gpu_policy, decode_node_policy
from vgpu_scheduler.shared.domain.model import GpuPolicy, NodePolicy, NvidiaConfig
from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.k8s.nodefit import REASON_SEPARATOR, Ledger, kube_filters, pod_key, pod_request
from vgpu_scheduler.shared.k8s.podvalidation import is_extended, pod_invalid
from vgpu_scheduler.shared.preemption import may_preempt, pod_priority
from vgpu_scheduler.shared.protocol.extender import refused_nodes
from vgpu_scheduler.shared.vendors.nvidia import NvidiaVendor
from vgpu_scheduler.shared.vendors.pods import vendors_manage_pod
from vgpu_scheduler.shared.vendors.registry import Vendors

KubeObject = dict[str, Any]

EVICTED = "evicted through the Eviction API"
"""A pod's reason once the Eviction API deleted it."""

_PREEMPTED_BY = re.compile(r"^Preempted by pod (\S+) ")
"""The extender's ``Preempted`` Event on a victim names the pod it was preempted for."""


@dataclass(frozen=True, slots=True)
class Defaults:
    """The cluster's default policies (the extender's flags), for labelling results by effective policy."""

    node_policy: NodePolicy
    gpu_policy: GpuPolicy


def effective_policies(pod: Mapping[str, Any], defaults: Defaults) -> tuple[str, str]:
    """The pod's node and GPU policy: its ``hami.io/*-scheduler-policy`` annotations, else the defaults."""
    annos = (pod.get("metadata") or {}).get("annotations") or {}
    node, gpu = defaults.node_policy.value, str(defaults.gpu_policy)
    try:
        if keys.NODE_SCHEDULER_POLICY in annos:
            node = decode_node_policy(str(annos[keys.NODE_SCHEDULER_POLICY])).value
        if keys.GPU_SCHEDULER_POLICY in annos:
            gpu = str(decode_gpu_policy(str(annos[keys.GPU_SCHEDULER_POLICY])))
    except DecodeError:
        pass  # the extender answers such a pod with an Error; label it with the defaults
    return node, gpu


Hook = Callable[[KubeObject], Awaitable[None]]


@dataclass(slots=True)
class Queued:
    """One workload pod inside the driver's scheduling queue."""

    index: int
    original: KubeObject
    created: KubeObject | None = None
    attempts: int = 0
    retried: bool = False
    last_error: dict[str, str] = field(default_factory=dict)
    result: PodResult | None = None
    last_try: float = 0.0
    """When its last scheduling attempt was (the driver's clock), for the backoff left when it is requeued."""
    replaces: str | None = None
    """A controller's replacement: the ``namespace/name`` of the pod it replaces."""
    replaced_by: str | None = None
    """Deleted and replaced by its controller: the replacement's ``namespace/name``."""
    deleted: bool = False
    """Deleted before it was bound: no more scheduling cycles."""


@dataclass(frozen=True, slots=True)
class Unschedulable:
    """No node this time: the pod waits in kube-scheduler's unschedulable pool for a cluster event."""

    result: PodResult
    by_extender: bool = True
    """Refused by the extender (kube-scheduler records no rejecting plugin, so any event requeues it), else by
    kube-scheduler's own NodeResourcesFit or NodeAffinity (requeued when a pod is deleted)."""


@dataclass(frozen=True, slots=True)
class Assume:
    node: str


@dataclass(frozen=True, slots=True)
class Bound:
    node: str


@dataclass(frozen=True, slots=True)
class Retry:
    reasons: dict[str, str]


CycleOutcome = PodResult | Unschedulable | Assume | Bound | Retry
"""What one scheduling cycle gives: a final result, unschedulable for now, the node chosen (the binding cycle
follows), a pod found bound already, or a failure to retry after a backoff."""


class PodCycles:
    """The steps of one pod (see the module docstring), over the clients and state they share.

    ``vendors``: the enabled vendors (None: NVIDIA only, with ``cfg``); ``before_filter(pod)`` runs before each
    ``/filter``, ``after_settle(pod)`` after the device plugin settled a pod, ``after_terminate(pod)`` after the
    kubelet deleted one for good; ``idle()`` waits until the extender has no preemption or gang check under way.
    """

    def __init__(
        self,
        kube: KubeHttp,
        extenders: Extenders,
        admit: Admit,
        *,
        cfg: NvidiaConfig,
        defaults: Defaults,
        before_filter: Hook | None = None,
        after_settle: Hook | None = None,
        timing: SchedulerTiming | None = None,
        clock: str = "real",
        vendors: Vendors | None = None,
        known_vendors: Vendors | None = None,
        priority: PriorityAdmission | None = None,
        pod_groups: Sequence[Mapping[str, Any]] = (),
        idle: Callable[[], Awaitable[None]] | None = None,
        after_terminate: Hook | None = None,
        controllers: Sequence[ControllerSpec] = (),
        budgets: Sequence[Mapping[str, Any]] = (),
        evictions: Sequence[ScheduledEviction] = (),
        controller_delay_s: float = DEFAULT_CONTROLLER_DELAY_S,
    ) -> None:
        self.kube = kube
        self.kcm = ControllerManager(kube, controllers=controllers, budgets=budgets, delay_s=controller_delay_s)
        """kube-controller-manager: the workload controllers and the disruption controller (:mod:`.kcm`)."""
        self.scheduled_evictions = tuple(evictions)
        """Evictions to request during a run (the workload's ``Eviction`` documents)."""
        self.eviction_requests: list[EvictionRequest] = []
        """Every eviction requested through the Eviction API (:meth:`~.driver.Driver.evict`), in order."""
        self.replacements: list[PodResult] = []
        """The results of the pods controllers created in place of deleted ones, in creation order."""
        self._evicted: Hook | None = None
        """While a run is under way: hands a pod the Eviction API deleted (its state before) to the run's kubelet and
        controllers."""
        self._started = 0.0
        """When the run began (the driver's clock)."""
        self.priority = priority or PriorityAdmission()
        """The API server's Priority admission over the workload's PriorityClasses."""
        self.pod_groups = [dict(g) for g in pod_groups]
        """PodGroups to create before the first pod (the workload's)."""
        self.gangs: dict[tuple[str, str], int] = {}
        for g in self.pod_groups:
            n = gang_min_count(g) if g.get("apiVersion") in POD_GROUP_APIS else None
            if n is not None:
                self.gangs[(str(g["metadata"].get("namespace") or "default"), str(g["metadata"]["name"]))] = n
        """minCount of each native gang (kube-scheduler v1.36 schedules them in group passes)."""
        self.idle = idle
        """Waits until the extender has no preemption or gang check under way (embedded runs)."""
        self.after_terminate = after_terminate
        """Runs after the kubelet deleted a pod for good (embedded runs: until the informer released it)."""
        self.moves_in_background = False
        """The extender may move pods by itself for a pod it found no node for (``--auto-defrag``): the driver then
        waits for it (``idle``) after each such pod, as after one that may preempt."""
        self.defrag_moves: Sequence[Mapping[str, Any]] = ()
        """The moves the extender made by itself (embedded runs with ``--auto-defrag``: the extender's own list)."""
        self.on_unschedulable: Hook | None = None
        """Runs when the extender found no node for a pod, before the next pod is taken: where a defragmentation
        planner makes its moves (:meth:`~.driver.Driver.evict` for each, docs/simulate.md)."""
        self.preemptions: list[Preemption] = []
        """Every pod evicted by a preemption, in order."""
        self.vendors = vendors
        """The enabled vendors (None: NVIDIA only, with ``cfg``): "is this pod ours", each device plugin's check."""
        self.extenders = extenders
        self.admit = admit
        self.cfg = cfg
        self.defaults = defaults
        self.before_filter = before_filter
        self.after_settle = after_settle
        self.timing = timing or SchedulerTiming()
        self.contention = Contention(clock=clock)
        self.known_vendors = known_vendors if known_vendors is not None else ALL_VENDORS
        """Every vendor family this build knows (enabled or not): whose HAMi device plugin serves a resource."""
        served = vendors if vendors is not None else Vendors((NvidiaVendor(cfg),))
        self.managed: frozenset[str] = frozenset(n for v in served for n in v.resources.all)
        """kube-scheduler's ``managedResources`` with ``ignoredByScheduler``: every enabled vendor's resource names
        (NodeResourcesFit leaves them to the extender)."""
        self.node_side = NodeSide(kube, cfg=cfg, vendors=vendors, managed=self.managed, known=self.known_vendors)
        """The kubelet and device plugins of the nodes pods are bound to (:mod:`.nodeside`)."""
        self._nodes: list[KubeObject] | None = None
        self._ledger: Ledger | None = None
        self._in_flight = 0

    async def nodes(self) -> list[KubeObject]:
        if self._nodes is None:
            self._nodes = await self.kube.list_nodes()
        return self._nodes

    async def ledger(self) -> Ledger:
        """What kube-scheduler's cache knows the nodes' pods request: the pods bound when the run starts, then the
        pods it assumes on their chosen node (see :class:`~shared.k8s.nodefit.Ledger`)."""
        if self._ledger is None:
            self._ledger = Ledger(await self.nodes(), await self.kube.list_pods())
        return self._ledger

    def _result(
        self, q: Queued, node: str | None, annotations: Mapping[str, str], reasons: Mapping[str, str]
    ) -> PodResult:
        pod = q.created or q.original
        meta = q.original["metadata"]
        node_policy, gpu_policy = effective_policies(pod, self.defaults)
        try:
            gpu = (
                vendors_manage_pod(pod, self.vendors)
                if self.vendors is not None
                else pod_requests_managed_resource(pod, self.cfg)
            )
        except DecodeError:
            gpu = True
        ns, name = str(meta.get("namespace") or "default"), str(meta["name"])
        other = tuple(n for n in sorted(pod_request(pod).scalar) if is_extended(n) and n not in self.managed)
        return PodResult(
            ns,
            name,
            node,
            dict(annotations),
            dict(reasons),
            node_policy,
            gpu_policy,
            gpu,
            other,
            priority=pod_priority(pod),
            pod_group=pod_group_name(pod),
            owner=owner.label if (owner := owner_of(pod)) is not None else None,
            replaces=q.replaces,
        )

    def _gang_of(self, q: Queued) -> tuple[str, str] | None:
        """The native gang the pod belongs to (None: scheduled alone)."""
        pod = q.created or q.original
        name = pod_group_name(pod)
        if name is None:
            return None
        key = (str(pod["metadata"].get("namespace") or "default"), name)
        return key if key in self.gangs else None

    def _may_preempt(self, q: Queued) -> bool:
        pod = q.created or q.original
        return pod_priority(pod) > 0 and may_preempt(pod) and self._gang_of(q) is None

    async def _record_eviction(
        self,
        last: KubeObject,
        q: Queued | None,
        finish: Callable[[Queued, PodResult], None],
        at_s: float,
    ) -> None:
        """A pod the kubelet terminated after its deletion: who preempted it (the ``Preempted`` Event the extender
        recorded on it), in :attr:`preemptions`, and a workload pod's result. A pod evicted through the Eviction API
        is not a preemption: only its result says so."""
        meta = last["metadata"]
        node = str((last.get("spec") or {}).get("nodeName") or "")
        if evicted_by_api(last):
            if q is not None and q.result is not None and q.result.placed:
                why = {node: f"{EVICTED} (terminated after its grace period)"}
                finish(
                    q, replace(self._result(q, None, q.result.annotations, why), evicted=True, via_eviction_api=True)
                )
            return
        events = await self.kube.list_events(
            str(meta["namespace"]), field_selector=f"involvedObject.name={meta['name']},reason=Preempted"
        )
        by = None
        for e in events:
            found = _PREEMPTED_BY.match(str(e.get("message") or ""))
            if found:
                by = found.group(1)
        self.preemptions.append(
            Preemption(
                pod=pod_key(last),
                node=node,
                by=by,
                priority=pod_priority(last),
                at_s=round(at_s, 3),
                workload=q is not None,
            )
        )
        if q is not None and q.result is not None and q.result.placed:
            reason = f"preempted by {by}" if by else "deleted"
            result = self._result(
                q, None, q.result.annotations, {node: f"{reason} (terminated after its grace period)"}
            )
            finish(q, replace(result, evicted=True, preempted_by=by))

    async def evict(self, namespace: str, name: str, *, by: str = "") -> EvictionRequest:
        """Request the eviction of ``namespace/name`` through the Eviction API (PodDisruptionBudgets honoured by the
        API server), as ``kubectl drain`` or the defrag executor does; recorded in :attr:`eviction_requests`. Called
        during a run (a scheduled eviction, the ``on_unschedulable`` hook), an evicted pod then terminates after its
        grace period and its controller, if any, creates its replacement, which is scheduled as any new pod."""
        at_s = round(asyncio.get_running_loop().time() - self._started, 3)
        try:
            before: KubeObject | None = await self.kube.get_pod(namespace, name)
        except DriverError as e:
            if e.status != 404:
                raise
            before = None  # the API server's answer below says so
        status, message = await self.kube.evict_pod(namespace, name)
        request = EvictionRequest(f"{namespace}/{name}", at_s, by, status, message)
        self.eviction_requests.append(request)
        if request.evicted and before is not None and self._evicted is not None:
            await self._evicted(before)
        return request

    async def _admit_and_create(self, q: Queued) -> PodResult | None:
        """The API server's side of a new pod: Priority admission, the webhook's mutation, validation, then the
        pod is created (``q.created``). The refusal as the pod's result, or None."""
        prioritized = self.priority.admit(q.original)
        if isinstance(prioritized, Forbidden):
            return self._result(q, None, {}, {ADMISSION: prioritized.message})
        admitted = await self.admit(prioritized)
        if admitted.pod is None:
            return self._result(q, None, {}, {ADMISSION: admitted.message})
        invalid = pod_invalid(admitted.pod)  # the API server validates the mutated pod before storing it
        if invalid is not None:
            return self._result(q, None, {}, {ADMISSION: invalid})
        q.created = await self.kube.create_pod(admitted.pod)
        return None

    async def _scheduling_cycle(self, q: Queued) -> CycleOutcome:
        """One scheduling cycle of a created pod: a final result, unschedulable for now, the node chosen (the
        binding cycle follows), a pod found bound already (after a bind that timed out on our side), or a
        failure to retry after a backoff."""
        assert q.created is not None
        if q.attempts:
            meta = q.created["metadata"]
            current = await self.kube.get_pod(meta["namespace"], meta["name"])
            node = (current.get("spec") or {}).get("nodeName")
            if node:  # a bind that timed out on our side went through after all: the pod is bound
                return Bound(str(node))
            q.created = current
        q.attempts += 1
        q.last_try = asyncio.get_running_loop().time()
        created = q.created
        # kube-scheduler's own filters first; the extender sees only the nodes they leave
        names, refused = kube_filters(created, await self.nodes())
        candidates, misfits = (await self.ledger()).filter(created, names, self.managed)
        refused.update((node, REASON_SEPARATOR.join(reasons)) for node, reasons in misfits.items())
        if not candidates:
            result = self._result(q, None, {}, refused or {ADMISSION: "no candidate node"})
            return Unschedulable(result, by_extender=False)
        if self.before_filter is not None:
            await self.before_filter(created)
        try:
            answer = await self.extenders.filter(created, candidates)
        except DriverError as e:
            if not e.timed_out:
                raise
            self.contention.extender_timeouts += 1
            return Retry({ADMISSION: f"filter timed out: {e}"})
        if answer.get("Error"):
            return self._result(q, None, {}, {ADMISSION: f"filter error: {answer['Error']}"})
        chosen = answer.get("NodeNames") or []
        if not chosen:
            refused.update(refused_nodes(answer))
            return Unschedulable(self._result(q, None, {}, refused or {ADMISSION: "no candidate node"}))
        return Assume(str(chosen[0]))

    async def _bind(self, pod: KubeObject, node: str) -> str | None:
        """POST /bind; None when bound, else the error (an ``Error`` answer or a timeout)."""
        loop = asyncio.get_running_loop()
        began = loop.time()
        self.contention.binds += 1
        try:
            error: str | None = await self.extenders.bind(pod, node) or None
        except DriverError as e:
            if not e.timed_out:
                raise
            self.contention.extender_timeouts += 1
            error = f"timed out after {self.timing.http_timeout_s:g}s"
        finally:
            self._in_flight -= 1
        took = loop.time() - began
        if took > LOCK_WAIT_THRESHOLD_S:
            self.contention.lock_waits += 1
            self.contention.lock_wait_s += took
            self.contention.lock_wait_max_s = max(self.contention.lock_wait_max_s, took)
        if error is not None:
            self.contention.bind_failures += 1
            kind = error_kind(error)
            self.contention.bind_errors[kind] = self.contention.bind_errors.get(kind, 0) + 1
        return error

    async def _settled(self, q: Queued, node: str) -> PodResult:
        """The device plugin's Allocate, ``allocate_latency_s`` after the Binding; the pod's result."""
        assert q.created is not None
        meta = q.created["metadata"]
        await asyncio.sleep(self.timing.allocate_latency_s)
        settled, rejected = await self.node_side.settle(meta["namespace"], meta["name"], node)
        if self.after_settle is not None:
            await self.after_settle(settled)
        if rejected is not None:  # the kubelet rejected it: bound, but never running, holding nothing
            (await self.ledger()).forget(settled)
            return self._result(q, None, {}, {node: rejected})
        return self._result(q, node, scheduler_annotations(q.original, settled), {})

    async def _release_node_lock(self, node: str, ns: str, name: str) -> None:
        """HAMi's ``ReleaseNodeLock`` (:meth:`.NodeSide._release_node_lock`), kept here for its callers."""
        await self.node_side._release_node_lock(node, ns, name)


@dataclass(frozen=True, slots=True)
class EvictionRequest:
    """One eviction requested through the Eviction API: the pod, when (seconds after the run began), who asked, and
    the API server's answer (``201`` evicted, ``429`` a PodDisruptionBudget forbids it, ``404`` no such pod)."""

    pod: str
    at_s: float
    by: str
    status: int
    message: str = ""

    @property
    def evicted(self) -> bool:
        return self.status == 201

    def to_json(self) -> dict[str, Any]:
        return {
            "pod": self.pod,
            "at_s": self.at_s,
            "by": self.by,
            "evicted": self.evicted,
            "status": self.status,
            "message": self.message,
        }


def as_evicted(pod: Mapping[str, Any]) -> KubeObject:
    """``pod`` with the ``DisruptionTarget`` condition the Eviction API sets (for a pod deleted at once)."""
    status = dict(pod.get("status") or {})
    condition = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}
    status["conditions"] = [*(status.get("conditions") or []), condition]
    return {**pod, "status": status}


def evicted_by_api(pod: Mapping[str, Any]) -> bool:
    """The pod carries the ``DisruptionTarget`` condition the Eviction API sets (``EvictionByEvictionAPI``)."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "DisruptionTarget" and c.get("reason") == "EvictionByEvictionAPI" for c in conditions)


def scheduler_annotations(original: Mapping[str, Any], final: Mapping[str, Any]) -> dict[str, str]:
    """Every ``hami.io/*`` annotation on the final pod that the workload pod did not carry itself."""
    before = (original.get("metadata") or {}).get("annotations") or {}
    after = (final.get("metadata") or {}).get("annotations") or {}
    return {k: str(v) for k, v in after.items() if k.startswith("hami.io/") and k not in before}
