"""A node that reboots while the registrar is down, on the real control plane.

The node is deleted and comes back without its device plugin's registration, and the registrar (killed, as a
Deployment's pod on a failed machine) has not seen it yet, so Redis still lists the node's cards and the extender
places the next pod there. The kubelet refuses the pod at admission (no plugin has registered its resources: the
pod ends ``Failed``, ``UnexpectedAdmissionError``) and no device plugin ever settles its bind. What it held must
come back at once — its allocation, the node lock's annotation and its Redis lock — not after
``--node-lock-timeout`` (5 min), and the node takes a pod again as soon as its plugin and the registrar are back.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from tests.controlplane.control import ApiServer, Cleanup
from tests.controlplane.harness import RUN_LABEL, Kube, NodeShape, Settings, gpu_node, gpu_pod, running_system
from tests.waiting import eventually
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.store import Store, connect

SHAPE = NodeShape(gpus=1)


async def test_a_pod_the_kubelet_refuses_after_a_reboot_gives_its_node_back_at_once(
    kube_apiserver: ApiServer, kube_cleanup: Cleanup, redis_url: str, tmp_path: Path
) -> None:
    run_id = f"reboot-{uuid.uuid4().hex[:6]}"
    labels = {RUN_LABEL: run_id}
    ns = kube_cleanup.namespace(run_id, labels)
    node = f"{run_id}-n0"
    body = gpu_node(node, SHAPE, labels)
    kube_cleanup.node(node)
    pods = f"/api/v1/namespaces/{ns}/pods"
    store = Store.create(connect(redis_url), prefix=f"vgpu-{run_id}")
    async with Kube.open(kube_apiserver) as kube:
        await kube.create("/api/v1/nodes", body)

        async def pod(name: str) -> dict[str, Any]:
            status, got = await kube.call("GET", f"{pods}/{name}")
            assert status == 200, got
            return dict(got)

        async def allocated(name: str) -> bool:
            return ((await pod(name))["metadata"].get("annotations") or {}).get(keys.BIND_PHASE) == "success"

        async def node_lock() -> str | None:
            _, got = await kube.call("GET", f"/api/v1/nodes/{node}")
            return (got["metadata"].get("annotations") or {}).get(keys.NODE_LOCK)

        settings = Settings(replicas=1)
        async with running_system(
            kube_apiserver, redis_url, tmp_path / run_id, settings, run_id=run_id, node_selector=f"{RUN_LABEL}={run_id}"
        ) as system:
            await kube.create(pods, gpu_pod("before"))
            await eventually(lambda: allocated("before"), 60, "the first pod allocated")

            await system.kill("registrar")
            # the machine reboots: its pods are collected with the node, which registers again without devices
            assert (await kube.call("DELETE", f"/api/v1/nodes/{node}"))[0] == 200
            assert (await kube.call("DELETE", f"{pods}/before"))[0] == 200
            bare = {**body, "metadata": {**body["metadata"], "annotations": {}}}
            await kube.create("/api/v1/nodes", bare)

            await kube.create(pods, gpu_pod("refused"))

            async def failed() -> bool:
                status = (await pod("refused")).get("status") or {}
                return status.get("phase") == "Failed"

            await eventually(failed, 60, "the kubelet refuses the pod")
            refused = await pod("refused")
            assert refused["spec"]["nodeName"] == node
            assert refused["status"]["reason"] == "UnexpectedAdmissionError"
            assert refused["metadata"]["annotations"][keys.BIND_PHASE] == "allocating"
            assert system.plugin.refused == [f"{ns}/refused on {node}"]
            # given back at once (the lock timeout is 5 min; the informer acts on the pod's end)
            await eventually(lambda: _none(node_lock()), 30, "the node lock annotation removed")
            await eventually(lambda: _empty(store.locks.inspect_many([node])), 30, "the Redis lock released")
            await eventually(lambda: _none(store.reservations.get(refused["metadata"]["uid"])), 30, "released")

            # the device plugin is back, then the registrar: the node takes pods again
            register = body["metadata"]["annotations"][keys.NODE_NVIDIA_REGISTER]
            patch = {"metadata": {"annotations": {keys.NODE_NVIDIA_REGISTER: register}}}
            assert await kube.merge_patch(f"/api/v1/nodes/{node}", patch) == 200
            await system.restart("registrar")
            await kube.create(pods, gpu_pod("after"))
            await eventually(lambda: allocated("after"), 60, "a pod allocated on the node again")
            assert (await pod("after"))["spec"]["nodeName"] == node
            assert system.plugin.failures == [] and system.crashed() == []
    await store.aclose()


async def _none(value: Any) -> bool:
    return await value is None


async def _empty(value: Any) -> bool:
    return not await value
