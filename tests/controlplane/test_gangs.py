"""Gangs on the real control plane: kube-apiserver and kube-scheduler with the release's gang scheduling on
(:data:`tests.controlplane.gangapi.GANG_APIS`: v1.36's ``GenericWorkload`` and ``GangScheduling`` gates and
``scheduling.k8s.io/v1alpha2``, v1.37's ``GenericWorkload`` and ``scheduling.k8s.io/v1beta1``), a PodGroup with
``minCount`` N, its members naming it in ``spec.schedulingGroup.podGroupName``; our services as processes. No
controller-manager runs: the harness removes a deleted PodGroup's finalizer as it would
(:class:`tests.controlplane.kubelet.Finisher`).

3. A gang of 8 whole-card pods that fits only packed on two nodes (a third is full) binds all 8, with no bind
   failure in kube-scheduler's log or our extender's.
4. A gang of 8 where only 7 cards are free: no member binds, no member is left with a reservation, a node lock or
   an allocation annotation, and an ordinary pod then takes a free card at once.
5. ``minCount`` 6 of 8 with 7 free cards: the 7 that fit bind, the eighth waits holding nothing.
6. ``minCount`` 6 of 8 with 5 free cards: nothing binds or stays reserved; a plain pod then takes a card.
7. A high-priority gang on cards all held by priority-0 pods: nothing is evicted, the gang holds nothing.
8. A high-priority gang short of CPU only: kube-scheduler evicts the two CPU holders, the gang binds whole on free
   cards.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.controlplane.audit import AuditReport, audit
from tests.controlplane.control import ApiServer, Cleanup
from tests.controlplane.gangapi import GangApi
from tests.controlplane.harness import (
    RUN_LABEL,
    SCHEDULER_NAME,
    BindWatch,
    Kube,
    NodeShape,
    Settings,
    System,
    gpu_node,
    gpu_pod,
    running_system,
)
from tests.controlplane.kubelet import Finisher
from tests.controlplane.scenario import count_scheduler_errors
from tests.waiting import eventually
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec.podannotations import decode_allocation
from vgpu_scheduler.shared.store import Store, connect

pytestmark = pytest.mark.timeout(300)

SHAPE = NodeShape(gpus=4, mem_mib=16384)


def whole_card(name: str, group: str | None = None) -> dict[str, Any]:
    pod = gpu_pod(name, mem=16384, cores=100)
    if group:
        pod["spec"]["schedulingGroup"] = {"podGroupName": group}
    return pod


def pod_group(gang: GangApi, name: str, min_count: int, priority_class: str = "") -> dict[str, Any]:
    """A gang PodGroup; ``priority_class``: its ``spec.priorityClassName`` (v1.37's kube-scheduler refuses a group
    whose members' priority differs from its own)."""
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"apiVersion": gang.api_version, "kind": "PodGroup", "metadata": {"name": name}, "spec": spec}


@dataclass
class Run:
    gang: GangApi
    ns: str
    run_id: str
    kube: Kube
    system: System
    watch: BindWatch
    finisher: Finisher
    store: Store


