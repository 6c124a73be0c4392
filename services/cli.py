"""The ``vgpu-scheduler`` console script: one subcommand per service.

Each subcommand module exposes ``register(subparsers)`` which adds its parser with ``set_defaults(run=...)``;
``run(args) -> int`` is the process' composition root. A service's parser comes from the option table::

    def register(subparsers):
        add_service_parser(subparsers, Service.INFORMER).set_defaults(run=run)

    def run(args):
        settings = settings_from_args(Service.INFORMER, args, os.environ)   # may raise ConfigError
        ...
        return run_service(main)

A :class:`~shared.errors.ConfigError` escaping ``run`` is printed as one ``vgpu-scheduler: error: ...`` line
and the process exits 2 (argparse's own usage errors exit 2 as well).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import sys
from collections.abc import Sequence

from vgpu_scheduler.shared.config import normalize_argv
from vgpu_scheduler.shared.errors import ConfigError

# Subcommands are added here as they exist; a subcommand that is not built yet is simply absent.
SUBCOMMANDS: tuple[str, ...] = (
    "vgpu_scheduler.services.registrar.main",
    "vgpu_scheduler.services.informer.main",
    "vgpu_scheduler.services.extender.main",
    "vgpu_scheduler.services.simulate.main",
    "vgpu_scheduler.services.allinone.main",
    "vgpu_scheduler.services.inspect.main",
)

EXIT_USAGE = 2
DISTRIBUTION = "vgpu-scheduler"


def version() -> str:
    """The installed package's version (its metadata), or a note when running from an uninstalled tree."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return "unknown (package not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vgpu-scheduler",
        description="GPU-sharing scheduler extender for Kubernetes, wire-compatible with HAMi's device plugin.",
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"{DISTRIBUTION} {version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in SUBCOMMANDS:
        module = importlib.import_module(module_name)
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(normalize_argv(sys.argv[1:] if argv is None else argv))
    run = getattr(args, "run", None)
    if run is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        code: int = run(args)
    except ConfigError as e:
        print(f"vgpu-scheduler: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    return code


if __name__ == "__main__":
    sys.exit(main())
