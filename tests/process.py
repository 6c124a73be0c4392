"""A service as a real process (``python -m vgpu_scheduler.services.cli <subcommand>``) for the composition-root
tests: start it
with JSON logs to a file, find the servers it logged as listening, read its HTTP endpoints, and kill it if a test
leaves it running."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp

from tests.waiting import eventually


@contextlib.asynccontextmanager
async def service_process(log: Path, subcommand: str, *flags: str) -> AsyncIterator[asyncio.subprocess.Process]:
    """``vgpu-scheduler <subcommand> <flags> --log-format=json`` with stderr in ``log``; killed on exit if running."""
    with log.open("wb") as err:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "vgpu_scheduler.services.cli",
            subcommand,
            *flags,
            "--log-format=json",
            stdout=asyncio.subprocess.DEVNULL,
            stderr=err,
        )
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def listening_addresses(log: Path) -> list[str]:
    """The ``address`` of every ``listening`` record in a JSON log, in order."""
    out = []
    for line in log.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("msg") == "listening":
            out.append(str(record["address"]))
    return out


async def first_listening(proc: asyncio.subprocess.Process, log: Path, timeout_s: float = 30.0) -> str:
    """The address of the first server the process logged as listening; fails with the log if it exits first."""
    await eventually(lambda: bool(listening_addresses(log)) or proc.returncode is not None, timeout_s, "listening")
    addresses = listening_addresses(log)
    assert addresses, _text(log)
    return addresses[0]


def _text(log: Path) -> str:
    return log.read_text()


async def http_get(session: aiohttp.ClientSession, url: str) -> tuple[int, str]:
    """(status, body text) of a GET with a 5 s deadline."""
    async with session.get(url, timeout=aiohttp.ClientTimeout(total=5)) as resp:
        return resp.status, await resp.text()
