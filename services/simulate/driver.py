"""The driver: plays kube-scheduler and HAMi's device plugin against real extenders and an API server.

For each workload pod, in order (:meth:`Driver.schedule`):

1. **admission** — the webhook's mutation, as the API server would apply it (difference 16): either the
   pure :func:`~shared.protocol.webhook.mutate_pod` + :func:`~shared.protocol.jsonpatch.apply_patch` (embedded runs)
   or an AdmissionReview POSTed to an extender's ``/webhook`` (a deployed extender). A denied pod is reported as
   unschedulable with the denial message;
2. the pod is **created** in the API server (``POST pods``);
3. **kube-scheduler**: ``POST /filter`` with ``ExtenderArgs {"Pod": pod, "Nodes": null, "NodeNames": [...]}`` (every
   schedulable node matching the pod's ``nodeSelector``), then ``POST /bind`` with ``ExtenderBindingArgs`` for the
   single node returned. With several extender URLs, filter and bind alternate between them (any replica binds
   what another filtered). A failed bind is retried from the filter, as kube-scheduler re-queues a pod;
4. **device plugin** (after kubelet's Allocate): the pod is found as HAMi's plugin finds it, through the node's
   ``hami.io/mutex.lock`` (``GetPendingPod``, :mod:`services.simulate.devplugin`), and its to-allocate list must
   serve every container's Allocate; then ``hami.io/bind-phase: success`` on the pod, the node's
   ``hami.io/mutex.lock`` removed (owner- and resourceVersion-checked, as ``ReleaseNodeLock`` does), and the pod's
   ``status.phase: Running``; for a pod given Cambricon MLUs, Cambricon's plugin also removes its own node lock
   ``cambricon.com/dsmlu.lock``. A bind the real plugin would serve wrongly (another pod, wrong device counts) is a
   :class:`DriverError`;
5. optional hooks let an embedded run wait for the informer to observe the settle before the next pod, and for the
   extender's snapshot to catch up before each filter, so placements do not depend on timing.

Everything travels over HTTP with the exact JSON bodies the real components send.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Final

import aiohttp

from vgpu_scheduler.services.simulate.devplugin import (
    LockedPod,
    NoPod,
    PendingPod,
    allocation_problems,
    fallback_choice,
    lock_choice,
    lock_kinds_of,
    vendor_allocation_problems,
)
from vgpu_scheduler.services.simulate.report import ADMISSION, PodResult
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec.quantity import parse_quantity
from vgpu_scheduler.shared.codec.resources import pod_requests_managed_resource, vendors_manage_pod
from vgpu_scheduler.shared.codec.selectors import decode_gpu_policy, decode_node_policy
from vgpu_scheduler.shared.domain.model import GpuPolicy, NodePolicy, NvidiaConfig, QuotaState
from vgpu_scheduler.shared.errors import DecodeError, TransientError
from vgpu_scheduler.shared.protocol.admission import decode_patch
from vgpu_scheduler.shared.protocol.jsonpatch import apply_patch
from vgpu_scheduler.shared.protocol.webhook import mutate_pod
from vgpu_scheduler.shared.vendors.base import NodeLockKind
from vgpu_scheduler.shared.vendors.registry import Vendors

logger = logging.getLogger(__name__)

KubeObject = dict[str, Any]

MERGE_PATCH: Final = "application/merge-patch+json"
REQUEST_TIMEOUT_S: Final = 30.0
_PATCH_ATTEMPTS: Final = 5


class DriverError(TransientError):
    """An HTTP call of the driver failed (status and body in the message; ``status`` is the HTTP status when the
    server answered, None when it did not)."""

    def __init__(self, message: str, *, status: int | None = None, timed_out: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.timed_out = timed_out


# --------------------------------------------------------------------------------------------
# HTTP: the API server (core/v1 REST, as the emulator serves it) and the extenders
# --------------------------------------------------------------------------------------------


class KubeHttp:
    """The few core/v1 calls the driver makes, over plain HTTP (the emulator needs no credentials)."""

    def __init__(self, session: aiohttp.ClientSession, base_url: str, *, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self._session = session
        self._base = base_url.rstrip("/") + "/api/v1"
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)

    async def _call(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json") -> Any:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": content_type} if data is not None else {}
        try:
            async with self._session.request(
                method, self._base + path, data=data, headers=headers, timeout=self._timeout
            ) as resp:
                text = await resp.read()
                if resp.status >= 300:
                    raise DriverError(
                        f"{method} {path}: HTTP {resp.status}: {text[:300].decode(errors='replace')}",
                        status=resp.status,
                    )
                return json.loads(text) if text else None
        except (aiohttp.ClientError, TimeoutError, ValueError) as e:
            raise DriverError(f"{method} {path}: {type(e).__name__}: {e}") from e

    async def list_nodes(self) -> list[KubeObject]:
        body = await self._call("GET", "/nodes")
        return list(body.get("items") or [])

    async def create_pod(self, pod: KubeObject) -> KubeObject:
        ns = pod["metadata"].get("namespace") or "default"
        created: KubeObject = await self._call("POST", f"/namespaces/{ns}/pods", pod)
        return created

    async def get_pod(self, namespace: str, name: str) -> KubeObject:
        pod: KubeObject = await self._call("GET", f"/namespaces/{namespace}/pods/{name}")
        return pod

    async def list_pods(self, *, node_name: str | None = None) -> list[KubeObject]:
        """Every pod, or those with ``spec.nodeName=<node_name>``."""
        query = f"?fieldSelector=spec.nodeName%3D{node_name}" if node_name is not None else ""
        body = await self._call("GET", f"/pods{query}")
        return list(body.get("items") or [])

    async def patch_pod(self, namespace: str, name: str, patch: Mapping[str, Any], *, status: bool = False) -> None:
        sub = "/status" if status else ""
        await self._call("PATCH", f"/namespaces/{namespace}/pods/{name}{sub}", patch, content_type=MERGE_PATCH)

    async def get_node(self, name: str) -> KubeObject:
        node: KubeObject = await self._call("GET", f"/nodes/{name}")
        return node

    async def patch_node(self, name: str, patch: Mapping[str, Any]) -> None:
        await self._call("PATCH", f"/nodes/{name}", patch, content_type=MERGE_PATCH)


class Extenders:
    """kube-scheduler's side of the extender protocol, over one or more extender base URLs (used in turn)."""

    def __init__(self, session: aiohttp.ClientSession, urls: Sequence[str], *, timeout_s: float = REQUEST_TIMEOUT_S):
        if not urls:
            raise ValueError("at least one extender URL is needed")
        self._session = session
        self.urls = [u.rstrip("/") for u in urls]
        self._turn = itertools.count()
        self.timeout_s = timeout_s
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)

    def next_url(self) -> str:
        return self.urls[next(self._turn) % len(self.urls)]

    async def post(self, url: str, verb: str, body: Mapping[str, Any]) -> dict[str, Any]:
        try:
            async with self._session.post(
                f"{url}/{verb}",
                data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"},
                timeout=self._timeout,
            ) as resp:
                text = await resp.read()
                if resp.status != 200:
                    raise DriverError(
                        f"POST {url}/{verb}: HTTP {resp.status}: {text[:300].decode(errors='replace')}",
                        status=resp.status,
                    )
                answer = json.loads(text)
        except TimeoutError as e:
            raise DriverError(f"POST {url}/{verb}: no answer within {self.timeout_s:g}s", timed_out=True) from e
        except (aiohttp.ClientError, ValueError) as e:
            raise DriverError(f"POST {url}/{verb}: {type(e).__name__}: {e}") from e
        if not isinstance(answer, dict):
            raise DriverError(f"POST {url}/{verb}: expected a JSON object, got {type(answer).__name__}")
        return answer

    async def filter(self, pod: KubeObject, node_names: Sequence[str]) -> dict[str, Any]:
        """``ExtenderArgs`` as kube-scheduler sends it with ``nodeCacheCapable: true``."""
        return await self.post(self.next_url(), "filter", {"Pod": pod, "Nodes": None, "NodeNames": list(node_names)})

    async def bind(self, pod: KubeObject, node: str) -> str:
        """``ExtenderBindingArgs``; returns the ``Error`` text ("" on success)."""
        meta = pod["metadata"]
        body = {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"], "Node": node}
        answer = await self.post(self.next_url(), "bind", body)
        return str(answer.get("Error") or "")


# --------------------------------------------------------------------------------------------
# Admission (difference 16)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Admitted:
    """The pod as admitted (mutated), or None with the denial/error message."""

    pod: KubeObject | None
    message: str = ""


Admit = Callable[[KubeObject], Awaitable[Admitted]]


def local_admission(
    *,
    cfg: NvidiaConfig,
    scheduler_name: str,
    force_overwrite_default_scheduler: bool,
    quota: Callable[[str], Awaitable[QuotaState | None]],
    vendors: Vendors | None = None,
) -> Admit:
    """The webhook's decision computed in-process: ``mutate_pod`` (with the namespace's quota and the enabled
    ``vendors``) + ``apply_patch``."""

    async def admit(pod: KubeObject) -> Admitted:
        ns = pod["metadata"].get("namespace") or "default"
        outcome = mutate_pod(
            pod,
            cfg=cfg,
            scheduler_name=scheduler_name,
            force_overwrite_default_scheduler=force_overwrite_default_scheduler,
            quota=await quota(ns),
            vendors=vendors,
        )
        if not outcome.allowed:
            return Admitted(None, f"admission denied: {outcome.message}")
        mutated: KubeObject = apply_patch(pod, outcome.patch_ops) if outcome.patch_ops else pod
        return Admitted(mutated)

    return admit


def webhook_admission(extenders: Extenders) -> Admit:
    """The webhook's decision from a running extender: an ``admission.k8s.io/v1`` AdmissionReview to ``/webhook``."""

    async def admit(pod: KubeObject) -> Admitted:
        ns = pod["metadata"].get("namespace") or "default"
        review = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": str(uuid.uuid4()),
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
                "requestResource": {"group": "", "version": "v1", "resource": "pods"},
                "name": pod["metadata"].get("name", ""),
                "namespace": ns,
                "operation": "CREATE",
                "userInfo": {"username": "vgpu-scheduler-simulate"},
                "object": pod,
                "oldObject": None,
                "dryRun": False,
            },
        }
        answer = await extenders.post(extenders.urls[0], "webhook", review)
        response = answer.get("response")
        if not isinstance(response, dict):
            raise DriverError("POST /webhook: the AdmissionReview answer has no response object")
        if not response.get("allowed"):
            message = str((response.get("status") or {}).get("message", "denied"))
            return Admitted(None, f"admission denied: {message}")
        try:
            ops = decode_patch(response)
            mutated: KubeObject = apply_patch(pod, ops) if ops else pod
        except DecodeError as e:
            raise DriverError(f"POST /webhook: {e}") from e
        return Admitted(mutated)

    return admit


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


