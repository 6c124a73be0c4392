"""Chaos on the real control plane: our services (``replicas`` extenders behind the balancer, the informer, the
registrar, all from the chart's flags) on a Redis with Sentinel (a primary, a replica, three Sentinels), with
kube-scheduler from the chart's configuration and the HAMi device-plugin emulator, while a churning workload
(:mod:`tests.controlplane.chaos_workload`) runs and every fault of :mod:`tests.controlplane.chaos_faults` is
injected at a random (seeded) moment; the audit (:mod:`tests.controlplane.chaos_checks`) every ``audit_every_s``
and at the end, once settled. One extender replica reaches Redis through a proxy the run can stall
(:mod:`tests.controlplane.stallproxy`); it follows the primary as a plain-URL client with
``--redis-wait-replicas=1`` does. The chart's readiness probe takes a replica that is not ready out of the balancer
(:mod:`tests.controlplane.readiness`), as a Service does.

Runs on a control plane of its own (the run restarts its API server). Used by ``benchmarks/chaos.py`` and
``tests/controlplane/test_chaos.py``."""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import time
import urllib.error
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.controlplane.chaos_checks import Check, Waiting, check_api, check_redis
from tests.controlplane.chaos_faults import Injected, Injector, fault_names, node_bodies
from tests.controlplane.chaos_workload import Workload, call, mean_lifetime_s
from tests.controlplane.control import ApiServer, Cleanup, start_scheduler
from tests.controlplane.harness import RUN_LABEL, Kube, NodeShape, Settings, System, running_system
from tests.controlplane.readiness import probe_readiness
from tests.controlplane.rss import RssLog
from tests.controlplane.scenario import count_scheduler_errors, scheduler_error_kinds
from tests.controlplane.stallproxy import StallProxy
from tests.e2e.redisproc import SentinelGroup
from vgpu_scheduler.shared.store import Store, connect

PRIORITY_CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"
_BIND_FAILURE = re.compile(r"error binding pod|Failed to bind", re.IGNORECASE)


@dataclass(frozen=True)
class ChaosSpec:
    nodes: int = 20
    gpus: int = 4
    pods: int = 300
    duration_s: float = 300.0
    """Pods are created evenly over this window; faults fall in its first three quarters."""
    replicas: int = 3
    seed: int = 1
    fill: float = 2.0
    """The cards the pods alive at once would hold, over the cluster's (> 1: a full cluster, preemption)."""
    stall_s: float = 70.0
    pause_s: float = 70.0
    audit_every_s: float = 30.0
    settle_s: float = 420.0
    """At most this long after the last pod is created for the final audit to come out clean (a lock left by a
    killed bind is the chart's ``--node-lock-timeout``, 5 min, at most)."""
    allocate_latency_s: float = 0.2
    node_reboots: int = 2
    card_faults: int = 2
    faults: tuple[str, ...] | None = None
    """The faults to inject (None: every fault, :func:`fault_names`)."""
    quota_mib: int = 40000


@dataclass
class ChaosOutcome:
    spec: ChaosSpec
    checks: list[Check] = field(default_factory=list)
    final: Check | None = None
    faults: list[Injected] = field(default_factory=list)
    latencies_s: list[float] = field(default_factory=list)
    created: int = 0
    bound: int = 0
    deleted_in_bind: int = 0
    preempted: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    scheduler_errors: int = 0
    """kube-scheduler's error lines (a filter answered "not ready", a bind failed …): each pod is retried."""
    error_kinds: dict[str, int] = field(default_factory=dict)
    binds_retried: int = 0
    """The binds among them (kube-scheduler's "error binding pod" / "Failed to bind")."""
    rss: RssLog = field(default_factory=RssLog)
    settled_after_s: float | None = None
    crashed: list[str] = field(default_factory=list)
    failed_creates: list[str] = field(default_factory=list)
    refused_at_admission: list[str] = field(default_factory=list)
    """Pods the kubelet failed at admission: bound to a node whose device plugin had not registered (a reboot)."""
    elapsed_s: float = 0.0
    cleanup_error: str | None = None
    """Deleting what the run created failed (the run's own control plane is torn down after it anyway)."""


