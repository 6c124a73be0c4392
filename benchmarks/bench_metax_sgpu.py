"""Benchmark of the plan for MetaX sGPU pods by app class (docs/vendors/metax.md).

Run: ``.venv/bin/python -m benchmarks.bench_metax_sgpu [--nodes 100 1000] [--calls 50]``. Prints figures only.
Each node has 8 sGPU cards; half the nodes run pods on their first four cards (an unclassed best-effort pod on
cards 0-1, an offline pod on cards 2-3, with an online one beside it on card 3). Printed: p50/p99 of one ``plan()``
for an unclassed pod (first fit), an offline pod (first fit) and an online pod (its node score depends on the
cards it gets, so every node that could still win is fitted), each asking for one card, 4 GiB and 30 % of it.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics

from benchmarks.bench_pod_score import _pct, _time
from vgpu_scheduler.shared.domain.model import (
    MEM_PCT_UNSET,
    ContainerRequest,
    DeviceInfo,
    DeviceUsage,
    NodeInventory,
    PodConstraints,
    PodRequest,
)
from vgpu_scheduler.shared.domain.plan import plan
from vgpu_scheduler.shared.domain.scoring import Policies
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.vendors import metax, metax_sgpu
from vgpu_scheduler.shared.vendors.nvidia import NvidiaVendor
from vgpu_scheduler.shared.vendors.pods import decode_vendor_constraints
from vgpu_scheduler.shared.vendors.registry import Vendors

CARDS = 8
SG = metax_sgpu.NAME
VENDORS = Vendors((NvidiaVendor(), *metax.build(None)))
BUSY: dict[int, DeviceUsage] = {
    0: DeviceUsage(1, 4096, 30, tags=(("qos=best-effort", 1),)),
    1: DeviceUsage(1, 4096, 30, tags=(("qos=best-effort", 1),)),
    2: DeviceUsage(1, 4096, 30, tags=(("app=offline", 1), ("qos=best-effort", 1))),
    3: DeviceUsage(2, 8192, 30, tags=(("app=offline", 1), ("app=online", 1), ("qos=best-effort", 1))),
}


def build_cluster(n_nodes: int, seed: int = 7) -> list[NodeSnapshot]:
    rnd = random.Random(seed)
    nodes: list[NodeSnapshot] = []
    for k in range(n_nodes):
        devices = tuple(
            DeviceInfo(f"SG-{k:05d}-{c}", c, 8, 32768, 100, SG, 0, metax_sgpu.device_mode("", 0), True, vendor=SG)
            for c in range(CARDS)
        )
        usage = {devices[c].id: u for c, u in BUSY.items()} if rnd.random() < 0.5 else {}
        nodes.append(NodeSnapshot(NodeInventory(node=f"node-{k:05d}", vendor=SG, devices=devices), usage))
    return nodes


def run(n_nodes: int, calls: int) -> None:
    nodes = build_cluster(n_nodes)
    pod = PodRequest(containers=(ContainerRequest(1, 4096, MEM_PCT_UNSET, 30, SG),), init_count=0)
    for label, annos in (
        ("unclassed", {metax_sgpu.QOS_POLICY_KEY: "best-effort"}),
        ("offline", {metax_sgpu.APP_CLASS_KEY: "offline", metax_sgpu.QOS_POLICY_KEY: "best-effort"}),
        ("online", {metax_sgpu.APP_CLASS_KEY: "online"}),
    ):
        constraints = decode_vendor_constraints(annos, VENDORS)

        def once(c: PodConstraints = constraints) -> object:
            return plan(pod, c, nodes, policies=Policies(), rules=VENDORS.rules)

        times = _time(once, calls)
        print(
            f"{n_nodes:>6} nodes  {label:<9}  p50 {_pct(times, 0.5):8.2f} ms  p99 {_pct(times, 0.99):8.2f} ms  "
            f"mean {statistics.fmean(times) * 1000:8.2f} ms"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--calls", type=int, default=50)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}; {CARDS} sGPU cards per node, half the nodes busy")
    for n in args.nodes:
        run(n, args.calls)


if __name__ == "__main__":
    main()
