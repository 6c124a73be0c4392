"""``vgpu-scheduler explain`` and ``vgpu-scheduler usage``, and the ``kubectl-vgpu`` plugin: the parsers, cheap to
import (argparse and the option table only); the commands (:mod:`vgpu_scheduler.services.inspect.main`) are imported
when they run.

``kubectl-vgpu`` is found by kubectl on the ``PATH`` and run for ``kubectl vgpu ...``; it names itself
``kubectl vgpu`` in its usage and error lines, as kubectl plugins do (what the user typed).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Final

from vgpu_scheduler.services.cli import deferred, main
from vgpu_scheduler.shared.config import Service, add_service_parser

KUBECTL_PROG: Final = "kubectl vgpu"
KUBECTL_COMMANDS: Final = ("explain", "usage", "defrag")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``explain`` and ``usage`` subcommands."""
    ex = add_service_parser(subparsers, Service.EXPLAIN)
    g = ex.add_argument_group("explain options")
    g.add_argument("target", metavar="NAMESPACE/POD", help="The pod to explain (POD alone: namespace from -n).")
    g.add_argument(
        "-n",
        "--namespace",
        dest="pod_namespace",
        metavar="NAMESPACE",
        default=None,
        help="The pod's namespace when the target has none [default: default].",
    )
    g.add_argument("-o", "--output", choices=("text", "json"), default="text", help="Output format [default: text].")
    ex.set_defaults(run=deferred("vgpu_scheduler.services.inspect.main:run_explain", settings_of=Service.EXPLAIN))

    us = add_service_parser(subparsers, Service.USAGE)
    g = us.add_argument_group("usage options")
    g.add_argument(
        "--node",
        action="append",
        default=[],
        metavar="NAME",
        help="Only this node (repeat, or comma-separate, for several).",
    )
    g.add_argument(
        "-n",
        "--namespace",
        dest="pod_namespace",
        metavar="NAMESPACE",
        default=None,
        help="Only devices holding pods of this namespace, and only those pods.",
    )
    g.add_argument("--vendor", metavar="VENDOR", default=None, help="Only nodes of this device vendor (e.g. NVIDIA).")
    g.add_argument(
        "-o",
        "--output",
        choices=("text", "wide", "json"),
        default="text",
        help="Output format: text, wide (full UUIDs, index, mode, NUMA, each pod's share) or json [default: text].",
    )
    us.set_defaults(run=deferred("vgpu_scheduler.services.inspect.main:run_usage", settings_of=Service.USAGE))


def kubectl_main(argv: Sequence[str] | None = None) -> int:
    """The ``kubectl-vgpu`` console script: ``kubectl vgpu explain …`` / ``usage …`` / ``defrag plan …``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in KUBECTL_COMMANDS:
        if args and args[0] in ("-h", "--help"):
            print(
                f"usage: {KUBECTL_PROG} {{explain NAMESPACE/POD | usage | defrag plan}} [options]"
                "  (--help after a command lists them)"
            )
            return 0
        print(
            f"{KUBECTL_PROG}: error: expected a command: explain NAMESPACE/POD, usage, or defrag plan", file=sys.stderr
        )
        return 2
    return main(args, prog=KUBECTL_PROG)
