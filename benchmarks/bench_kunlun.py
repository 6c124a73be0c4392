"""Timing of ``plan`` for a Kunlunxin whole-XPU pod, whose node score depends on the XPUs it gets (the bounded walk:
only the nodes whose bound on that score could still win are fitted), next to a vXPU pod of the same shape (no such
score: the fast walk to the first node that fits).

Run: ``.venv/bin/python -m benchmarks.bench_kunlun [--nodes 100 1000] [--reps N] [--seed S]``.
Each node is an 8-XPU board (whole XPUs, or vXPUs with 4 slots) with a random half of its XPUs busy; the pod asks
for 2 XPUs (or 2 quarter vXPUs). Prints, per case, p50/p99 of the wall time and p50 of the CPU time in milliseconds
(the machine's load inflates the first, not the second), under node binpack (the default) and node spread.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from vgpu_scheduler.shared.domain.model import (
    MEM_PCT_UNSET,
    ContainerRequest,
    DeviceInfo,
    DeviceUsage,
    NodeInventory,
    NodePolicy,
    PodConstraints,
    PodRequest,
)
from vgpu_scheduler.shared.domain.plan import Decision, plan
from vgpu_scheduler.shared.domain.scoring import Policies
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.vendors import kunlun
from vgpu_scheduler.shared.vendors.nvidia import NvidiaVendor
from vgpu_scheduler.shared.vendors.registry import Vendors

XPU_MIB = kunlun.XPU_MEMORY_MIB


def cluster(vendor: str, nodes: int, rng: random.Random) -> list[NodeSnapshot]:
    out = []
    for n in range(nodes):
        name = f"node-{n:05d}"
        slots, used_mem, used_cores = (100, XPU_MIB, 100) if vendor == kunlun.NAME else (4, 24576, 25)
        devices = tuple(
            DeviceInfo(f"{name}-kunlun-{i}", i, slots, XPU_MIB, 100, vendor, i // 4, "", True, vendor=vendor)
            for i in range(8)
        )
        busy = rng.sample(range(8), 4)
        usage = {f"{name}-kunlun-{i}": DeviceUsage(1, used_mem, used_cores) for i in busy}
        out.append(NodeSnapshot(NodeInventory(name, vendor, devices), usage))
    return out


def run(nodes: int, reps: int, seed: int) -> None:
    rules = Vendors((NvidiaVendor(), *kunlun.build(None))).rules
    rng = random.Random(seed)
    cases = {
        "whole XPUs (scored: bounded walk)": (kunlun.NAME, ContainerRequest(2, 0, 100, 0, kunlun.NAME)),
        "vXPUs (no node term: first fit)": (
            kunlun.VXPU_NAME,
            ContainerRequest(2, 24576, MEM_PCT_UNSET, 25, kunlun.VXPU_NAME),
        ),
    }
    for label, (vendor, request) in cases.items():
        snaps = cluster(vendor, nodes, rng)
        pod = PodRequest(containers=(request,), init_count=0)
        for policy in NodePolicy:
            times, cpu = [], []
            for _ in range(reps):
                t0, c0 = time.perf_counter(), time.process_time()
                got = plan(pod, PodConstraints(), snaps, policies=Policies(node=policy), rules=rules)
                times.append((time.perf_counter() - t0) * 1000)
                cpu.append((time.process_time() - c0) * 1000)
                assert isinstance(got, Decision), got
            times.sort()
            p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
            print(
                f"{nodes:>6} nodes  {policy.value:<7}  {label:<34} "
                f"p50 {statistics.median(times):8.2f} ms  p99 {p99:8.2f} ms  (CPU p50 {statistics.median(cpu):8.2f} ms)"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    for n in args.nodes:
        run(n, args.reps, args.seed)


if __name__ == "__main__":
    main()
