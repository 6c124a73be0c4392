"""``eventually``: await state that offers no event to await (Redis written by another task, another process)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


async def eventually(check: Callable[[], Awaitable[object] | object], timeout_s: float = 10.0, what: str = "") -> None:
    """Await until ``check()`` is truthy (re-checked every 10 ms; a coroutine's result is awaited); fail with an
    AssertionError naming ``what`` after ``timeout_s``."""
    try:
        async with asyncio.timeout(timeout_s):
            while True:
                result = check()
                if isinstance(result, Awaitable):
                    result = await result
                if result:
                    return
                await asyncio.sleep(0.01)
    except TimeoutError:
        raise AssertionError(f"condition not met within {timeout_s}s: {what or check}") from None
