"""``vgpu-scheduler explain`` and ``vgpu-scheduler usage`` (also ``kubectl vgpu explain|usage``): the composition roots.

Both read; neither reserves nor writes anything. Exit codes: 0 answered, 1 a failure reported on one line (Redis or
the API server unreachable, pod not found), 2 a configuration or usage error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence

from vgpu_scheduler.services.inspect.connect import InspectError, kube_settings, one_line, open_api, open_store
from vgpu_scheduler.services.inspect.explain import Explanation, explain, parse_target
from vgpu_scheduler.services.inspect.explain import render_text as render_explanation
from vgpu_scheduler.services.inspect.usage import Filters, UsageReport, collect
from vgpu_scheduler.services.inspect.usage import render_text as render_usage
from vgpu_scheduler.shared.config import InspectSettings, Service, add_service_parser, settings_from_args
from vgpu_scheduler.shared.errors import ConfigError, VgpuError
from vgpu_scheduler.shared.k8s import KubeSettings

EXIT_FAILED = 1


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
    ex.set_defaults(run=run_explain)

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
    us.set_defaults(run=run_usage)


def _fail(command: str, message: str) -> int:
    print(f"vgpu-scheduler {command}: error: {one_line(message)}", file=sys.stderr)
    return EXIT_FAILED


def run_explain(args: argparse.Namespace) -> int:
    settings = settings_from_args(Service.EXPLAIN, args, os.environ)
    try:
        namespace, name = parse_target(args.target, args.pod_namespace)
        kube = kube_settings(settings.common, os.environ)
        result = asyncio.run(_explain(settings, kube, namespace, name))
    except ConfigError:
        raise
    except (InspectError, VgpuError) as e:
        return _fail("explain", str(e))
    if args.output == "json":
        print(json.dumps(result.to_json(), indent=2, sort_keys=False))
    else:
        print(render_explanation(result))
    return 0


async def _explain(settings: InspectSettings, kube: KubeSettings, namespace: str, name: str) -> Explanation:
    async with open_store(settings.common) as store, open_api(kube) as api:
        return await explain(settings, store, api, namespace, name)


def _node_names(values: Sequence[str]) -> frozenset[str]:
    return frozenset(n.strip() for v in values for n in v.split(",") if n.strip())


def run_usage(args: argparse.Namespace) -> int:
    settings = settings_from_args(Service.USAGE, args, os.environ)
    filters = Filters(nodes=_node_names(args.node), namespace=args.pod_namespace, vendor=args.vendor)
    try:
        report = asyncio.run(_usage(settings, filters))
    except ConfigError:
        raise
    except (InspectError, VgpuError) as e:
        return _fail("usage", str(e))
    if args.output == "json":
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(render_usage(report, wide=args.output == "wide"))
    return 0


async def _usage(settings: InspectSettings, filters: Filters) -> UsageReport:
    async with open_store(settings.common) as store:
        return await collect(store, filters)


def kubectl_main(argv: Sequence[str] | None = None) -> int:
    """The ``kubectl-vgpu`` console script: ``kubectl vgpu explain …`` / ``kubectl vgpu usage …``."""
    from vgpu_scheduler.services.cli import main

    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in ("explain", "usage"):
        if args and args[0] in ("-h", "--help"):
            print("usage: kubectl vgpu {explain NAMESPACE/POD | usage} [options]  (--help after a command lists them)")
            return 0
        print("kubectl vgpu: expected a command: explain NAMESPACE/POD, or usage", file=sys.stderr)
        return 2
    return main(args)
