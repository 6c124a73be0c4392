"""The real control plane, native kube-scheduler versus vgpu-scheduler, same nodes, same pods, same run.

Needs ``KUBEBUILDER_ASSETS`` (the directory ``scripts/install-control-plane.sh .cache/k8s`` fills and prints, or
setup-envtest's) and ``redis-server`` on the PATH. Each row
starts its own kube-scheduler (and our services) on one shared etcd + kube-apiserver, on fresh nodes:

* ``native``: kube-scheduler alone places ``nvidia.com/gpu: 1`` pods (the chart's configuration without the
  extender block);
* ``vgpu …``: the chart's configuration, our registrar, informer and N extender replicas (flag defaults, or the
  chart's flags), the HAMi device-plugin emulator (Allocate latency ``--allocate-latency``), the same pods.

Printed per row: pods bound / created, pods/s (first create to last bind), the ratio to native measured in the same
run, time-to-bind p50/p99, node-lock waits (the extenders' ``vgpu_node_lock_wait_seconds`` count) and give-ups
(``vgpu_bind_outcomes_total{outcome="lock_timeout"}``), kube-scheduler errors (its log), the audit's findings, the
nodes that received a pod beside the fewest nodes the burst fits on (``density.minimum_nodes``); then the CPU each
component spent per bound pod (``/proc``), the API server's requests per bound pod by kind
(``apiserver_request_total``) and by client (its audit log, ``--audit``), and the cost columns: ``OURS MS``
(extender + informer + registrar + Redis, CPU ms per bound pod), ``xKS`` (that ÷ native kube-scheduler's own CPU per
pod in the same invocation), ``OUR REQ`` (API requests per bound pod sent by our services, the Binding included) and
``+REQ`` (requests per pod beyond the native run's and the device plugin's: what vgpu-scheduler adds). Figures are
printed, never asserted.

    KUBEBUILDER_ASSETS=.cache/k8s python -m benchmarks.bench_cluster --nodes 100 --pods 300
    KUBEBUILDER_ASSETS=.cache/k8s python -m benchmarks.bench_cluster --nodes 1000 --gpus 8 --pods 2000 \\
        --replicas 1,3 --policies binpack,spread --settings defaults,chart
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.harness import redis_server
from tests.controlplane.apicalls import AuditTail, calls_by_client
from tests.controlplane.control import ApiServer, Cleanup, assets_dir, control_plane
from tests.controlplane.density import minimum_nodes
from tests.controlplane.harness import NodeShape, Settings, gpu_pod
from tests.controlplane.native import run_native
from tests.controlplane.scenario import Outcome, Scenario, run_scenario, scheduler_error_kinds


def _pods(n: int, shared: bool) -> list[dict[str, Any]]:
    if shared:
        return [gpu_pod(f"p{i:05d}", mem=1000 * (1 + i % 4), cores=10 * (1 + i % 3)) for i in range(n)]
    return [gpu_pod(f"p{i:05d}", mem=None, cores=None) for i in range(n)]


OURS = ("extender", "informer", "registrar", "redis-server")
"""The processes whose CPU per pod is ours (every extender replica counts under ``extender``)."""
OUR_CLIENTS = ("extender", "informer", "registrar")
"""The API clients that are ours (:func:`tests.controlplane.apicalls.client_of`)."""


def _per_pod_ms(o: Outcome, labels: tuple[str, ...]) -> float | None:
    if not o.bound or not o.cpu_s:
        return None
    return 1000 * sum(o.cpu_s.get(label, 0.0) for label in labels) / o.bound


def _requests_per_pod(o: Outcome) -> float | None:
    return sum(o.api_calls.values()) / o.bound if o.api_calls and o.bound else None


def _cost(
    o: Outcome,
    native_scheduler_ms: float | None,
    clients: dict[str, dict[str, int]] | None,
    native_requests: float | None = None,
) -> str:
    """``OURS MS``, ``xKS``, ``OUR REQ`` and ``+REQ`` (see the module docstring); ``-`` where not measured."""
    ours = _per_pod_ms(o, OURS)
    ratio = f"{ours / native_scheduler_ms:.2f}" if ours is not None and native_scheduler_ms else "-"
    requests = beyond = "-"
    if clients is not None and o.bound:
        requests = f"{sum(sum(clients.get(c, {}).values()) for c in OUR_CLIENTS) / o.bound:.2f}"
        total = _requests_per_pod(o)
        if total is not None and native_requests is not None:
            plugin = sum(clients.get("device-plugin", {}).values()) / o.bound
            beyond = f"{total - native_requests - plugin:.2f}"
    return f"{ours if ours is not None else float('nan'):>8.1f} {ratio:>5} {requests:>7} {beyond:>5}"


def _row(label: str, o: Outcome, native: float | None, minimum: int, cost: str) -> str:
    ratio = f"{o.pods_per_s / native:.2f}" if native else "-"
    findings = f"{len(o.report.correctness)}/{len(o.report.liveness)}"
    density = f"{o.nodes_touched / minimum:.2f}" if minimum else "-"
    return (
        f"{label:<34} {o.bound:>5}/{o.created:<5} {o.pods_per_s:>7.1f} {ratio:>6} {o.percentile(50):>7.2f} "
        f"{o.percentile(99):>7.2f} {o.lock_waits:>6} {o.lock_timeouts:>6} {o.scheduler_errors:>7} {findings:>7} "
        f"{o.nodes_touched:>6} {minimum:>5} {density:>5} {cost}"
    )


def _clients(audit: AuditTail | None, o: Outcome) -> dict[str, dict[str, int]] | None:
    """Requests of the outcome's window by client, from the audit log (None without one)."""
    if audit is None:
        return None
    return calls_by_client(audit.read(), *o.window)


