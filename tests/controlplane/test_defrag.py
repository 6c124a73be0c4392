"""Executing a defragmentation plan on the real control plane: kube-apiserver, kube-scheduler and
kube-controller-manager (Deployments, ReplicaSets, the disruption controller, the garbage collector), our services
as processes, the device-plugin emulator, and a kubelet stand-in (:class:`~tests.controlplane.kubelet.Finisher`:
allocated pods reported running and ready, graceful deletions finished).

A Deployment of four shared pods (4,000 MiB each) is spread (node and GPU policy ``spread``) over two nodes of two
16 GiB cards: no card is idle. A pod asking for a whole card waits. The plan is written by hand (the planner has
its own tests): move the pod on one card of one node; the pod fits on that card.

1. Executed: the card is held, the pod evicted through the Eviction API, the ReplicaSet's replacement bound
   elsewhere, and the waiting pod bound on exactly that card; the audit finds nothing over capacity, and no
   reservation is left unconfirmed.
2. A PodDisruptionBudget with ``maxUnavailable: 0`` (the disruption controller computes ``disruptionsAllowed: 0``):
   the API server refuses the eviction with 429, the run stops cleanly with the state printed, nothing is evicted,
   the hold is released, and the audit is clean.
3. The same plan for freeing the card (no waiting pod): the spread policies would send the replacement straight
   back to the idle card (without the hold it went back to the same node); the hold keeps it off, then the card is
   left idle.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.controlplane.audit import audit
from tests.controlplane.control import ApiServer, Cleanup
from tests.controlplane.controllers import WORKLOAD_CONTROLLERS, has_controller_manager
from tests.controlplane.harness import RUN_LABEL, Kube, NodeShape, Settings, System, gpu_node, gpu_pod, running_system
from tests.controlplane.kubelet import Finisher
from tests.waiting import eventually
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec.podannotations import decode_allocation
from vgpu_scheduler.shared.defrag.execute import ExecuteOptions, ExecuteResult, execute_plan
from vgpu_scheduler.shared.defrag.hold import Placement
from vgpu_scheduler.shared.domain.defragmodel import DefragPlan, Move, Target
from vgpu_scheduler.shared.domain.model import NodePolicy, NvidiaConfig
from vgpu_scheduler.shared.domain.scoring import SPREAD, Policies
from vgpu_scheduler.shared.k8s import Api, KubeSettings, open_client
from vgpu_scheduler.shared.store import Store, connect

pytestmark = [
    pytest.mark.timeout(400),
    pytest.mark.skipif(
        not has_controller_manager(),
        reason="needs kube-controller-manager in $KUBEBUILDER_ASSETS (scripts/install-control-plane.sh builds it)",
    ),
]

MEM = 16384
SHARE = 4000
REPLICAS = 4


@dataclass
class Fragmented:
    kube: Kube
    system: System
    finisher: Finisher
    ns: str
    store: Store
    api: Api
    pods: dict[str, dict[str, Any]]
    """The Deployment's pods once allocated, by name."""


def card_of(pod: dict[str, Any]) -> str:
    decoded = decode_allocation(pod)
    assert decoded is not None, pod["metadata"].get("annotations")
    ((device,),) = decoded[0]
    return device.uuid


def allocated(pod: dict[str, Any]) -> bool:
    annotations = pod["metadata"].get("annotations") or {}
    return annotations.get(keys.BIND_PHASE) == "success" and pod.get("status", {}).get("phase") == "Running"


