"""Process runtime: one ``asyncio.run``, signals to a stop event, supervised root tasks.

A service's composition root looks like this::

    def run(args: argparse.Namespace) -> int:
        settings = settings_from_args(Service.INFORMER, args, os.environ)
        configure_from_settings(settings.common)

        async def main(stop: asyncio.Event) -> None:
            async with make_deps(settings) as deps:            # clients, registry, ...
                await supervise(stop, [
                    RootTask("ops-server", lambda: serve(ops_app, settings.common.metrics_bind)),
                    RootTask("pod-watch", lambda: watch_pods(deps)),
                ])

        return run_service(main)

Rules (kopf's): once any root task exits, all exit; shutdown goes in reverse start order within a deadline;
``CancelledError`` is never swallowed. The first SIGTERM/SIGINT sets the stop event; a second one cancels
the main coroutine outright.

One ``Task.cancel()`` is not always enough on Python 3.11: ``asyncio.wait_for`` returns the inner result and
drops the cancellation when both happen in the same loop turn (CPython gh-86296, fixed in 3.12), and redis-py
calls it on every command it sends. Whoever stops tasks therefore uses :func:`cancel_until_done`, which cancels
again while a task still runs.
"""

from __future__ import annotations

import asyncio
import logging
import random
import signal
import sys
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from vgpu_scheduler.shared.errors import ConfigError

logger = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_CONFIG = 2

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class FailureStreak:
    """Consecutive failures of one retried operation: a capped, jittered exponential delay and a log level that
    keeps a long outage quiet.

    ``failed()`` counts a failure and returns the delay before the next try: ``initial_s * 2**(n-1)`` capped at
    ``max_s``, jittered into [d/2, d]. ``level`` is WARNING on the 1st, 2nd, 4th, 8th, … failure of the streak
    and DEBUG otherwise (an unreachable dependency is a few lines an hour, not one per retry). ``recovered()``
    ends the streak and returns its length (0: there was none), for a single "recovered" line.
    """

    def __init__(self, initial_s: float, max_s: float, rng: random.Random | None = None) -> None:
        self.initial_s = initial_s
        self.max_s = max(max_s, initial_s)
        self.failures = 0
        self._rng = rng or random.Random()

    def failed(self) -> float:
        self.failures += 1
        base = min(self.max_s, self.initial_s * 2.0 ** min(self.failures - 1, 60))
        return base / 2 + self._rng.random() * base / 2

    @property
    def level(self) -> int:
        n = self.failures
        return logging.WARNING if n > 0 and n & (n - 1) == 0 else logging.DEBUG

    def recovered(self) -> int:
        n, self.failures = self.failures, 0
        return n


async def cancel_until_done(
    tasks: Iterable[asyncio.Task[Any]],
    *,
    deadline_s: float | None = None,
    recancel_s: float = 0.05,
    warn_after_s: float = 10.0,
) -> set[asyncio.Task[Any]]:
    """Cancel ``tasks`` and wait until every one is done, cancelling again every ``recancel_s`` while any runs.

    A cancellation lost inside the task (see the module docstring) is thus repeated until it lands. With
    ``deadline_s`` it gives up waiting after that many seconds and returns the tasks still running (cancelled,
    not awaited); without one it waits as long as it takes, logging the stragglers every ``warn_after_s``, and
    returns an empty set. If the caller is cancelled meanwhile, it still finishes (as ``asyncio.TaskGroup``
    does: children are not abandoned half-stopped), then raises ``CancelledError``.
    """
    loop = asyncio.get_running_loop()
    give_up_at = None if deadline_s is None else loop.time() + max(0.0, deadline_s)
    warn_at = loop.time() + warn_after_s
    pending = {t for t in tasks if not t.done()}
    interrupted = False
    while pending:
        for t in pending:
            t.cancel()
        wait_s = recancel_s if give_up_at is None else max(0.0, min(recancel_s, give_up_at - loop.time()))
        try:
            await asyncio.wait(pending, timeout=wait_s)
        except asyncio.CancelledError:
            interrupted = True  # re-raised below, once the tasks are done (or the deadline passed)
        pending = {t for t in pending if not t.done()}
        if not pending or (give_up_at is not None and loop.time() >= give_up_at):
            break
        if loop.time() >= warn_at:
            logger.error("tasks do not stop when cancelled", extra={"tasks": sorted(t.get_name() for t in pending)})
            warn_at = loop.time() + warn_after_s
    if interrupted:
        raise asyncio.CancelledError
    return pending


async def wait_then_cancel(
    tasks: Iterable[asyncio.Task[Any]], *, grace_s: float, recancel_s: float = 0.05
) -> set[asyncio.Task[Any]]:
    """Give ``tasks`` (already asked to stop, say by an event) ``grace_s`` to end by themselves; then cancel the
    rest with :func:`cancel_until_done`. Returns the tasks that had to be cancelled (each is logged).

    A cancellation of the caller meanwhile neither cuts the grace short nor abandons the tasks (a supervisor
    that cancels again and again must not interrupt a drain): it is re-raised once all are done.
    """
    loop = asyncio.get_running_loop()
    end = loop.time() + grace_s
    pending = {t for t in tasks if not t.done()}
    interrupted = False
    while pending and (left_s := end - loop.time()) > 0:
        try:
            await asyncio.wait(pending, timeout=left_s)
        except asyncio.CancelledError:
            interrupted = True
        pending = {t for t in pending if not t.done()}
    for t in sorted(pending, key=lambda t: t.get_name()):
        logger.error("task did not stop in time, cancelling it", extra={"task": t.get_name()})
    try:
        await cancel_until_done(pending, recancel_s=recancel_s)
    except asyncio.CancelledError:
        interrupted = True
    if interrupted:
        raise asyncio.CancelledError
    return pending


