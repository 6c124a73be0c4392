"""Store health and "synced" markers, so a reader can tell a loaded store from a flushed one.

The store epoch is a random id created on first use. A flush (or a Redis restart without persistence)
removes it; the next ``ensure_epoch`` creates a new one, and every marker of the old epoch is gone with it.
The registrar marks ``INVENTORY`` after a full node list, the informer ``ALLOCATIONS``/``QUOTAS`` after a full
pod/quota list; the extender is ready only while the markers it needs belong to the current epoch.
"""

from __future__ import annotations

import secrets
import time

from shared.store._base import StoreContext, as_int, check_fenced, fence_args, text
from shared.store.types import Fence, StoreStatus, SyncMarker


class MetaRepo:
    """Ping, epoch and synced markers."""

    def __init__(self, ctx: StoreContext) -> None:
        self._ctx = ctx

    async def ping(self) -> float:
        """Round-trip time in seconds; raises TransientError when Redis does not answer in time."""
        started = time.perf_counter()
        async with self._ctx.translated("ping"):
            await self._ctx.client.ping()
        return time.perf_counter() - started

    async def ensure_epoch(self) -> str:
        """The current store epoch, creating it if the store is new or was flushed."""
        async with self._ctx.translated("ensure epoch"):
            epoch = await self._ctx.scripts.meta_ensure_epoch(keys=[self._ctx.keys.meta()], args=[secrets.token_hex(8)])
        return text(epoch)

    async def mark_synced(self, marker: SyncMarker, epoch: str, fence: Fence | None = None) -> bool:
        """Record that a full load finished in ``epoch``; False (nothing marked) if the store was flushed since."""
        extra_keys, token = fence_args(self._ctx.keys, fence)
        async with self._ctx.translated("mark synced"):
            reply = await self._ctx.scripts.meta_mark_synced(
                keys=[self._ctx.keys.meta(), *extra_keys], args=[token, marker.value, epoch]
            )
        check_fenced(reply, fence)
        return as_int(reply[1]) == 1

    async def status(self) -> StoreStatus:
        """The epoch and the markers set in it, in one round trip."""
        async with self._ctx.translated("read meta"):
            fields = await self._ctx.client.hgetall(self._ctx.keys.meta())
        raw_epoch = fields.get(b"epoch")
        if raw_epoch is None:
            return StoreStatus(epoch=None)
        synced = frozenset(m for m in SyncMarker if fields.get(f"synced:{m.value}".encode()) == raw_epoch)
        return StoreStatus(epoch=text(raw_epoch), synced=synced)
