"""``vgpu-scheduler extender``: the subcommand's parser (flags generated from the option table), cheap to import; the
service itself (:mod:`vgpu_scheduler.services.extender.main`) is imported when the command runs."""

from __future__ import annotations

import argparse

from vgpu_scheduler.services.cli import deferred
from vgpu_scheduler.shared.config import Service, add_service_parser


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``extender`` subcommand."""
    run = deferred("vgpu_scheduler.services.extender.main:run", settings_of=Service.EXTENDER)
    add_service_parser(subparsers, Service.EXTENDER).set_defaults(run=run)
