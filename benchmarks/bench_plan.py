"""Benchmark of ``plan()``: p50/p99 per call on 1,000 and 5,000 nodes × 8 GPUs with mixed usage.

Run: ``.venv/bin/python -m benchmarks.bench_plan [--nodes 1000 5000] [--calls 400]``. Prints figures only.
Snapshots are built once (as the extender would cache them); each timed call is one ``plan()`` with the fast
path, plus, for reference, a few calls of the exhaustive evaluation.
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import statistics
import time
from collections.abc import Callable

from vgpu_scheduler.shared.domain.model import (
    NO_CONSTRAINTS,
    NVIDIA,
    ContainerRequest,
    DeviceInfo,
    DeviceUsage,
    NodeInventory,
    NodePolicy,
    PodRequest,
)
from vgpu_scheduler.shared.domain.plan import Decision, plan
from vgpu_scheduler.shared.domain.scoring import Policies
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot

GPUS = 8
COUNT = 10
MEM = 81920


def _device_usage(rnd: random.Random, kind: str) -> DeviceUsage:
    if kind == "idle":
        return DeviceUsage()
    if kind == "whole":
        return DeviceUsage(used=1, used_mem_mib=MEM, used_cores=100)
    tasks = rnd.randint(1, 6 if kind == "shared" else COUNT)
    mem = min(MEM, sum(rnd.choice([4096, 8192, 10240, 20480]) for _ in range(tasks)))
    cores = min(100, sum(rnd.choice([0, 10, 20, 30]) for _ in range(tasks)))
    return DeviceUsage(used=tasks, used_mem_mib=mem, used_cores=cores)


def build_cluster(n_nodes: int, seed: int = 7) -> list[NodeSnapshot]:
    """Nodes of 8 A100-80GB (10 slots each): ~30 % idle, ~40 % shared, ~20 % nearly full, ~10 % whole cards."""
    rnd = random.Random(seed)
    nodes: list[NodeSnapshot] = []
    for k in range(n_nodes):
        name = f"node-{k:05d}"
        profile = rnd.choices(["idle", "shared", "busy", "whole"], weights=[30, 40, 20, 10])[0]
        devices = tuple(
            DeviceInfo(
                id=f"GPU-{k:05d}-{i}",
                index=i,
                count=COUNT,
                devmem_mib=MEM,
                devcore=100,
                type="NVIDIA A100-SXM4-80GB",
                numa=i // 4,
                mode="hami-core",
                health=rnd.random() > 0.01,
            )
            for i in range(GPUS)
        )
        usage: dict[str, DeviceUsage] = {}
        for d in devices:
            kind = profile if profile != "shared" else rnd.choice(["idle", "shared", "shared"])
            if profile == "whole":
                kind = rnd.choice(["whole", "whole", "idle"])
            u = _device_usage(rnd, kind)
            if u.used:
                usage[d.id] = u
        nodes.append(NodeSnapshot(NodeInventory(node=name, vendor=NVIDIA, devices=devices), usage))
    rnd.shuffle(nodes)
    return nodes


PODS: dict[str, PodRequest] = {
    "1 GPU 8 GiB 20 %": PodRequest((ContainerRequest(nums=1, mem_mib=8192, cores_pct=20),), 0),
    "1 GPU 25 % memory": PodRequest((ContainerRequest(nums=1, mem_pct=25, cores_pct=10),), 0),
    "1 whole GPU": PodRequest((ContainerRequest(nums=1, mem_pct=100, cores_pct=100),), 0),
    "2 GPU 20 GiB": PodRequest((ContainerRequest(nums=2, mem_mib=20480, cores_pct=30),), 0),
    "4 whole GPUs": PodRequest((ContainerRequest(nums=4, mem_pct=100, cores_pct=100),), 0),
    "8 whole GPUs": PodRequest((ContainerRequest(nums=8, mem_pct=100, cores_pct=100),), 0),
    "init + 2 app": PodRequest(
        (
            ContainerRequest(nums=1, mem_mib=4096),
            ContainerRequest(nums=1, mem_mib=8192, cores_pct=20),
            ContainerRequest(nums=2, mem_mib=8192, cores_pct=20),
        ),
        1,
    ),
}


def _time(fn: Callable[[], object], calls: int) -> list[float]:
    out: list[float] = []
    for _ in range(calls):
        t0 = time.perf_counter_ns()
        fn()
        out.append((time.perf_counter_ns() - t0) / 1e6)
    return out


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def run(n_nodes: int, calls: int) -> None:
    t0 = time.perf_counter()
    nodes = build_cluster(n_nodes)
    build_s = time.perf_counter() - t0
    per_node_us = build_s / n_nodes * 1e6
    print(f"\n== {n_nodes} nodes × {GPUS} GPUs (snapshots built in {build_s:.2f} s, {per_node_us:.0f} µs/node)")
    print(f"{'pod':<22} {'policy':<8} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8}  {'result':<12} {'full p50 ms':>11}")
    all_times: list[float] = []
    for node_policy in (NodePolicy.BINPACK, NodePolicy.SPREAD):
        policies = Policies(node=node_policy)
        for label, pod in PODS.items():
            call = functools.partial(plan, pod, NO_CONSTRAINTS, nodes, policies=policies)
            result = call()
            times = _time(call, calls)
            all_times += times
            full = _time(functools.partial(call, exhaustive=True), 3)
            outcome = f"-> {result.node}" if isinstance(result, Decision) else "no fit"
            print(
                f"{label:<22} {node_policy.value:<8} {_pct(times, 0.5):8.3f} {_pct(times, 0.99):8.3f} "
                f"{statistics.fmean(times):8.3f}  {outcome:<12} {_pct(full, 0.5):11.1f}"
            )
    p50, p99, mean = _pct(all_times, 0.5), _pct(all_times, 0.99), statistics.fmean(all_times)
    print(f"{'all pods':<22} {'both':<8} {p50:8.3f} {p99:8.3f} {mean:8.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs (timings are wall clock per call)")
    for n in args.nodes:
        run(n, args.calls)
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
