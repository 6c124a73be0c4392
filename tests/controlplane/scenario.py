"""One scenario on the real control plane: nodes and a namespace labelled with the run id, the system started
(``harness.running_system``), pods created, binds watched until every pod is bound, or nothing more binds for
``stall_s``, or ``deadline_s``; then the audit from the API's objects. Figures for the benchmark come along."""

from __future__ import annotations

import asyncio
import contextlib
import re
import statistics
import time
import uuid
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from tests.controlplane.apicalls import calls_between, request_counts
from tests.controlplane.audit import AuditReport, audit
from tests.controlplane.control import ApiServer, Cleanup
from tests.controlplane.cpu import cpu_by_pid, cpu_used
from tests.controlplane.harness import (
    RUN_LABEL,
    BindWatch,
    Kube,
    NodeShape,
    Settings,
    System,
    VendorPart,
    gpu_node,
    running_system,
    vendor_node,
)
from tests.controlplane.rediscalls import command_stats, commands_between
from tests.process import listening_addresses
from vgpu_scheduler.shared.config.values import parse_gpu_policy
from vgpu_scheduler.shared.domain.model import NodePolicy
from vgpu_scheduler.shared.domain.scoring import Policies


@dataclass(frozen=True)
class Scenario:
    name: str
    pods: Sequence[dict[str, Any]]
    settings: Settings = field(default_factory=Settings)
    nodes: int = 20
    shape: NodeShape = field(default_factory=NodeShape)
    quota: dict[str, str] | None = None
    """``spec.hard`` of a ResourceQuota in the scenario's namespace."""
    kill_extender_after: int | None = None
    """SIGKILL extender replica 0 once this many pods are bound."""
    deadline_s: float = 150.0
    stall_s: float = 15.0
    fleet: Sequence[Sequence[VendorPart]] = ()
    """Nodes carrying devices of several vendors, one entry per node (replaces ``nodes`` × ``shape``); the
    vendors must be enabled by ``settings.device_sections``."""


@dataclass
class Outcome:
    report: AuditReport
    created: int
    rejected: list[str]
    """Pods the API server refused at creation (webhook denials), ``name: message``."""
    bound: int
    elapsed_s: float
    """First pod created to last pod bound."""
    bind_latencies_s: list[float]
    scheduler_errors: int
    lock_waits: int
    """Binds that waited 10 ms or more for the node lock (the live extenders' ``vgpu_node_lock_wait_seconds``)."""
    stalled: bool
    lock_timeouts: int = 0
    """Binds that gave up waiting for a node lock (``vgpu_bind_outcomes_total{outcome="lock_timeout"}``)."""
    system_log: dict[str, str] = field(default_factory=dict, repr=False)
    nodes_touched: int = 0
    """Nodes that received at least one pod (binpack's packing, next to one-at-a-time packing)."""
    pods: list[dict[str, Any]] = field(default_factory=list, repr=False)
    """The scenario's pods as the API server holds them at the end."""
    cpu_s: dict[str, float] = field(default_factory=dict)
    """CPU seconds per component (:mod:`tests.controlplane.cpu`) from the first create to the end of binding."""
    api_calls: dict[str, int] = field(default_factory=dict)
    """API server requests by ``<VERB> <resource>`` over the same window (:mod:`tests.controlplane.apicalls`)."""
    window: tuple[float, float] = (0.0, 0.0)
    """That window in wall-clock epoch seconds (to read the API server's audit log for it)."""
    redis_commands: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Redis commands (calls, microseconds) over the same window (:mod:`tests.controlplane.rediscalls`)."""

    @property
    def pods_per_s(self) -> float:
        return self.bound / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def percentile(self, q: float) -> float:
        if not self.bind_latencies_s:
            return float("nan")
        if len(self.bind_latencies_s) == 1:
            return self.bind_latencies_s[0]
        return statistics.quantiles(self.bind_latencies_s, n=100, method="inclusive")[int(q) - 1]


_SCHEDULER_ERROR = re.compile(r"Error scheduling pod|SchedulerError|error binding pod|Failed to bind")


def count_scheduler_errors(log: str) -> int:
    """kube-scheduler's error lines for failed scheduling or binding attempts."""
    return len(_SCHEDULER_ERROR.findall(log))


