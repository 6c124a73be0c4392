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
   extender's snapshot to catch up before each filter, so placements do not depend on timing.

Everything travels over HTTP with the exact JSON bodies the real components send (:mod:`.kubehttp`); admission is
:mod:`.admission`, the scheduler's timing and contention counters :mod:`.timing`.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
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
from vgpu_scheduler.services.simulate.report import ADMISSION, PodResult
from vgpu_scheduler.services.simulate.timing import LOCK_WAIT_THRESHOLD_S, Contention, SchedulerTiming, error_kind
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec.resources import pod_requests_managed_resource, vendors_manage_pod
from vgpu_scheduler.shared.codec.selectors import decode_gpu_policy, decode_node_policy
from vgpu_scheduler.shared.domain.model import GpuPolicy, NodePolicy, NvidiaConfig
from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.vendors.nvidia import NvidiaVendor
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
    ) -> None:
        self.kube = kube
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
        return PodResult(ns, name, node, dict(annotations), dict(reasons), node_policy, gpu_policy, gpu, other)

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

        def finish(q: _Queued, result: PodResult) -> None:
            nonlocal finished
            q.result = result
            finished += 1
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

        async def binding_cycle(q: _Queued, node: str) -> None:
            assert q.created is not None
            error = await self._bind(q.created, node)
            if error is None:
                finish(q, await self._settled(q, node))
            else:
                ledger.forget(q.created)
                back_off(q, {node: f"bind failed: {error}"})

        async def settle_only(q: _Queued, node: str) -> None:
            finish(q, await self._settled(q, node))

        ledger = await self.ledger()
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
                    outcome = await self._scheduling_cycle(q)
                    if isinstance(outcome, PodResult):
                        finish(q, outcome)
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
                    continue
                live = [t for t in tasks if not (stopping and t.get_name().startswith("simulate:backoff"))]
                if not live:
                    break
                wake.clear()
                await wake.wait()
        finally:
            for task in list(tasks):
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self.contention.duration_s = loop.time() - start
        if failures:
            raise failures[0]
        return [q.result for q in queue if q.result is not None]

    async def _scheduling_cycle(self, q: _Queued) -> PodResult | _Assume | _Bound | _Retry:
        """One scheduling cycle: a final result, the node chosen (the binding cycle follows), a pod found bound
        already (after a bind that timed out on our side), or a failure to retry after a backoff."""
        if q.created is None:
            admitted = await self.admit(q.original)
            if admitted.pod is None:
                return self._result(q, None, {}, {ADMISSION: admitted.message})
            invalid = pod_invalid(admitted.pod)  # the API server validates the mutated pod before storing it
            if invalid is not None:
                return self._result(q, None, {}, {ADMISSION: invalid})
            q.created = await self.kube.create_pod(admitted.pod)
        else:
            meta = q.created["metadata"]
            current = await self.kube.get_pod(meta["namespace"], meta["name"])
            node = (current.get("spec") or {}).get("nodeName")
            if node:  # a bind that timed out on our side went through after all: the pod is bound
                return _Bound(str(node))
        q.attempts += 1
        created = q.created
        # kube-scheduler's own filters first; the extender sees only the nodes they leave
        names, refused = kube_filters(created, await self.nodes())
        candidates, misfits = (await self.ledger()).filter(created, names, self.managed)
        refused.update((node, REASON_SEPARATOR.join(reasons)) for node, reasons in misfits.items())
        if not candidates:
            return self._result(q, None, {}, refused or {ADMISSION: "no candidate node"})
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
            return self._result(q, None, {}, refused or {ADMISSION: "no candidate node"})
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