@contextlib.asynccontextmanager
async def gang_run(
    api: ApiServer, cleanup: Cleanup, redis_url: str, tmp: Path, name: str, nodes: int, cpu: str | None = None
) -> AsyncIterator[Run]:
    """A run of ``nodes`` GPU nodes (``cpu``: their allocatable CPU instead of the default) with our services and
    kube-scheduler under the release's gang scheduling."""
    gang = api.gang
    if gang is None:
        pytest.skip("no gang scheduling API known for this release (gangapi.GANG_APIS: v1.36 and v1.37)")
    run_id = f"{name}-{uuid.uuid4().hex[:6]}"
    labels = {RUN_LABEL: run_id}
    ns = cleanup.namespace(run_id, labels)
    names = [f"{run_id}-n{i:04d}" for i in range(nodes)]
    settings = Settings(replicas=1, node_policy="binpack", scheduler_feature_gates=gang.feature_gates)
    async with Kube.open(api) as kube:
        for n in names:
            cleanup.node(n)
        bodies = [gpu_node(n, SHAPE, labels) for n in names]
        for body in bodies:
            if cpu is not None:
                body["status"]["capacity"]["cpu"] = body["status"]["allocatable"]["cpu"] = cpu
        await kube.create_all("/api/v1/nodes", bodies)
        async with running_system(
            api, redis_url, tmp / run_id, settings, run_id=run_id, node_selector=f"{RUN_LABEL}={run_id}"
        ) as system:
            watch, finisher = BindWatch(), Finisher(ns)
            store = Store.create(connect(redis_url), prefix=f"vgpu-{run_id}")
            tasks = [
                asyncio.create_task(watch.run(kube, ns), name="bind-watch"),
                asyncio.create_task(finisher.run(kube, podgroups=gang.podgroups(ns)), name="kubelet-finisher"),
            ]
            try:
                yield Run(gang, ns, run_id, kube, system, watch, finisher, store)
                # PodGroups go before the namespace; their finalizer is removed by the finisher, as a
                # controller-manager would
                for group in await kube.items(gang.podgroups(ns)):
                    path = gang.podgroups(ns) + f"/{group['metadata']['name']}"
                    await kube.call("DELETE", path)
                    await _until_gone(kube, path)
            finally:
                for t in tasks:
                    t.cancel()
                for t in tasks:
                    with contextlib.suppress(asyncio.CancelledError):
                        await t
                await store.aclose()


async def _until_gone(kube: Kube, path: str) -> None:
    async def gone() -> bool:
        status, _ = await kube.call("GET", path)
        return status == 404

    await eventually(gone, 30, f"{path} deleted")


async def _create(run: Run, pods: Sequence[dict[str, Any]]) -> None:
    await run.kube.create_all(f"/api/v1/namespaces/{run.ns}/pods", pods)


async def _final(run: Run) -> tuple[list[dict[str, Any]], AuditReport]:
    pods = await run.kube.items(f"/api/v1/namespaces/{run.ns}/pods")
    nodes = await run.kube.items(f"/api/v1/nodes?labelSelector={RUN_LABEL}%3D{run.run_id}")
    report = audit(pods, nodes, [], plugin_failures=run.system.plugin.failures, crashed=run.system.crashed())
    print(f"\n{report.summary()}; notes {report.notes[:3]}")
    return pods, report


def _bind_failures(run: Run) -> int:
    return count_scheduler_errors(run.system.scheduler.log_text()) + run.system.log_count('"bind failed"')


async def test_a_gang_that_fits_only_packed_on_two_nodes_binds_whole(
    kube_apiserver: ApiServer, kube_cleanup: Cleanup, redis_url: str, tmp_path: Path
) -> None:
    async with gang_run(kube_apiserver, kube_cleanup, redis_url, tmp_path, "gang-fits", nodes=3) as run:
        fillers = [whole_card(f"fill{i}") for i in range(4)]
        await _create(run, fillers)
        await eventually(lambda: len(run.watch.bound) == 4, 60, "the fillers bound")
        full = set(run.watch.nodes.values())
        await run.kube.create(run.gang.podgroups(run.ns), pod_group(run.gang, "train", 8))
        members = [whole_card(f"m{i}", "train") for i in range(8)]
        created = time.monotonic()
        await _create(run, members)
        await eventually(lambda: all(f"m{i}" in run.watch.bound for i in range(8)), 120, "every member bound")
        last = max(run.watch.bound[f"m{i}"] for i in range(8))
        print(f"\ngang of 8 bound {last - created:.2f}s after its members were created")
        await run.system.plugin.settled(15)
        placed = {run.watch.nodes[f"m{i}"] for i in range(8)}
        _, report = await _final(run)
        report.check()
        assert len(placed) == 2 and not placed & full, (placed, full)
        assert report.bound == 12
        assert _bind_failures(run) == 0