async def run_chaos(
    api: ApiServer, tmp: Path, spec: ChaosSpec, progress: Callable[[str], None] = lambda _: None
) -> ChaosOutcome:
    """The run (module docstring); its figures, never asserted here; ``progress`` is told each audit's line."""
    run_id = f"chaos-{uuid.uuid4().hex[:6]}"
    labels = {RUN_LABEL: run_id}
    cleanup = Cleanup(api)
    namespaces = (cleanup.namespace(run_id, labels), cleanup.namespace(f"{run_id}-q", labels))
    shape = NodeShape(gpus=spec.gpus)
    bodies = node_bodies([f"{run_id}-n{i:04d}" for i in range(spec.nodes)], shape, labels)
    outcome = ChaosOutcome(spec)
    try:
        async with Kube.open(api) as kube, SentinelGroup(replicas=1, sentinels=3, down_after_ms=3000) as redis:
            for n in bodies:
                cleanup.node(n)
            await kube.create_all("/api/v1/nodes", bodies.values())
            high = f"chaos-high-{run_id}"
            cleanup.path(f"{PRIORITY_CLASSES}/{high}")
            await kube.create(PRIORITY_CLASSES, {"metadata": {"name": high}, "value": 1000})
            hard = {"limits.nvidia.com/gpumem": str(spec.quota_mib)}
            quota = {"metadata": {"name": "gpu-quota"}, "spec": {"hard": hard}}
            await kube.create(f"/api/v1/namespaces/{namespaces[1]}/resourcequotas", quota)
            proxy = StallProxy(lambda: _primary(redis))
            await proxy.start()
            settings = Settings(
                replicas=spec.replicas,
                allocate_latency_s=spec.allocate_latency_s,
                scheduler_feature_gates=api.gang.feature_gates if api.gang is not None else "",
                replica_redis={spec.replicas - 1: (f"--redis-url={proxy.url}", "--redis-wait-replicas=1")},
            )
            try:
                async with running_system(
                    api, redis.url, tmp / run_id, settings, run_id=run_id, node_selector=f"{RUN_LABEL}={run_id}"
                ) as system:
                    store = Store.create(connect(redis.url), prefix=f"vgpu-{run_id}")
                    workload = Workload(
                        kube, random.Random(spec.seed), namespaces, shape, spec.pods, spec.duration_s,
                        mean_lifetime_s(spec.nodes, spec.gpus, spec.pods, spec.duration_s, spec.fill),
                        high, gang=api.gang,
                    )  # fmt: skip
                    run = _Run(spec, api, kube, system, settings, workload, namespaces, list(bodies), store, outcome)
                    run.progress = progress
                    try:
                        await run.drive(redis, proxy, bodies)
                    finally:
                        await store.aclose()
            finally:
                await proxy.stop()
            outcome.crashed = system.crashed()
    finally:
        try:
            await asyncio.to_thread(cleanup.run)
        except (OSError, urllib.error.URLError) as exc:  # the run's figures stand; its control plane is its own
            outcome.cleanup_error = f"{type(exc).__name__}: {exc}"
    return outcome


async def _primary(redis: SentinelGroup) -> tuple[str, int]:
    return "127.0.0.1", await redis.agreed_primary()