@contextlib.asynccontextmanager
async def fragmented(
    api: ApiServer, cleanup: Cleanup, redis_url: str, tmp: Path, *, budget: bool, extra: tuple[str, ...] = ()
) -> AsyncIterator[Fragmented]:
    """The fragmented cluster (module docstring); ``extra``: flags of the extender (``--auto-defrag``)."""
    run_id = f"defrag-{uuid.uuid4().hex[:6]}"
    labels = {RUN_LABEL: run_id}
    ns = cleanup.namespace(run_id, labels)
    nodes = [f"{run_id}-n{i}" for i in range(2)]
    template = gpu_pod("web", mem=SHARE, cores=10)
    deployment: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": REPLICAS,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web", **labels}}, "spec": template["spec"]},
        },
    }
    settings = Settings(
        replicas=1,
        chart=False,
        webhook=False,
        node_policy="spread",
        gpu_policy="spread",
        controllers=WORKLOAD_CONTROLLERS,
        extra=extra,
    )
    async with Kube.open(api) as kube:
        for n in nodes:
            cleanup.node(n)
        await kube.create_all("/api/v1/nodes", [gpu_node(n, NodeShape(gpus=2, mem_mib=MEM), labels) for n in nodes])
        finisher = Finisher(ns, run_pods=True)
        async with running_system(
            api, redis_url, tmp / run_id, settings, run_id=run_id, node_selector=f"{RUN_LABEL}={run_id}"
        ) as system:
            watch = asyncio.create_task(finisher.run(kube), name="kubelet-finisher")
            store = Store.create(connect(redis_url), prefix=f"vgpu-{run_id}")
            try:
                if budget:
                    await kube.create(
                        f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
                        {
                            "metadata": {"name": "web"},
                            "spec": {"selector": {"matchLabels": {"app": "web"}}, "maxUnavailable": 0},
                        },
                    )

                def web() -> dict[str, dict[str, Any]]:
                    return {
                        n: p
                        for n, p in finisher.last.items()
                        if n.startswith("web-") and not p["metadata"].get("deletionTimestamp")
                    }

                # one replica at a time, each placed once the last is allocated: the spread policies then give each
                # its own card (pods placed at once may share one, the extender's cache not yet showing the others)
                path = f"/apis/apps/v1/namespaces/{ns}/deployments"
                for replicas in range(1, REPLICAS + 1):
                    if replicas == 1:
                        await kube.create(path, {**deployment, "spec": {**deployment["spec"], "replicas": 1}})
                    else:
                        assert await kube.merge_patch(f"{path}/web", {"spec": {"replicas": replicas}}) == 200

                    def placed(n: int = replicas) -> bool:
                        return len(web()) == n and all(map(allocated, web().values()))

                    await eventually(placed, 120, f"{replicas} pod(s) of the Deployment allocated and running")
                async with open_client(KubeSettings(kubeconfig=str(api.kubeconfig), qps=0)) as client:
                    yield Fragmented(kube, system, finisher, ns, store, Api(client, component="vgpu-scheduler"), web())
            finally:
                watch.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watch
                await store.aclose()


PLACEMENT = Placement(
    vendors=Settings(chart=False).vendors(),
    nvidia=NvidiaConfig(),
    policies=Policies(node=NodePolicy.SPREAD, gpu=SPREAD),
)


async def _waiting_pod(f: Fragmented) -> dict[str, Any]:
    """Create the whole-card pod and wait until kube-scheduler has tried it and found no node (no card is idle)."""
    await f.kube.create(f"/api/v1/namespaces/{f.ns}/pods", gpu_pod("big", mem=MEM, cores=None))
    pod: dict[str, Any] = {}

    async def tried() -> bool:
        nonlocal pod
        _, pod = await f.kube.call("GET", f"/api/v1/namespaces/{f.ns}/pods/big")
        return any(
            c.get("type") == "PodScheduled" and c.get("status") == "False"
            for c in pod.get("status", {}).get("conditions") or []
        )

    await eventually(tried, 120, "kube-scheduler tried the whole-card pod")
    assert not pod["spec"].get("nodeName"), pod
    return pod


def _plan(f: Fragmented, big: dict[str, Any]) -> tuple[DefragPlan, Move]:
    """Move the first pod (by name) off its card; the whole-card pod fits on that card."""
    cards = {name: (p["spec"]["nodeName"], card_of(p)) for name, p in f.pods.items()}
    assert len(set(cards.values())) == REPLICAS, f"not one pod per card: {cards}"  # no card is idle
    name = sorted(cards)[0]
    node, card = cards[name]
    dest, dest_card = next(c for c in cards.values() if c[0] != node)
    pod = f.pods[name]
    move = Move(f.ns, name, pod["metadata"]["uid"], 0, node, (card,), dest, (dest_card,), SHARE)
    target = Target(f.ns, "big", big["metadata"]["uid"], node, ((card,),))
    return DefragPlan(moves=(move,), target=target, freed=((node, card),)), move


async def _execute(f: Fragmented, plan: DefragPlan) -> tuple[ExecuteResult, list[str]]:
    lines: list[str] = []
    options = ExecuteOptions(execute=True, wave_timeout_s=120, bind_timeout_s=120)
    result = await execute_plan(plan, api=f.api, store=f.store, placement=PLACEMENT, options=options, out=lines.append)
    print("\n" + "\n".join(lines))
    return result, lines


