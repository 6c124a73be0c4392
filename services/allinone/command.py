"""``vgpu-scheduler all-in-one``: the subcommand's parser (flags generated from the option table), cheap to import; the
service itself (:mod:`vgpu_scheduler.services.allinone.main`) is imported when the command runs."""

from __future__ import annotations

import argparse

from vgpu_scheduler.services.cli import deferred
from vgpu_scheduler.shared.config import Service, add_service_parser


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``all-in-one`` subcommand."""
    run = deferred("vgpu_scheduler.services.allinone.main:run", settings_of=Service.ALL_IN_ONE)
    add_service_parser(subparsers, Service.ALL_IN_ONE).set_defaults(run=run)