_POD_NAMES = re.compile(
    r"\bp\d{5}\b|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|-n\d{4}\b|\d+(\.\d+)?"
)


def scheduler_error_kinds(log: str) -> dict[str, int]:
    """kube-scheduler's error lines grouped by their text with pod and node names, UIDs and numbers blanked out
    (what kinds of failure, how many of each)."""
    kinds: dict[str, int] = {}
    for line in log.splitlines():
        if _SCHEDULER_ERROR.search(line):
            text = line.split("] ", 1)[-1] if "] " in line else line
            kind = _POD_NAMES.sub("#", text)[:300]
            kinds[kind] = kinds.get(kind, 0) + 1
    return kinds


async def _lock_waits(session: aiohttp.ClientSession, system: System) -> tuple[int, int]:
    """Over the live extenders: binds that waited 10 ms or more for a node lock, and binds that gave up waiting
    (``vgpu_bind_outcomes_total{outcome="lock_timeout"}``)."""
    waited = gave_up = 0.0
    for s in system.extenders():
        if s.proc.returncode is not None:
            continue
        plain = [a for a in listening_addresses(s.log) if f"https://{a}" not in system.extender_urls]
        if not plain:
            continue
        with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
            async with session.get(f"http://{plain[0]}/metrics", timeout=aiohttp.ClientTimeout(total=5)) as r:
                count = quick = 0.0
                for line in (await r.text()).splitlines():
                    if line.startswith("vgpu_node_lock_wait_seconds_count"):
                        count = float(line.rsplit(" ", 1)[1])
                    elif line.startswith('vgpu_node_lock_wait_seconds_bucket{le="0.01"}'):
                        quick = float(line.rsplit(" ", 1)[1])
                    elif line.startswith('vgpu_bind_outcomes_total{outcome="lock_timeout"}'):
                        gave_up += float(line.rsplit(" ", 1)[1])
                waited += count - quick
    return int(waited), int(gave_up)


async def run_scenario(
    api: ApiServer,
    cleanup: Cleanup,
    redis_url: str,
    tmp: Path,
    scenario: Scenario,
    *,
    during: Callable[[System, BindWatch], Coroutine[Any, Any, None]] | None = None,
) -> Outcome:
    """Run ``scenario`` to its end and audit it (the audit's findings are in ``outcome.report``, not raised)."""
    run_id = f"{scenario.name}-{uuid.uuid4().hex[:6]}"
    labels = {RUN_LABEL: run_id}
    ns = cleanup.namespace(run_id, labels)
    count = len(scenario.fleet) if scenario.fleet else scenario.nodes
    node_names = [f"{run_id}-n{i:04d}" for i in range(count)]
    vendors = scenario.settings.vendors()
    if scenario.fleet:
        bodies = [vendor_node(n, parts, labels, vendors) for n, parts in zip(node_names, scenario.fleet, strict=True)]
    else:
        bodies = [gpu_node(n, scenario.shape, labels) for n in node_names]
    async with Kube.open(api) as kube:
        for name in node_names:
            cleanup.node(name)
        await kube.create_all("/api/v1/nodes", bodies)
        if scenario.quota is not None:
            await kube.create(
                f"/api/v1/namespaces/{ns}/resourcequotas",
                {"metadata": {"name": "gpu-quota"}, "spec": {"hard": scenario.quota}},
            )
        async with running_system(
            api, redis_url, tmp / run_id, scenario.settings, run_id=run_id, node_selector=f"{RUN_LABEL}={run_id}"
        ) as system:
            watch = BindWatch()
            watcher = asyncio.create_task(watch.run(kube, ns), name="bind-watch")
            try:
                outcome = await _drive(kube, system, watch, ns, scenario, during, redis_url)
            finally:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watcher
        # every process is stop requested (SIGTERM) here: their exit codes are known
        pods = await kube.items(f"/api/v1/namespaces/{ns}/pods")
        nodes = await kube.items(f"/api/v1/nodes?labelSelector={RUN_LABEL}%3D{run_id}")
        quotas = await kube.items(f"/api/v1/namespaces/{ns}/resourcequotas")
    settings = scenario.settings
    policies = Policies(
        node=NodePolicy(settings.node_policy) if settings.node_policy else NodePolicy.BINPACK,
        gpu=parse_gpu_policy(settings.gpu_policy) if settings.gpu_policy else Policies().gpu,
    )
    outcome.report = audit(
        pods,
        nodes,
        quotas,
        plugin_failures=system.plugin.failures,
        crashed=system.crashed(),
        policies=policies,
        vendors=vendors,
    )
    outcome.pods = pods
    outcome.system_log = {s.name: s.log.read_text(errors="replace") for s in system.services}
    outcome.system_log["kube-scheduler"] = system.scheduler.log_text()
    return outcome


