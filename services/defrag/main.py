"""``vgpu-scheduler defrag plan``: the composition root (docs/defrag.md).

Live: the store at ``--redis-url`` and the API server found as ``explain`` finds it (``services/inspect/connect``).
Offline (``--cluster``): simulate's embedded cluster on the simulated clock (:mod:`.offline`). Either way
:func:`.planning.make_plan` plans, and the plan is printed as text (:mod:`.render`) or as its ``to_json``.

With ``--execute`` (live only) the plan is printed, then carried out by :func:`shared.defrag.execute.execute_plan`
under the extender's policies, a progress line per move (on stderr with ``-o json``, whose one document is then
``{"plan": ..., "execution": ...}``); SIGTERM stops the run with the state it reached.

Exit status: 0 a plan (perhaps of no move; carried out, with ``--execute``), 1 no plan (``cannot: <reason>`` on
stdout), a run that stopped (its state printed), or a failure reported on one line on stderr (Redis or the API
server unreachable), 2 a usage or configuration error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys

from vgpu_scheduler.services.cli import program
from vgpu_scheduler.services.defrag.planning import PlanAsk, PlanOutcome, make_plan
from vgpu_scheduler.services.defrag.render import render_text
from vgpu_scheduler.services.inspect.connect import InspectError, kube_settings, one_line, open_api, open_store
from vgpu_scheduler.services.inspect.explain import parse_target
from vgpu_scheduler.shared.config import OPTIONS_BY_NAME, InspectSettings, LogLevel, Service, settings_from_args
from vgpu_scheduler.shared.defrag.execute import ExecuteOptions, execute_plan
from vgpu_scheduler.shared.defrag.hold import Placement
from vgpu_scheduler.shared.domain.defragmodel import DefragPlan
from vgpu_scheduler.shared.domain.scoring import Policies
from vgpu_scheduler.shared.errors import ConfigError, VgpuError
from vgpu_scheduler.shared.k8s import Api, KubeSettings
from vgpu_scheduler.shared.logs import configure_logging
from vgpu_scheduler.shared.runtime import run_service
from vgpu_scheduler.shared.store import Store
from vgpu_scheduler.shared.vendors.catalog import enabled_vendors

EXIT_CANNOT = 1
EXIT_FAILED = 1
LIVE_ONLY = ("redis-url", "kubeconfig", "kube-server")
"""Options that name the live cluster: they do not apply with ``--cluster``."""


def ask_of(args: argparse.Namespace) -> PlanAsk:
    """The question the flags ask; ConfigError (exit 2) on flags that do not go together."""
    nodes = frozenset(n.strip() for v in args.node for n in v.split(",") if n.strip())
    cards = args.free_cards is not None
    if args.for_pod is None and args.pod_namespace is not None:
        raise ConfigError("-n/--namespace goes with --for")
    if args.card_type is not None and not cards:
        raise ConfigError("--type goes with --free-cards")
    if (nodes or args.node_selector is not None) and args.for_pod is not None:
        raise ConfigError(
            "--node and -l/--selector go with --free-cards or --free-nodes (a --for pod goes where it fits)"
        )
    if nodes and args.node_selector is not None:
        raise ConfigError("give --node or -l/--selector, not both")
    if args.workload is not None and args.cluster is None:
        raise ConfigError("--workload needs --cluster (the simulated cluster it runs on)")
    if args.execute and args.cluster is not None:
        raise ConfigError("--execute carries a plan out on the live cluster: it does not go with --cluster")
    for_pod = None
    if args.for_pod is not None:
        try:
            for_pod = parse_target(args.for_pod, args.pod_namespace)
        except InspectError as e:
            raise ConfigError(f"--for: {e}") from None
    return PlanAsk(
        for_pod=for_pod,
        free_cards=args.free_cards,
        free_nodes=args.free_nodes,
        card_type=args.card_type,
        nodes=nodes or None,
        selector=args.node_selector,
    )


def run_plan(args: argparse.Namespace) -> int:
    ask = ask_of(args)
    settings = settings_from_args(Service.DEFRAG, args, os.environ)
    try:
        if args.cluster is not None:
            outcome = _offline(args, settings, ask)
            if outcome is None:
                return EXIT_FAILED
        else:
            if settings.common.redis_url is None:
                raise ConfigError(
                    "--redis-url is required to plan on the live cluster (or give --cluster to plan on a simulated one)"
                )
            kube = kube_settings(settings.common, os.environ)
            if args.execute:
                return _execute(settings, kube, ask, args.output, args.wave_size)
            outcome = asyncio.run(_live(settings, kube, ask))
    except ConfigError:
        raise
    except (InspectError, VgpuError) as e:
        print(f"{program(args)} defrag plan: error: {one_line(e)}", file=sys.stderr)
        return EXIT_FAILED
    return emit(outcome, args.output)


def emit(outcome: PlanOutcome, output: str) -> int:
    """Print the outcome; the exit status."""
    for w in outcome.warnings:
        print(f"warning: {w}", file=sys.stderr)
    if output == "json":
        print(json.dumps(outcome.result.to_json(), indent=2))
    else:
        print(render_text(outcome))
    return 0 if isinstance(outcome.result, DefragPlan) else EXIT_CANNOT


def _execute(settings: InspectSettings, kube: KubeSettings, ask: PlanAsk, output: str, wave_size: int) -> int:
    """Plan on the live cluster, print the plan, carry it out (SIGTERM stops it cleanly); the exit status."""
    codes: list[int] = []
    progress = (lambda line: print(line, file=sys.stderr, flush=True)) if output == "json" else print

    async def main(stop: asyncio.Event) -> None:
        async with open_store(settings.common) as store, open_api(kube) as api:
            outcome = await make_plan(settings, store, api, ask)
            plan = outcome.result
            if not isinstance(plan, DefragPlan) or output != "json":
                codes.append(emit(outcome, output))
            if not isinstance(plan, DefragPlan):
                return
            common = settings.common
            placement = Placement(
                vendors=enabled_vendors(common.nvidia, common.device_sections, common.enable_flags),
                nvidia=common.nvidia,
                policies=Policies(settings.node_policy, settings.gpu_policy),
            )
            options = ExecuteOptions(execute=True, wave_size=wave_size)
            result = await execute_plan(
                plan, api=api, store=store, placement=placement, options=options, out=progress, stop=stop
            )
            if output == "json":
                print(json.dumps({"plan": plan.to_json(), "execution": result.to_json()}, indent=2))
            codes[:] = [0 if result.ok else EXIT_FAILED]

    code = run_service(main)
    return code or (codes[0] if codes else EXIT_FAILED)


async def _live(settings: InspectSettings, kube: KubeSettings, ask: PlanAsk) -> PlanOutcome:
    async with open_store(settings.common) as store, open_api(kube) as api:
        return await make_plan(settings, store, api, ask)


def _offline(args: argparse.Namespace, settings: InspectSettings, ask: PlanAsk) -> PlanOutcome | None:
    """Plan on the simulated cluster (:mod:`.offline`); None when the run was stopped or failed (reported)."""
    from vgpu_scheduler.services.defrag.offline import on_simulated  # simulate's modules, only when simulating
    from vgpu_scheduler.services.simulate.clock import VirtualClockLoop

    for name in LIVE_ONLY:
        if getattr(args, OPTIONS_BY_NAME[name].dest, None) is not None:
            raise ConfigError(f"--{name} does not apply with --cluster (the simulated cluster has its own)")
    simulate = settings_from_args(Service.SIMULATE, args, {**os.environ, OPTIONS_BY_NAME["redis-url"].env_var: ""})
    configure_logging(fmt=settings.common.log_format, level=LogLevel.WARNING)
    result: list[PlanOutcome] = []

    async def then(store: Store, api: Api) -> PlanOutcome:
        return await make_plan(settings, store, api, ask)

    async def main(stop: asyncio.Event) -> None:
        del stop  # a signal cancels the run: nothing is left to clean up but the embedded cluster itself
        warn = lambda line: print(f"warning: {line}", file=sys.stderr)  # noqa: E731
        result.append(await on_simulated(simulate, args.cluster, args.workload, then, warn=warn))

    code = run_service(main, loop_factory=VirtualClockLoop)
    if code != 0 or not result:
        return None
    return result[0]
