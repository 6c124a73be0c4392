"""The ``vgpu-scheduler`` console script: one subcommand per service.

Each subcommand module exposes ``register(subparsers)`` which adds its parser with ``set_defaults(run=...)``;
``run(args) -> int`` is the process' composition root.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Subcommands are added here as they exist; a subcommand that is not built yet is simply absent.
SUBCOMMANDS: tuple[str, ...] = ()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vgpu-scheduler",
        description="GPU-sharing scheduler extender for Kubernetes, wire-compatible with HAMi's device plugin.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in SUBCOMMANDS:
        module = importlib.import_module(module_name)
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    run = getattr(args, "run", None)
    if run is None:
        parser.print_help()
        return 2
    code: int = run(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
