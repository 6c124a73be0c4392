"""The driver: plays kube-scheduler and HAMi's device plugin against real extenders and an API server.

For each workload pod, in order (:meth:`Driver.schedule`):

1. **admission** — the webhook's mutation, as the API server would apply it (difference 16): either the
   pure :func:`~shared.protocol.webhook.mutate_pod` + :func:`~shared.protocol.jsonpatch.apply_patch` (embedded runs)
   or an AdmissionReview POSTed to an extender's ``/webhook`` (a deployed extender). A denied pod is reported as
   unschedulable with the denial message;
2. the API server's **validation** of the mutated pod (:mod:`.podvalidation`): a pod it would refuse is reported
   unschedulable with its message (``Pod "x" is invalid: ...``) and never created; otherwise the pod is
   **created** in the API server (``POST pods``);
3. **kube-scheduler**: its own filters first (NodeUnschedulable, ``nodeSelector``, NodeResourcesFit:
   :mod:`.nodefit`; no node left: the pod stays Pending with kube-scheduler's reasons), then ``POST /filter`` with
   ``ExtenderArgs {"Pod": pod, "Nodes": null, "NodeNames": [...]}`` naming the nodes they left, then ``POST /bind``
   with ``ExtenderBindingArgs`` for the single node returned (assumed on it meanwhile). With several extender
   URLs, filter and bind alternate between them (any replica binds what another filtered). A failed bind is
   retried from the filter, as kube-scheduler re-queues a pod;
4. **device plugin** (after kubelet's Allocate): the pod is found as HAMi's plugin finds it, through the node's
   ``hami.io/mutex.lock`` (``GetPendingPod``, :mod:`services.simulate.devplugin`), and its to-allocate list must
   serve every container's Allocate; then ``hami.io/bind-phase: success`` on the pod, the node's
   ``hami.io/mutex.lock`` removed (owner- and resourceVersion-checked, as ``ReleaseNodeLock`` does), and the pod's
   ``status.phase: Running``; for a pod given Cambricon MLUs, Cambricon's plugin also removes its own node lock
   ``cambricon.com/dsmlu.lock``. A bind the real plugin would serve wrongly (another pod, wrong device counts) is a
   :class:`DriverError`. A pod kube-scheduler placed alone on a node whose HAMi plugin serves a resource it asks
   for (a vendor not enabled) is rejected by the kubelet. This node side is :mod:`.nodeside`;
5. optional hooks let an embedded run wait for the informer to observe the settle before the next pod, and for the
   extender's snapshot to catch up before each filter, so placements do not depend on timing;
6. **priority and preemption** (docs/simulate.md): the API server's Priority admission (:mod:`.priority`) runs before
   the webhook. A pod no node fits waits in kube-scheduler's unschedulable pool and is tried again (after its
   backoff) when a pod is deleted. When one of positive priority is refused, the driver lets the extender finish
   its own preemption (``idle``) and plays the kubelet of every pod being deleted: its grace period, then
   ``Failed``, then the final delete; the preemptor is retried then and binds to the devices held for it;
7. **gangs**: the members of a v1.36 PodGroup with ``gang.minCount`` wait until ``minCount`` of them exist; then one
   group pass filters each in turn, and binds the members that passed only when at least ``minCount`` did;
   otherwise it forgets them all (the extender, told nothing, releases their reservations itself).

Everything travels over HTTP with the exact JSON bodies the real components send (:mod:`.kubehttp`); admission is
:mod:`.admission`, the scheduler's timing and contention counters :mod:`.timing`.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from vgpu_scheduler.services.simulate.admission import Admit, Admitted, local_admission, webhook_admission
from vgpu_scheduler.services.simulate.kubehttp import MERGE_PATCH, REQUEST_TIMEOUT_S, DriverError, Extenders, KubeHttp
from vgpu_scheduler.services.simulate.nodefit import (
    REASON_SEPARATOR,
    SELECTOR_MISMATCH,
    UNSCHEDULABLE,
    Ledger,
    pod_request,
)
from vgpu_scheduler.services.simulate.nodeside import NodeSide
from vgpu_scheduler.services.simulate.podvalidation import is_extended, pod_invalid
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
from vgpu_scheduler.shared.preemption import may_preempt, pod_priority
from vgpu_scheduler.shared.vendors.nvidia import NvidiaVendor
from vgpu_scheduler.shared.vendors.pods import vendors_manage_pod
from vgpu_scheduler.shared.vendors.registry import Vendors

__all__ = [
    "MERGE_PATCH",
    "REQUEST_TIMEOUT_S",
    "Admit",
    "Admitted",
    "Contention",
    "Defaults",
    "Driver",
    "DriverError",
    "Extenders",
    "KubeHttp",
    "SchedulerTiming",
    "candidate_names",
    "effective_policies",
    "local_admission",
    "schedule_all",
    "scheduler_annotations",
    "webhook_admission",
]
"""The driver and, for its callers, the pieces it is made of (HTTP clients, admission, timing) under one name."""

logger = logging.getLogger(__name__)

KubeObject = dict[str, Any]

POD_GROUP_API = "scheduling.k8s.io/v1alpha2"
_WAITING_TASKS = ("simulate:backoff", "simulate:requeue", "simulate:flush")
"""Tasks of pods waiting to be retried: a stopped run leaves them out."""
_PREEMPTED_BY = re.compile(r"^Preempted by pod (\S+) ")
"""The extender's ``Preempted`` Event on a victim names the pod it was preempted for."""


