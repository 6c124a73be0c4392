"""Shared fixtures: a real redis-server per test session, flushed between tests; a guard against leaked tasks;
Hypothesis without timing limits."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.controlplane.fixtures import kube_apiserver, kube_cleanup  # noqa: F401

# A test never fails on a timing: Hypothesis' per-example deadline (200 ms) and its too-slow health check would
# fail a property on a machine busy with other work, whatever the code does.
settings.register_profile("vgpu", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("vgpu")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], deadline_s: float = 10.0) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"redis-server exited early with code {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)  # start-up of an external process: nothing to await
    raise RuntimeError(f"redis-server did not listen on {port} within {deadline_s}s")


@pytest.fixture(scope="session")
def redis_server() -> Iterator[str]:
    """Start a private ``redis-server`` on a free loopback port; yield its URL. Never the machine's shared one."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is not installed: .ci/run installs it (apt-get install redis-server)")
    port = _free_port()
    workdir = tempfile.mkdtemp(prefix="vgpu-redis-")
    proc = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            workdir,
            "--daemonize",
            "no",
            "--loglevel",
            "warning",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for_port(port, proc)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def redis_url(redis_server: str) -> Iterator[str]:
    """The session's redis URL, flushed before each test that uses it."""
    import redis as sync_redis

    client = sync_redis.Redis.from_url(redis_server)
    try:
        client.flushall()
    finally:
        client.close()
    yield redis_server


@pytest.fixture(autouse=True)
async def no_leaked_tasks() -> AsyncIterator[None]:
    """Fail any async test that leaves asyncio tasks running behind it."""
    before = asyncio.all_tasks()
    yield
    current = asyncio.current_task()
    leaked = [t for t in asyncio.all_tasks() - before if t is not current and not t.done()]
    if leaked:
        # give tasks that are already finishing one loop turn to complete
        await asyncio.sleep(0)
        leaked = [t for t in leaked if not t.done()]
    for t in leaked:
        t.cancel()
    if leaked:
        names = ", ".join(sorted(t.get_name() for t in leaked))
        pytest.fail(f"test leaked {len(leaked)} asyncio task(s): {names}")


@pytest.fixture
def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault("VGPU_TESTING", "1")
