"""Store health and "synced" markers, so a reader can tell a loaded store from a flushed one.

The store epoch is a random id created on first use. A flush (or a Redis restart without persistence)
removes it; the next ``ensure_epoch`` creates a new one, and every marker of the old epoch is gone with it.
The registrar marks ``INVENTORY`` after a full node list, the informer ``ALLOCATIONS``/``QUOTAS`` after a full
pod/quota list; the extender is ready only while the markers it needs belong to the current epoch.

With a primary that can change (Sentinel), the meta hash also records the primary's replication id; a client that
finds another primary rotates the epoch (``meta_follow_primary.lua``) and ends the leases, so that the writes the
failover lost are rebuilt from the API server exactly as after a flush.
"""

from __future__ import annotations

import logging
import secrets
import time

from redis.asyncio.connection import AbstractConnection

from vgpu_scheduler.shared.errors import PermanentError
from vgpu_scheduler.shared.store._base import StoreContext, as_int, check_fenced, fence_args, text
from vgpu_scheduler.shared.store.types import Fence, StoreStatus, SyncMarker

logger = logging.getLogger(__name__)

LEASE_NAMES = ("registrar", "informer")
"""The services' leases, ended when the primary changes (their holders step down; a new term rebuilds)."""


def _replication_id(info: object) -> str:
    """``master_replid`` from an ``INFO replication`` reply (parsed by redis-py or raw)."""
    if isinstance(info, dict):
        value = info.get("master_replid", info.get(b"master_replid"))
        if value is not None:
            return text(value)
    raw = info.decode() if isinstance(info, bytes) else str(info)
    for line in raw.splitlines():
        if line.startswith("master_replid:"):
            return line.split(":", 1)[1].strip()
    raise PermanentError(
        "redis INFO replication has no master_replid: this server cannot tell a new primary from the old one "
        "(set --redis-wait-replicas 0 with a plain redis:// URL, or use Redis 5 or later)"
    )


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

    async def follow_primary(self, replid: str | None = None) -> bool:
        """With a primary that can change: compare the primary's replication id with the one the store epoch was
        made on, and start a new epoch (ending the leases) if it differs. True when it rotated the epoch."""
        if replid is None:
            async with self._ctx.translated("read replication id"):
                replid = _replication_id(await self._ctx.client.info("replication"))
        k = self._ctx.keys
        lease_keys = [key for name in LEASE_NAMES for key in (k.lease(name), k.lease_epoch(name))]
        async with self._ctx.translated("follow primary"):
            reply = await self._ctx.scripts.meta_follow_primary(
                keys=[k.meta(), k.allocation_nodes(), *lease_keys], args=[replid, secrets.token_hex(8), k.prefix]
            )
        rotated = as_int(reply[0]) == 1
        if rotated:
            logger.warning(
                "redis primary changed: new store epoch, rebuilt from the API server",
                extra={"epoch": text(reply[1]), "replication_id": replid},
            )
        return rotated

    async def follow_primary_on(self, connection: AbstractConnection) -> None:
        """:meth:`follow_primary` on a raw connection being set up (``connection.PrimaryCheck``): before any other
        command reaches a new primary, the store epoch is rotated if the primary changed."""
        await connection.send_command("INFO", "replication")
        replid = _replication_id(await connection.read_response())
        k = self._ctx.keys
        lease_keys = [key for name in LEASE_NAMES for key in (k.lease(name), k.lease_epoch(name))]
        keys = [k.meta(), k.allocation_nodes(), *lease_keys]
        script = self._ctx.scripts.meta_follow_primary
        await connection.send_command("EVAL", script.script, len(keys), *keys, replid, secrets.token_hex(8), k.prefix)
        reply = await connection.read_response()
        if isinstance(reply, list) and reply and as_int(reply[0]) == 1:
            logger.warning(
                "redis primary changed: new store epoch, rebuilt from the API server",
                extra={"epoch": text(reply[1]), "replication_id": replid},
            )

    async def ensure_epoch(self) -> str:
        """The current store epoch, creating it if the store is new or was flushed."""
        if self._ctx.track_primary:
            await self.follow_primary()
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
        if self._ctx.track_primary:
            async with self._ctx.pipeline("read meta") as pipe:
                pipe.hgetall(self._ctx.keys.meta())
                pipe.info("replication")
                fields, info = await pipe.execute()
            replid = _replication_id(info)
            if fields.get(b"primary") is not None and text(fields[b"primary"]) != replid:
                await self.follow_primary(replid)
                async with self._ctx.translated("read meta"):
                    fields = await self._ctx.client.hgetall(self._ctx.keys.meta())
            elif fields.get(b"epoch") is not None and fields.get(b"primary") is None:
                await self.follow_primary(replid)  # first sight: record the primary
        else:
            async with self._ctx.translated("read meta"):
                fields = await self._ctx.client.hgetall(self._ctx.keys.meta())
        raw_epoch = fields.get(b"epoch")
        if raw_epoch is None:
            return StoreStatus(epoch=None)
        synced = frozenset(m for m in SyncMarker if fields.get(f"synced:{m.value}".encode()) == raw_epoch)
        return StoreStatus(epoch=text(raw_epoch), synced=synced)
