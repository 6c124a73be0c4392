"""The change feed: one Redis stream of (node, generation, kind) events, appended by the same scripts that
change a node, so a reader that follows it never misses a generation without noticing."""

from __future__ import annotations

from typing import Any

from vgpu_scheduler.shared.store._base import StoreContext, text
from vgpu_scheduler.shared.store.connection import socket_timeout_s
from vgpu_scheduler.shared.store.types import ChangeBatch, ChangeEvent, ChangeKind

START_ID = "0-0"
"""The id before every event: reading after it returns the whole (retained) stream."""

_BLOCK_MARGIN_S = 0.5


def _id_key(event_id: str) -> tuple[int, int]:
    ms, _, seq = event_id.partition("-")
    return int(ms), int(seq or 0)


def _event(eid: Any, fields: dict[bytes, bytes]) -> ChangeEvent | None:
    try:
        return ChangeEvent(
            id=text(eid),
            node=fields[b"node"].decode(),
            generation=int(fields[b"gen"]),
            kind=ChangeKind(fields[b"kind"].decode()),
            lock_released=fields.get(b"lock") == b"released",
            binds_in_flight=_count(fields.get(b"inflight")),
            lock_taken=fields.get(b"lock") == b"taken",
        )
    except (KeyError, ValueError, UnicodeDecodeError):
        return None


def _count(value: bytes | None) -> int | None:
    """The entry's ``inflight`` count; None when absent (an older writer, or a change of usage or inventory) or
    unreadable: the reader then reads the node, as for any other change."""
    if value is None or not value.isdigit():
        return None
    return int(value)


class ChangeFeed:
    """Follow node changes: ``latest_id()`` before a full load, then ``read(after)`` in a loop."""

    def __init__(self, ctx: StoreContext) -> None:
        self._ctx = ctx

    async def latest_id(self) -> str:
        """The id of the newest event (``START_ID`` if none): read after it to see only later changes."""
        async with self._ctx.translated("read feed head"):
            last = await self._ctx.client.xrevrange(self._ctx.keys.changes(), count=1)
        return text(last[0][0]) if last else START_ID

    async def read(self, after_id: str, *, block_s: float | None = None, count: int = 1000) -> ChangeBatch:
        """Events after ``after_id`` (at most ``count``), waiting up to ``block_s`` for the first one.

        The wait is capped below the client's socket timeout. ``gap`` is set when events after ``after_id``
        may have been trimmed away or Redis was flushed: the reader must reload everything.
        """
        key = self._ctx.keys.changes()
        block_ms: int | None = None
        if block_s is not None:
            limit = socket_timeout_s(self._ctx.client)
            if limit is not None:
                block_s = min(block_s, max(limit - _BLOCK_MARGIN_S, 0.0))
            block_ms = max(int(block_s * 1000), 1)
        if after_id == START_ID:
            async with self._ctx.translated("read feed"):
                reply: Any = await self._ctx.client.xread({key: after_id}, count=count, block=block_ms)
            return _batch(_entries(reply), after_id, gap=False)
        # The gap check rides in the same round trip: Redis runs the two XRANGEs right after the XREAD returns
        # (blocked or not), which is when a separate call would have run them, one round trip later.
        async with self._ctx.pipeline("read feed") as pipe:
            pipe.xread({key: after_id}, count=count, block=block_ms)
            pipe.xrange(key, min=after_id, max=after_id, count=1)
            pipe.xrange(key, count=1)
            reply, same, first = await pipe.execute()
        entries = _entries(reply)
        return _batch(entries, after_id, gap=_lost(after_id, text(entries[0][0]) if entries else None, same, first))


def _entries(reply: Any) -> list[tuple[Any, dict[bytes, bytes]]]:
    # RESP2: [[stream, [(id, {field: value}), ...]]] or an empty reply after the block timeout
    return list(reply[0][1]) if reply else []


def _batch(entries: list[tuple[Any, dict[bytes, bytes]]], after_id: str, *, gap: bool) -> ChangeBatch:
    events = tuple(e for e in (_event(eid, f) for eid, f in entries) if e is not None)
    last_id = text(entries[-1][0]) if entries else after_id
    return ChangeBatch(events=events, last_id=last_id, gap=gap)


def _lost(after_id: str, first_read: str | None, same: Any, first: Any) -> bool:
    """True when entries after ``after_id`` may be gone: ``after_id`` itself is no longer in the stream (``same``,
    its XRANGE) and nothing older than what we read is retained (``first``, the stream's oldest entry), or the
    stream is gone."""
    if same:
        return False
    if not first:
        # empty stream: flushed (or trimmed to nothing) since after_id was read
        return True
    oldest = text(first[0][0])
    if first_read is not None and oldest != first_read:
        return False
    return _id_key(oldest) > _id_key(after_id)
