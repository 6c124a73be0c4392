"""A loopback TCP proxy that can stop forwarding: a network partition between one extender replica and Redis as
both ends see it (connections stay open, nothing is refused or reset, bytes stop flowing and flow again when it
heals, as TCP retransmits them). Each new connection goes to the address ``upstream()`` names at that moment: the
Redis primary as the Sentinels name it, so the replica behind the proxy follows a failover like the others."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from tests.controlplane.harness import TcpBalancer


class StallProxy(TcpBalancer):
    """``await proxy.start()`` → ``proxy.url``; ``await proxy.stall(s)`` forwards nothing for ``s`` seconds."""

    def __init__(self, upstream: Callable[[], Awaitable[tuple[str, int]]]) -> None:
        super().__init__([])
        self._upstream = upstream
        self._flowing_now = asyncio.Event()
        self._flowing_now.set()
        self.stalls = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def stall(self, seconds: float) -> None:
        """Forward nothing, either way, on any connection, new ones included, for ``seconds``."""
        self._flowing_now.clear()
        self.stalls += 1
        try:
            await asyncio.sleep(seconds)  # the partition's length is the point
        finally:
            self._flowing_now.set()

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        await self._flowing_now.wait()  # a connection made during a partition gets nowhere until it heals
        with contextlib.suppress(OSError, RuntimeError):
            host, port = await self._upstream()
            return await asyncio.open_connection(host, port)
        return None

    async def _flowing(self) -> None:
        await self._flowing_now.wait()
