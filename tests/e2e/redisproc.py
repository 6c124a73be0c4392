"""A private redis-server the test can kill (SIGKILL) and start again, empty, on the same port: what a Redis
restart without persistence looks like to the services."""

from __future__ import annotations

import asyncio
import shutil
import socket
import tempfile
from types import TracebackType


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisProcess:
    """``async with RedisProcess() as r:`` → ``r.url``; ``await r.restart()`` kills it and starts it empty."""

    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        self._binary = binary
        self.port = _free_port()
        self._dir = tempfile.mkdtemp(prefix="vgpu-redis-restart-")
        self._proc: asyncio.subprocess.Process | None = None
        self.restarts = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def start(self) -> None:
        args = [self._binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        args += ["--dir", self._dir, "--daemonize", "no", "--loglevel", "warning"]
        self._proc = await asyncio.create_subprocess_exec(
            *args, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
        )
        for _ in range(500):
            if self._proc.returncode is not None:
                raise RuntimeError(f"redis-server exited early with code {self._proc.returncode}")
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", self.port)
                writer.close()
                await writer.wait_closed()
                return
            except OSError:
                await asyncio.sleep(0.02)  # an external process starting: nothing to await
        raise RuntimeError(f"redis-server did not listen on {self.port}")

    async def kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            await self._proc.wait()
            self._proc = None

    async def restart(self, down_s: float = 0.3) -> None:
        """Kill it, stay down ``down_s`` (requests fail meanwhile), start it again with nothing in it."""
        await self.kill()
        await asyncio.sleep(down_s)
        await self.start()
        self.restarts += 1

    async def __aenter__(self) -> RedisProcess:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.kill()
        shutil.rmtree(self._dir, ignore_errors=True)
