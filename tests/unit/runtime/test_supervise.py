"""Root-task supervision: once any root task exits all exit, in reverse start order, within a deadline."""

from __future__ import annotations

import asyncio
import logging

import pytest

from vgpu_scheduler.shared.runtime import RootTask, supervise


class Recorder:
    """Root tasks that record start and stop, and signal when all have started."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.started: list[str] = []
        self.stopped: list[str] = []
        self.task_names: list[str] = []
        self.all_started = asyncio.Event()

    def task(self, name: str) -> RootTask:
        async def run() -> None:
            current = asyncio.current_task()
            assert current is not None
            self.task_names.append(current.get_name())
            self.started.append(name)
            if len(self.started) == len(self.names):
                self.all_started.set()
            try:
                await asyncio.Event().wait()
            finally:
                self.stopped.append(name)

        return RootTask(name, run)

    def tasks(self) -> list[RootTask]:
        return [self.task(n) for n in self.names]


async def test_stop_event_stops_every_task_in_reverse_start_order() -> None:
    rec = Recorder(["redis", "watch", "server"])
    stop = asyncio.Event()

    async def trigger() -> None:
        await rec.all_started.wait()
        stop.set()

    async with asyncio.TaskGroup() as tg:
        tg.create_task(trigger())
        await supervise(stop, rec.tasks())
    assert rec.started == ["redis", "watch", "server"]
    assert rec.stopped == ["server", "watch", "redis"]
    assert rec.task_names == ["redis", "watch", "server"]


async def test_a_crashing_root_task_stops_the_others_and_is_raised() -> None:
    rec = Recorder(["a", "b", "c"])
    stop = asyncio.Event()

    async def crash() -> None:
        await rec.all_started.wait()
        raise RuntimeError("boom")

    with pytest.raises(ExceptionGroup) as info:
        await supervise(stop, [*rec.tasks(), RootTask("crasher", crash)])
    assert [type(e) for e in info.value.exceptions] == [RuntimeError]
    assert str(info.value.exceptions[0]) == "boom"
    assert rec.stopped == ["c", "b", "a"]
    assert not stop.is_set()


async def test_a_root_task_that_returns_stops_the_others_cleanly() -> None:
    rec = Recorder(["a", "b"])

    async def finish() -> None:
        await rec.all_started.wait()

    await supervise(asyncio.Event(), [*rec.tasks(), RootTask("finisher", finish)])
    assert rec.stopped == ["b", "a"]


async def test_a_slow_task_past_the_deadline_is_logged_and_the_rest_still_stop(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rec = Recorder(["first"])
    release = asyncio.Event()
    stop = asyncio.Event()
    slow_cancelled = asyncio.Event()

    class ReleaseOnDeadline(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage() == "root task did not stop within the shutdown deadline":
                release.set()

    async def slow() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            slow_cancelled.set()
            await release.wait()  # slow clean-up, finishes only after the supervisor gave up waiting
            raise

    async def fast_stop() -> None:
        await rec.all_started.wait()
        stop.set()

    handler = ReleaseOnDeadline()
    logging.getLogger("vgpu_scheduler.shared.runtime").addHandler(handler)
    try:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(fast_stop())
            await supervise(stop, [*rec.tasks(), RootTask("slow", slow)], shutdown_deadline_s=0.01)
    finally:
        logging.getLogger("vgpu_scheduler.shared.runtime").removeHandler(handler)
    assert slow_cancelled.is_set()
    assert rec.stopped == ["first"]
    late = [r for r in caplog.records if r.getMessage() == "root task did not stop within the shutdown deadline"]
    assert [getattr(r, "task", None) for r in late] == ["slow"]


async def test_cancelling_the_supervisor_cancels_its_tasks_and_propagates() -> None:
    rec = Recorder(["a", "b"])
    sup = asyncio.create_task(supervise(asyncio.Event(), rec.tasks()))
    await rec.all_started.wait()
    sup.cancel()
    with pytest.raises(asyncio.CancelledError):
        await sup
    assert sorted(rec.stopped) == ["a", "b"]


async def test_failures_of_several_tasks_are_all_reported() -> None:
    async def fail(msg: str) -> None:
        raise ValueError(msg)  # both fail in their first step, before the supervisor wakes up

    async def fail_on_cancel() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise KeyError("during shutdown") from None

    tasks = [
        RootTask("other", fail_on_cancel),
        RootTask("first", lambda: fail("first")),
        RootTask("second", lambda: fail("second")),
    ]
    with pytest.raises(ExceptionGroup) as info:
        await supervise(asyncio.Event(), tasks)
    messages = sorted(str(e) for e in info.value.exceptions)
    assert messages == ["'during shutdown'", "first", "second"]


async def _idle() -> None:
    await asyncio.Event().wait()


@pytest.mark.parametrize(
    ("tasks", "message"),
    [
        ([], "at least one root task"),
        ([RootTask("x", _idle), RootTask("x", _idle)], "unique"),
    ],
    ids=["empty", "duplicate-names"],
)
async def test_bad_task_lists(tasks: list[RootTask], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        await supervise(asyncio.Event(), tasks)


async def test_a_root_task_that_loses_its_cancellation_is_cancelled_again(caplog: pytest.LogCaptureFixture) -> None:
    """One ``cancel()`` can be lost (CPython gh-86296 via redis-py's ``wait_for``): the supervisor repeats it."""
    rec = Recorder(["other"])
    stop = asyncio.Event()
    cancellations = 0

    async def loses_first_cancel() -> None:
        nonlocal cancellations
        while True:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancellations += 1
                if cancellations > 1:
                    raise
                # the first one is swallowed, exactly as a lost one: the loop carries on

    async def trigger() -> None:
        await rec.all_started.wait()
        stop.set()

    async with asyncio.TaskGroup() as tg:
        tg.create_task(trigger())
        await supervise(
            stop, [*rec.tasks(), RootTask("stubborn", loses_first_cancel)], shutdown_deadline_s=60, recancel_s=0.001
        )
    assert cancellations == 2
    assert rec.stopped == ["other"]
    assert not [r for r in caplog.records if r.levelname == "ERROR"]
