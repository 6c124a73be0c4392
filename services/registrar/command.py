"""``vgpu-scheduler registrar``: the subcommand's parser (flags generated from the option table), cheap to import; the
service itself (:mod:`vgpu_scheduler.services.registrar.main`) is imported when the command runs."""

from __future__ import annotations

import argparse

from vgpu_scheduler.services.cli import deferred
from vgpu_scheduler.shared.config import Service, add_service_parser


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``registrar`` subcommand."""
    run = deferred("vgpu_scheduler.services.registrar.main:run", settings_of=Service.REGISTRAR)
    add_service_parser(subparsers, Service.REGISTRAR).set_defaults(run=run)