def _clients_line(clients: dict[str, dict[str, int]] | None, bound: int) -> str:
    if not clients or not bound:
        return ""
    parts = []
    for client, kinds in sorted(clients.items(), key=lambda kv: -sum(kv[1].values())):
        total = sum(kinds.values()) / bound
        detail = ", ".join(f"{k} {n / bound:.2f}" for k, n in sorted(kinds.items(), key=lambda kv: -kv[1]))
        parts.append(f"{client} {total:.2f} ({detail})")
    for client in OUR_CLIENTS:
        if client not in clients:
            parts.append(f"{client} 0")
    return "\n    api calls/pod by client: " + "; ".join(parts)


async def _main(args: argparse.Namespace, api: ApiServer, redis_url: str, tmp: Path) -> None:
    shape = NodeShape(gpus=args.gpus)
    audit = AuditTail(api.audit_log) if api.audit_log is not None else None
    header = (
        f"{'RUN':<34} {'BOUND':>11} {'PODS/S':>7} {'xNAT':>6} {'P50 S':>7} {'P99 S':>7} {'LOCKW':>6} {'GAVEUP':>6} "
        f"{'SCHERR':>7} {'C/L':>7} {'NODES':>6} {'MIN':>5} {'xMIN':>5} {'OURS MS':>8} {'xKS':>5} {'OUR REQ':>7} "
        f"{'+REQ':>5}"
    )
    native_pods, our_pods = _pods(args.pods, shared=False), _pods(args.pods, shared=args.shared)
    native_min, our_min = minimum_nodes(native_pods, shape), minimum_nodes(our_pods, shape)
    print(
        f"# {args.nodes} nodes x {args.gpus} GPUs, {args.pods} {'shared' if args.shared else 'whole-card'} pods "
        f"(fewest nodes they fit on: {our_min}); kube-scheduler qps {args.scheduler_qps}"
    )
    print(header, flush=True)
    native_rate: float | None = None
    native_scheduler_ms: float | None = None
    native_requests: float | None = None
    if not args.skip_native:
        cleanup = Cleanup(api)
        try:
            native = await run_native(
                api, cleanup, tmp / "native", nodes=args.nodes, shape=shape, pods=native_pods,
                scheduler_qps=args.scheduler_qps, deadline_s=args.deadline,
            )  # fmt: skip
        finally:
            cleanup.run()
        native_rate = native.pods_per_s or None
        native_scheduler_ms = _per_pod_ms(native, ("kube-scheduler",))
        native_requests = _requests_per_pod(native)
        clients = _clients(audit, native)
        print(_row("native nvidia.com/gpu: 1", native, None, native_min, _cost(native, None, clients)), flush=True)
        print(_cpu_line(native) + _clients_line(clients, native.bound), flush=True)
    extra: tuple[str, ...] = ()
    if args.kube_qps is not None:
        extra += (f"--kube-qps={args.kube_qps:g}",)
    if args.kube_burst is not None:
        extra += (f"--kube-burst={args.kube_burst}",)
    extra += tuple(args.extender_flag)
    for replicas in args.replicas:
        for policy in args.policies:
            for setting in args.settings:
                settings = Settings(
                    replicas=replicas,
                    chart=setting == "chart",
                    node_policy=policy,
                    extra=extra,
                    allocate_latency_s=args.allocate_latency,
                    scheduler_qps=args.scheduler_qps,
                )
                scenario = Scenario(
                    f"bench-{replicas}-{policy}-{setting}",
                    our_pods,
                    settings,
                    nodes=args.nodes,
                    shape=shape,
                    deadline_s=args.deadline,
                    stall_s=args.stall,
                )
                cleanup = Cleanup(api)
                try:
                    outcome = await run_scenario(api, cleanup, redis_url, tmp / scenario.name, scenario)
                finally:
                    cleanup.run()
                label = f"vgpu {replicas} repl {policy} {setting}" + (" " + " ".join(extra) if extra else "")
                clients = _clients(audit, outcome)
                cost = _cost(outcome, native_scheduler_ms, clients, native_requests)
                print(_row(label, outcome, native_rate, our_min, cost), flush=True)
                print(_cpu_line(outcome) + _clients_line(clients, outcome.bound) + _redis_line(outcome), flush=True)
                for line in (outcome.report.correctness + outcome.report.liveness)[: args.show_findings]:
                    print(f"    {line}")
                if args.show_errors and outcome.scheduler_errors:
                    kinds = scheduler_error_kinds(outcome.system_log.get("kube-scheduler", ""))
                    for kind, n in sorted(kinds.items(), key=lambda kv: -kv[1])[: args.show_errors]:
                        print(f"    {n:>5} x {kind}")
    print(
        "BOUND bound/created; PODS/S first create to last bind; xNAT ratio to native in this run; P50/P99 create-"
        "to-bind; LOCKW node-lock waits; GAVEUP binds that gave up waiting for a node lock; SCHERR kube-scheduler "
        "error lines; C/L audit correctness/liveness findings; NODES nodes that received a pod; MIN the fewest "
        "nodes the row's pods fit on (tests/controlplane/density.py); xMIN NODES over MIN; OURS MS our CPU ms per "
        "bound pod (extender, informer, registrar, Redis); xKS that over native kube-scheduler's own CPU ms per pod"
        " in this invocation; OUR REQ API requests per bound pod sent by our services (audit log); +REQ requests "
        "per pod beyond native's (this invocation) and the device plugin's; cpu ms/pod: CPU milliseconds per bound "
        "pod by component, first create to last bind, and API server requests per bound pod by verb and resource "
        "(harness: pod creation, bind watch, device-plugin emulator; other: the machine's other processes); by "
        "client: the same requests by sender (the API server's audit log); redis/pod: scripts run per pod (and "
        "Redis' microseconds "
        "in them), then the commands run per pod, inside scripts or not (INFO commandstats)"
    )


