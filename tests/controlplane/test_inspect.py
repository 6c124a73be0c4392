"""``explain`` and ``usage`` on the real control plane: kube-apiserver and kube-scheduler, our registrar, informer
and extender as processes, the device-plugin emulator. One pod is scheduled by kube-scheduler through the
extender, one is too big for any GPU and stays Pending; both commands run as processes (``explain`` through the
``kubectl-vgpu`` console script, finding the cluster through ``$KUBECONFIG`` as kubectl does).

Expected figures come from the pod's allocation annotation on the API server, not from the store.
"""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

import pytest

from tests.controlplane.control import ApiServer, Cleanup
from tests.controlplane.harness import RUN_LABEL, Kube, NodeShape, Settings, gpu_node, gpu_pod, running_system
from tests.integration.inspect.cli import row, run_cli
from tests.waiting import eventually
from vgpu_scheduler.services.inspect.devices import short_uuid
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec.podannotations import decode_allocation

pytestmark = pytest.mark.timeout(300)
MEM = 16384


async def test_explain_and_usage_on_the_real_control_plane(
    kube_apiserver: ApiServer, kube_cleanup: Cleanup, redis_url: str, tmp_path: Path
) -> None:
    api = kube_apiserver
    run_id = f"inspect-{uuid.uuid4().hex[:6]}"
    labels = {RUN_LABEL: run_id}
    ns = kube_cleanup.namespace(run_id, labels)
    nodes = [f"{run_id}-n{i}" for i in range(2)]
    prefix = ["--redis-url", redis_url, "--key-prefix", f"vgpu-{run_id}"]
    kubectl_vgpu = str(Path(sys.executable).parent / "kubectl-vgpu")
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env["KUBECONFIG"] = str(api.kubeconfig)
    async with Kube.open(api) as kube:
        for n in nodes:
            kube_cleanup.node(n)
        await kube.create_all("/api/v1/nodes", [gpu_node(n, NodeShape(gpus=2, mem_mib=MEM), labels) for n in nodes])
        settings = Settings(replicas=1, chart=False, webhook=False)
        async with running_system(
            api, redis_url, tmp_path / run_id, settings, run_id=run_id, node_selector=f"{RUN_LABEL}={run_id}"
        ):
            await kube.create(f"/api/v1/namespaces/{ns}/pods", gpu_pod("fit", mem=10000, cores=30))

            async def settled() -> bool:
                _, pod = await kube.call("GET", f"/api/v1/namespaces/{ns}/pods/fit")
                return (pod["metadata"].get("annotations") or {}).get(keys.BIND_PHASE) == "success"

            await eventually(settled, 120, "pod fit bound and allocated")
            _, fit = await kube.call("GET", f"/api/v1/namespaces/{ns}/pods/fit")
            node = fit["spec"]["nodeName"]
            decoded = decode_allocation(fit)
            assert decoded is not None
            ((device,),) = decoded[0]
            assert device.used_mem_mib == 10000

            async def recorded() -> bool:
                ran = await run_cli("usage", *prefix, "-o", "json")
                pods = [p for n in ran.json()["nodes"] for d in n["devices"] for p in d["pods"]]
                return [(p["name"], p["state"]) for p in pods] == [("fit", "confirmed")]

            await eventually(recorded, 60, "the informer confirmed fit's allocation")

            await kube.create(f"/api/v1/namespaces/{ns}/pods", gpu_pod("huge", mem=20000, cores=10))
            ran = await run_cli("explain", f"{ns}/huge", *prefix, env=env, program=kubectl_vgpu)
            assert ran.code == 0, ran.err
            lines = ran.out.splitlines()
            assert lines[0] == f"Pod {ns}/huge: Pending; not placed"
            for n in nodes:
                free = {f"GPU-{n}-{i}": MEM for i in range(2)}
                if n == node:
                    free[device.uuid] -= 10000
                best = max(sorted(free), key=lambda u: free[u])
                assert row(ran.out, n, start=True) == [
                    n,
                    "no fit",
                    "2/2 CardInsufficientMemory",
                    f"needs 20,000 MiB on one GPU; the most free on {n} is {free[best]:,} MiB on {best}",
                ]
            assert "Would get now: no node; the nearest misses above say what is missing" in lines

            bound = await run_cli("explain", f"{ns}/fit", *prefix, "-o", "json", env=env, program=kubectl_vgpu)
            got = bound.json()
            assert (got["pod"]["state"], got["pod"]["node"]) == ("bound", node)
            (row_json,) = got["devices"]
            assert row_json["uuid"] == device.uuid
            assert row_json["memory_mib"] == {"used": 10000, "capacity": MEM}
            assert [p["name"] for p in row_json["pods"]] == ["fit"]

            usage = await run_cli("usage", *prefix, "--node", node, program=kubectl_vgpu)
            assert usage.code == 0, usage.err
            cells = row(usage.out, short_uuid(device.uuid))
            assert cells[-6:] == ["10,000/16,384", "61.0%", "30/100%", "1/10", "ok", f"{ns}/fit"]
            assert "Cluster: 1 node, 2 GPUs (2 usable, 0 unhealthy, 0 cordoned), 1 pod, 0 node locks held" in (
                usage.out.splitlines()
            )