def _extended_requests(pod: Mapping[str, Any], ignored: frozenset[str]) -> dict[str, Fraction]:
    """The extended resources (``domain/name``) the pod asks for, as kube-scheduler's NodeResourcesFit counts
    them (each container's requests, else its limits; the app containers' sum, at least each init container's),
    minus ``ignored`` (the ``managedResources`` with ``ignoredByScheduler``: the enabled vendors'). A value that is
    not a quantity is left out (the API server would have refused the pod)."""

    def of(c: Any) -> dict[str, Fraction]:
        res = (c.get("resources") or {}) if isinstance(c, Mapping) else {}
        merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        out: dict[str, Fraction] = {}
        for name, raw in merged.items():
            if "/" not in str(name) or name in ignored or str(name).startswith(("kubernetes.io/", "hugepages-")):
                continue
            try:
                out[str(name)] = parse_quantity(raw, str(name))
            except DecodeError:
                continue
        return out

    spec = pod.get("spec") or {}
    total: dict[str, Fraction] = {}
    for c in spec.get("containers") or ():
        for k, v in of(c).items():
            total[k] = total.get(k, Fraction(0)) + v
    for c in spec.get("initContainers") or ():
        for k, v in of(c).items():
            total[k] = max(total.get(k, Fraction(0)), v)
    return {k: v for k, v in total.items() if v > 0}


