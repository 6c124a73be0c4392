"""The baseline: kube-scheduler alone (the chart's configuration without the extender) placing the same pods on
the same nodes, as extended resources (``nvidia.com/gpu`` counted against ``status.allocatable``)."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.controlplane.apicalls import calls_between, request_counts
from tests.controlplane.audit import AuditReport
from tests.controlplane.control import ApiServer, Cleanup, start_scheduler
from tests.controlplane.cpu import cpu_by_pid, cpu_used
from tests.controlplane.harness import RUN_LABEL, BindWatch, Kube, NodeShape, gpu_node, native_scheduler_config
from tests.controlplane.scenario import Outcome, count_scheduler_errors


async def run_native(
    api: ApiServer,
    cleanup: Cleanup,
    tmp: Path,
    *,
    nodes: int,
    shape: NodeShape,
    pods: Sequence[dict[str, Any]],
    scheduler_qps: int | None = None,
    deadline_s: float = 600.0,
) -> Outcome:
    run_id = f"native-{uuid.uuid4().hex[:6]}"
    labels = {RUN_LABEL: run_id}
    ns = cleanup.namespace(run_id, labels)
    names = [f"{run_id}-n{i:04d}" for i in range(nodes)]
    config = native_scheduler_config()
    if scheduler_qps:
        config["clientConnection"] = {"qps": scheduler_qps, "burst": 2 * scheduler_qps}
    async with Kube.open(api) as kube:
        for name in names:
            cleanup.node(name)
        await kube.create_all("/api/v1/nodes", [gpu_node(n, shape, labels) for n in names])
        with start_scheduler(api, config, tmp) as scheduler:
            watch = BindWatch()
            watcher = asyncio.create_task(watch.run(kube, ns), name="bind-watch")
            try:
                sem = asyncio.Semaphore(16)

                async def create(body: dict[str, Any]) -> None:
                    async with sem:
                        watch.created[body["metadata"]["name"]] = time.monotonic()
                        await kube.create(f"/api/v1/namespaces/{ns}/pods", body)

                calls_before = request_counts(await kube.text("/metrics"))
                cpu_before = cpu_by_pid()
                start, wall_start = time.monotonic(), time.time()
                await asyncio.gather(*(create(p) for p in pods))
                while len(watch.bound) < len(pods) and time.monotonic() - start < deadline_s:
                    watch.changed.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(watch.changed.wait(), 1)
                cpu = cpu_used(cpu_before, cpu_by_pid())
                calls = calls_between(calls_before, request_counts(await kube.text("/metrics")))
                wall_end = time.time()
            finally:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watcher
            errors = count_scheduler_errors(scheduler.log_text())
    first = min(watch.created.values())
    latencies = [watch.bound[n] - watch.created[n] for n in watch.bound if n in watch.created]
    return Outcome(
        report=AuditReport(pods=len(pods), bound=len(watch.bound)),
        created=len(watch.created),
        rejected=[],
        bound=len(watch.bound),
        elapsed_s=(max(watch.bound.values()) - first) if watch.bound else 0.0,
        bind_latencies_s=latencies,
        scheduler_errors=errors,
        lock_waits=0,
        stalled=len(watch.bound) < len(pods),
        nodes_touched=len(set(watch.nodes.values())),
        cpu_s=cpu,
        api_calls=calls,
        window=(wall_start, wall_end),
    )