async def _drive(
    kube: Kube,
    system: System,
    watch: BindWatch,
    ns: str,
    scenario: Scenario,
    during: Callable[[System, BindWatch], Coroutine[Any, Any, None]] | None,
    redis_url: str,
) -> Outcome:
    rejected: list[str] = []
    sem = asyncio.Semaphore(16)
    calls_before = request_counts(await kube.text("/metrics"))
    redis_before = await command_stats(redis_url)
    cpu_before = cpu_by_pid()
    start, wall_start = time.monotonic(), time.time()

    async def create(body: dict[str, Any]) -> None:
        async with sem:
            name = body["metadata"]["name"]
            watch.created[name] = time.monotonic()
            status, data = await kube.call("POST", f"/api/v1/namespaces/{ns}/pods", body)
            if status >= 300:
                del watch.created[name]
                rejected.append(f"{name}: {status} {(data or {}).get('message', data)}")

    async def create_all() -> None:
        await asyncio.gather(*(create(p) for p in scenario.pods))

    creating = asyncio.create_task(create_all(), name="create-pods")
    extra = asyncio.create_task(during(system, watch)) if during is not None else None
    killed = False
    last_progress, seen = time.monotonic(), 0
    stalled = False
    try:
        while True:
            watch.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(watch.changed.wait(), 0.5)
            now = time.monotonic()
            if len(watch.bound) != seen:
                seen, last_progress = len(watch.bound), now
            if scenario.kill_extender_after is not None and not killed and seen >= scenario.kill_extender_after:
                await system.kill_extender(0)
                killed = True
            if not creating.done():
                continue
            if seen >= len(watch.created):
                break
            if now - last_progress > scenario.stall_s or now - start > scenario.deadline_s:
                stalled = True
                break
        cpu = cpu_used(cpu_before, cpu_by_pid())
        calls = calls_between(calls_before, request_counts(await kube.text("/metrics")))
        redis_commands = commands_between(redis_before, await command_stats(redis_url))
        wall_end = time.time()
        # let the kubelets settle what was bound
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(system.plugin.idle.wait(), 10)
        await creating
        if extra is not None:
            await extra
    finally:
        for task in (creating, extra):
            if task is not None and not task.done():
                task.cancel()
    bound_times = [watch.bound[n] for n in watch.bound if n in watch.created]
    first = min(watch.created.values(), default=start)
    elapsed = (max(bound_times) - first) if bound_times else 0.0
    async with aiohttp.ClientSession(trust_env=False) as session:
        waits, gave_up = await _lock_waits(session, system)
    return Outcome(
        report=AuditReport(),
        created=len(watch.created),
        rejected=rejected,
        bound=len(bound_times),
        elapsed_s=elapsed,
        bind_latencies_s=[watch.bound[n] - watch.created[n] for n in watch.bound if n in watch.created],
        scheduler_errors=count_scheduler_errors(system.scheduler.log_text()),
        lock_waits=waits,
        lock_timeouts=gave_up,
        stalled=stalled,
        nodes_touched=len(set(watch.nodes.values())),
        cpu_s=cpu,
        api_calls=calls,
        window=(wall_start, wall_end),
        redis_commands=redis_commands,
    )
