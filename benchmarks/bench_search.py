"""What the card-assignment search (``shared/domain/assignment.py``) costs ``plan()``, the decision /filter makes.

Run: ``.venv/bin/python -m benchmarks.bench_search [--nodes 1000] [--calls 200]``. Prints figures only.

The cluster is ``bench_plan``'s (1,000 nodes × 8 A100-80GB, mixed usage). Each pod is planned ``--calls`` times
(a pod no node fits: a twentieth of that, since each call evaluates every node) with the fast path, as /filter
does, and a few times evaluating every node (``exhaustive``). Single-container pods never reach the search; the
multi-container pods do on the nodes where the greedy walk places the first containers and then fails. To compare
with the code before the search, run this file alternately from this checkout and from one without the search
(the figures print the ``WALK_LIMIT`` in force, or "none"): ``cd <other checkout> && python <this file>``.
"""

from __future__ import annotations

import argparse
import functools
import os

from benchmarks.bench_plan import PODS as PLAN_PODS
from benchmarks.bench_plan import _pct, _time, build_cluster
from vgpu_scheduler.shared.domain.model import NO_CONSTRAINTS, ContainerRequest, PodRequest
from vgpu_scheduler.shared.domain.plan import Decision, plan
from vgpu_scheduler.shared.domain.scoring import Policies

try:
    from vgpu_scheduler.shared.domain.assignment import WALK_LIMIT

    SEARCH = f"WALK_LIMIT {WALK_LIMIT}"
except ImportError:  # a checkout before the search
    SEARCH = "none"

PODS: dict[str, PodRequest] = {
    "single: 1 GPU 8 GiB": PodRequest((ContainerRequest(nums=1, mem_mib=8192, cores_pct=20),), 0),
    "single: 2 GPU 20 GiB": PodRequest((ContainerRequest(nums=2, mem_mib=20480, cores_pct=30),), 0),
    "single: 9 GPUs (no fit)": PodRequest((ContainerRequest(nums=9, mem_mib=1000, cores_pct=10),), 0),
    "multi: init + 2 app": PLAN_PODS["init + 2 app"],
    "multi: 1 + 2 × 80 GiB": PodRequest(
        (ContainerRequest(nums=1, mem_mib=4096), ContainerRequest(nums=2, mem_mib=81920, cores_pct=50)), 0
    ),
    "multi: 4 + 4 whole (no fit)": PodRequest(
        (ContainerRequest(nums=4, mem_mib=81920, cores_pct=100), ContainerRequest(nums=5, mem_mib=81920)), 0
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    nodes = build_cluster(args.nodes)
    policies = Policies()
    print(f"search: {SEARCH}; {args.nodes} nodes; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    print(f"{'pod':<30} {'p50 ms':>8} {'p99 ms':>8}  {'result':<12} {'every node p50 ms':>17}")
    for label, pod in PODS.items():
        call = functools.partial(plan, pod, NO_CONSTRAINTS, nodes, policies=policies)
        result = call()
        fits = isinstance(result, Decision)
        times = _time(call, args.calls if fits else max(5, args.calls // 20))  # a refusal walks every node
        full = _time(functools.partial(call, exhaustive=True), 3)
        outcome = f"-> {result.node}" if isinstance(result, Decision) else "no fit"
        print(f"{label:<30} {_pct(times, 0.5):8.3f} {_pct(times, 0.99):8.3f}  {outcome:<12} {_pct(full, 0.5):17.1f}")


if __name__ == "__main__":
    main()
