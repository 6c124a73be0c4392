"""Timing of the topology-aware set choice (``select_set``): exact branch and bound versus HAMi's enumeration.

Run: ``.venv/bin/python -m benchmarks.bench_topology [--reps N] [--seed S] [--large]``.
Prints p50/p99/max per case over freshly drawn score tables. ``random`` tables draw every pair score uniformly
from 0..1800 (step 10): the hard case, since many sets are nearly optimal. ``islands`` tables look like real
nodes: NVLink islands (600/1200 inside), PCIe/cross-CPU (20/10) between. Timings include building the weight
matrix from the score mapping, i.e. what a caller pays.
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import time
from collections.abc import Callable

from vgpu_scheduler.shared.domain.model import DeviceInfo
from vgpu_scheduler.shared.domain.topology import pair_score, select_set

Scores = dict[str, dict[str, int]]


def gpus(n: int) -> list[DeviceInfo]:
    return [
        DeviceInfo(
            id=f"GPU-{i:04d}",
            index=i,
            count=10,
            devmem_mib=81920,
            devcore=100,
            type="NVIDIA H100 80GB HBM3",
            numa=i // 8,
            mode="hami-core",
            health=True,
        )
        for i in range(n)
    ]


def random_scores(devs: list[DeviceInfo], rng: random.Random) -> Scores:
    out: Scores = {d.id: {} for d in devs}
    for a, b in itertools.combinations(devs, 2):
        out[a.id][b.id] = out[b.id][a.id] = rng.randrange(0, 1801, 10)
    return out


def island_scores(devs: list[DeviceInfo], rng: random.Random, island: int = 8) -> Scores:
    out: Scores = {d.id: {} for d in devs}
    for a, b in itertools.combinations(devs, 2):
        if a.index // island == b.index // island:
            s = rng.choice([1200, 1200, 600])
        elif a.index // (2 * island) == b.index // (2 * island):
            s = 20
        else:
            s = 10
        out[a.id][b.id] = out[b.id][a.id] = s
    return out


def hami_enumeration(devs: list[DeviceInfo], k: int, scores: Scores) -> tuple[DeviceInfo, ...]:
    """HAMi's ``generateCombinations`` + ``computeBestCombination``: every combination, first best kept."""
    best: tuple[DeviceInfo, ...] = ()
    best_score = -1
    for combo in itertools.combinations(devs, k):
        total = sum(pair_score(a.id, b.id, scores) for a, b in itertools.combinations(combo, 2))
        if total > best_score:
            best, best_score = combo, total
    return best


def measure(
    label: str,
    n: int,
    k: int,
    reps: int,
    make: Callable[[list[DeviceInfo], random.Random], Scores],
    rng: random.Random,
    fn: Callable[[list[DeviceInfo], int, Scores], object] = select_set,
) -> None:
    devs = gpus(n)
    samples_ms: list[float] = []
    for _ in range(reps):
        scores = make(devs, rng)
        t0 = time.perf_counter_ns()
        fn(devs, k, scores)
        samples_ms.append((time.perf_counter_ns() - t0) / 1e6)
    samples_ms.sort()
    p50 = statistics.median(samples_ms)
    p99 = samples_ms[min(len(samples_ms) - 1, round(0.99 * (len(samples_ms) - 1)))]
    print(
        f"{label:<34} n={n:<3} k={k:<3} reps={reps:<4} "
        f"p50={p50:8.2f} ms  p99={p99:8.2f} ms  max={samples_ms[-1]:8.2f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=200, help="score tables per case (default 200)")
    parser.add_argument("--seed", type=int, default=20240611)
    parser.add_argument("--large", action="store_true", help="also time random 32-choose-16 (about 0.5 s each)")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    reps = args.reps

    print("select_set (exact branch and bound)")
    measure("random 16 choose 8  [target < 5 ms]", 16, 8, reps, random_scores, rng)
    measure("random 8 choose 4", 8, 4, reps, random_scores, rng)
    measure("random 16 choose 4", 16, 4, reps, random_scores, rng)
    measure("random 16 choose 12", 16, 12, reps, random_scores, rng)
    measure("islands 16 choose 8", 16, 8, reps, island_scores, rng)
    measure("random 24 choose 12", 24, 12, max(1, reps // 10), random_scores, rng)
    measure("islands 32 choose 8", 32, 8, max(1, reps // 10), island_scores, rng)
    measure("islands 32 choose 16", 32, 16, max(1, reps // 10), island_scores, rng)
    if args.large:
        measure("random 32 choose 16", 32, 16, max(1, reps // 40), random_scores, rng)
    print("HAMi enumeration (all C(n,k) combinations), for comparison")
    measure("random 16 choose 8", 16, 8, max(1, reps // 40), random_scores, rng, hami_enumeration)


if __name__ == "__main__":
    main()
