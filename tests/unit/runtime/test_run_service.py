"""run_service: signals → stop event → clean shutdown; exit codes 0 / 1 / 2."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from vgpu_scheduler.shared.errors import ConfigError
from vgpu_scheduler.shared.runtime import EXIT_CONFIG, EXIT_FAILED, EXIT_OK, fast_loop_factory, run_service

SERVICE = textwrap.dedent(
    """
    import asyncio, sys
    from vgpu_scheduler.shared.runtime import RootTask, fast_loop_factory, run_service, supervise

    def worker(name):
        async def run():
            try:
                print(f"started {name}", flush=True)
                await asyncio.Event().wait()
            finally:
                print(f"stopped {name}", flush=True)
        return RootTask(name, run)

    async def main(stop):
        print(f"loop {type(asyncio.get_running_loop()).__module__}", flush=True)
        await supervise(stop, [worker("store"), worker("watch"), worker("server")])
        print("clean", flush=True)

    async def stubborn(stop):
        print("waiting", flush=True)
        await stop.wait()
        print("ignoring stop", flush=True)
        await asyncio.Event().wait()

    factory = fast_loop_factory() if "fast" in sys.argv[1:] else None
    sys.exit(run_service(stubborn if "stubborn" in sys.argv[1:] else main, loop_factory=factory))
    """
)


def start(repo_root: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", SERVICE, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=repo_root,
        env={**os.environ, "PYTHONPATH": str(repo_root)},
    )


def read_until(proc: subprocess.Popen[str], wanted: str) -> list[str]:
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        if lines[-1] == wanted:
            return lines
    raise AssertionError(f"process ended before printing {wanted!r}: {lines}")


@pytest.mark.parametrize("loop", ["asyncio", "fast"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_signal_stops_root_tasks_in_reverse_order_and_exits_0(repo_root: Path, sig: signal.Signals, loop: str) -> None:
    """The same with the fast loop the extender runs on (uvloop, where installed)."""
    proc = start(repo_root, loop)
    try:
        lines = read_until(proc, "started server")
        expected_loop = "asyncio" if loop == "asyncio" or fast_loop_factory() is None else "uvloop"
        assert lines[0].removeprefix("loop ").split(".")[0] == expected_loop
        assert lines[1:] == ["started store", "started watch", "started server"]
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert out.splitlines() == ["stopped server", "stopped watch", "stopped store", "clean"]
    assert proc.returncode == 0, err


@pytest.mark.parametrize("loop", ["asyncio", "fast"])
def test_a_second_signal_forces_the_stop(repo_root: Path, loop: str) -> None:
    proc = start(repo_root, "stubborn", loop)
    try:
        read_until(proc, "waiting")  # signal handlers are installed before main runs
        proc.send_signal(signal.SIGTERM)
        read_until(proc, "ignoring stop")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 1, err


# --- in-process: exit codes ------------------------------------------------------------------


def test_main_returning_exits_0() -> None:
    seen: list[bool] = []

    async def main(stop: asyncio.Event) -> None:
        seen.append(stop.is_set())

    assert run_service(main) == EXIT_OK
    assert seen == [False]


def test_sigterm_sets_the_stop_event() -> None:
    async def main(stop: asyncio.Event) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        await stop.wait()

    assert run_service(main) == EXIT_OK
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_config_error_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    async def main(stop: asyncio.Event) -> None:
        raise ConfigError("--cert_file: no such file '/x'")

    assert run_service(main) == EXIT_CONFIG
    assert capsys.readouterr().err == "vgpu-scheduler: error: --cert_file: no such file '/x'\n"


def test_config_error_inside_a_task_group_is_still_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    async def main(stop: asyncio.Event) -> None:
        raise ExceptionGroup("x", [ConfigError("--key_file: bad")])

    assert run_service(main) == EXIT_CONFIG
    assert capsys.readouterr().err == "vgpu-scheduler: error: --key_file: bad\n"


@pytest.mark.parametrize(
    "error", [RuntimeError("boom"), ExceptionGroup("root task(s) failed", [RuntimeError("a"), ConfigError("b")])]
)
def test_failure_exits_1(error: Exception) -> None:
    async def main(stop: asyncio.Event) -> None:
        raise error

    assert run_service(main) == EXIT_FAILED
