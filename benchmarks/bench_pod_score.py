"""Benchmark of the plan for a vendor with a pod-dependent node score (``pod_score``: Vastai die mode, MetaX).

Run: ``.venv/bin/python -m benchmarks.bench_pod_score [--nodes 100 1000] [--calls 50]``. Prints figures only.
Such a pod is fitted on every node before one is chosen, where other pods stop at the first node that fits: this
prints p50/p99 of one ``plan()`` for a 2-die Vastai pod and, for comparison, for a 2-card Biren pod (slot-only too,
no pod score) on clusters of the same shape (8 cards of 2 dies per node; half the nodes have one die used per card).
The walk stops once no node can reach the best total; here the busy half comes first under binpack and each of its
nodes could still win (its dies would be split, 0.5, but its score is higher), so that half is fitted in full.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from collections.abc import Callable

from vgpu_scheduler.shared.domain.model import (
    NO_CONSTRAINTS,
    ContainerRequest,
    DeviceInfo,
    DeviceUsage,
    NodeInventory,
    PodRequest,
)
from vgpu_scheduler.shared.domain.plan import plan
from vgpu_scheduler.shared.domain.scoring import Policies
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.vendors import biren, vastai
from vgpu_scheduler.shared.vendors.nvidia import NvidiaVendor
from vgpu_scheduler.shared.vendors.registry import Vendors

CARDS = 8
DIES = 2
RULES = Vendors((NvidiaVendor(), *vastai.build(None), *biren.build(None))).rules


def build_cluster(n_nodes: int, vendor: str, seed: int = 7) -> list[NodeSnapshot]:
    rnd = random.Random(seed)
    nodes: list[NodeSnapshot] = []
    for k in range(n_nodes):
        name = f"node-{k:05d}"
        devices = tuple(
            DeviceInfo(
                f"{vendor}-{k:05d}-{c}-{d}",
                c * DIES + d,
                1,
                16384,
                100,
                vendor,
                0,
                f"die:{name}-{c}" if vendor == vastai.NAME else "",
                True,
                vendor=vendor,
            )
            for c in range(CARDS)
            for d in range(DIES)
        )
        usage = {dev.id: DeviceUsage(1) for dev in devices if dev.index % DIES == 0} if rnd.random() < 0.5 else {}
        nodes.append(NodeSnapshot(NodeInventory(node=name, vendor=vendor, devices=devices), usage))
    return nodes


def _time(fn: Callable[[], object], calls: int) -> list[float]:
    out: list[float] = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def _pct(xs: list[float], q: float) -> float:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def run(n_nodes: int, calls: int) -> None:
    for vendor, note in ((vastai.NAME, "pod_score: walk while one can win"), (biren.NAME, "first fit")):
        nodes = build_cluster(n_nodes, vendor)
        pod = PodRequest(containers=(ContainerRequest(2, 0, 100, 0, vendor),), init_count=0)

        def once(nodes: list[NodeSnapshot] = nodes, pod: PodRequest = pod) -> object:
            return plan(pod, NO_CONSTRAINTS, nodes, policies=Policies(), rules=RULES)

        times = _time(once, calls)
        print(
            f"{n_nodes:>6} nodes  {vendor:<7} ({note:<33})  p50 {_pct(times, 0.5):8.2f} ms  "
            f"p99 {_pct(times, 0.99):8.2f} ms  mean {statistics.fmean(times) * 1000:8.2f} ms"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--calls", type=int, default=50)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}; {CARDS} cards × {DIES} dies per node")
    for n in args.nodes:
        run(n, args.calls)


if __name__ == "__main__":
    main()
