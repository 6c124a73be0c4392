"""Redis commands by name over a window of a benchmark run, from the server's ``INFO commandstats``.

Commands run inside a script are counted under their own names as well as the ``EVALSHA`` that ran them (and a
script's time includes theirs), so the counts say which keys and commands a pod costs, and ``EVALSHA``'s time is
what the scripts cost in all."""

from __future__ import annotations

from collections.abc import Mapping

import redis.asyncio as aioredis


async def command_stats(url: str) -> dict[str, tuple[int, int]]:
    """Command name (lower case) → (calls, microseconds) so far; empty when Redis cannot be read."""
    client = aioredis.from_url(url)
    try:
        info = await client.info("commandstats")
    except (aioredis.RedisError, OSError):
        return {}
    finally:
        await client.aclose()
    return {
        name.removeprefix("cmdstat_"): (int(stats.get("calls", 0)), int(stats.get("usec", 0)))
        for name, stats in info.items()
        if isinstance(stats, Mapping)
    }


def commands_between(
    before: Mapping[str, tuple[int, int]], after: Mapping[str, tuple[int, int]]
) -> dict[str, tuple[int, int]]:
    """Calls and microseconds per command between two readings (commands with no call left out)."""
    out: dict[str, tuple[int, int]] = {}
    for name, (calls, usec) in after.items():
        was_calls, was_usec = before.get(name, (0, 0))
        if calls > was_calls:
            out[name] = (calls - was_calls, usec - was_usec)
    return out
