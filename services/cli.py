"""The ``vgpu-scheduler`` console script: one subcommand per service.

Each module of :data:`SUBCOMMANDS` exposes ``register(subparsers)``, which adds its parsers with
``set_defaults(run=...)``; ``run(args) -> int`` is the process' composition root. The parser modules are cheap to
import (argparse and the option table only): the service itself is imported when its command runs, through
:func:`deferred`, so ``--help``, ``--version`` and a usage error answer without loading aiohttp, the Kubernetes
client, Redis or Prometheus::

    def register(subparsers):                                    # services/informer/command.py
        add_service_parser(subparsers, Service.INFORMER).set_defaults(
            run=deferred("vgpu_scheduler.services.informer.main:run"))

    def run(args):                                               # services/informer/main.py
        settings = settings_from_args(Service.INFORMER, args, os.environ)   # may raise ConfigError
        ...
        return run_service(main)

A :class:`~shared.errors.ConfigError` escaping ``run`` is printed as one ``vgpu-scheduler: error: ...`` line
and the process exits 2 (argparse's own usage errors exit 2 as well).

A reader that goes away early (``vgpu-scheduler usage | head -2``) ends the command quietly, as a Unix tool
killed by SIGPIPE does: nothing on stderr, exit status 141 (128 + SIGPIPE, what a shell reports for ``yes`` in
``yes | head -1``).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, Final, NoReturn

from vgpu_scheduler.shared.config import Service, normalize_argv, settings_from_args
from vgpu_scheduler.shared.errors import ConfigError

# Subcommands are added here as they exist; a subcommand that is not built yet is simply absent.
SUBCOMMANDS: tuple[str, ...] = (
    "vgpu_scheduler.services.registrar.command",
    "vgpu_scheduler.services.informer.command",
    "vgpu_scheduler.services.extender.command",
    "vgpu_scheduler.services.simulate.command",
    "vgpu_scheduler.services.allinone.command",
    "vgpu_scheduler.services.inspect.command",
    "vgpu_scheduler.services.defrag.command",
)

EXIT_USAGE: Final = 2
EXIT_BROKEN_PIPE: Final = 141
"""128 + SIGPIPE (13): the status a shell reports for a process killed by SIGPIPE, as coreutils are."""
DISTRIBUTION: Final = "vgpu-scheduler"
PROG: Final = "vgpu-scheduler"
PROG_DEST: Final = "_prog"
"""The namespace attribute holding the program name the user typed (``vgpu-scheduler`` or ``kubectl vgpu``)."""

Run = Callable[[argparse.Namespace], int]


def version() -> str:
    """The installed package's version (its metadata), or a note when running from an uninstalled tree."""
    import importlib.metadata  # only for --version: its import costs as much as the rest of --help

    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return "unknown (package not installed)"


class _VersionAction(argparse.Action):
    """``--version``: reads the package metadata only when asked (argparse's own action formats it up front)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        del kwargs
        super().__init__(
            option_strings,
            dest=dest,
            default=argparse.SUPPRESS,
            nargs=0,
            help="Print the installed version and exit.",
        )

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> NoReturn:
        print(f"{DISTRIBUTION} {version()}")
        parser.exit()


def deferred(target: str, *, settings_of: Service | None = None) -> Run:
    """A subcommand's ``run``, named ``"package.module:function"`` and imported only when the command runs.

    ``settings_of``: check that service's settings first (flags, environment, ``--config`` file), so that a
    configuration error (a missing ``--redis-url``) is reported before the service's modules are loaded; ``run``
    builds them again for itself."""
    module_name, _, function = target.partition(":")

    def run(args: argparse.Namespace) -> int:
        if settings_of is not None:
            settings_from_args(settings_of, args, os.environ)
        fn: Run = getattr(importlib.import_module(module_name), function)
        return fn(args)

    run.__qualname__ = run.__name__ = f"deferred({target})"
    return run


def program(args: argparse.Namespace) -> str:
    """The program name the user typed, for error lines (``vgpu-scheduler``, or ``kubectl vgpu`` for the plugin)."""
    prog = getattr(args, PROG_DEST, PROG)
    return prog if isinstance(prog, str) else PROG


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="GPU-sharing scheduler extender for Kubernetes, wire-compatible with HAMi's device plugin.",
        allow_abbrev=False,
    )
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in SUBCOMMANDS:
        module = importlib.import_module(module_name)
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None, *, prog: str = PROG) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``) and run the command; returns the exit status."""
    try:
        try:
            return _main(argv, prog)
        finally:
            # a closed pipe shows here, not in the interpreter's own flush at exit (argparse's --help and usage
            # errors ignore a failed write themselves)
            sys.stdout.flush()
    except BrokenPipeError:
        return broken_pipe()


def _main(argv: Sequence[str] | None, prog: str) -> int:
    parser = build_parser(prog)
    args = parser.parse_args(normalize_argv(sys.argv[1:] if argv is None else argv))
    setattr(args, PROG_DEST, prog)
    run = getattr(args, "run", None)
    if run is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        code: int = run(args)
    except ConfigError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    return code


def broken_pipe() -> int:
    """The reader of stdout went away: stop quietly, as a Unix tool killed by SIGPIPE does (status 141).

    What is still buffered cannot be written; stdout is pointed at the null device so that the interpreter's flush
    at exit does not raise again (it would print ``Exception ignored ... BrokenPipeError`` and exit 120)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no real stdout (a test's capture): nothing left to protect
        pass
    return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