@dataclass
class _Run:
    spec: ChaosSpec
    api: ApiServer
    kube: Kube
    system: System
    settings: Settings
    workload: Workload
    namespaces: tuple[str, str]
    nodes: list[str]
    store: Store
    outcome: ChaosOutcome
    progress: Callable[[str], None] = field(default=lambda _: None)
    """Told each audit's line as it is made (the benchmark prints them)."""
    start: float = field(default_factory=time.monotonic)
    scheduler_logs: list[Path] = field(default_factory=list)
    waiting: dict[str, Waiting] = field(default_factory=dict)
    """Pods every check has found pending although they fit: since when, the room they fitted (:func:`check_api`)."""

    async def drive(self, redis: SentinelGroup, proxy: StallProxy, bodies: dict[str, dict[str, Any]]) -> None:
        spec, system = self.spec, self.system
        self.scheduler_logs.append(system.scheduler.log)
        stack = contextlib.ExitStack()
        rng = random.Random(spec.seed + 1)
        injector = Injector(
            system, self.api, self.kube, redis, proxy, lambda: self._restart_scheduler(stack), self.nodes, bodies,
            NodeShape(gpus=spec.gpus), rng, spec.stall_s, spec.pause_s,
            stalled_replica=spec.replicas - 1, paused_replica=1 % spec.replicas, progress=self.progress,
            occupied=self.workload.occupied,
        )  # fmt: skip
        names = (
            spec.faults if spec.faults is not None else fault_names(spec.replicas, spec.node_reboots, spec.card_faults)
        )
        self.start = injector.start = time.monotonic()
        churn = asyncio.create_task(self.workload.run(), name="chaos-workload")
        faults = asyncio.create_task(injector.run(names, spec.duration_s), name="chaos-faults")
        auditor = asyncio.create_task(self._audit_every(), name="chaos-audit")
        prober = asyncio.create_task(probe_readiness(system), name="readiness-probe")
        try:
            while not self.workload.created_all.is_set() or not faults.done():
                await asyncio.sleep(1.0)  # polls the three tasks' progress
                for task in (churn, faults, auditor):
                    if task.done():
                        task.result()  # an error in the harness ends the run
            self.workload.reaping = False
            auditor.cancel()
            await self._settle()
        finally:
            for task in (churn, faults, auditor, prober):
                task.cancel()
            await asyncio.gather(churn, faults, auditor, prober, return_exceptions=True)
            await asyncio.to_thread(stack.close)
        self._figures(injector.log)

    async def _restart_scheduler(self, stack: contextlib.ExitStack) -> None:
        config = yaml.safe_load(self.system.scheduler.config_file.read_text())
        where = self.system.scheduler.log.parent.with_name(f"kube-scheduler-{len(self.scheduler_logs)}")
        cm = start_scheduler(self.api, config, where, feature_gates=self.settings.scheduler_feature_gates)
        self.system.scheduler = await asyncio.to_thread(stack.enter_context, cm)
        self.scheduler_logs.append(self.system.scheduler.log)

    async def _audit_every(self) -> None:
        while True:
            await asyncio.sleep(self.spec.audit_every_s)  # the audit's period
            self.outcome.checks.append(await self._check(final=False))
            self.progress(self.outcome.checks[-1].line())

    async def _settle(self) -> None:
        """Check every 15 s (no pod created or deleted any more) until clean, or ``settle_s``."""
        began = time.monotonic()
        while True:
            await asyncio.sleep(min(15.0, self.spec.audit_every_s))  # settling takes time: nothing to await
            final = await self._check(final=True)
            self.progress("settling: " + final.line())
            for finding in (final.stuck + final.other + final.detail)[:20]:
                self.progress(f"    {finding}")
            self.outcome.final = final
            if final.clean():
                self.outcome.settled_after_s = time.monotonic() - began
                return
            if time.monotonic() - began > self.spec.settle_s:
                return

    async def _check(self, *, final: bool) -> Check:
        now = time.monotonic()
        pods: list[dict[str, Any]] = []
        quotas: list[dict[str, Any]] = []
        for ns in self.namespaces:
            pods += await _items(self.kube, f"/api/v1/namespaces/{ns}/pods")
            quotas += await _items(self.kube, f"/api/v1/namespaces/{ns}/resourcequotas")
        nodes = await _items(self.kube, f"/api/v1/nodes?labelSelector={RUN_LABEL}%3D{self.namespaces[0]}")
        extra: dict[str, Any] = {"vendors": self.settings.vendors()}
        if final:
            extra.update(plugin_failures=list(self.system.plugin.failures), crashed=self.system.crashed())
        check = await asyncio.to_thread(
            check_api, now - self.start, pods, nodes, quotas, waiting=self.waiting, now=now, final=final,
            **extra,
        )  # fmt: skip
        if final:
            try:
                names = [n["metadata"]["name"] for n in nodes]
                check.redis = await check_redis(self.store, pods, names, check.detail)
            except Exception as e:  # Redis unreadable at that moment: a finding, not a crash
                check.other.append(f"redis unreadable: {e}")
        self.outcome.rss.sample(now - self.start, _pids(self.system))
        return check

    def _figures(self, faults: list[Injected]) -> None:
        out, workload = self.outcome, self.workload
        out.elapsed_s = time.monotonic() - self.start
        out.faults = faults
        out.latencies_s = workload.latencies_s()
        out.created = workload.created
        out.bound = len(out.latencies_s)
        out.deleted_in_bind = sum(1 for p in workload.lives.values() if p.deleted_in_bind)
        out.preempted = sum(1 for p in workload.lives.values() if p.preempted)
        out.by_kind = {k: workload.count(k) for k in ("shared", "whole", "multi", "quota", "high", "gang")}
        out.failed_creates = workload.failed_creates
        out.refused_at_admission = list(self.system.plugin.refused)
        logs = "\n".join(p.read_text(errors="replace") for p in self.scheduler_logs if p.exists())
        out.scheduler_errors = count_scheduler_errors(logs)
        out.error_kinds = scheduler_error_kinds(logs)
        out.binds_retried = sum(n for kind, n in out.error_kinds.items() if _BIND_FAILURE.search(kind))


async def _items(kube: Kube, path: str) -> list[dict[str, Any]]:
    status, data = await call(kube, "GET", path)
    if status != 200:
        raise RuntimeError(f"GET {path}: {status} {data}")
    items: list[dict[str, Any]] = data["items"]
    return items


def _pids(system: System) -> dict[str, int]:
    pids = {s.name: s.proc.pid for s in system.services if s.proc.returncode is None}
    pids["kube-scheduler"] = system.scheduler.proc.pid
    return pids