def _fits_extended(node: Mapping[str, Any], wanted: Mapping[str, Fraction]) -> bool:
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    for name, amount in wanted.items():
        try:
            have = parse_quantity(allocatable.get(name, 0), name)
        except DecodeError:
            return False
        if have < amount:
            return False
    return True


def candidate_names(
    pod: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]], ignored: frozenset[str] = frozenset()
) -> list[str]:
    """What kube-scheduler's own filters would leave: schedulable nodes matching the pod's ``nodeSelector`` that
    have the extended resources the pod asks for outside ``ignored`` (the enabled vendors' resources, which
    kube-scheduler leaves to the extender). So a pod of a family that is not enabled lands, as in a cluster, only
    on a node whose device plugin advertises its resource (capacity only: other pods' use is not subtracted)."""
    wanted = _extended_requests(pod, ignored)
    return [
        n["metadata"]["name"]
        for n in nodes
        if not (n.get("spec") or {}).get("unschedulable") and _selector_matches(pod, n) and _fits_extended(n, wanted)
    ]


Hook = Callable[[KubeObject], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class SchedulerTiming:
    """How the driver's kube-scheduler and device plugin behave in time (kube-scheduler v1.36's defaults)."""

    initial_backoff_s: float = 1.0
    """``podInitialBackoffSeconds``: the first backoff of a pod whose bind failed; doubled per attempt."""
    max_backoff_s: float = 10.0
    """``podMaxBackoffSeconds``: the cap of that doubling."""
    http_timeout_s: float = 30.0
    """The extender's ``httpTimeout`` (the Helm chart's ``kubeScheduler.extenderHTTPTimeout``)."""
    allocate_latency_s: float = 0.2
    """From the Binding to the device plugin's Allocate (kubelet's pod admission), as HAMi's plugin sees it."""
    max_attempts: int = 20
    """A simulation must end: a pod still failing to bind after this many scheduling attempts is reported pending
    (kube-scheduler would go on retrying it every ``max_backoff_s``)."""

    def backoff_s(self, attempts: int) -> float:
        """kube-scheduler's backoff after ``attempts`` scheduling attempts: initial × 2^(attempts-1), capped."""
        return float(min(self.initial_backoff_s * 2.0 ** max(attempts - 1, 0), self.max_backoff_s))


LOCK_WAIT_THRESHOLD_S: Final = 0.01
"""A bind that took longer than this waited for a node lock (on the simulated clock a bind that does not wait
takes no time at all; the extender's first lock retry comes after 10 ms or more)."""


@dataclass(slots=True)
class Contention:
    """What the truthful kube-scheduler met: failed and retried binds, node-lock waits, extender timeouts."""

    clock: str = "real"
    """``simulated`` (an embedded run, :mod:`services.simulate.clock`) or ``real``."""
    binds: int = 0
    bind_failures: int = 0
    binds_retried: int = 0
    pods_retried: int = 0
    lock_waits: int = 0
    lock_wait_s: float = 0.0
    lock_wait_max_s: float = 0.0
    extender_timeouts: int = 0
    plugin_failures: int = 0
    duration_s: float = 0.0
    max_binds_in_flight: int = 0
    bind_errors: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "clock": self.clock,
            "duration_s": round(self.duration_s, 3),
            "binds": self.binds,
            "bind_failures": self.bind_failures,
            "binds_retried": self.binds_retried,
            "pods_retried": self.pods_retried,
            "lock_waits": self.lock_waits,
            "lock_wait_s": round(self.lock_wait_s, 3),
            "lock_wait_max_s": round(self.lock_wait_max_s, 3),
            "max_binds_in_flight": self.max_binds_in_flight,
            "extender_timeouts": self.extender_timeouts,
            "plugin_failures": self.plugin_failures,
            "bind_errors": dict(sorted(self.bind_errors.items())),
        }


