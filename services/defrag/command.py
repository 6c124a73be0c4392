"""``vgpu-scheduler defrag plan``: the parser, cheap to import (argparse and the option table only); the command
(:mod:`vgpu_scheduler.services.defrag.main`) is imported when it runs.

``defrag`` groups subcommands (``plan``). The ``plan`` parser is made by :func:`add_plan_parser`, its own options in
named argument groups, so that more (``--execute`` and its options) can join it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from vgpu_scheduler.services.cli import deferred
from vgpu_scheduler.shared.config import Service, add_options

DESCRIPTION = "Which pods to move so that a waiting pod fits, or so that whole cards or nodes become idle."
PLAN_DESCRIPTION = (
    "Plan a defragmentation: which pods to move, from where to where, so that the pending pod named by --for fits, "
    "or so that --free-cards N cards / --free-nodes N nodes are idle. Reads the live state (Redis and the API "
    "server, as explain does), or runs a simulate cluster and workload file to its end and plans on that "
    "(--cluster, --workload). Reserves and evicts nothing unless --execute is given: then the plan is carried out "
    "on the live cluster (the cards held, evictions through the Eviction API in waves, each awaited until the "
    "replacements are bound). Exit status: 0 a plan (carried out, with --execute), 1 no plan (cannot: ...), a run "
    "that stopped, or a failure, 2 a usage error."
)


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if n <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return n


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``defrag`` and its ``plan`` subcommand."""
    defrag = subparsers.add_parser("defrag", help=DESCRIPTION, description=DESCRIPTION, allow_abbrev=False)
    sub = defrag.add_subparsers(dest="defrag_command", metavar="COMMAND")
    add_plan_parser(sub)

    def usage(args: argparse.Namespace) -> int:
        del args
        defrag.print_help()
        return 2

    defrag.set_defaults(run=usage)


def add_plan_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """The ``plan`` parser: the goal, the selection, the output, the simulated cluster, then the settings
    shared with ``explain`` (Redis, the API server, the extender's policies, the device config)."""
    plan = sub.add_parser("plan", help="Plan which pods to move (--execute: move them).", description=PLAN_DESCRIPTION)
    goal = plan.add_argument_group("goal (one of)")
    one = goal.add_mutually_exclusive_group(required=True)
    one.add_argument(
        "--for",
        dest="for_pod",
        metavar="NAMESPACE/POD",
        help="Make room for this pending pod (POD alone: namespace from -n).",
    )
    one.add_argument("--free-cards", type=_positive, metavar="N", help="Have N idle cards (idle ones count).")
    one.add_argument("--free-nodes", type=_positive, metavar="N", help="Have N nodes with every card idle.")
    g = plan.add_argument_group("selection")
    g.add_argument(
        "-n",
        "--namespace",
        dest="pod_namespace",
        metavar="NAMESPACE",
        default=None,
        help="The --for pod's namespace when it has none [default: default].",
    )
    g.add_argument(
        "--type",
        dest="card_type",
        metavar="TYPE",
        default=None,
        help="--free-cards: only cards whose type contains TYPE (case-insensitive), or of this vendor (NVIDIA).",
    )
    g.add_argument(
        "--node",
        action="append",
        default=[],
        metavar="NAME",
        help="--free-cards/--free-nodes: only on this node (repeat, or comma-separate, for several).",
    )
    g.add_argument(
        "-l",
        "--selector",
        dest="node_selector",
        metavar="SELECTOR",
        default=None,
        help="--free-cards/--free-nodes: only on the nodes this label selector selects (e.g. pool=train).",
    )
    g.add_argument("-o", "--output", choices=("text", "json"), default="text", help="Output format [default: text].")
    s = plan.add_argument_group("simulated cluster (instead of the live one)")
    s.add_argument("--cluster", type=Path, metavar="FILE", default=None, help="A simulate cluster file.")
    s.add_argument(
        "--workload", type=Path, metavar="FILE", default=None, help="A simulate workload file, run to its end first."
    )
    x = plan.add_argument_group("carrying the plan out (live cluster only)")
    x.add_argument(
        "--execute",
        action="store_true",
        help="Carry the plan out: hold the cards, evict the moved pods through the Eviction API (PodDisruptionBudgets "
        "honoured), wait for their replacements to bind. Without it nothing is reserved or evicted (a dry run).",
    )
    x.add_argument(
        "--wave-size",
        type=_positive,
        metavar="N",
        default=2,
        help="--execute: evictions at once; the next wave waits until these pods' replacements are bound [default: 2].",
    )
    add_options(plan, Service.DEFRAG)
    plan.set_defaults(run=deferred("vgpu_scheduler.services.defrag.main:run_plan", settings_of=Service.DEFRAG))
    return plan
