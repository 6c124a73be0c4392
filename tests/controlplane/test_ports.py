"""Starting a control-plane process on free ports: a port picked free and taken by someone else before the process
bound it (another suite on the same machine) restarts the process on other ports instead of failing the run.
Needs no Kubernetes binaries: the processes are Python's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.controlplane import control
from tests.controlplane.control import ControlPlaneError, _start_listening


def _serve(port: int, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port)], stdout=out, stderr=out
        )


def _exit_with(message: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-c", f"import sys; print({message!r}); sys.exit(1)"], stdout=out)


def test_a_taken_port_starts_the_process_again_on_another(tmp_path: Path) -> None:
    log = tmp_path / "proc.log"
    launched: list[int] = []

    def launch(ports: list[int]) -> tuple[subprocess.Popen[bytes], str, None]:
        (port,) = ports
        launched.append(port)
        if len(launched) == 1:
            proc = _exit_with(f"listen tcp 127.0.0.1:{port}: bind: address already in use", log)
        else:
            proc = _serve(port, log)
        return proc, f"http://127.0.0.1:{port}/", None

    proc, (port,) = _start_listening(1, launch, log, "server")
    try:
        assert len(launched) == 2 and port == launched[1]
    finally:
        control._stop(proc)


def test_any_other_failure_is_reported_at_once(tmp_path: Path) -> None:
    log = tmp_path / "proc.log"
    launched: list[int] = []

    def launch(ports: list[int]) -> tuple[subprocess.Popen[bytes], str, None]:
        launched.append(ports[0])
        return _exit_with("flag provided but not defined: -bogus", log), f"http://127.0.0.1:{ports[0]}/", None

    with pytest.raises(ControlPlaneError, match="bogus"):
        _start_listening(1, launch, log, "server")
    assert len(launched) == 1
