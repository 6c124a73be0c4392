"""Benchmark of one Prometheus scrape of the extender's and the informer's ``/metrics``: ms per scrape and bytes.

Run: ``.venv/bin/python -m benchmarks.bench_metrics [--nodes 300 1000] [--scrapes 10] [--legacy]
[--pods-per-gpu 2] [--only extender|informer]``. Prints figures only. The extender's registry is built as the
extender builds it (process collectors, build info, ``ExtenderMetrics``, the allocation collector over a
``name → NodeSnapshot`` map like the snapshot cache's, a few namespace quotas); the cluster is ``bench_plan``'s
(8 A100 per node, mixed usage, ~1 % unhealthy devices) with a cordoned device on every tenth node. Each scrape is
what the ``/metrics`` handler runs (the registry rendered to text), timed in CPU and wall time, in four
situations:

* ``unchanged``: the same snapshots every scrape (a quiet cluster);
* ``churn 1 %``: 1 % of the nodes get a new snapshot (one more pod on a device) between two scrapes;
* ``reloaded``: every node gets a new snapshot object of the same devices and usage (a full reload of the
  snapshot cache);
* ``all changed``: every node gets a new snapshot with one more pod (the worst case: nothing can be reused).

The informer leader's registry holds its counters and the per-container gauges of ``--pods-per-gpu`` single-GPU
pods on every GPU; there 1 % of the pods are replaced, every allocation re-recorded equal, or every one changed.

``generic`` is prometheus_client's own ``generate_latest`` over the same registry (every sample built as an
object and formatted one by one), as ``/metrics`` rendered before; ``ours`` is the renderer ``/metrics`` uses.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import statistics
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, generate_latest

from benchmarks.bench_plan import build_cluster
from vgpu_scheduler.services.extender.metrics import AllocationCollector, ExtenderMetrics, FilterOutcome, QuotaView
from vgpu_scheduler.services.informer.metrics import AllocationView, InformerMetrics, PodAllocationCollector
from vgpu_scheduler.shared.domain.accounting import collapse
from vgpu_scheduler.shared.domain.allocation import Allocation
from vgpu_scheduler.shared.domain.model import ContainerDevice, DeviceUsage
from vgpu_scheduler.shared.domain.quota import QuotaLimits, QuotaState
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.metrics import new_registry, register_build_info, render_text

Renderer = Callable[[CollectorRegistry], bytes]
RENDERERS: dict[str, Renderer] = {"generic": generate_latest, "ours": render_text}


def cluster(n_nodes: int) -> dict[str, NodeSnapshot]:
    """``bench_plan``'s cluster as the snapshot cache holds it (name → snapshot), a cordoned device on every
    tenth node."""
    out: dict[str, NodeSnapshot] = {}
    for snap in build_cluster(n_nodes):
        inv = snap.inventory
        if int(snap.name.rsplit("-", 1)[1]) % 10 == 0:
            inv = dataclasses.replace(inv, cordoned=frozenset({inv.devices[0].id}))
        out[snap.name] = NodeSnapshot(inv, dict(snap.usage))
    return out


def one_more_pod(snap: NodeSnapshot, rnd: random.Random) -> NodeSnapshot:
    """The node's next snapshot: one more 4 GiB 10 % task on one of its devices (a new object, as the cache
    installs after a change)."""
    dev = rnd.choice(snap.inventory.devices)
    u = snap.device_usage(dev.id)
    usage = dict(snap.usage)
    usage[dev.id] = DeviceUsage(
        used=u.used + 1, used_mem_mib=u.used_mem_mib + 4096, used_cores=min(100, u.used_cores + 10)
    )
    return NodeSnapshot(snap.inventory, usage)


def registry_for(view: dict[str, dict[str, NodeSnapshot]], *, legacy: bool) -> CollectorRegistry:
    """A registry as the extender's process builds it, reading ``view["nodes"]`` at scrape time."""
    registry = new_registry()
    register_build_info(registry, service="extender")
    metrics = ExtenderMetrics(registry)
    metrics.policy_info.labels("binpack", "spread").set(1)
    for outcome in FilterOutcome:
        metrics.filter_outcome(outcome)
    quotas = QuotaView(
        {f"team-{i}": QuotaState(QuotaLimits(mem_mib=200_000, cores_pct=800), 1000 * i, 10 * i) for i in range(20)}
    )
    registry.register(AllocationCollector(lambda: view["nodes"], lambda: quotas, legacy=legacy))
    return registry


SITUATIONS = ("unchanged", "churn 1 %", "reloaded", "all changed")
Mutate = Callable[[str, random.Random], None]
"""Changes the scraped view for one situation before a scrape."""


