"""Benchmark of ``plan()`` for AWS Neuron pods: p50/p99 per call on Inferentia2 and Trainium nodes of 16 devices.

Run: ``.venv/bin/python -m benchmarks.bench_neuron [--nodes 1000] [--calls 300]``. Prints figures only. Half the
nodes are ``inf2.48xlarge`` (a ring: any run of devices), half ``trn1.32xlarge`` (runs of 1, 4, 8 or 16 aligned);
about a third of each node's devices hold one or two cores (with their ``core=<bit>`` usage tags). Each timed call
is one ``plan()`` (fast path) of a one-container pod: one core, two cores, four whole devices, or eight.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from vgpu_scheduler.shared.domain.model import NO_CONSTRAINTS, DeviceUsage, NodeInventory, PodRequest
from vgpu_scheduler.shared.domain.plan import Decision, plan
from vgpu_scheduler.shared.domain.scoring import Policies
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.vendors import awsneuron
from vgpu_scheduler.shared.vendors.nvidia import NvidiaVendor
from vgpu_scheduler.shared.vendors.registry import Vendors

DEVICES = 16
VENDOR = awsneuron.build(None)[0]
RULES = Vendors((NvidiaVendor(), VENDOR)).rules
REQUESTS = {
    "1 core": {"aws.amazon.com/neuroncore": "1"},
    "2 cores": {"aws.amazon.com/neuroncore": "2"},
    "4 devices": {"aws.amazon.com/neuron": "4"},
    "8 devices": {"aws.amazon.com/neuron": "8"},
}


def build_cluster(n_nodes: int, seed: int = 11) -> list[NodeSnapshot]:
    rnd = random.Random(seed)
    nodes = []
    for k in range(n_nodes):
        name = f"neuron-{k:05d}"
        kind = "inf2.48xlarge" if k % 2 == 0 else "trn1.32xlarge"
        devices = awsneuron.devices_from_capacity(name, DEVICES, 2 * DEVICES, kind)
        usage = {}
        for d in devices:
            roll = rnd.random()
            mask = rnd.choice((0b01, 0b10)) if roll < 0.2 else 0b11 if roll < 0.33 else 0
            if mask:  # with the core tags its holder's charge adds (docs/vendors/awsneuron.md)
                tags = tuple((t, 1) for t in awsneuron.core_tags(mask))
                usage[d.id] = DeviceUsage(used=1, used_cores=mask, tags=tags)
        nodes.append(NodeSnapshot(NodeInventory(node=name, vendor=awsneuron.NAME, devices=devices), usage))
    return nodes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    nodes = build_cluster(args.nodes)
    print(f"plan() for AWS Neuron pods, {args.nodes} nodes x {DEVICES} devices, {args.calls} calls each")
    for label, limits in REQUESTS.items():
        request = VENDOR.container_request({"name": "c", "resources": {"limits": limits}}, "c")
        pod = PodRequest(containers=(request,), init_count=0)
        times = []
        placed = 0
        for _ in range(args.calls):
            t0 = time.perf_counter()
            got = plan(pod, NO_CONSTRAINTS, nodes, policies=Policies(), rules=RULES)
            times.append(time.perf_counter() - t0)
            placed += isinstance(got, Decision)
        times.sort()
        p50 = statistics.median(times) * 1000
        p99 = times[int(len(times) * 0.99) - 1] * 1000
        print(f"  {label:10s} p50 {p50:.3f} ms  p99 {p99:.3f} ms  ({placed}/{args.calls} placed)")


if __name__ == "__main__":
    main()
