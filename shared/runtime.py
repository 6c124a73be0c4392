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
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from shared.errors import ConfigError

logger = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_CONFIG = 2

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@dataclass(frozen=True, slots=True)
class RootTask:
    """A named long-running coroutine of a process. ``run`` is called once, when the task starts."""

    name: str
    run: Callable[[], Awaitable[None]]


async def supervise(stop: asyncio.Event, tasks: Sequence[RootTask], *, shutdown_deadline_s: float = 10.0) -> None:
    """Run ``tasks`` (in this order) until ``stop`` is set or any of them exits; then stop the rest.

    The remaining tasks are cancelled one at a time in reverse start order, all within
    ``shutdown_deadline_s``; a task still running after the deadline is logged by name (and still awaited
    by the task group: a task that swallows cancellation is a bug to fix, not to hide).
    Raises ``ExceptionGroup`` of the failures if any root task raised.
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
            if task.done():
                continue
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=max(0.0, deadline - loop.time()))
            if not done:
                logger.error("root task did not stop within the shutdown deadline", extra={"task": task.get_name()})
    if failures:
        raise ExceptionGroup("root task(s) failed", failures)


def run_service(
    main: Callable[[asyncio.Event], Awaitable[None]], *, signals: Sequence[signal.Signals] = STOP_SIGNALS
) -> int:
    """Run ``main(stop)`` in a fresh event loop; SIGTERM/SIGINT set ``stop``. Return the process exit code.

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
        asyncio.run(entry())
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