def _cpu_line(o: Outcome) -> str:
    if not o.cpu_s or not o.bound:
        return "    cpu ms/pod: -"
    parts = sorted(o.cpu_s.items(), key=lambda kv: -kv[1])
    total = sum(o.cpu_s.values())
    shown = " ".join(f"{label} {1000 * s / o.bound:.1f}" for label, s in parts if s > 0)
    line = (
        f"    cpu ms/pod: total {1000 * total / o.bound:.1f} = {shown} (machine busy {total / o.elapsed_s:.2f} cores)"
    )
    if o.api_calls:
        calls = sorted(o.api_calls.items(), key=lambda kv: -kv[1])
        per_pod = " ".join(f"{kind} {n / o.bound:.2f}" for kind, n in calls if n / o.bound >= 0.01)
        line += f"\n    api calls/pod: total {sum(o.api_calls.values()) / o.bound:.2f} = {per_pod}"
    return line


def _redis_line(o: Outcome) -> str:
    """Redis commands per bound pod (``INFO commandstats`` over the window): the scripts (``evalsha``, with the
    microseconds Redis spent in them) and the commands they and the clients ran, most called first."""
    if not o.redis_commands or not o.bound:
        return ""
    evalsha = o.redis_commands.get("evalsha", (0, 0))
    others = sorted(((n, c) for n, (c, _) in o.redis_commands.items() if n != "evalsha"), key=lambda kv: -kv[1])
    shown = " ".join(f"{n} {c / o.bound:.1f}" for n, c in others[:10] if c / o.bound >= 0.05)
    return (
        f"\n    redis/pod: evalsha {evalsha[0] / o.bound:.1f} ({evalsha[1] / o.bound:.0f} us); "
        f"commands {sum(c for _, c in others) / o.bound:.1f} = {shown}"
    )


