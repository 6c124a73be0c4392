"""What every repository shares: the client, the key builder, the registered scripts, error translation."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import redis.exceptions as rexc
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from shared.errors import PermanentError, TransientError
from shared.store.keys import Keys
from shared.store.scripts import Scripts
from shared.store.types import Fence, StaleFenceError


@dataclass(frozen=True, slots=True)
class StoreContext:
    """The pieces repositories are built from. ``stream_maxlen`` caps the change stream (approximately)."""

    client: Redis
    keys: Keys
    scripts: Scripts
    stream_maxlen: int = 10_000
    retry_delay_s: float = 0.5

    def translated(self, what: str) -> AbstractAsyncContextManager[None]:
        """Translate redis errors raised inside the block (see :func:`translated`)."""
        return translated(what, self.retry_delay_s)

    @asynccontextmanager
    async def pipeline(self, what: str) -> AsyncIterator[Pipeline]:
        """A non-transactional pipeline whose errors (including at ``execute``) are translated."""
        async with translated(what, self.retry_delay_s), self.client.pipeline(transaction=False) as pipe:
            yield pipe


@asynccontextmanager
async def translated(what: str, delay_s: float = 0.5) -> AsyncIterator[None]:
    """Turn redis-py errors into the project's tree: connection trouble is transient, the rest permanent."""
    try:
        yield
    except (rexc.ConnectionError, rexc.TimeoutError, TimeoutError, rexc.BusyLoadingError) as e:
        raise TransientError(f"redis unavailable during {what}: {e}", delay_s) from e
    except rexc.ReadOnlyError as e:
        raise TransientError(f"redis is read-only during {what}: {e}", delay_s) from e
    except rexc.RedisError as e:
        raise PermanentError(f"redis error during {what}: {e}") from e


def fence_args(keys: Keys, fence: Fence | None) -> tuple[list[str], str]:
    """The extra KEYS entry and the token ARGV[1] for an optionally fenced script call."""
    if fence is None:
        return [], ""
    return [keys.lease(fence.lease)], str(fence.token)


def check_fenced(reply: Any, fence: Fence | None) -> None:
    """Raise StaleFenceError when a script answered ``{'fenced'}``."""
    if isinstance(reply, list) and reply and reply[0] == b"fenced":
        if fence is None:
            raise PermanentError("a script refused an unfenced write as fenced")
        raise StaleFenceError(fence)


def text(value: Any) -> str:
    """A reply element as str (replies are bytes with RESP2)."""
    if isinstance(value, bytes):
        return value.decode()
    return str(value)


def as_bytes(value: bytes | str) -> bytes:
    """A stored value as bytes (the client returns bytes; its type hints also allow str)."""
    return value if isinstance(value, bytes) else value.encode()


def as_int(value: Any) -> int:
    if isinstance(value, bytes):
        return int(value)
    if isinstance(value, int):
        return value
    raise TypeError(f"expected an integer reply, got {value!r}")


def flat_pairs(flat: Sequence[Any]) -> dict[bytes, bytes]:
    """A flat HGETALL reply (as returned from Lua) as a dict."""
    return {flat[i]: flat[i + 1] for i in range(0, len(flat), 2)}
