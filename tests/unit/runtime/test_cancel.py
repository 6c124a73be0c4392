"""Stopping tasks when one ``cancel()`` may be lost (CPython gh-86296): cancel_until_done and wait_then_cancel."""

from __future__ import annotations

import asyncio
import contextlib
import sys

import pytest

from vgpu_scheduler.shared.runtime import cancel_until_done, wait_then_cancel


class Stubborn:
    """A task body that swallows its first ``swallow`` cancellations and carries on, as a lost one looks."""

    def __init__(self, swallow: int = 1) -> None:
        self.swallow = swallow
        self.cancellations = 0
        self.swallowed = asyncio.Event()

    async def run(self) -> None:
        while True:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancellations += 1
                if self.cancellations > self.swallow:
                    raise
                self.swallowed.set()  # carry on as if nothing happened


async def _started(task: asyncio.Task[None]) -> None:
    """Let ``task`` reach its first await."""
    for _ in range(3):
        await asyncio.sleep(0)
    assert not task.done()


async def test_a_swallowed_cancellation_is_repeated_until_the_task_ends() -> None:
    body = Stubborn(swallow=2)
    task = asyncio.create_task(body.run(), name="stubborn")
    await _started(task)
    assert await cancel_until_done([task], recancel_s=0.001) == set()
    assert task.cancelled()
    assert body.cancellations == 3


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="gh-86296 is fixed in 3.12")
async def test_wait_for_on_311_loses_a_cancellation_that_meets_the_inner_result() -> None:
    """The real bug, deterministically: the inner future completes in the same loop turn as ``cancel()``."""
    loop = asyncio.get_running_loop()
    inner: asyncio.Queue[asyncio.Future[None]] = asyncio.Queue()
    rounds = 0

    async def loop_on_wait_for() -> None:  # what a redis-py command loop looks like
        nonlocal rounds
        while True:
            fut: asyncio.Future[None] = loop.create_future()
            inner.put_nowait(fut)
            await asyncio.wait_for(fut, timeout=60)
            rounds += 1

    task = asyncio.create_task(loop_on_wait_for(), name="wait-for-loop")
    first = await inner.get()
    first.set_result(None)
    task.cancel()  # same turn: wait_for returns the result and drops the cancellation
    second = await inner.get()
    assert not task.done()
    assert rounds == 1
    assert await cancel_until_done([task]) == set()
    assert task.cancelled()
    assert second.cancelled()  # wait_for cancelled the inner future it was waiting on


async def test_the_deadline_returns_the_tasks_still_running() -> None:
    body = Stubborn(swallow=10**9)
    task = asyncio.create_task(body.run(), name="never-stops")
    await _started(task)
    late = await cancel_until_done([task], deadline_s=0.01, recancel_s=0.001)
    assert late == {task}
    assert body.cancellations >= 1
    body.swallow = 0  # let the clean-up below succeed
    assert await cancel_until_done([task]) == set()


async def test_done_tasks_and_an_empty_list_return_at_once() -> None:
    done = asyncio.create_task(asyncio.sleep(0), name="done")
    await done
    assert await cancel_until_done([done]) == set()
    assert await cancel_until_done([]) == set()
    assert not done.cancelled()


async def test_a_cancelled_caller_still_waits_for_its_tasks_then_raises() -> None:
    release = asyncio.Event()
    cleaned = asyncio.Event()

    async def slow_cleanup() -> None:  # clean-up that outlasts several cancellations
        try:
            await asyncio.Event().wait()
        finally:
            while not release.is_set():
                with contextlib.suppress(asyncio.CancelledError):
                    await release.wait()
            cleaned.set()

    child = asyncio.create_task(slow_cleanup(), name="child")
    await _started(child)
    stopping = asyncio.Event()

    async def stopper() -> None:
        stopping.set()
        await cancel_until_done([child], recancel_s=0.001)

    caller = asyncio.create_task(stopper(), name="caller")
    await stopping.wait()
    await asyncio.sleep(0)
    caller.cancel()
    await asyncio.sleep(0)
    assert not caller.done()  # still waiting for the child, not abandoning it
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert cleaned.is_set()
    assert child.done()


async def test_wait_then_cancel_lets_finishers_finish_and_cancels_the_rest() -> None:
    finish = asyncio.Event()

    async def finisher() -> None:
        await finish.wait()

    body = Stubborn(swallow=1)
    polite = asyncio.create_task(finisher(), name="polite")
    stubborn = asyncio.create_task(body.run(), name="stubborn")
    await _started(stubborn)
    finish.set()
    late = await wait_then_cancel([polite, stubborn], grace_s=0.01, recancel_s=0.001)
    assert late == {stubborn}
    assert not polite.cancelled()
    assert stubborn.cancelled()
    assert body.cancellations == 2


async def test_wait_then_cancel_keeps_the_grace_when_its_caller_is_cancelled() -> None:
    finish = asyncio.Event()
    waiting = asyncio.Event()

    async def drains() -> None:
        waiting.set()
        await finish.wait()

    service = asyncio.create_task(drains(), name="service")
    caller = asyncio.create_task(wait_then_cancel([service], grace_s=60), name="caller")
    await waiting.wait()
    await asyncio.sleep(0)
    for _ in range(3):  # a supervisor cancelling again and again
        caller.cancel()
        await asyncio.sleep(0)
    assert not caller.done()
    finish.set()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert service.done() and not service.cancelled()
