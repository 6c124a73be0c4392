"""A simulated clock for ``simulate``'s embedded runs: an asyncio event loop whose time advances only when idle.

Everything of an embedded run lives in one process and one event loop: the API emulator, the embedded store
(fakeredis, in-process), the real registrar, informer and extender, and the driver that plays kube-scheduler and
the device plugin. :class:`VirtualClockLoop` makes that loop's ``time()`` a simulated clock:

* while anything is ready to run (a callback, an I/O event, a result from a worker thread), time stands still:
  computing costs no simulated time;
* when nothing is ready and the loop would sleep until its next timer (an ``asyncio.sleep``, a timeout, a
  retry backoff), it waits 1 ms for real (loopback data the kernel has not delivered yet must not pass for
  idleness), then the clock jumps to that timer instead of waiting for it;
* while a worker thread is busy (``run_in_executor``), the loop waits for it in real time and the clock does not
  move, so a thread's work is never mistaken for idleness.

So kube-scheduler's backoffs (1 s to 10 s), the device plugin's Allocate latency and the extender's node-lock wait
cost no real time, and a run's outcome depends only on the order of events, never on how fast the machine is:
two runs of the same input give the same placements. The idleness test needs every party in this process; a run
against an external Redis or a deployed system uses the ordinary loop and real time.

The wall clock (``time.time()``: lock timestamps, ``hami.io/bind-time``, Redis key expiry) is not simulated.
"""

from __future__ import annotations

import asyncio
import selectors
import time
from collections.abc import Callable
from concurrent.futures import Executor
from typing import TypeVar, TypeVarTuple

_T = TypeVar("_T")
_Ts = TypeVarTuple("_Ts")

_GRACE_S = 0.001
"""How long the loop waits for real before calling itself idle and moving the clock."""
_THREAD_POLL_S = 0.005
"""While a worker thread is busy: how long one real wait for its result lasts before the loop looks again."""


class _IdleSelector(selectors.DefaultSelector):
    """The loop's selector: never blocks while timers are pending; advances the clock to the next one instead."""

    def __init__(self, loop: VirtualClockLoop) -> None:
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        events: list[tuple[selectors.SelectorKey, int]] = super().select(0)
        if events or (timeout is not None and timeout <= 0):
            return events
        if self._loop.threads_busy:
            # A worker thread will report through the self-pipe: wait for it for real, without moving the clock.
            wait = _THREAD_POLL_S if timeout is None else min(timeout, _THREAD_POLL_S)
            waited: list[tuple[selectors.SelectorKey, int]] = super().select(wait)
            return waited
        if timeout is None:
            return list(super().select(None))  # no timer at all: only an outside event (a signal) can come
        # Loopback data the kernel has not delivered yet (its network softirq can lag behind under load) must not
        # pass for idleness: a short real wait first, and the clock moves only if nothing came
        late: list[tuple[selectors.SelectorKey, int]] = super().select(min(timeout, _GRACE_S))
        if late:
            return late
        self._loop.advance(timeout)
        return []


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """See the module docstring. ``elapsed`` is the simulated time since the loop was made."""

    def __init__(self) -> None:
        self._start = time.monotonic()
        self._now = self._start
        self._busy_threads = 0
        super().__init__(selector=_IdleSelector(self))

    def time(self) -> float:
        return self._now

    @property
    def elapsed(self) -> float:
        return self._now - self._start

    def advance(self, seconds: float) -> None:
        """Move the clock forward (the selector does it when the loop is idle)."""
        if seconds > 0:
            self._now += seconds

    @property
    def threads_busy(self) -> bool:
        return self._busy_threads > 0

    def run_in_executor(self, executor: Executor | None, func: Callable[[*_Ts], _T], *args: *_Ts) -> asyncio.Future[_T]:
        future = super().run_in_executor(executor, func, *args)
        self._busy_threads += 1

        def done(_: asyncio.Future[_T]) -> None:
            self._busy_threads -= 1

        future.add_done_callback(done)
        return future


def simulated_elapsed() -> float | None:
    """The running loop's simulated time so far, or None when the loop runs on real time."""
    loop = asyncio.get_running_loop()
    return loop.elapsed if isinstance(loop, VirtualClockLoop) else None
