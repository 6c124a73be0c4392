"""Device-aware preemption on the real control plane (kube-apiserver and kube-scheduler v1.36, the chart's
scheduler configuration with ``preemptVerb``, our services as processes). No kubelet runs: the harness finishes a
preempted pod's graceful deletion as a kubelet would (:class:`tests.controlplane.kubelet.Finisher`).

1. Low-priority shared pods fill every GPU; a high-priority pod needing two whole cards' memory evicts exactly the
   two pods holding two cards, and binds to those very devices.
2. The same where memory is plentiful but every card's cores are allocated: the victims free cores.

Each ends with the audit from the API's objects (over-commit, allocations, pending pods that could fit, locks).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.controlplane.audit import audit
from tests.controlplane.control import ApiServer, Cleanup
from tests.controlplane.harness import (
    RUN_LABEL,
    BindWatch,
    Kube,
    NodeShape,
    Settings,
    gpu_node,
    gpu_pod,
    running_system,
)
from tests.controlplane.kubelet import Finisher
from tests.waiting import eventually
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec.podannotations import decode_allocation

pytestmark = pytest.mark.timeout(300)

PRIORITY_CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"
GRACE_S = 30
"""The victims' termination grace: their deletion waits for the (emulated) kubelet, as in a cluster."""


def low_pod(name: str, *, mem: int, cores: int) -> dict[str, Any]:
    pod = gpu_pod(name, mem=mem, cores=cores)
    pod["spec"]["terminationGracePeriodSeconds"] = GRACE_S
    return pod


def high_pod(name: str, *, gpus: int, mem: int, cores: int) -> dict[str, Any]:
    """The preemptor; its PriorityClass (value 1000) is made per run."""
    return gpu_pod(name, gpus=gpus, mem=mem, cores=cores)


def devices_of(pod: dict[str, Any]) -> set[str]:
    decoded = decode_allocation(pod)
    assert decoded is not None, pod["metadata"].get("annotations")
    return {d.uuid for ctr in decoded[0] for d in ctr}


async def _preempt(
    api: ApiServer,
    cleanup: Cleanup,
    redis_url: str,
    tmp: Path,
    *,
    name: str,
    lows: Sequence[dict[str, Any]],
    high: dict[str, Any],
    nodes: int,
    shape: NodeShape,
    after: Sequence[dict[str, Any]] = (),
    cpu: str | None = None,
) -> tuple[dict[str, dict[str, Any]], list[str], dict[str, Any], list[dict[str, Any]], Any]:
    """Bind ``lows``, then ``after`` (pods without a GPU), then create ``high``; wait for it to bind. ``cpu``: the
    nodes' allocatable CPU. A pod's ``priorityClassName`` ``high`` or ``mid`` names this run's class of value 1000 or
    10. Returns the low pods as bound (by name), the names whose deletion the harness finished, the high pod at the
    end, the namespace's events and the audit report."""
    run_id = f"{name}-{uuid.uuid4().hex[:6]}"
    labels = {RUN_LABEL: run_id}
    ns = cleanup.namespace(run_id, labels)
    node_names = [f"{run_id}-n{i:04d}" for i in range(nodes)]
    classes = {"high": 1000, "mid": 10}
    bodies = [gpu_node(n, shape, labels) for n in node_names]
    if cpu is not None:
        for body in bodies:
            body["status"]["capacity"]["cpu"] = body["status"]["allocatable"]["cpu"] = cpu
    async with Kube.open(api) as kube:
        for n in node_names:
            cleanup.node(n)
        await kube.create_all("/api/v1/nodes", bodies)
        for klass, value in classes.items():
            cleanup.path(f"{PRIORITY_CLASSES}/{klass}-{run_id}")
            await kube.create(PRIORITY_CLASSES, {"metadata": {"name": f"{klass}-{run_id}"}, "value": value})
        high["spec"]["priorityClassName"] = "high"
        for pod in [*lows, *after, high]:
            if pod["spec"].get("priorityClassName") in classes:
                pod["spec"]["priorityClassName"] += f"-{run_id}"
        settings = Settings(replicas=1, node_policy="binpack")
        async with running_system(
            api, redis_url, tmp / run_id, settings, run_id=run_id, node_selector=f"{RUN_LABEL}={run_id}"
        ) as system:
            watch, finisher = BindWatch(), Finisher(ns)
            tasks = [
                asyncio.create_task(watch.run(kube, ns), name="bind-watch"),
                asyncio.create_task(finisher.run(kube), name="kubelet-finisher"),
            ]
            try:
                await kube.create_all(f"/api/v1/namespaces/{ns}/pods", lows)
                low_names = {p["metadata"]["name"] for p in lows}
                await eventually(lambda: low_names <= set(watch.bound), 90, "every low-priority pod bound")
                await eventually(
                    lambda: all(
                        keys.BIND_PHASE in (finisher.last.get(n, {}).get("metadata", {}).get("annotations") or {})
                        and finisher.last[n]["metadata"]["annotations"][keys.BIND_PHASE] == "success"
                        for n in low_names
                    ),
                    60,
                    "every low-priority pod allocated by the device plugin",
                )
                bound_lows = {n: finisher.last[n] for n in low_names}
                if after:
                    await kube.create_all(f"/api/v1/namespaces/{ns}/pods", after)
                    names = {p["metadata"]["name"] for p in after}
                    await eventually(lambda: names <= set(watch.bound), 60, "the pods without a GPU bound")
                created = time.monotonic()
                await kube.create(f"/api/v1/namespaces/{ns}/pods", high)
                high_name = high["metadata"]["name"]
                await eventually(lambda: high_name in watch.bound, 120, "the high-priority pod bound")
                print(f"\npreemptor bound {watch.bound[high_name] - created:.2f}s after its creation")
                await eventually(
                    lambda: (
                        (finisher.last.get(high_name, {}).get("metadata", {}).get("annotations") or {}).get(
                            keys.BIND_PHASE
                        )
                        == "success"
                    ),
                    60,
                    "the high-priority pod allocated",
                )
                await system.plugin.settled(10)
            finally:
                for t in tasks:
                    t.cancel()
                for t in tasks:
                    with contextlib.suppress(asyncio.CancelledError):
                        await t
        pods = await kube.items(f"/api/v1/namespaces/{ns}/pods")
        nodes_now = await kube.items(f"/api/v1/nodes?labelSelector={RUN_LABEL}%3D{run_id}")
        events = await kube.items(f"/api/v1/namespaces/{ns}/events")
    report = audit(pods, nodes_now, [], plugin_failures=system.plugin.failures, crashed=system.crashed())
    final_high = next(p for p in pods if p["metadata"]["name"] == high["metadata"]["name"])
    print(f"\n{report.summary()}; preempted {finisher.finished}")
    return bound_lows, list(finisher.finished), final_high, events, report


