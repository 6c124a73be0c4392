"""Chaos at scale on the real control plane: every fault at a random (seeded) moment while a churning workload runs,
the audit every 30 s and at the end (``tests/controlplane/chaos.py`` runs it; docs/reliability.md says what is
injected and what held).

Needs ``KUBEBUILDER_ASSETS`` (the directory ``scripts/install-control-plane.sh .cache/k8s`` fills), ``redis-server``
and ``redis-sentinel``. Starts its own etcd and kube-apiserver (the run restarts the API server). Printed: the
faults as injected, each audit's figures, the final audit (once settled) with what only Redis shows, time-to-bind
p50/p99, binds retried (kube-scheduler's bind failures, each retried), the workload by kind, and every process'
RSS over the run. Figures are printed, never asserted.

    KUBEBUILDER_ASSETS=.cache/k8s python -m benchmarks.chaos --nodes 20 --pods 300 --duration 300
    KUBEBUILDER_ASSETS=.cache/k8s python -m benchmarks.chaos --nodes 1000 --gpus 8 --pods 10000 --duration 3600
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from tests.controlplane.chaos import ChaosOutcome, ChaosSpec, run_chaos
from tests.controlplane.chaos_faults import fault_names
from tests.controlplane.control import assets_dir, control_plane


def percentile(values: list[float], q: int) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def report(o: ChaosOutcome) -> list[str]:
    """The run's figures as printed lines."""
    s = o.spec
    lines = [
        f"# chaos: {s.nodes} nodes x {s.gpus} GPUs, {s.pods} pods over {s.duration_s:.0f}s, {s.replicas} extender "
        f"replicas, seed {s.seed}, fill {s.fill}; run {o.elapsed_s:.0f}s",
        "faults injected (s into the run, how long it took):",
    ]
    for f in sorted(o.faults, key=lambda f: f.at_s):
        lines.append(
            f"  {f.at_s:>6.0f}s {f.name:<22} {f.took_s:>5.1f}s {f.detail}{'  ERROR ' + f.error if f.error else ''}"
        )
    lines.append("audits:")
    lines.extend(f"  {c.line()}" for c in o.checks)
    final = o.final
    if final is not None:
        settled = f"settled after {o.settled_after_s:.0f}s" if o.settled_after_s is not None else "NOT settled"
        lines.append(f"final audit ({settled}):")
        lines.append(f"  {final.line()}")
        lines.extend(f"    {x}" for x in (final.other + final.stuck + final.detail)[:15])
    for c in o.checks:
        lines.extend(f"    at {c.at_s:.0f}s: {x}" for x in (c.other + c.stuck + c.detail)[:5])
    lat = o.latencies_s
    kinds = " ".join(f"{k} {n}" for k, n in o.by_kind.items())
    lines.append(
        f"pods created {o.created} ({kinds}), bound {o.bound}, deleted while binding {o.deleted_in_bind}, "
        f"preempted {o.preempted}, "
        f"create failures {len(o.failed_creates)}, failed at admission {len(o.refused_at_admission)}"
    )
    lines.extend(f"  failed at admission (no device plugin registered yet): {p}" for p in o.refused_at_admission[:5])
    lines.extend(f"  create refused: {f[:300]}" for f in o.failed_creates[:3])
    lines.append(
        f"time to bind: p50 {percentile(lat, 50):.2f}s p99 {percentile(lat, 99):.2f}s max {max(lat, default=0):.1f}s"
    )
    lines.append(f"kube-scheduler errors (each pod retried): {o.scheduler_errors}, of which binds: {o.binds_retried}")
    for kind, n in sorted(o.error_kinds.items(), key=lambda kv: -kv[1])[:6]:
        lines.append(f"  {n:>5} x {kind[:200]}")
    if o.cleanup_error:
        lines.append(f"cleanup after the run failed: {o.cleanup_error}")
    lines.append(f"crashed processes: {len(o.crashed)}")
    lines.extend(f"  {c}" for c in o.crashed)
    lines.append("RSS over the run:")
    lines.extend(f"  {line}" for line in o.rss.table())
    lines.extend(f"  {line}" for line in o.rss.timeline())
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=20)
    p.add_argument("--gpus", type=int, default=4, help="GPUs per node")
    p.add_argument("--pods", type=int, default=300)
    p.add_argument("--duration", type=float, default=300.0, help="seconds over which the pods are created")
    p.add_argument("--replicas", type=int, default=3, help="extender replicas (at least 2)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--fill", type=float, default=2.0, help="cards the live pods would hold / the cluster's")
    p.add_argument("--stall", type=float, default=70.0, help="seconds one extender is cut off from Redis")
    p.add_argument("--pause", type=float, default=70.0, help="seconds one extender is SIGSTOPped")
    p.add_argument("--audit-every", type=float, default=30.0)
    p.add_argument("--settle", type=float, default=420.0, help="at most this long for the final audit to be clean")
    p.add_argument("--allocate-latency", type=float, default=0.2, help="device plugin Allocate latency, s")
    p.add_argument("--node-reboots", type=int, default=2)
    p.add_argument("--card-faults", type=int, default=2)
    p.add_argument("--faults", default="", help="comma list of faults to inject (default: all of them): "
                   + ",".join(dict.fromkeys(fault_names(3))))  # fmt: skip
    p.add_argument("--keep", type=Path, default=None, help="keep every process' logs in this directory")
    args = p.parse_args()
    if args.replicas < 2:
        p.error("--replicas: at least 2 (one is stalled, one paused)")
    assets = assets_dir()
    if assets is None:
        sys.exit("chaos: set KUBEBUILDER_ASSETS=$(scripts/install-control-plane.sh .cache/k8s) (see README)")
    spec = ChaosSpec(
        nodes=args.nodes, gpus=args.gpus, pods=args.pods, duration_s=args.duration, replicas=args.replicas,
        seed=args.seed, fill=args.fill, stall_s=args.stall, pause_s=args.pause, audit_every_s=args.audit_every,
        settle_s=args.settle, allocate_latency_s=args.allocate_latency, node_reboots=args.node_reboots,
        card_faults=args.card_faults, faults=tuple(f for f in args.faults.split(",") if f) or None,
    )  # fmt: skip
    tmp = args.keep or Path(tempfile.mkdtemp(prefix="chaos-"))
    try:
        with control_plane(assets) as api:
            outcome = asyncio.run(run_chaos(api, tmp, spec, lambda line: print(line, flush=True)))
        print("\n".join(report(outcome)), flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
