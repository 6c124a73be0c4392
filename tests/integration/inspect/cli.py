"""Run the operator commands as real processes (``python -m vgpu_scheduler.services.cli explain|usage …``)
and capture them."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        assert self.code == 0, self.err
        return json.loads(self.out)


async def run_cli(*args: str, env: Mapping[str, str] | None = None, program: str | None = None) -> Ran:
    """``vgpu-scheduler <args>`` (or ``program <args>``, e.g. the kubectl-vgpu script); never blocks the loop."""
    argv = [program] if program else [sys.executable, "-m", "vgpu_scheduler.services.cli"]
    proc = await asyncio.create_subprocess_exec(
        *argv,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=dict(os.environ if env is None else env),
    )
    async with asyncio.timeout(60):
        out, err = await proc.communicate()
    assert proc.returncode is not None
    return Ran(proc.returncode, out.decode(), err.decode())


def columns(line: str) -> list[str]:
    """A table row's cells (columns are separated by two spaces or more)."""
    return [c.strip() for c in re.split(r"\s{2,}", line.strip())]


def row(text: str, needle: str, *, start: bool = False) -> list[str]:
    """The cells of the first line of ``text`` that starts with (or contains) ``needle``."""
    for line in text.splitlines():
        if line.startswith(needle) if start else needle in line:
            return columns(line)
    raise AssertionError(f"no line with {needle!r} in:\n{text}")
