"""Wake a bind waiting for a node's lock when the node changes, instead of only polling.

Every release of a node lock (the informer's, when the device plugin has removed the annotation; a failed bind's)
bumps the node's generation and appends to the store's change feed, which every replica already follows with a
blocking read (:mod:`services.extender.snapshot`). The follower calls :meth:`NodeWakeups.notify` for each node in
the feed; a bind whose lock is busy waits for that instead of sleeping out its backoff, and polls only as a fallback
(a lock that expires, or an annotation another scheduler holds, brings no change to the feed).

Not every change of a node is a release (reservations move its generation too): a woken bind simply tries again.
"""

from __future__ import annotations

import asyncio


class NodeWakeups:
    """Per node, an event set by the next change seen on the feed. Arm before trying, then wait on what was armed,
    so a change that lands between a failed try and the wait is not missed."""

    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = {}

    def arm(self, node: str) -> asyncio.Event:
        """The event the next change of ``node`` sets (shared by everyone waiting for that node)."""
        event = self._events.get(node)
        if event is None:
            event = self._events[node] = asyncio.Event()
        return event

    def notify(self, node: str) -> None:
        """``node`` changed: wake whoever armed it (later waiters arm a fresh event)."""
        event = self._events.pop(node, None)
        if event is not None:
            event.set()

    def notify_all(self) -> None:
        """Every node may have changed (a gap in the feed, a reload)."""
        events, self._events = self._events, {}
        for event in events.values():
            event.set()

    def __len__(self) -> int:
        return len(self._events)


async def wait_armed(event: asyncio.Event, timeout_s: float) -> bool:
    """Wait until ``event`` is set or ``timeout_s`` passes; True when it was set."""
    if event.is_set():
        return True
    try:
        async with asyncio.timeout(max(timeout_s, 0.0)):
            await event.wait()
    except TimeoutError:
        return False
    return True