async def test_a_gang_that_cannot_fit_whole_binds_nothing_and_holds_nothing(
    kube_apiserver: ApiServer, kube_cleanup: Cleanup, redis_url: str, tmp_path: Path
) -> None:
    async with gang_run(kube_apiserver, kube_cleanup, redis_url, tmp_path, "gang-7of8", nodes=2) as run:
        await _create(run, [whole_card("fill0")])
        await eventually(lambda: "fill0" in run.watch.bound, 60, "the filler bound")
        await run.kube.create(run.gang.podgroups(run.ns), pod_group(run.gang, "train", 8))
        uids: list[str] = []
        for pod in [whole_card(f"m{i}", "train") for i in range(8)]:
            created = await run.kube.create(f"/api/v1/namespaces/{run.ns}/pods", pod)
            uids.append(created["metadata"]["uid"])
        # kube-scheduler tries the group, a member fits nowhere, the extender releases the group's reservations
        await eventually(
            lambda: run.system.log_count("gang cannot be placed whole") > 0, 60, "the extender gave the group up"
        )
        # kube-scheduler keeps retrying the group: the next real pass (after the extender's refusal window) fails
        # the same way and leaves nothing either
        await eventually(
            lambda: run.system.log_count("gang cannot be placed whole") > 1, 60, "a second pass of the group"
        )

        async def nothing_reserved() -> bool:
            return all([await run.store.reservations.node_of(u) is None for u in uids])

        await eventually(nothing_reserved, 30, "no member holds a reservation")
        # a plain pod takes a free card at once: the waiting gang holds none
        await _create(run, [whole_card("plain")])
        await eventually(lambda: "plain" in run.watch.bound, 60, "the plain pod bound")
        await run.system.plugin.settled(15)
        pods, report = await _final(run)
        members = [p for p in pods if p["metadata"]["name"].startswith("m")]
        assert not any((p.get("spec") or {}).get("nodeName") for p in members)
        assert not any(
            k in (p["metadata"].get("annotations") or {})
            for p in members
            for k in (keys.VGPU_NODE, keys.BIND_PHASE, keys.DEVICES_ALLOCATED)
        )
        nodes = await run.kube.items(f"/api/v1/nodes?labelSelector={RUN_LABEL}%3D{run.run_id}")
        assert not any(keys.NODE_LOCK in (n["metadata"].get("annotations") or {}) for n in nodes)
        assert await nothing_reserved()
        report.check()  # the 8 members rightly pending (they do not fit together), the others bound
        assert report.bound == 2


async def test_a_gang_below_its_size_binds_the_members_that_fit_and_the_rest_wait(
    kube_apiserver: ApiServer, kube_cleanup: Cleanup, redis_url: str, tmp_path: Path
) -> None:
    """minCount 6 of 8 members, 7 cards free: kube-scheduler binds the 7 that fit; the eighth waits, holding
    nothing."""
    async with gang_run(kube_apiserver, kube_cleanup, redis_url, tmp_path, "gang-6of8-fits", nodes=2) as run:
        await _create(run, [whole_card("fill0")])
        await eventually(lambda: "fill0" in run.watch.bound, 60, "the filler bound")
        await run.kube.create(run.gang.podgroups(run.ns), pod_group(run.gang, "train", 6))
        uids: dict[str, str] = {}
        for pod in [whole_card(f"m{i}", "train") for i in range(8)]:
            created = await run.kube.create(f"/api/v1/namespaces/{run.ns}/pods", pod)
            uids[created["metadata"]["name"]] = created["metadata"]["uid"]
        await eventually(
            lambda: len([n for n in run.watch.bound if n.startswith("m")]) == 7, 120, "seven members bound"
        )
        waiting = next(n for n in uids if n not in run.watch.bound)

        async def holds_nothing() -> bool:
            return await run.store.reservations.node_of(uids[waiting]) is None

        await eventually(holds_nothing, 30, "the waiting member holds no reservation")
        await run.system.plugin.settled(15)
        _, report = await _final(run)
        report.check()
        assert report.bound == 8
        assert run.system.log_count("gang cannot be placed whole") == 0
        assert _bind_failures(run) == 0