def _csv(kind: type) -> Any:
    return lambda text: [kind(x) for x in text.split(",") if x]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=100)
    p.add_argument("--gpus", type=int, default=8, help="GPUs per node")
    p.add_argument("--pods", type=int, default=300)
    p.add_argument("--replicas", type=_csv(int), default=[1], help="comma list, e.g. 1,3")
    p.add_argument("--policies", type=_csv(str), default=["binpack"], help="node policies: binpack,spread")
    p.add_argument("--settings", type=_csv(str), default=["defaults", "chart"], help="defaults,chart")
    p.add_argument("--kube-qps", type=float, default=None, help="--kube-qps for every extender replica")
    p.add_argument("--kube-burst", type=int, default=None, help="--kube-burst for every extender replica")
    p.add_argument("--extender-flag", action="append", default=[], metavar="FLAG",
                   help="a flag for every extender replica (repeatable), e.g. --max-binds-per-node=8")  # fmt: skip
    p.add_argument("--scheduler-qps", type=int, default=None, help="kube-scheduler clientConnection qps")
    p.add_argument("--allocate-latency", type=float, default=0.2, help="device plugin Allocate latency, s")
    p.add_argument("--shared", action=argparse.BooleanOptionalAction, default=False,
                   help="shared pods (1-4 GB, 10-30%%) instead of nvidia.com/gpu: 1 for our runs")  # fmt: skip
    p.add_argument("--deadline", type=float, default=600.0, help="give up a run after this many seconds")
    p.add_argument("--stall", type=float, default=60.0, help="end a run when nothing binds for this long")
    p.add_argument("--skip-native", action="store_true")
    p.add_argument("--show-findings", type=int, default=3)
    p.add_argument("--show-errors", type=int, default=3, help="print this many kinds of kube-scheduler error lines")
    p.add_argument("--audit", action=argparse.BooleanOptionalAction, default=True,
                   help="API server audit log: requests per pod by client (costs it a little CPU)")  # fmt: skip
    args = p.parse_args()
    bad = [s for s in args.settings if s not in ("defaults", "chart")]
    if bad:
        p.error(f"--settings takes defaults and/or chart, not {bad}")
    assets = assets_dir()
    if assets is None:
        sys.exit("bench_cluster: set KUBEBUILDER_ASSETS=$(scripts/install-control-plane.sh .cache/k8s) (see README)")
    tmp = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    try:
        with redis_server() as redis_url, control_plane(assets, audit=args.audit) as api:
            asyncio.run(_main(args, api, redis_url, tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
