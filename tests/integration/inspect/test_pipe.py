"""``vgpu-scheduler usage | head -1`` and ``kubectl vgpu usage | head -1`` (issue 23 item 5): the real commands, a
real redis-server holding 400 registered nodes (far more text than a pipe holds), a reader that takes one line and
closes. The command stops quietly with status 141 (128 + SIGPIPE, as a coreutils tool killed by SIGPIPE)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from tests.builders import inventory
from vgpu_scheduler.shared.store import Store, connect

KUBECTL_VGPU = Path(sys.executable).parent / "kubectl-vgpu"
NODES = 400
PREFIX = "pipe"


@pytest.fixture
async def many_nodes(redis_url: str) -> str:
    store = Store.create(connect(redis_url), prefix=PREFIX)
    try:
        await asyncio.gather(*(store.inventory.put(inventory(f"node-{i:04d}", n=4)) for i in range(NODES)))
    finally:
        await store.aclose()
    return redis_url


def head_one(*argv: str) -> tuple[str, int, str]:
    """Read one line of ``argv``'s output, then close the pipe, as ``head -1`` does."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline().decode()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.stderr.close()
    return first, proc.wait(timeout=60), err


@pytest.mark.parametrize(
    "program",
    [
        pytest.param([sys.executable, "-m", "vgpu_scheduler.services.cli"], id="vgpu-scheduler"),
        pytest.param(
            [str(KUBECTL_VGPU)],
            id="kubectl-vgpu",
            marks=pytest.mark.skipif(not KUBECTL_VGPU.exists(), reason="kubectl-vgpu not installed (pip install -e .)"),
        ),
    ],
)
async def test_usage_into_a_pipe_closed_after_one_line(many_nodes: str, program: list[str]) -> None:
    argv = [*program, "usage", "--redis-url", many_nodes, "--key-prefix", PREFIX]
    first, code, err = await asyncio.to_thread(head_one, *argv)
    assert first.split()[:3] == ["NODE", "DEVICE", "TYPE"], first
    assert err == ""
    assert code == 141


async def test_usage_read_to_the_end_is_success(many_nodes: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "vgpu_scheduler.services.cli",
        "usage",
        "--redis-url",
        many_nodes,
        "--key-prefix",
        PREFIX,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(60):
        out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    assert len(out) > 2 * 64 * 1024  # twice a Linux pipe's buffer: the test above really meets a full pipe
    assert sum(1 for line in out.decode().splitlines() if line.startswith("node-")) == NODES
