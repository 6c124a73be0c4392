"""Benchmark of the defragmentation planner (``shared/domain/defrag*.py``) on a fragmented cluster.

Run: ``.venv/bin/python -m benchmarks.bench_defrag [--nodes 1000] [--gpus 8] [--runs 3]``. Prints figures only.

The cluster: nodes of A100-80GB cards (10 slots each); almost every card holds one to four small pods (4–20 GiB,
0–30 % of the cores), so there is plenty of free memory and not one idle card; one pod in five may not move (bare,
opted out, or above the helped pod's priority). Timed: ``plan_defrag`` for a pod asking for one whole card, for a
pod asking for two whole cards on one node, and ``--free-cards 8``; the snapshots and candidates are built once, as
the command builds them once from the store.
"""

from __future__ import annotations

import argparse
import functools
import random
import statistics
import time
from collections.abc import Callable

from vgpu_scheduler.shared.domain.defrag import Candidate, ForPod, FreeCards, Goal, Placement, plan_defrag
from vgpu_scheduler.shared.domain.defragmodel import DefragPlan
from vgpu_scheduler.shared.domain.defragwork import BARE_POD
from vgpu_scheduler.shared.domain.model import (
    NO_CONSTRAINTS,
    NVIDIA,
    ContainerRequest,
    DeviceCharge,
    DeviceInfo,
    DeviceUsage,
    NodeInventory,
    PodRequest,
)
from vgpu_scheduler.shared.domain.preempt import Resident
from vgpu_scheduler.shared.domain.scoring import Policies
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot

COUNT = 10
MEM = 81920


def build(n_nodes: int, gpus: int, seed: int = 11) -> tuple[list[NodeSnapshot], list[Candidate]]:
    """The fragmented cluster of the module docstring."""
    rnd = random.Random(seed)
    snaps: list[NodeSnapshot] = []
    candidates: list[Candidate] = []
    for k in range(n_nodes):
        name = f"node-{k:05d}"
        devices = tuple(
            DeviceInfo(f"GPU-{k:05d}-{i}", i, COUNT, MEM, 100, "NVIDIA A100-SXM4-80GB", i // 4, "hami-core", True)
            for i in range(gpus)
        )
        usage: dict[str, DeviceUsage] = {}
        for d in devices:
            pods = rnd.choices([0, 1, 2, 3, 4], weights=[0, 25, 30, 25, 20])[0]
            used = mem = cores = 0
            for _ in range(pods):
                p_mem, p_cores = rnd.choice([4096, 8192, 10240, 20480]), rnd.choice([0, 10, 20, 30])
                uid = f"{name}-{d.index}-{used}"
                charge = DeviceCharge(d.id, slots=1, mem_mib=p_mem, cores_pct=p_cores)
                request = PodRequest((ContainerRequest(1, mem_mib=p_mem, cores_pct=p_cores),), 0)
                candidates.append(
                    Candidate(
                        Resident(uid, "work", uid, rnd.choice([0, 0, 0, 1000]), 0.0, (charge,)),
                        name,
                        request,
                        NO_CONSTRAINTS,
                        unmovable=BARE_POD if rnd.random() < 0.1 else None,
                    )
                )
                used, mem, cores = used + 1, mem + p_mem, cores + p_cores
            if used:
                usage[d.id] = DeviceUsage(used=used, used_mem_mib=mem, used_cores=cores)
        snaps.append(NodeSnapshot(NodeInventory(node=name, vendor=NVIDIA, devices=devices), usage))
    return snaps, candidates


def timed(fn: Callable[[], object], runs: int) -> tuple[list[float], object]:
    times: list[float] = []
    result: object = None
    for _ in range(runs):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return times, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    t0 = time.perf_counter()
    snaps, candidates = build(args.nodes, args.gpus)
    idle = sum(1 for s in snaps for u in s.usages if u.used == 0)
    print(
        f"cluster: {args.nodes} nodes x {args.gpus} cards, {len(candidates)} pods holding devices, {idle} idle cards "
        f"(built in {time.perf_counter() - t0:.2f}s)"
    )
    placement = Placement(Policies())

    def whole(n: int) -> ForPod:
        return ForPod(
            "work",
            "waiting",
            "uid",
            PodRequest((ContainerRequest(n, mem_pct=100, cores_pct=100),), 0),
            NO_CONSTRAINTS,
            priority=100,
        )

    goals: list[tuple[str, Goal]] = [
        ("--for (one whole card)", whole(1)),
        ("--for (two whole cards on one node)", whole(2)),
        ("--free-cards 8", FreeCards(8)),
    ]
    for label, goal in goals:
        times, result = timed(functools.partial(plan_defrag, goal, snaps, candidates, placement=placement), args.runs)
        what = (
            f"{len(result.moves)} moves, {result.memory_moved_mib} MiB moved"
            if isinstance(result, DefragPlan)
            else f"cannot: {getattr(result, 'reason', '')}"
        )
        print(
            f"{label:38s} median {statistics.median(times) * 1000:8.1f} ms  max {max(times) * 1000:8.1f} ms  ({what})"
        )


if __name__ == "__main__":
    main()