# --------------------------------------------------------------------------------------------
# The driver
# --------------------------------------------------------------------------------------------


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


def _selector_matches(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())


def candidate_names(pod: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]]) -> list[str]:
    """What kube-scheduler's NodeUnschedulable and NodeAffinity filters leave: schedulable nodes matching the pod's
    ``nodeSelector``."""
    return kube_filters(pod, nodes)[0]


def kube_filters(pod: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]]) -> tuple[list[str], dict[str, str]]:
    """NodeUnschedulable and the ``nodeSelector`` part of NodeAffinity: (the nodes left, in order; {node: reason}
    for the others, in kube-scheduler's words)."""
    left: list[str] = []
    refused: dict[str, str] = {}
    for n in nodes:
        name = str(n["metadata"]["name"])
        reasons = []
        if (n.get("spec") or {}).get("unschedulable"):
            reasons.append(UNSCHEDULABLE)
        if not _selector_matches(pod, n):
            reasons.append(SELECTOR_MISMATCH)
        if reasons:
            refused[name] = REASON_SEPARATOR.join(reasons)
        else:
            left.append(name)
    return left, refused


Hook = Callable[[KubeObject], Awaitable[None]]


@dataclass(slots=True)
class _Queued:
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


@dataclass(frozen=True, slots=True)
class _Unschedulable:
    """No node this time: the pod waits in kube-scheduler's unschedulable pool for a cluster event."""

    result: PodResult
    by_extender: bool = True
    """Refused by the extender (kube-scheduler records no rejecting plugin, so any event requeues it), else by
    kube-scheduler's own NodeResourcesFit or NodeAffinity (requeued when a pod is deleted)."""


@dataclass(frozen=True, slots=True)
class _Assume:
    node: str


@dataclass(frozen=True, slots=True)
class _Bound:
    node: str


@dataclass(frozen=True, slots=True)
class _Retry:
    reasons: dict[str, str]


