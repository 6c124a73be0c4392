"""Issue 23 item 6: ``--help``, ``--version`` and argument errors answer without importing the services.

Each case runs in a fresh interpreter (``sys.modules`` of this one is full already) and reports which heavy modules
it loaded. Timings are ``benchmarks/bench_cli.py``'s business, never asserted here.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from vgpu_scheduler.services import cli

HEAVY = (
    "aiohttp",
    "kubernetes_asyncio",
    "redis",
    "hiredis",
    "fakeredis",
    "prometheus_client",
    "yaml",
    "uvloop",
    "orjson",
    "msgpack",
    "matplotlib",
    "vgpu_scheduler.shared.store",
    "vgpu_scheduler.shared.k8s",
    "vgpu_scheduler.shared.emulator",
    "vgpu_scheduler.shared.vendors",
    "vgpu_scheduler.shared.domain.plan",
)
"""Third-party packages that cost tens to hundreds of milliseconds each, and our modules that pull them in."""

PROBE = """
import contextlib, io, json, sys
from vgpu_scheduler.services import cli
from vgpu_scheduler.services.inspect.command import kubectl_main
entry, argv = sys.argv[1], sys.argv[2:]
out, err = io.StringIO(), io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    try:
        code = (kubectl_main if entry == "kubectl" else cli.main)(argv)
    except SystemExit as e:
        code = e.code
heavy = json.loads(sys.stdin.read())
loaded = sorted(h for h in heavy if any(m == h or m.startswith(h + ".") for m in sys.modules))
services = sorted(m for m in sys.modules if m.startswith("vgpu_scheduler.services.") and not m.endswith(
    (".cli", ".command", "services.registrar", "services.informer", "services.extender", "services.simulate",
     "services.allinone", "services.inspect", "services.defrag")))
print(json.dumps({"code": code, "out": out.getvalue(), "err": err.getvalue(), "heavy": loaded, "services": services}))
"""


def probe(repo_root: Path, entry: str, *argv: str) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, entry, *argv],
        input=json.dumps(HEAVY),
        capture_output=True,
        text=True,
        check=True,
        cwd=repo_root,
        env={"PATH": "/usr/bin:/bin"},  # no VGPU_* variables of the caller
        timeout=60,
    )
    result: dict[str, object] = json.loads(proc.stdout)
    return result


@pytest.mark.parametrize(
    ("entry", "argv", "code", "says"),
    [
        pytest.param("cli", ["--help"], 0, "usage: vgpu-scheduler", id="help"),
        pytest.param("cli", ["--version"], 0, "vgpu-scheduler ", id="version"),
        pytest.param("cli", [], 2, "usage: vgpu-scheduler", id="no-command"),
        pytest.param("cli", ["simulate", "--help"], 0, "--allocate-latency", id="simulate-help"),
        pytest.param("cli", ["extender", "--help"], 0, "--http_bind", id="extender-help"),
        pytest.param("cli", ["usage", "--bogus"], 2, "unrecognized arguments: --bogus", id="argument-error"),
        pytest.param("cli", ["simulate", "--allocate-latency=soon"], 2, "--allocate-latency", id="bad-value"),
        pytest.param("cli", ["extender"], 2, "--redis-url is required by extender", id="config-error"),
        pytest.param("cli", ["explain", "default/p"], 2, "--redis-url is required by explain", id="explain-config"),
        pytest.param("cli", ["defrag", "plan", "--help"], 0, "--free-cards N", id="defrag-plan-help"),
        pytest.param("kubectl", ["--help"], 0, "usage: kubectl vgpu", id="kubectl-help"),
        pytest.param("kubectl", ["usage", "--help"], 0, "usage: kubectl vgpu usage", id="kubectl-usage-help"),
    ],
)
def test_answers_without_importing_the_services(
    repo_root: Path, entry: str, argv: list[str], code: int, says: str
) -> None:
    result = probe(repo_root, entry, *argv)
    assert result["code"] == code, result
    assert says in f"{result['out']}{result['err']}", result
    assert result["heavy"] == [], f"{' '.join(argv)} imported {result['heavy']}"
    assert result["services"] == [], f"{' '.join(argv)} imported {result['services']}"


def test_a_command_that_runs_imports_its_service(repo_root: Path) -> None:
    """The probe can see a service being imported: a config error found by the service itself (after the cheap
    check passed) loads it."""
    result = probe(repo_root, "cli", "emulator", "--bind", "nonsense")
    assert result["code"] == 2, result
    assert "--bind" in str(result["err"])
    assert "vgpu_scheduler.services.simulate.main" in result["services"]  # type: ignore[operator]


def test_every_subcommand_has_a_parser_module() -> None:
    (sub,) = (a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    names = set(sub.choices)
    assert names == {
        "registrar",
        "informer",
        "extender",
        "simulate",
        "emulator",
        "all-in-one",
        "explain",
        "usage",
        "defrag",
    }


def test_simulate_flag_defaults_are_the_drivers() -> None:
    from vgpu_scheduler.services.simulate import command
    from vgpu_scheduler.services.simulate.driver import SchedulerTiming

    assert SchedulerTiming().allocate_latency_s == command.DEFAULT_ALLOCATE_LATENCY_S
    assert SchedulerTiming().http_timeout_s == command.DEFAULT_EXTENDER_HTTP_TIMEOUT_S
    assert SchedulerTiming().controller_delay_s == command.DEFAULT_CONTROLLER_DELAY_S
