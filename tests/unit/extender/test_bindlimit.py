"""The per-node bind limit: the queue a node's lock serves within most of a bind's wait, from measured cycles."""

from __future__ import annotations

import pytest

from vgpu_scheduler.services.extender.bindlimit import CYCLE_WEIGHT, QUEUE_SHARE, TIMEOUT_RAISE, BindLimit


def limit(ceiling: int = 4, budget_s: float = 3.0) -> tuple[BindLimit, list[int]]:
    changes: list[int] = []
    return BindLimit(ceiling, budget_s, changes.append), changes


def test_starts_at_the_ceiling_until_a_cycle_is_measured() -> None:
    lim, changes = limit()
    assert lim.value == 4 and lim.cycle_s is None
    lim.observe(2.9)  # a long wait alone proves nothing: queues may have formed before the limit was known
    assert lim.value == 4 and changes == []


@pytest.mark.parametrize(
    ("cycle_s", "expected"),
    [
        (0.2, 4),  # 1 + 2.25 / 0.2 = 12, the ceiling
        (0.6, 4),  # 1 + 3.75
        (0.8, 3),  # 1 + 2.81
        (1.2, 2),  # 1 + 1.875
        (2.5, 1),  # one bind at a time
        (30.0, 1),  # never below one
    ],
)
def test_the_limit_is_one_plus_the_cycles_that_fit_in_the_queue_share_of_the_wait(
    cycle_s: float, expected: int
) -> None:
    lim, _ = limit()
    lim.observe_cycle(cycle_s)
    assert lim.cycle_s == cycle_s
    assert lim.value == expected
    assert expected == max(1, min(4, 1 + int(QUEUE_SHARE * 3.0 / cycle_s)))


def test_cycles_are_averaged_so_one_slow_cycle_does_not_halve_the_queue() -> None:
    lim, changes = limit()
    for _ in range(20):
        lim.observe_cycle(0.4)
    lim.observe_cycle(2.0)  # one slow Allocate
    assert lim.cycle_s == pytest.approx(0.4 + CYCLE_WEIGHT * 1.6)
    assert lim.value == 4 and changes == []
    for _ in range(10):  # the cluster really slows down: the limit follows
        lim.observe_cycle(2.0)
    assert lim.value == 2 and changes == [3, 2]


def test_a_timeout_raises_the_estimate_at_once_and_measured_cycles_bring_it_back() -> None:
    lim, changes = limit()
    lim.observe_cycle(0.7)  # 1 + 2.25 / 0.7 = 4
    lim.observe(2.8, timed_out=True)
    # raised from at least the longest cycle that still gives the ceiling (2.25 / 3 = 0.75): the limit drops
    assert lim.cycle_s == pytest.approx(0.75 * TIMEOUT_RAISE)
    assert lim.value == 3
    lim.observe(2.8, timed_out=True)  # 1.17 s
    assert lim.value == 2
    for _ in range(30):
        lim.observe_cycle(0.5)
    assert lim.value == 4
    assert changes == [3, 2, 3, 4]


def test_a_timeout_before_any_cycle_assumes_the_ceiling_was_too_much() -> None:
    lim, _ = limit()
    lim.observe(2.8, timed_out=True)
    assert lim.value == 3  # the cycle that gives 4, raised by a quarter


def test_no_budget_means_no_adaptation() -> None:
    lim, changes = limit(budget_s=0.0)
    lim.observe(10.0, timed_out=True)
    lim.observe_cycle(5.0)
    assert lim.value == 4 and changes == []