async def test_a_gang_below_its_size_with_too_many_members_fitting_nowhere_holds_nothing(
    kube_apiserver: ApiServer, kube_cleanup: Cleanup, redis_url: str, tmp_path: Path
) -> None:
    """minCount 6 of 8 members, 5 cards free: three members fit nowhere in each pass, so the pass fails; the
    extender, counting the pass's failures together, releases what the five others reserved."""
    async with gang_run(kube_apiserver, kube_cleanup, redis_url, tmp_path, "gang-6of8-not", nodes=2) as run:
        await _create(run, [whole_card(f"fill{i}") for i in range(3)])
        await eventually(lambda: len(run.watch.bound) == 3, 60, "the fillers bound")
        await run.kube.create(run.gang.podgroups(run.ns), pod_group(run.gang, "train", 6))
        uids: list[str] = []
        for pod in [whole_card(f"m{i}", "train") for i in range(8)]:
            created = await run.kube.create(f"/api/v1/namespaces/{run.ns}/pods", pod)
            uids.append(created["metadata"]["uid"])
        await eventually(
            lambda: run.system.log_count("gang cannot be placed whole") > 0, 60, "the extender gave the group up"
        )

        async def nothing_reserved() -> bool:
            return all([await run.store.reservations.node_of(u) is None for u in uids])

        await eventually(nothing_reserved, 30, "no member holds a reservation")
        await _create(run, [whole_card("plain")])
        await eventually(lambda: "plain" in run.watch.bound, 60, "the plain pod bound")
        await run.system.plugin.settled(15)
        pods, report = await _final(run)
        members = [p for p in pods if p["metadata"]["name"].startswith("m")]
        assert not any((p.get("spec") or {}).get("nodeName") for p in members)
        assert await nothing_reserved()
        report.check()
        assert report.bound == 4


PRIORITY_CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"


async def _high_priority_group(run: Run, cleanup: Cleanup, name: str, min_count: int) -> str:
    """Create this run's PriorityClass of value 1000 and PodGroup ``name`` of that class; the class's name. The
    Priority admission plugin knows a new class only once its informer has seen it, so the PodGroup is created
    again while admission answers "no PriorityClass"."""
    high = f"high-{run.run_id}"
    cleanup.path(f"{PRIORITY_CLASSES}/{high}")
    await run.kube.create(PRIORITY_CLASSES, {"metadata": {"name": high}, "value": 1000})
    body = pod_group(run.gang, name, min_count, high)

    async def admitted() -> bool:
        status, answer = await run.kube.call("POST", run.gang.podgroups(run.ns), body)
        if status == 403 and "no PriorityClass" in str(answer):
            return False
        assert status in (201, 409), (status, answer)
        return True

    await eventually(admitted, 30, f"PodGroup {name} admitted with PriorityClass {high}")
    return high


def _allocated(run: Run, name: str) -> bool:
    """The device plugin has served pod ``name`` (its ``bind-phase`` is ``success``)."""
    annotations = (run.finisher.last.get(name, {}).get("metadata") or {}).get("annotations") or {}
    return bool(annotations.get(keys.BIND_PHASE) == "success")


