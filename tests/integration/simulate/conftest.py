"""Helpers for the simulate integration tests: run the console script in-process or as a child process."""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from vgpu_scheduler.services import cli

REPO = Path(__file__).resolve().parents[3]


def run_cli(*argv: str) -> tuple[int, str, str]:
    """``vgpu-scheduler <argv>`` in this process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(argv))
    return code, out.getvalue(), err.getvalue()


def run_cli_json(*argv: str) -> Any:
    code, out, err = run_cli(*argv, "--output", "json")
    assert code == 0, err
    return json.loads(out)


def spawn(*argv: str) -> subprocess.Popen[str]:
    """``python -m vgpu_scheduler.services.cli <argv>`` as a child process (stdout/stderr piped, text)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, "-m", "vgpu_scheduler.services.cli", *argv],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