class Driver:
    """Plays kube-scheduler v1.36 and HAMi's device plugin for a workload (see the module docstring).

    * **scheduling cycles are serial**: one pod at a time is filtered (``before_filter(pod)`` runs first; embedded
      runs wait there for the extender's snapshot to catch up with the store);
    * **binding cycles are asynchronous**: once the filter chose a node, the bind runs in a task of its own and the
      next pod is filtered at once, so many binds are in flight together and contend for node locks, as in the
      real scheduler;
    * **a failed bind** (an ``Error`` answer, a timeout) puts the pod into backoff, ``timing.backoff_s(attempts)``
      (1 s doubling to 10 s), then back into the queue ahead of pods that have not arrived yet;
    * every extender call times out after ``timing.http_timeout_s``;
    * **the device plugin** settles a bound pod ``timing.allocate_latency_s`` after its Binding;
    * pods **arrive** in workload order: each is admitted and created when the scheduler is ready for it.

    ``after_settle(pod)`` runs after the device plugin settled a pod.
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
    ) -> None:
        self.kube = kube
        self.priority = priority or PriorityAdmission()
        """The API server's Priority admission over the workload's PriorityClasses."""
        self.pod_groups = [dict(g) for g in pod_groups]
        """PodGroups to create before the first pod (the workload's)."""
        self.gangs: dict[tuple[str, str], int] = {}
        for g in self.pod_groups:
            n = gang_min_count(g) if g.get("apiVersion") == POD_GROUP_API else None
            if n is not None:
                self.gangs[(str(g["metadata"].get("namespace") or "default"), str(g["metadata"]["name"]))] = n
        """minCount of each native gang (kube-scheduler v1.36 schedules them in group passes)."""
        self.idle = idle
        """Waits until the extender has no preemption or gang check under way (embedded runs)."""
        self.after_terminate = after_terminate
        """Runs after the kubelet deleted a pod for good (embedded runs: until the informer released it)."""
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
        pods it assumes on their chosen node (see :class:`~services.simulate.nodefit.Ledger`)."""
        if self._ledger is None:
            self._ledger = Ledger(await self.nodes(), await self.kube.list_pods())
        return self._ledger

    async def schedule(self, pod: KubeObject) -> PodResult:
        """Admit, create, filter, bind and settle one pod on its own; the outcome as a :class:`PodResult`."""
        results = await self.run([pod])
        return results[0]

    def _result(
        self, q: _Queued, node: str | None, annotations: Mapping[str, str], reasons: Mapping[str, str]
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
        )

    async def run(
        self,
        pods: Sequence[KubeObject],
        *,
        stop: asyncio.Event | None = None,
        progress: Callable[[int, int, PodResult], None] | None = None,
    ) -> list[PodResult]:
        """Schedule ``pods``; the results of those finished, in workload order (all of them unless ``stop`` was
        set: then no new pod is taken, binds in flight finish and pods in backoff are left out)."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        queue = [_Queued(i, p) for i, p in enumerate(pods)]
        arrivals = collections.deque(queue)
        ready: collections.deque[_Queued] = collections.deque()
        wake = asyncio.Event()
        tasks: set[asyncio.Task[None]] = set()
        failures: list[BaseException] = []
        finished = 0
        unschedulable: list[tuple[_Queued, bool]] = []
        """Pods no node fitted, in kube-scheduler's unschedulable pool (and whether the extender refused them)."""
        by_key: dict[str, _Queued] = {}
        terminating: set[str] = set()
        gang_waiting: dict[tuple[str, str], list[_Queued]] = {}
        gang_bound: collections.Counter[tuple[str, str]] = collections.Counter()
        activity = 0
        """Binds settled and pods terminated so far: a flush that changed none of it ends the run."""
        flushed_at = -1
        quiet_at: float | None = None

        def finish(q: _Queued, result: PodResult) -> None:
            nonlocal finished
            if q.result is None:
                finished += 1
            q.result = result
            if progress is not None:
                progress(finished, len(pods), result)
            wake.set()

        def spawn(coro: Awaitable[None], name: str) -> None:
            task = asyncio.ensure_future(coro)
            task.set_name(name)
            tasks.add(task)

            def done(t: asyncio.Task[None]) -> None:
                tasks.discard(t)
                if not t.cancelled() and t.exception() is not None:
                    failures.append(t.exception())  # type: ignore[arg-type]
                wake.set()

            task.add_done_callback(done)

        async def requeue_after(q: _Queued, delay: float) -> None:
            await asyncio.sleep(delay)
            ready.append(q)

        def back_off(q: _Queued, reasons: dict[str, str]) -> None:
            """A failed scheduling attempt: the pod waits its backoff, then goes back into the queue."""
            q.last_error = reasons
            if q.attempts >= self.timing.max_attempts:
                finish(q, self._result(q, None, {}, reasons))
                return
            self.contention.binds_retried += 1
            if not q.retried:
                q.retried = True
                self.contention.pods_retried += 1
            delay = self.timing.backoff_s(q.attempts)
            logger.info(
                "scheduling attempt failed: the pod backs off and is re-queued",
                extra={"pod": _key(q.created or q.original), "reasons": reasons, "backoff_s": delay},
            )
            spawn(requeue_after(q, delay), f"simulate:backoff:{_key(q.created or q.original)}")

        def park(q: _Queued, result: PodResult, *, by_extender: bool = True) -> None:
            """Unschedulable: reported pending unless a cluster event brings it back."""
            finish(q, result)
            unschedulable.append((q, by_extender))

        def flush_unschedulable() -> None:
            """kube-scheduler's ``podMaxInUnschedulablePodsDuration``: a pod unschedulable that long is tried again
            whatever happened."""
            for q, _by_extender in unschedulable:
                if q.attempts < self.timing.max_attempts:
                    left = max(0.0, q.last_try + self.timing.unschedulable_flush_s - loop.time())
                    spawn(requeue_after(q, left), f"simulate:flush:{_key(q.created or q.original)}")
            unschedulable[:] = []

        def requeue_unschedulable(*, deleted: bool) -> None:
            """A pod was bound or deleted (kube-scheduler's AssignedPodAdd / AssignedPodDelete): the unschedulable
            pods that event concerns go back into the queue once their backoff is over. A pod the extender refused
            has no rejecting plugin, so kube-scheduler requeues it on any event; one NodeResourcesFit or
            NodeAffinity refused, on a deletion. A bind only takes room, so after a bind the driver retries only
            the pods that may preempt (the bound pod may be the victim they lacked): for the others the retry
            could only fail the same way."""
            keep: list[tuple[_Queued, bool]] = []
            for q, by_extender in unschedulable:
                if not (deleted or (by_extender and self._may_preempt(q))):
                    keep.append((q, by_extender))
                    continue
                if q.attempts >= self.timing.max_attempts:
                    continue
                left = max(0.0, q.last_try + self.timing.backoff_s(q.attempts) - loop.time())
                spawn(requeue_after(q, left), f"simulate:requeue:{_key(q.created or q.original)}")
            unschedulable[:] = keep

        async def binding_cycle(q: _Queued, node: str) -> None:
            assert q.created is not None
            error = await self._bind(q.created, node)
            if error is None:
                finish(q, await self._settled(q, node))
                nonlocal activity
                activity += 1
                requeue_unschedulable(deleted=False)
            else:
                ledger.forget(q.created)
                back_off(q, {node: f"bind failed: {error}"})

        async def settle_only(q: _Queued, node: str) -> None:
            nonlocal activity
            finish(q, await self._settled(q, node))
            activity += 1
            requeue_unschedulable(deleted=False)

        async def terminate(pod: KubeObject) -> None:
            """The kubelet of a pod being deleted; then kube-scheduler hears of the deletion."""
            nonlocal activity
            meta = pod["metadata"]
            last = await self.node_side.terminate(meta["namespace"], meta["name"])
            activity += 1
            if last is not None:
                ledger.forget(last)
                if self.after_terminate is not None:
                    await self.after_terminate(last)
                await self._record_eviction(last, by_key.get(_key(last)), finish, loop.time() - start)
            requeue_unschedulable(deleted=True)

        async def kubelet_sync() -> None:
            """Let the extender finish what it does in the background, then start the kubelet's termination of
            every pod being deleted."""
            if self.idle is not None:
                await self.idle()
            for pod in await self.kube.list_pods():
                key = _key(pod)
                meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
                if meta.get("deletionTimestamp") and spec.get("nodeName") and key not in terminating:
                    terminating.add(key)
                    spawn(terminate(pod), f"simulate:terminate:{key}")

        def handle(q: _Queued, outcome: PodResult | _Unschedulable | _Assume | _Bound | _Retry) -> None:
            if isinstance(outcome, PodResult):
                finish(q, outcome)
            elif isinstance(outcome, _Unschedulable):
                park(q, outcome.result, by_extender=outcome.by_extender)
            elif isinstance(outcome, _Assume):
                assert q.created is not None
                ledger.assume(q.created, outcome.node)  # kube-scheduler's assume, before the bind
                self._in_flight += 1
                self.contention.max_binds_in_flight = max(self.contention.max_binds_in_flight, self._in_flight)
                spawn(binding_cycle(q, outcome.node), f"simulate:bind:{_key(q.created or q.original)}")
            elif isinstance(outcome, _Bound):
                assert q.created is not None
                ledger.assume(q.created, outcome.node)
                spawn(settle_only(q, outcome.node), f"simulate:settle:{_key(q.created or q.original)}")
            else:
                back_off(q, outcome.reasons)

        async def group_pass(group: tuple[str, str], members: list[_Queued], need: int) -> None:
            """kube-scheduler v1.36's gang pass: each member filtered in turn and assumed; the members that passed
            are bound only when at least ``need`` did, otherwise all are forgotten."""
            passed: list[tuple[_Queued, _Assume]] = []
            failed: list[tuple[_Queued, PodResult | _Unschedulable | _Assume | _Bound | _Retry]] = []
            for m in members:
                outcome = await self._scheduling_cycle(m)
                if isinstance(outcome, _Assume):
                    assert m.created is not None
                    ledger.assume(m.created, outcome.node)
                    passed.append((m, outcome))
                else:
                    failed.append((m, outcome))
            if len(passed) >= need:
                gang_bound[group] += len(passed)
                for m, assumed in passed:
                    ledger.forget(m.created or {})
                    handle(m, assumed)
                for m, outcome in failed:
                    handle(m, outcome)
                return
            for m, _assumed in passed:
                ledger.forget(m.created or {})
            if self.idle is not None:
                await self.idle()  # the extender, told nothing, releases what the pass reserved (docs/gangs.md)
            why = (
                f"pod group {group[1]}: {len(passed)} of {len(members)} member(s) found a node, "
                f"{need} needed (minCount {self.gangs[group]}): none bound"
            )
            for m, _assumed in passed:
                park(m, self._result(m, None, {}, {ADMISSION: why}))
            for m, outcome in failed:
                if isinstance(outcome, _Unschedulable):
                    park(m, outcome.result, by_extender=outcome.by_extender)
                else:
                    handle(m, outcome)

        ledger = await self.ledger()
        for g in self.pod_groups:
            await self.kube.create_namespaced(g, "podgroups")
        try:
            while True:
                if failures:
                    raise failures[0]
                stopping = stop is not None and stop.is_set()
                q: _Queued | None = None
                if not stopping and ready:
                    q = ready.popleft()
                elif not stopping and arrivals:
                    q = arrivals.popleft()
                if q is not None:
                    if q.created is None:
                        refused = await self._admit_and_create(q)
                        if refused is not None:
                            finish(q, refused)
                            continue
                        by_key[_key(q.created or q.original)] = q
                    group = self._gang_of(q)
                    if group is not None and gang_bound[group] < self.gangs[group]:
                        waiting = gang_waiting.setdefault(group, [])
                        waiting.append(q)
                        need = self.gangs[group] - gang_bound[group]
                        if len(waiting) >= need:
                            gang_waiting[group] = []
                            await group_pass(group, waiting, need)
                        continue
                    outcome = await self._scheduling_cycle(q)
                    handle(q, outcome)
                    if isinstance(outcome, _Unschedulable) and self._may_preempt(q):
                        await kubelet_sync()  # the extender preempts for it off the request path
                    continue
                live = [t for t in tasks if not (stopping and t.get_name().startswith(_WAITING_TASKS))]
                if not live and not stopping:
                    await kubelet_sync()  # anything still being deleted is terminated before the run ends
                    live = list(tasks)
                    preemptors = [q for q, by_extender in unschedulable if by_extender and self._may_preempt(q)]
                    if not live and preemptors and activity != flushed_at and self.contention.clock == "simulated":
                        # quiet, but pods that may preempt wait: kube-scheduler's periodic flush tries the
                        # unschedulable pods again. For a pod that does not preempt nothing changed, so the retry
                        # would fail the same way: without a preemptor waiting the run ends here (and five
                        # simulated minutes of the services' timers are not worth computing). A flush after which
                        # nothing was bound or deleted would only repeat itself, so it ends the run too; on real
                        # time the flush's five minutes are not waited for.
                        flushed_at, quiet_at = activity, loop.time()
                        flush_unschedulable()
                        live = list(tasks)
                if not live:
                    break
                wake.clear()
                await wake.wait()
        finally:
            for task in list(tasks):
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            # a last flush that changed nothing is not part of the run's duration
            end = quiet_at if quiet_at is not None and activity == flushed_at else loop.time()
            self.contention.duration_s = end - start
        if failures:
            raise failures[0]
        for group, waiting in gang_waiting.items():
            for m in waiting:
                if m.result is None:
                    have = len(waiting) + gang_bound[group]
                    why = f"pod group {group[1]}: waiting for minCount {self.gangs[group]} members, {have} exist"
                    finish(m, self._result(m, None, {}, {ADMISSION: why}))
        return [q.result for q in queue if q.result is not None]

    def _gang_of(self, q: _Queued) -> tuple[str, str] | None:
        """The native gang the pod belongs to (None: scheduled alone)."""
        pod = q.created or q.original
        name = pod_group_name(pod)
        if name is None:
            return None
        key = (str(pod["metadata"].get("namespace") or "default"), name)
        return key if key in self.gangs else None

    def _may_preempt(self, q: _Queued) -> bool:
        pod = q.created or q.original
        return pod_priority(pod) > 0 and may_preempt(pod) and self._gang_of(q) is None

    async def _record_eviction(
        self,
        last: KubeObject,
        q: _Queued | None,
        finish: Callable[[_Queued, PodResult], None],
        at_s: float,
    ) -> None:
        """A pod the kubelet terminated after its deletion: who preempted it (the ``Preempted`` Event the extender
        recorded on it), in :attr:`preemptions`, and a workload pod's result."""
        meta = last["metadata"]
        node = str((last.get("spec") or {}).get("nodeName") or "")
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
                pod=_key(last),
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

    async def _admit_and_create(self, q: _Queued) -> PodResult | None:
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

    async def _scheduling_cycle(self, q: _Queued) -> PodResult | _Unschedulable | _Assume | _Bound | _Retry:
        """One scheduling cycle of a created pod: a final result, unschedulable for now, the node chosen (the
        binding cycle follows), a pod found bound already (after a bind that timed out on our side), or a
        failure to retry after a backoff."""
        assert q.created is not None
        if q.attempts:
            meta = q.created["metadata"]
            current = await self.kube.get_pod(meta["namespace"], meta["name"])
            node = (current.get("spec") or {}).get("nodeName")
            if node:  # a bind that timed out on our side went through after all: the pod is bound
                return _Bound(str(node))
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
            return _Unschedulable(result, by_extender=False)
        if self.before_filter is not None:
            await self.before_filter(created)
        try:
            answer = await self.extenders.filter(created, candidates)
        except DriverError as e:
            if not e.timed_out:
                raise
            self.contention.extender_timeouts += 1
            return _Retry({ADMISSION: f"filter timed out: {e}"})
        if answer.get("Error"):
            return self._result(q, None, {}, {ADMISSION: f"filter error: {answer['Error']}"})
        chosen = answer.get("NodeNames") or []
        if not chosen:
            failed = answer.get("FailedNodes") or {}
            refused.update((str(k), str(v)) for k, v in failed.items())
            return _Unschedulable(self._result(q, None, {}, refused or {ADMISSION: "no candidate node"}))
        return _Assume(str(chosen[0]))

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

    async def _settled(self, q: _Queued, node: str) -> PodResult:
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


def scheduler_annotations(original: Mapping[str, Any], final: Mapping[str, Any]) -> dict[str, str]:
    """Every ``hami.io/*`` annotation on the final pod that the workload pod did not carry itself."""
    before = (original.get("metadata") or {}).get("annotations") or {}
    after = (final.get("metadata") or {}).get("annotations") or {}
    return {k: str(v) for k, v in after.items() if k.startswith("hami.io/") and k not in before}


async def schedule_all(
    driver: Driver,
    pods: Sequence[KubeObject],
    *,
    stop: asyncio.Event | None = None,
    progress: Callable[[int, int, PodResult], None] | None = None,
) -> list[PodResult]:
    """Schedule ``pods`` (:meth:`Driver.run`); stops early (returning what is done) once ``stop`` is set."""
    return await driver.run(pods, stop=stop, progress=progress)


def _key(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}"