async def test_a_high_priority_gang_short_of_cards_evicts_nothing_and_holds_nothing(
    kube_apiserver: ApiServer, kube_cleanup: Cleanup, redis_url: str, tmp_path: Path
) -> None:
    """Every card of the node is held by a priority-0 pod; a gang of 2 of priority 1000 arrives. v1.36 runs no
    workload-aware preemption (its gate is off) and kube-scheduler's per-pod dry run finds no victim (the device
    resources are ``ignoredByScheduler``); v1.37's workload-aware preemption removes the lower-priority pods from its
    own snapshot only and re-runs the group, asking our ``/filter``, which sees the cards still held; neither asks
    ``/preempt``, and our own preemption leaves PodGroup members alone (docs/gangs.md). So nothing is evicted and the
    waiting gang holds nothing."""
    async with gang_run(kube_apiserver, kube_cleanup, redis_url, tmp_path, "gang-preempt", nodes=1) as run:
        fillers = [f"fill{i}" for i in range(4)]
        await _create(run, [whole_card(n) for n in fillers])
        await eventually(lambda: len(run.watch.bound) == 4, 60, "the fillers bound")
        await eventually(lambda: all(_allocated(run, n) for n in fillers), 60, "the fillers allocated")
        high = await _high_priority_group(run, kube_cleanup, "train", 2)
        uids: list[str] = []
        for pod in [whole_card(f"m{i}", "train") for i in range(2)]:
            pod["spec"]["priorityClassName"] = high
            created = await run.kube.create(f"/api/v1/namespaces/{run.ns}/pods", pod)
            uids.append(created["metadata"]["uid"])
        # the group refused twice: by two passes (v1.36), or by a pass and v1.37's preemption re-run of the group
        await eventually(lambda: run.system.log_count("gang cannot be placed whole") > 1, 60, "two passes of the group")

        async def nothing_reserved() -> bool:
            return all([await run.store.reservations.node_of(u) is None for u in uids])

        await eventually(nothing_reserved, 30, "no member holds a reservation")
        pods, report = await _final(run)
        assert not run.finisher.finished, run.finisher.finished
        assert not any(p["metadata"].get("deletionTimestamp") for p in pods)
        assert run.system.log_count("pod preempted") == 0
        members = [p for p in pods if p["metadata"]["name"].startswith("m")]
        assert not any((p.get("spec") or {}).get("nodeName") for p in members)
        assert all(p["spec"].get("priority") == 1000 for p in members)
        report.check()
        assert report.bound == 4


async def test_a_high_priority_gang_short_of_cpu_only_gets_the_cpu_victims_and_binds_on_free_cards(
    kube_apiserver: ApiServer, kube_cleanup: Cleanup, redis_url: str, tmp_path: Path
) -> None:
    """The node's 4 cards are free but its 4 CPUs are held by two priority-0 pods without a GPU; a gang of 2 of
    priority 1000, each member a whole card and 2 CPUs. kube-scheduler's preemption (v1.36: each member's own,
    ``/preempt`` answered unchanged for a gang member; v1.37: the group's, re-running the group through our
    ``/filter``) evicts the two CPU holders and the gang binds whole, each member on a card of its own: no pod that
    holds a card is evicted, nothing is over-committed."""
    async with gang_run(kube_apiserver, kube_cleanup, redis_url, tmp_path, "gang-cpu", nodes=1, cpu="4") as run:
        hogs = [f"hog{i}" for i in range(2)]
        for name in hogs:
            await _create(run, [_cpu_pod(name, "2")])
        await eventually(lambda: set(hogs) <= set(run.watch.bound), 60, "the CPU holders bound")
        high = await _high_priority_group(run, kube_cleanup, "train", 2)
        members = [f"m{i}" for i in range(2)]
        for name in members:
            pod = whole_card(name, "train")
            pod["spec"]["priorityClassName"] = high
            pod["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "2"}
            await _create(run, [pod])
        await eventually(lambda: all(m in run.watch.bound for m in members), 120, "every member bound")
        await eventually(lambda: all(_allocated(run, m) for m in members), 60, "the members allocated")
        await eventually(lambda: _no_node_lock(run), 30, "the device plugin released the node lock")
        pods, report = await _final(run)
        assert sorted(run.finisher.finished) == hogs, run.finisher.finished
        cards = [
            {d.uuid for ctr in decoded[0] for d in ctr}
            for p in pods
            if p["metadata"]["name"] in members and (decoded := decode_allocation(p)) is not None
        ]
        assert len(cards) == 2 and len(cards[0] | cards[1]) == 2, cards
        report.check()
        assert report.bound == 2


async def _no_node_lock(run: Run) -> bool:
    nodes = await run.kube.items(f"/api/v1/nodes?labelSelector={RUN_LABEL}%3D{run.run_id}")
    return not any(keys.NODE_LOCK in (n["metadata"].get("annotations") or {}) for n in nodes)


def _cpu_pod(name: str, cpu: str) -> dict[str, Any]:
    """A priority-0 pod of our scheduler asking for CPU only; its deletion waits for the (emulated) kubelet."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": SCHEDULER_NAME,
            "terminationGracePeriodSeconds": 30,
            "containers": [{"name": "main", "image": "x", "resources": {"requests": {"cpu": cpu}}}],
        },
    }
