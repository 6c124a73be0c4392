"""What the HTTP benchmarks run against and talk with: processes on free loopback ports (a private ``redis-server``,
the real ``vgpu-scheduler extender`` and ``informer``), each waited for until it listens and stopped with SIGTERM
on the way out, a process's resident memory, and a minimal keep-alive HTTP/1.1 client whose own overhead stays
small.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes], what: str, deadline_s: float = 30.0) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited early with code {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.1):
            return
        time.sleep(0.02)
    raise SystemExit(f"{what} did not listen on {port} within {deadline_s}s")


@contextlib.contextmanager
def process(cmd: Sequence[str], port: int, what: str) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(list(cmd), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, proc, what)
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def redis_server() -> Iterator[str]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server not found")
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="bench-redis-")
    cmd = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", workdir]
    try:
        with process(cmd, port, "redis-server"):
            yield f"redis://127.0.0.1:{port}/0"
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@contextlib.contextmanager
def extender_process(redis_url: str, kube_url: str, *extra: str) -> Iterator[tuple[str, int]]:
    port, metrics_port = free_port(), free_port()
    cli = str(Path(sys.executable).with_name("vgpu-scheduler"))
    cmd = [
        cli,
        "extender",
        f"--redis-url={redis_url}",
        f"--kube-server={kube_url}",
        f"--http_bind=127.0.0.1:{port}",
        f"--metrics-bind-address=127.0.0.1:{metrics_port}",
        "--scheduler-name=vgpu-scheduler",
        "--kube-qps=0",
        "--log-format=json",
        *extra,
    ]
    with process(cmd, port, "extender") as proc:
        yield f"http://127.0.0.1:{port}", proc.pid


@contextlib.contextmanager
def informer_process(redis_url: str, kube_url: str) -> Iterator[str]:
    """The real informer: it records bound pods and releases node locks once the (simulated) device plugin settles
    a bind, as in a cluster. Yields its ops URL."""
    port = free_port()
    cli = str(Path(sys.executable).with_name("vgpu-scheduler"))
    cmd = [
        cli,
        "informer",
        f"--redis-url={redis_url}",
        f"--kube-server={kube_url}",
        f"--metrics-bind-address=127.0.0.1:{port}",
        "--kube-qps=0",
        "--log-format=json",
    ]
    with process(cmd, port, "informer"):
        yield f"http://127.0.0.1:{port}"


class Http:
    """One keep-alive HTTP/1.1 connection; POST/GET with a Content-Length body. Low overhead on purpose."""

    def __init__(self, url: str) -> None:
        host, _, port = url.removeprefix("http://").partition(":")
        self._host, self._port = host, int(port)
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self._host, self._port)
        assert self._reader is not None
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: {self._host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        self._writer.write(head + body)
        status_line = await self._reader.readline()
        status = int(status_line.split()[1])
        length = 0
        while True:
            line = await self._reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return status, await self._reader.readexactly(length)

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(OSError):
                await self._writer.wait_closed()
