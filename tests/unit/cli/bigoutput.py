"""A stand-in subcommand module for the pipe tests: ``big`` prints far more than a pipe holds (64 KiB on Linux), so
a reader that closes after one line always finds the writer still writing."""

from __future__ import annotations

import argparse

LINES = 20_000


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    subparsers.add_parser("big").set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    for i in range(LINES):
        print(f"line {i:05d} " + "x" * 60)
    return 0