def table(title: str, scrapes: int, setup: Callable[[], tuple[CollectorRegistry, Mutate]]) -> None:
    """Time ``scrapes`` renders of a fresh ``setup()`` registry per situation and renderer; print one row each."""
    print(f"\n== {title}, {scrapes} scrapes each")
    print(f"{'situation':<12} {'renderer':<9} {'CPU ms/scrape':>14} {'p50 wall ms':>12} {'max wall ms':>12}", end="")
    print(f" {'bytes':>11}")
    for situation in SITUATIONS:
        for renderer_name, render in RENDERERS.items():
            rnd = random.Random(11)
            registry, mutate = setup()
            size = len(render(registry))  # warm-up: a process's first scrape costs what "all changed" does
            cpu: list[float] = []
            wall: list[float] = []
            for _ in range(scrapes):
                mutate(situation, rnd)
                c0, w0 = time.process_time(), time.perf_counter()
                size = len(render(registry))
                cpu.append((time.process_time() - c0) * 1e3)
                wall.append((time.perf_counter() - w0) * 1e3)
            print(
                f"{situation:<12} {renderer_name:<9} {statistics.mean(cpu):>14.1f} {statistics.median(wall):>12.1f} "
                f"{max(wall):>12.1f} {size:>11,}"
            )


def extender(n_nodes: int, scrapes: int, legacy: bool) -> None:
    base = cluster(n_nodes)
    names = sorted(base)

    def setup() -> tuple[CollectorRegistry, Mutate]:
        view = {"nodes": dict(base)}

        def mutate(situation: str, rnd: random.Random) -> None:
            if situation == "churn 1 %":
                for name in rnd.sample(names, max(1, n_nodes // 100)):
                    view["nodes"][name] = one_more_pod(view["nodes"][name], rnd)
            elif situation == "reloaded":
                view["nodes"] = {n: NodeSnapshot(s.inventory, dict(s.usage)) for n, s in view["nodes"].items()}
            elif situation == "all changed":
                view["nodes"] = {n: one_more_pod(s, rnd) for n, s in view["nodes"].items()}

        return registry_for(view, legacy=legacy), mutate

    table(f"extender: {n_nodes} nodes × 8 GPUs{' (--legacy-metrics)' if legacy else ''}", scrapes, setup)


def pod_allocation(uid: str, node: int, gpu: int, mem: int) -> Allocation:
    devs = ((ContainerDevice(f"GPU-{node:05d}-{gpu}", mem, 20),),)
    return Allocation(uid, f"team-{node % 20}", f"job-{uid}", f"node-{node:05d}", devs, collapse(devs, 0))


def informer(n_nodes: int, scrapes: int, legacy: bool, per_gpu: int) -> None:
    """The informer leader's registry: one single-GPU pod per slot, ``per_gpu`` on each GPU."""
    base = {
        f"uid-{n}-{g}-{k}": pod_allocation(f"uid-{n}-{g}-{k}", n, g, 4096)
        for n in range(n_nodes)
        for g in range(8)
        for k in range(per_gpu)
    }
    uids = sorted(base)

    def setup() -> tuple[CollectorRegistry, Mutate]:
        recorded = dict(base)
        registry = new_registry()
        register_build_info(registry, service="informer")
        InformerMetrics(registry)
        registry.register(PodAllocationCollector(lambda: AllocationView(recorded, {}), legacy=legacy))

        def mutate(situation: str, rnd: random.Random) -> None:
            if situation == "churn 1 %":  # pods ending, others starting in their place
                for uid in rnd.sample(uids, max(1, len(uids) // 100)):
                    a = recorded[uid]
                    recorded[uid] = dataclasses.replace(a, name=a.name + "-next")
            elif situation == "reloaded":  # a reconcile pass recording equal allocations
                recorded.update({uid: dataclasses.replace(a) for uid, a in recorded.items()})
            elif situation == "all changed":
                recorded.update({uid: dataclasses.replace(a, name=a.name + "-x") for uid, a in recorded.items()})

        return registry, mutate

    title = f"informer: {len(base):,} pods on {n_nodes} nodes × 8 GPUs{' (--legacy-metrics)' if legacy else ''}"
    table(title, scrapes, setup)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[300, 1000])
    parser.add_argument("--scrapes", type=int, default=10)
    parser.add_argument("--legacy", action="store_true", help="also export HAMi's legacy names (--legacy-metrics)")
    parser.add_argument("--pods-per-gpu", type=int, default=2, help="the informer's pods: this many on every GPU")
    parser.add_argument("--only", choices=["extender", "informer"], help="one process's registry only")
    args = parser.parse_args()
    for n in args.nodes:
        if args.only != "informer":
            extender(n, args.scrapes, args.legacy)
        if args.only != "extender":
            informer(n, args.scrapes, args.legacy, args.pods_per_gpu)


if __name__ == "__main__":
    main()