async def _audit(f: Fragmented) -> None:
    await f.system.plugin.settled(30)
    pods = await f.kube.items(f"/api/v1/namespaces/{f.ns}/pods")
    nodes = await f.kube.items(f"/api/v1/nodes?labelSelector={RUN_LABEL}%3D{f.ns}")
    report = audit(pods, nodes, [], plugin_failures=f.system.plugin.failures, crashed=f.system.crashed())
    print(report.summary())
    report.check()
    await eventually(lambda: _no_unconfirmed(f.store), 60, "every reservation confirmed by its pod (none left behind)")


async def _no_unconfirmed(store: Store) -> bool:
    return not await store.reservations.list_unconfirmed(errors=[])


async def test_a_plan_executed_frees_the_card_the_pod_binds_there_and_the_moved_pod_is_replaced(
    kube_apiserver: ApiServer, kube_cleanup: Cleanup, redis_url: str, tmp_path: Path
) -> None:
    async with fragmented(kube_apiserver, kube_cleanup, redis_url, tmp_path, budget=False) as f:
        big = await _waiting_pod(f)
        plan, move = _plan(f, big)
        result, lines = await _execute(f, plan)
        assert result.ok, lines
        assert (result.moved, result.failures, result.cards_freed) == (1, 0, 1)
        assert result.target_bound == move.source
        replacement = result.replacements[move.uid]
        assert replacement.startswith(f"{f.ns}/web-") and not replacement.startswith(f"{f.ns}/{move.name} ")
        await eventually(lambda: allocated(f.finisher.last.get("big", {"metadata": {}})), 60, "big allocated")
        assert card_of(f.finisher.last["big"]) == move.source_devices[0]
        name = replacement.split("/")[1].split(" ")[0]
        await eventually(lambda: allocated(f.finisher.last.get(name, {"metadata": {}})), 60, "replacement allocated")
        assert card_of(f.finisher.last[name]) != move.source_devices[0]
        events = await f.kube.items(f"/api/v1/namespaces/{f.ns}/events")
        reasons = {(e["reason"], e["involvedObject"]["name"]) for e in events}
        assert ("DefragMoved", move.name) in reasons and ("DefragMakingRoom", "big") in reasons
        await _audit(f)


async def test_a_budget_that_allows_no_disruption_stops_the_move_cleanly(
    kube_apiserver: ApiServer, kube_cleanup: Cleanup, redis_url: str, tmp_path: Path
) -> None:
    async with fragmented(kube_apiserver, kube_cleanup, redis_url, tmp_path, budget=True) as f:

        async def computed() -> bool:
            _, pdb = await f.kube.call("GET", f"/apis/policy/v1/namespaces/{f.ns}/poddisruptionbudgets/web")
            status = pdb.get("status") or {}
            return status.get("observedGeneration", 0) >= 1 and status.get("currentHealthy") == REPLICAS

        await eventually(computed, 60, "the disruption controller computed the budget")
        big = await _waiting_pod(f)
        plan, move = _plan(f, big)
        result, lines = await _execute(f, plan)
        assert result.failed == move and result.moved == 0 and result.hold == "released", lines
        assert "its PodDisruptionBudget refuses the eviction" in result.reason and "429" in result.reason
        assert lines[-3:] == [f"stopped: {move.key}: {result.reason}", "not moved (0): none", "hold: released"]
        _, pod = await f.kube.call("GET", f"/api/v1/namespaces/{f.ns}/pods/{move.name}")
        assert pod["metadata"]["uid"] == move.uid and not pod["metadata"].get("deletionTimestamp")
        assert await f.store.reservations.get(big["metadata"]["uid"]) is None
        events = await f.kube.items(f"/api/v1/namespaces/{f.ns}/events")
        assert any(e["reason"] == "DefragFailed" and e["involvedObject"]["name"] == "big" for e in events)
        await _audit(f)