def _error_kind(error: str) -> str:
    """A short class of a bind error for the counts: ``node locked``, ``timeout`` or its first words."""
    if "is locked by" in error or "lock" in error.lower():
        return "node locked"
    if "timed out" in error.lower() or "TimeoutError" in error:
        return "timeout"
    return " ".join(error.split()[:4])


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
        self._nodes: list[KubeObject] | None = None
        self._in_flight = 0
        names = (
            [n for v in vendors for n in v.resources.all]
            if vendors is not None
            else [
                cfg.resource_count_name,
                cfg.resource_memory_name,
                cfg.resource_memory_percentage_name,
                cfg.resource_core_name,
                cfg.resource_priority_name,
            ]
        )
        self._ignored = frozenset(n for n in names if n)
        """kube-scheduler's ``managedResources`` with ``ignoredByScheduler`` (as the chart configures it)."""

    async def nodes(self) -> list[KubeObject]:
        if self._nodes is None:
            self._nodes = await self.kube.list_nodes()
        return self._nodes

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
        return PodResult(ns, name, node, dict(annotations), dict(reasons), node_policy, gpu_policy, gpu)

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
                back_off(q, {node: f"bind failed: {error}"})

        async def settle_only(q: _Queued, node: str) -> None:
            finish(q, await self._settled(q, node))

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
                        self._in_flight += 1
                        self.contention.max_binds_in_flight = max(self.contention.max_binds_in_flight, self._in_flight)
                        spawn(binding_cycle(q, outcome.node), f"simulate:bind:{_key(q.created or q.original)}")
                    elif isinstance(outcome, _Bound):
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
            q.created = await self.kube.create_pod(admitted.pod)
        else:
            meta = q.created["metadata"]
            current = await self.kube.get_pod(meta["namespace"], meta["name"])
            node = (current.get("spec") or {}).get("nodeName")
            if node:  # a bind that timed out on our side went through after all: the pod is bound
                return _Bound(str(node))
        q.attempts += 1
        created = q.created
        candidates = candidate_names(created, await self.nodes(), self._ignored)
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
            return self._result(
                q, None, {}, {str(k): str(v) for k, v in failed.items()} or {ADMISSION: "no candidate node"}
            )
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
            kind = _error_kind(error)
            self.contention.bind_errors[kind] = self.contention.bind_errors.get(kind, 0) + 1
        return error

    async def _settled(self, q: _Queued, node: str) -> PodResult:
        """The device plugin's Allocate, ``allocate_latency_s`` after the Binding; the pod's result."""
        assert q.created is not None
        meta = q.created["metadata"]
        await asyncio.sleep(self.timing.allocate_latency_s)
        settled = await self._settle(meta["namespace"], meta["name"], node)
        if self.after_settle is not None:
            await self.after_settle(settled)
        return self._result(q, node, scheduler_annotations(q.original, settled), {})

    async def _settle(self, ns: str, name: str, node: str) -> KubeObject:
        """The device plugin after Allocate: bind phase success, node lock released, then the pod runs."""
        pod = await self.kube.get_pod(ns, name)
        annos = pod["metadata"].get("annotations") or {}
        if keys.VGPU_NODE in annos:  # a pod that asked for no device has nothing to allocate
            await self._check_plugin_serves(pod, node)
            await self.kube.patch_pod(ns, name, {"metadata": {"annotations": {keys.BIND_PHASE: "success"}}})
            await self._release_node_lock(node, ns, name)
            if self.vendors is not None and NodeLockKind.CAMBRICON in lock_kinds_of(pod, self.vendors):
                await self._release_time_lock(node, NodeLockKind.CAMBRICON.value)
        await self.kube.patch_pod(ns, name, {"status": {"phase": "Running"}}, status=True)
        return await self.kube.get_pod(ns, name)

    async def _check_plugin_serves(self, pod: KubeObject, node: str) -> None:
        """Raise DriverError unless HAMi's plugin on ``node`` would find ``pod`` (through the node lock) and
        serve each of its containers the devices the scheduler wrote for it."""
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        choice: PendingPod | None = lock_choice(await self.kube.get_node(node))
        if choice is None:
            choice = fallback_choice(node, await self.kube.list_pods(node_name=node))
        where = f"device plugin on {node}, allocating {ns}/{name}"
        if isinstance(choice, NoPod):
            raise DriverError(f"{where}: Allocate fails: {choice.reason}")
        if (choice.namespace, choice.name) != (ns, name):
            how = "the node lock names" if isinstance(choice, LockedPod) else "without a lock it would pick"
            raise DriverError(f"{where}: {how} {choice.namespace}/{choice.name} instead")
        if self.vendors is not None:
            problems = vendor_allocation_problems(pod, self.vendors)
        else:
            problems = allocation_problems(pod, self.cfg.resource_count_name)
        if problems:
            raise DriverError(f"{where}: " + "; ".join(problems))

    async def _release_time_lock(self, node: str, key: str) -> None:
        """Cambricon's device plugin after Allocate: its node lock ``key`` (a time, naming no pod) removed,
        guarded by the node's resourceVersion."""
        for _ in range(_PATCH_ATTEMPTS):
            obj = await self.kube.get_node(node)
            if key not in (obj["metadata"].get("annotations") or {}):
                return
            patch = {"metadata": {"annotations": {key: None}, "resourceVersion": obj["metadata"]["resourceVersion"]}}
            try:
                await self.kube.patch_node(node, patch)
                return
            except DriverError as e:
                if e.status != 409:
                    raise
        raise DriverError(f"node {node}: could not remove {key} (conflicts)")

    async def _release_node_lock(self, node: str, ns: str, name: str) -> None:
        """HAMi's ``ReleaseNodeLock``: only a lock naming this pod, guarded by the node's resourceVersion."""
        for _ in range(_PATCH_ATTEMPTS):
            obj = await self.kube.get_node(node)
            value = (obj["metadata"].get("annotations") or {}).get(keys.NODE_LOCK)
            if value is None or not str(value).endswith(f",{ns},{name}"):
                return  # already released (e.g. by the informer), or someone else's
            patch = {
                "metadata": {
                    "annotations": {keys.NODE_LOCK: None},
                    "resourceVersion": obj["metadata"]["resourceVersion"],
                }
            }
            try:
                await self.kube.patch_node(node, patch)
                return
            except DriverError as e:
                if e.status != 409:
                    raise
        raise DriverError(f"node {node}: could not release the node lock of {ns}/{name} (conflicts)")


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
