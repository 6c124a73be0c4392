"""What one list of many pods costs an extender replica in memory: whole pods in one answer, or summaries read a
page at a time (``Api.list_pod_summaries``), as preemption and gang checks read them on a full cluster.

Run: ``KUBEBUILDER_ASSETS=.cache/k8s .venv/bin/python -m benchmarks.bench_pod_lists [--pods 7000]``. Starts the
project's control plane, creates ``--pods`` GPU pods shaped like the chaos workload's (labels, HAMi's annotations,
device limits; the API server adds managedFields), two in three placed on a node, then lists them each way in
this process and prints the pods read, the MiB the result keeps and the MiB the list peaks at while it is read
(``tracemalloc``: the Python heap, which sets a replica's resident high-water mark). Figures only, never
asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import tracemalloc
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tests.controlplane.control import ApiServer, assets_dir, control_plane
from vgpu_scheduler.shared.k8s import Api, KubeSettings, open_client
from vgpu_scheduler.shared.preemption import placed_pods

NAMESPACE = "bench-lists"
LIMITS = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4096", "nvidia.com/gpucores": "25"}


def _pod(i: int) -> dict[str, Any]:
    devices = f"GPU-{i % 8:04d}-aaaa-bbbb-cccc-dddddddddddd,NVIDIA,4096,25:;"
    spec: dict[str, Any] = {
        "schedulerName": "vgpu-scheduler",
        "containers": [
            {
                "name": "main",
                "image": "registry.example/train:1.0",
                "command": ["python", "train.py"],
                "resources": {"limits": LIMITS},
            }
        ],
    }
    if i % 3:
        spec["nodeName"] = f"node-{i % 1000}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"p-{i:05d}",
            "labels": {"app": "train", "chaos": "shared"},
            "annotations": {
                "hami.io/vgpu-node": f"node-{i % 1000}",
                "hami.io/vgpu-devices-to-allocate": devices,
                "hami.io/vgpu-devices-allocated": devices,
                "hami.io/bind-phase": "success",
            },
        },
        "spec": spec,
    }


def _create(api: ApiServer, pods: int) -> None:
    api.request(
        "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    )
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda i: api.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", _pod(i)), range(pods)))


async def _measure(what: str, read: Callable[[], Awaitable[list[dict[str, Any]]]]) -> None:
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    pods = await read()
    kept, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"{what:<34} {len(pods):>7} {(kept - base) / 2**20:>9.1f} {(peak - base) / 2**20:>9.1f}", flush=True)
    del pods


async def _bench(server: ApiServer) -> None:
    async with open_client(KubeSettings(kubeconfig=str(server.kubeconfig), qps=0, timeout_s=120)) as client:
        api = Api(client, component="bench")
        await api.list_pods(namespace="kube-system")  # the connection and the client's imports, outside the figures
        print(f"{'LIST':<34} {'PODS':>7} {'KEPT MiB':>9} {'PEAK MiB':>9}")
        for _ in range(2):
            await _measure("whole pods, one answer", api.list_pods)
            await _measure("summaries, 500 a page", api.list_pod_summaries)
            await _measure("placed summaries (preemption's)", lambda: placed_pods(api))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pods", type=int, default=7000)
    args = p.parse_args()
    assets = assets_dir()
    if assets is None:
        sys.exit("bench_pod_lists: set KUBEBUILDER_ASSETS=$(scripts/install-control-plane.sh .cache/k8s) (see README)")
    with control_plane(assets) as server:
        _create(server, args.pods)
        asyncio.run(_bench(server))


if __name__ == "__main__":
    main()
