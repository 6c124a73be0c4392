"""The adaptive per-node bind limit: lowered by long lock waits and timeouts, raised back by runs of short waits."""

from __future__ import annotations

from vgpu_scheduler.services.extender.bindlimit import RAISE_AFTER, AdaptiveBindLimit


def limit(ceiling: int = 4, budget_s: float = 3.0) -> tuple[AdaptiveBindLimit, list[int]]:
    changes: list[int] = []
    return AdaptiveBindLimit(ceiling, budget_s, changes.append), changes


def test_starts_at_the_ceiling_and_long_waits_lower_it_one_step_at_a_time_down_to_one() -> None:
    lim, changes = limit()
    assert lim.value == 4
    lim.observe(1.6)  # more than half the 3 s budget
    lim.observe(0.5, timed_out=True)  # a timeout counts whatever the figure
    lim.observe(2.9)
    lim.observe(2.9)
    assert changes == [3, 2, 1]
    assert lim.value == 1


def test_a_run_of_short_waits_raises_it_again_but_never_above_the_ceiling() -> None:
    lim, changes = limit()
    lim.observe(3.0, timed_out=True)
    for _ in range(RAISE_AFTER - 1):
        lim.observe(0.1)
    assert lim.value == 3  # not yet
    lim.observe(0.1)
    assert lim.value == 4
    for _ in range(3 * RAISE_AFTER):
        lim.observe(0.0)
    assert changes == [3, 4]


def test_a_middling_wait_breaks_the_run_of_short_ones() -> None:
    lim, changes = limit()
    lim.observe(2.0)
    for _ in range(RAISE_AFTER - 1):
        lim.observe(0.1)
    lim.observe(1.0)  # between a quarter and a half of the budget: keeps the limit, restarts the count
    lim.observe(0.1)
    assert lim.value == 3 and changes == [3]


def test_no_budget_means_no_adaptation() -> None:
    lim, changes = limit(budget_s=0.0)
    lim.observe(10.0, timed_out=True)
    assert lim.value == 4 and changes == []