def _check_events(events: list[dict[str, Any]], victims: list[str], high: str) -> None:
    preempted = [e for e in events if e.get("reason") == "Preempted"]
    assert sorted(e["involvedObject"]["name"] for e in preempted) == sorted(victims)
    assert all(f"/{high} " in e["message"] for e in preempted), [e["message"] for e in preempted]
    assert any(e.get("reason") == "Preempting" and e["involvedObject"]["name"] == high for e in events)


async def test_a_high_priority_pod_evicts_exactly_the_two_cards_it_needs(
    kube_apiserver: ApiServer, kube_cleanup: Cleanup, redis_url: str, tmp_path: Path
) -> None:
    shape = NodeShape(gpus=4, mem_mib=16384)
    # one shared pod per card, holding all of its memory and half of its cores: every GPU of both nodes is full
    lows = [low_pod(f"low{i:02d}", mem=16384, cores=50) for i in range(8)]
    high = high_pod("high", gpus=2, mem=16384, cores=50)
    bound, finished, final, events, report = await _preempt(
        kube_apiserver,
        kube_cleanup,
        redis_url,
        tmp_path,
        name="preempt-mem",
        lows=lows,
        high=high,
        nodes=2,
        shape=shape,
    )
    report.check()
    assert len(finished) == 2, finished
    freed = set().union(*(devices_of(bound[n]) for n in finished))
    assert len(freed) == 2
    assert devices_of(final) == freed
    assert final["spec"]["nodeName"] == bound[finished[0]]["spec"]["nodeName"] == bound[finished[1]]["spec"]["nodeName"]
    assert final["status"].get("nominatedNodeName") in (None, "", final["spec"]["nodeName"])
    _check_events(events, finished, "high")


async def test_when_cores_are_exhausted_the_victims_free_cores(
    kube_apiserver: ApiServer, kube_cleanup: Cleanup, redis_url: str, tmp_path: Path
) -> None:
    shape = NodeShape(gpus=2, mem_mib=16384)
    # two pods per card, 1000 MiB and 50 % each: memory is plentiful, cores are all allocated
    lows = [low_pod(f"low{i:02d}", mem=1000, cores=50) for i in range(8)]
    high = high_pod("high", gpus=1, mem=2000, cores=60)
    bound, finished, final, events, report = await _preempt(
        kube_apiserver,
        kube_cleanup,
        redis_url,
        tmp_path,
        name="preempt-cores",
        lows=lows,
        high=high,
        nodes=2,
        shape=shape,
    )
    report.check()
    assert len(finished) == 2, finished  # 60 % needs both 50 % pods of one card gone; one card is enough
    freed = set().union(*(devices_of(bound[n]) for n in finished))
    assert len(freed) == 1
    assert devices_of(final) == freed
    _check_events(events, finished, "high")


async def test_when_kube_schedulers_victims_free_only_cpu_the_preempt_verb_adds_the_device_victim(
    kube_apiserver: ApiServer, kube_cleanup: Cleanup, redis_url: str, tmp_path: Path
) -> None:
    """kube-scheduler is short of CPU too: its dry run picks the CPU hog (its lowest-priority pod), which holds no
    GPU; ``/preempt`` adds the pod whose card the preemptor needs and holds that card for it."""
    shape = NodeShape(gpus=2, mem_mib=16384)
    lows = []
    for i in range(2):
        pod = low_pod(f"low{i:02d}", mem=16384, cores=50)
        pod["spec"]["priorityClassName"] = "mid"
        pod["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "500m"}
        lows.append(pod)
    hog = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "hog"},
        "spec": {
            "schedulerName": "vgpu-scheduler",
            "terminationGracePeriodSeconds": GRACE_S,
            "containers": [{"name": "main", "image": "x", "resources": {"requests": {"cpu": "3"}}}],
        },
    }
    high = high_pod("high", gpus=1, mem=16384, cores=50)
    high["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "1"}
    bound, finished, final, events, report = await _preempt(
        kube_apiserver,
        kube_cleanup,
        redis_url,
        tmp_path,
        name="preempt-verb",
        lows=lows,
        high=high,
        nodes=1,
        shape=shape,
        after=[hog],
        cpu="4",
    )
    report.check()
    assert sorted(finished)[0] == "hog" and len(finished) == 2, finished
    (gpu_victim,) = [n for n in finished if n != "hog"]
    assert devices_of(final) == devices_of(bound[gpu_victim])
    # kube-scheduler evicted both (its own Preempted events), on the victims /preempt answered
    preempted = sorted(e["involvedObject"]["name"] for e in events if e.get("reason") == "Preempted")
    assert preempted == sorted(finished)