@dataclass(frozen=True, slots=True)
class RootTask:
    """A named long-running coroutine of a process. ``run`` is called once, when the task starts."""

    name: str
    run: Callable[[], Awaitable[None]]


async def supervise(
    stop: asyncio.Event,
    tasks: Sequence[RootTask],
    *,
    shutdown_deadline_s: float = 10.0,
    recancel_s: float = 0.5,
) -> None:
    """Run ``tasks`` (in this order) until ``stop`` is set or any of them exits; then stop the rest.

    The remaining tasks are cancelled one at a time in reverse start order, all within
    ``shutdown_deadline_s``; one still running ``recancel_s`` after its cancellation is cancelled again (a
    lost cancellation, see :func:`cancel_until_done`; the pause leaves ordinary clean-up time to finish). A task
    still running after the deadline is logged by name; then all the rest are cancelled together, again and
    again, until done (the task group awaits them anyway: a task that swallows every cancellation is a bug to
    fix, not to hide). Raises ``ExceptionGroup`` of the failures if any root task raised.
    """
    if not tasks:
        raise ValueError("supervise() needs at least one root task")
    names = [t.name for t in tasks]
    if len(set(names)) != len(names):
        raise ValueError(f"root task names must be unique, got {names}")
    failures: list[Exception] = []
    wake = asyncio.Event()

    async def guard(spec: RootTask) -> None:
        try:
            await spec.run()
            logger.info("root task exited", extra={"task": spec.name})
        except asyncio.CancelledError:
            raise
        except Exception as e:
            logger.error("root task failed", extra={"task": spec.name}, exc_info=True)
            failures.append(e)
        finally:
            wake.set()

    async def watch_stop() -> None:
        await stop.wait()
        wake.set()

    async with asyncio.TaskGroup() as tg:
        watcher = tg.create_task(watch_stop(), name="supervisor:stop-watch")
        started = [tg.create_task(guard(spec), name=spec.name) for spec in tasks]
        await wake.wait()
        watcher.cancel()
        reason = "stop requested" if stop.is_set() else "a root task exited"
        logger.info("shutting down", extra={"reason": reason})
        loop = asyncio.get_running_loop()
        deadline = loop.time() + shutdown_deadline_s
        for task in reversed(started):
            late = await cancel_until_done([task], deadline_s=deadline - loop.time(), recancel_s=recancel_s)
            if late:
                logger.error("root task did not stop within the shutdown deadline", extra={"task": task.get_name()})
                break
        await cancel_until_done(started, recancel_s=recancel_s)
    if failures:
        raise ExceptionGroup("root task(s) failed", failures)


def fast_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop factory (for :func:`run_service`), or None for asyncio's own where uvloop is not installed
    (it is a dependency on Linux and macOS). The processes that answer ``/filter`` run on it: it takes a good part
    of each request's event-loop, socket and HTTP work into C."""
    try:
        import uvloop
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run_service(
    main: Callable[[asyncio.Event], Awaitable[None]],
    *,
    signals: Sequence[signal.Signals] = STOP_SIGNALS,
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None,
) -> int:
    """Run ``main(stop)`` in a fresh event loop (made by ``loop_factory``, default asyncio's); SIGTERM/SIGINT set
    ``stop``. Return the process exit code.

    0: ``main`` returned. 2: a :class:`ConfigError` (printed as one ``vgpu-scheduler: error:`` line).
    1: anything else (logged once, with its traceback), or a forced stop by a second signal.
    Call it from the main thread, once per process.
    """

    async def entry() -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        me = asyncio.current_task()
        received: list[signal.Signals] = []

        def on_signal(sig: signal.Signals) -> None:
            received.append(sig)
            if len(received) == 1:
                logger.info("stop requested", extra={"signal": sig.name})
                stop.set()
            elif me is not None:
                logger.warning("second stop signal: cancelling everything", extra={"signal": sig.name})
                me.cancel()

        for sig in signals:
            loop.add_signal_handler(sig, on_signal, sig)
        try:
            await main(stop)
        finally:
            for sig in signals:
                loop.remove_signal_handler(sig)

    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(entry())
    except ConfigError as e:
        print(f"vgpu-scheduler: error: {e}", file=sys.stderr)
        return EXIT_CONFIG
    except asyncio.CancelledError:
        logger.error("stopped by force")
        return EXIT_FAILED
    except ExceptionGroup as eg:
        config_errors, rest = eg.split(ConfigError)
        if rest is None and config_errors is not None:
            print(f"vgpu-scheduler: error: {_first_leaf(config_errors)}", file=sys.stderr)
            return EXIT_CONFIG
        logger.critical("service failed", extra={"errors": [repr(e) for e in _leaves(eg)]})
        return EXIT_FAILED
    except Exception:
        logger.critical("service failed", exc_info=True)
        return EXIT_FAILED
    return EXIT_OK


def _leaves(eg: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    out: list[BaseException] = []
    for e in eg.exceptions:
        out.extend(_leaves(e) if isinstance(e, BaseExceptionGroup) else [e])
    return out


def _first_leaf(eg: BaseExceptionGroup[BaseException]) -> BaseException:
    return _leaves(eg)[0]