async def test_a_plan_that_frees_a_card_keeps_the_replacement_off_it(
    kube_apiserver: ApiServer, kube_cleanup: Cleanup, redis_url: str, tmp_path: Path
) -> None:
    """Spread policies would send the replacement straight back to the idle card (its node is the emptier one, the
    card the emptiest): the hold keeps it off until the run ends."""
    async with fragmented(kube_apiserver, kube_cleanup, redis_url, tmp_path, budget=False) as f:
        planned, move = _plan(f, {"metadata": {"uid": ""}})
        plan = DefragPlan(moves=planned.moves, target=None, freed=planned.freed)
        result, lines = await _execute(f, plan)
        assert result.ok and (result.moved, result.cards_freed, result.hold) == (1, 1, "released"), lines
        replacement = result.replacements[move.uid].split(" ")[0].split("/")[1]
        await eventually(lambda: allocated(f.finisher.last.get(replacement, {"metadata": {}})), 60, "allocated")
        assert card_of(f.finisher.last[replacement]) != move.source_devices[0]
        pods = await f.kube.items(f"/api/v1/namespaces/{f.ns}/pods")
        assert all(card_of(p) != move.source_devices[0] for p in pods), "the freed card is idle"
        await _audit(f)


async def _defrag_cli(f: Fragmented, api: ApiServer, redis_url: str, *args: str) -> tuple[int, str, str]:
    """``vgpu-scheduler defrag plan`` as an operator runs it, against this run's store and API server."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "vgpu_scheduler.services.cli", "defrag", "plan", *args,
        f"--redis-url={redis_url}", f"--key-prefix=vgpu-{f.ns}", f"--kubeconfig={api.kubeconfig}",
        "--node-scheduler-policy=spread", "--gpu-scheduler-policy=spread",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    print(out.decode(), err.decode())
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_defrag_plan_for_then_execute_makes_room_for_the_waiting_pod(
    kube_apiserver: ApiServer, kube_cleanup: Cleanup, redis_url: str, tmp_path: Path
) -> None:
    """The planner and the executor together, as the command runs them: the plan moves one Deployment pod, the
    waiting pod binds on the card it freed, the moved pod's replacement binds elsewhere, the audit is clean."""
    async with fragmented(kube_apiserver, kube_cleanup, redis_url, tmp_path, budget=False) as f:
        await _waiting_pod(f)
        code, out, _ = await _defrag_cli(
            f, kube_apiserver, redis_url, "--for", f"{f.ns}/big", "-o", "json", "--execute"
        )
        assert code == 0
        report = json.loads(out)
        assert report["plan"]["feasible"] and len(report["plan"]["moves"]) == 1
        execution = report["execution"]
        assert execution["ok"] and execution["moved"] == 1 and execution["failed"] is None
        (move,) = report["plan"]["moves"]
        await eventually(lambda: allocated(f.finisher.last.get("big", {"metadata": {}})), 60, "big allocated")
        big = f.finisher.last["big"]
        assert big["spec"]["nodeName"] == report["plan"]["target"]["node"] == move["from"]["node"]
        assert card_of(big) in move["from"]["devices"]
        moved = move["pod"].split("/")[1]
        replacement = execution["replacements"][move["pod"]].split("/")[1].split(" ")[0]
        assert replacement != moved
        # the executor waits for the replacement's bind; its allocation and start follow on the node
        await eventually(lambda: allocated(f.finisher.last.get(replacement, {"metadata": {}})), 60, "allocated")
        await _audit(f)


async def test_defrag_plan_says_why_when_every_move_is_forbidden_by_a_budget(
    kube_apiserver: ApiServer, kube_cleanup: Cleanup, redis_url: str, tmp_path: Path
) -> None:
    """A PodDisruptionBudget allowing no disruption covers every pod that could move: no plan, the reason given,
    nothing evicted (``--execute`` has nothing to carry out)."""
    async with fragmented(kube_apiserver, kube_cleanup, redis_url, tmp_path, budget=True) as f:
        await _waiting_pod(f)

        async def computed() -> bool:
            _, pdb = await f.kube.call("GET", f"/apis/policy/v1/namespaces/{f.ns}/poddisruptionbudgets/web")
            return bool(pdb.get("status", {}).get("observedGeneration") == pdb["metadata"].get("generation"))

        await eventually(computed, 60, "the disruption controller computed the budget")
        code, out, _ = await _defrag_cli(f, kube_apiserver, redis_url, "--for", f"{f.ns}/big", "--execute")
        assert code == 1
        assert out.startswith("cannot:") or "\ncannot:" in out
        assert "disruption" in out.lower()
        assert set(f.pods) <= set(f.finisher.last)  # nothing evicted
        assert not any(p["metadata"].get("deletionTimestamp") for p in f.finisher.last.values())
        await _audit(f)
