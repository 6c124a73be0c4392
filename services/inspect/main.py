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

from vgpu_scheduler.services.cli import program
from vgpu_scheduler.services.inspect.connect import InspectError, kube_settings, one_line, open_api, open_store
from vgpu_scheduler.services.inspect.explain import Explanation, explain, parse_target
from vgpu_scheduler.services.inspect.explaintext import render_text as render_explanation
from vgpu_scheduler.services.inspect.usage import Filters, UsageReport, collect
from vgpu_scheduler.services.inspect.usage import render_text as render_usage
from vgpu_scheduler.shared.config import InspectSettings, Service, settings_from_args
from vgpu_scheduler.shared.errors import ConfigError, VgpuError
from vgpu_scheduler.shared.k8s import KubeSettings

EXIT_FAILED = 1


def _fail(args: argparse.Namespace, command: str, message: str) -> int:
    print(f"{program(args)} {command}: error: {one_line(message)}", file=sys.stderr)
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
        return _fail(args, "explain", str(e))
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
        return _fail(args, "usage", str(e))
    if args.output == "json":
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(render_usage(report, wide=args.output == "wide"))
    return 0


async def _usage(settings: InspectSettings, filters: Filters) -> UsageReport:
    async with open_store(settings.common) as store:
        return await collect(store, filters)
