"""What every repository shares: the client, the key builder, the registered scripts, error translation."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import redis.exceptions as rexc
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.commands.core import AsyncScript

from vgpu_scheduler.shared.errors import PermanentError, TransientError
from vgpu_scheduler.shared.store.keys import Keys
from vgpu_scheduler.shared.store.scripts import Scripts
from vgpu_scheduler.shared.store.types import Fence, StaleFenceError


@dataclass(frozen=True, slots=True)
class StoreContext:
    """The pieces repositories are built from. ``stream_maxlen`` caps the change stream (approximately)."""

    client: Redis
    keys: Keys
    scripts: Scripts
    stream_maxlen: int = 10_000
    retry_delay_s: float = 0.5
    durability: Durability | None = None
    """Replicas that must hold a decision's write before it is acknowledged (None: not waited for)."""
    track_primary: bool = False
    """The primary may change (Sentinel): a new primary starts a new store epoch (docs/store.md, failover)."""

    def translated(self, what: str) -> AbstractAsyncContextManager[None]:
        """Translate redis errors raised inside the block (see :func:`translated`)."""
        return translated(what, self.retry_delay_s)

    @asynccontextmanager
    async def pipeline(self, what: str) -> AsyncIterator[Pipeline]:
        """A non-transactional pipeline whose errors (including at ``execute``) are translated."""
        async with translated(what, self.retry_delay_s), self.client.pipeline(transaction=False) as pipe:
            yield pipe


@dataclass(frozen=True, slots=True)
class ScriptCall:
    """One script call, built but not sent: for a caller that sends several in one pipeline (one round trip)."""

    script: AsyncScript
    keys: list[str | bytes]
    args: list[Any]

    def queue(self, pipe: Pipeline) -> None:
        """Add the call to ``pipe`` as an ``EVALSHA`` (the pipeline does not load scripts: a NOSCRIPT reply is the
        caller's to handle, by running the calls again one by one)."""
        pipe.evalsha(self.script.sha, len(self.keys), *self.keys, *self.args)


@dataclass(frozen=True, slots=True)
class Durability:
    """``WAIT replicas timeout_ms`` after a write that an acknowledged decision stands on (a reservation answered
    by ``/filter``, a bind's claim before the pod patch): the write is then on the primary and ``replicas``
    replicas, so a failover to the most up-to-date replica keeps it."""

    replicas: int
    timeout_ms: int


class StoreEpochChanged(TransientError):
    """A write planned in one store epoch met another (Redis flushed, or failed over to a new primary): nothing
    was written; the caller is not ready until it has reloaded."""


class ReplicationShortfall(TransientError):
    """Fewer replicas than required acknowledged a write within the timeout: the decision must not be
    acknowledged (a failover now could lose it)."""

    def __init__(self, what: str, acked: int, durability: Durability, delay: float = 0.5) -> None:
        super().__init__(
            f"{what}: {acked} of {durability.replicas} Redis replicas acknowledged it within "
            f"{durability.timeout_ms} ms (replication not confirmed)",
            delay,
        )
        self.acked = acked


async def run_script(
    ctx: StoreContext, script: AsyncScript, what: str, keys: Sequence[str | bytes], args: list[Any]
) -> Any:
    """Run ``script``; with ``ctx.durability``, in one pipeline with ``WAIT`` on the same connection (one round
    trip; WAIT covers every earlier write too, as replication is ordered). Returns the script's reply and raises
    :class:`ReplicationShortfall` when too few replicas acknowledged."""
    durability = ctx.durability
    if durability is None or durability.replicas <= 0:
        async with ctx.translated(what):
            return await script(keys=keys, args=args)
    for _ in range(2):
        async with ctx.pipeline(what) as pipe:
            pipe.evalsha(script.sha, len(keys), *keys, *args)
            pipe.wait(durability.replicas, durability.timeout_ms)
            reply, acked = await pipe.execute(raise_on_error=False)
        if isinstance(reply, rexc.NoScriptError):  # a restarted or new primary: load it, then again
            async with ctx.translated(what):
                await ctx.client.script_load(script.script)
            continue
        if isinstance(reply, BaseException):
            async with ctx.translated(what):
                raise reply
        if isinstance(acked, BaseException):
            async with ctx.translated(f"{what} (WAIT)"):
                raise acked
        if int(acked) < durability.replicas:
            raise ReplicationShortfall(what, int(acked), durability, ctx.retry_delay_s)
        return reply
    raise TransientError(f"redis lost the script of {what} twice in a row", ctx.retry_delay_s)


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
