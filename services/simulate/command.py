"""``vgpu-scheduler simulate`` and ``vgpu-scheduler emulator``: the parsers, cheap to import (argparse and the option
table only); the commands themselves (:mod:`vgpu_scheduler.services.simulate.main`) are imported when they run."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Final

from vgpu_scheduler.services.cli import deferred
from vgpu_scheduler.shared.config import Service, add_service_parser
from vgpu_scheduler.shared.config.values import parse_seconds

DEFAULT_ALLOCATE_LATENCY_S: Final = 0.2
"""``--allocate-latency``'s default: ``SchedulerTiming().allocate_latency_s`` (a test keeps the two equal)."""
DEFAULT_CONTROLLER_DELAY_S: Final = 1.0
"""``--controller-delay``'s default: ``SchedulerTiming().controller_delay_s`` (a test keeps the two equal)."""
DEFAULT_EXTENDER_HTTP_TIMEOUT_S: Final = 30.0
"""``--extender-http-timeout``'s default: ``SchedulerTiming().http_timeout_s`` (a test keeps the two equal)."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``simulate`` and ``emulator`` subcommands."""
    parser = add_service_parser(subparsers, Service.SIMULATE)
    add_simulate_options(parser)
    parser.set_defaults(run=deferred("vgpu_scheduler.services.simulate.main:run"))
    emu = subparsers.add_parser(
        "emulator",
        help="Serve the Kubernetes API emulator seeded with a cluster file (for docker-compose).",
        description="Serve the in-process Kubernetes API emulator (core/v1: nodes, pods, resourcequotas, events, "
        "namespaces) seeded with a cluster file, until SIGTERM.",
        allow_abbrev=False,
    )
    emu.add_argument(
        "--cluster",
        metavar="FILE",
        default=None,
        help="Cluster manifests to seed (default: the bundled example cluster).",
    )
    emu.add_argument(
        "--bind",
        metavar="HOST:PORT",
        default="127.0.0.1:8001",
        help="Listen address, Go-style (:8001 = every interface) [default: 127.0.0.1:8001].",
    )
    emu.add_argument("--log-format", metavar="auto|json|text", default="auto", help="Log format [default: auto].")
    emu.add_argument("--log-level", metavar="LEVEL", default="info", help="Log level [default: info].")
    emu.set_defaults(run=deferred("vgpu_scheduler.services.simulate.main:run_emulator"))


def add_simulate_options(parser: argparse.ArgumentParser) -> None:
    """The simulator's own options (command line only: they describe one run, not a deployment)."""
    g = parser.add_argument_group("simulate options")
    g.add_argument(
        "--cluster",
        metavar="FILE",
        help="Cluster manifests: Nodes (HAMi annotations, status.allocatable), "
        "running Pods with their allocation annotations, ResourceQuotas [default: the bundled example].",
    )
    g.add_argument("--workload", metavar="FILE", help="Pods to schedule, in order [default: the bundled example].")
    g.add_argument(
        "--output",
        metavar="text|json",
        choices=("text", "json"),
        default="text",
        help="A readable table, or one JSON object [default: text].",
    )
    g.add_argument(
        "--compare",
        action="store_true",
        help="Run the workload once per policy combination (fresh "
        "emulator and store each) and compare them. Implied when neither --cluster, --workload nor a "
        "policy flag is given.",
    )
    g.add_argument(
        "--policies",
        metavar="NODE/GPU[;...]",
        action="append",
        default=None,
        help="Combinations for --compare, e.g. 'binpack/spread;spread/topology-aware' (repeatable) "
        "[default: node binpack,spread x gpu binpack,spread,topology-aware].",
    )
    g.add_argument(
        "--plot",
        metavar="DIR",
        help="Write PNG charts of the comparison to DIR (needs matplotlib: pip install 'vgpu-scheduler[plot]').",
    )
    g.add_argument("--progress", action="store_true", help="Show progress on stderr even when it is not a terminal.")
    for flag, default, positive, text in (
        (
            "--allocate-latency",
            DEFAULT_ALLOCATE_LATENCY_S,
            False,
            "The device plugin's Allocate comes this long after a pod's Binding (kubelet's admission), e.g. "
            "200ms; the node lock is held meanwhile [default: 200ms].",
        ),
        (
            "--extender-http-timeout",
            DEFAULT_EXTENDER_HTTP_TIMEOUT_S,
            True,
            "kube-scheduler's extender httpTimeout: a /filter or /bind not answered within it fails and the pod "
            "backs off [default: 30s, the Helm chart's value].",
        ),
        (
            "--controller-delay",
            DEFAULT_CONTROLLER_DELAY_S,
            False,
            "kube-controller-manager: from the deletion of a pod a controller owns (a StatefulSet's: its end) to "
            "the creation of its replacement, e.g. 1s [default: 1s].",
        ),
    ):
        g.add_argument(flag, metavar="DURATION", type=_duration(flag, positive=positive), default=default, help=text)
    g.add_argument(
        "--kube-server",
        metavar="URL",
        dest="sim_kube_server",
        help="Drive a deployed system instead of "
        "the embedded one: the API server URL (the emulator; no credentials). Needs --extender-url.",
    )
    g.add_argument(
        "--extender-url",
        metavar="URL",
        action="append",
        dest="extender_urls",
        default=None,
        help="With --kube-server: an extender's base URL; repeat for several replicas (used in turn).",
    )


def _duration(flag: str, *, positive: bool = False) -> Callable[[str], float]:
    """An argparse type: a Go duration (``200ms``, ``1.5s``) or plain seconds, in seconds."""

    def parse(text: str) -> float:
        try:
            value = parse_seconds(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"{flag}: {e}") from None
        if value < 0 or (positive and value == 0):
            raise argparse.ArgumentTypeError(f"{flag}: must be {'positive' if positive else 'zero or more'}: {text!r}")
        return value

    return parse
