"""The simulated clock of embedded runs and kube-scheduler's backoff."""

from __future__ import annotations

import asyncio
import selectors
import threading
from typing import Any

import pytest

from vgpu_scheduler.services.simulate.clock import VirtualClockLoop, simulated_elapsed
from vgpu_scheduler.services.simulate.driver import SchedulerTiming


def run(coro_fn):
    with asyncio.Runner(loop_factory=VirtualClockLoop) as runner:
        return runner.run(coro_fn())


def test_timers_cost_no_real_time_and_fire_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    order: list[str] = []
    real_waits: list[float] = []  # the timeout of every wait on the sockets (the loop's only real waiting)
    select = selectors.DefaultSelector.select

    def recorded(self: selectors.BaseSelector, timeout: float | None = None) -> list[Any]:
        if timeout is not None:
            real_waits.append(timeout)
        return select(self, timeout)  # type: ignore[arg-type]

    monkeypatch.setattr(selectors.DefaultSelector, "select", recorded)

    async def main() -> float | None:
        async def after(delay: float, name: str) -> None:
            await asyncio.sleep(delay)
            order.append(name)

        await asyncio.gather(after(10.0, "ten"), after(1.0, "one"), after(5.0, "five"))
        return simulated_elapsed()

    elapsed = run(main)
    assert order == ["one", "five", "ten"]
    assert elapsed == pytest.approx(10.0)
    # the clock jumped to each timer: the loop never waited for real as long as the first one (1 s), whatever the
    # machine's speed (an ordinary loop waits 1 s, 4 s and 5 s)
    assert real_waits and max(real_waits) < 1.0


def test_a_timeout_fires_on_the_simulated_clock() -> None:
    async def main() -> bool:
        try:
            async with asyncio.timeout(3.0):
                await asyncio.Event().wait()
        except TimeoutError:
            return True
        return False

    assert run(main)


def test_a_busy_worker_thread_is_waited_for_without_moving_the_clock() -> None:
    release = threading.Event()

    async def main() -> tuple[str, float | None]:
        loop = asyncio.get_running_loop()
        ticker = asyncio.create_task(asyncio.sleep(100.0))  # a timer the clock could jump to
        threading.Timer(0.05, release.set).start()
        result = await loop.run_in_executor(None, lambda: "done" if release.wait(5) else "timeout")
        elapsed = simulated_elapsed()
        ticker.cancel()
        return result, elapsed

    result, elapsed = run(main)
    assert result == "done"
    assert elapsed is not None and elapsed < 1.0


def test_the_ordinary_loop_reports_no_simulated_time() -> None:
    async def main() -> float | None:
        return simulated_elapsed()

    assert asyncio.run(main()) is None


def test_backoff_doubles_from_one_second_to_ten() -> None:
    timing = SchedulerTiming()
    assert [timing.backoff_s(n) for n in range(1, 7)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert SchedulerTiming(initial_backoff_s=0.5, max_backoff_s=3.0).backoff_s(4) == 3.0
