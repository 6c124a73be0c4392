"""The per-node bind limit: the queue a node's lock serves within half a bind's wait, from measured lock cycles and
the time binds take to come."""

from __future__ import annotations

import pytest

from vgpu_scheduler.services.extender.bindlimit import (
    CYCLE_WEIGHT,
    PENDING_MAX,
    QUEUE_SHARE,
    TIMEOUT_RAISE,
    BindLimit,
)


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
        (0.2, 4),  # 1 + 1.5 / 0.2 = 8, the ceiling
        (0.4, 4),  # 1 + 3.75
        (0.6, 3),  # 1 + 2.5
        (0.8, 2),  # 1 + 1.875
        (1.5, 2),  # 1 + 1
        (2.0, 1),  # one bind at a time
        (30.0, 1),  # never below one
    ],
)
def test_the_limit_is_one_plus_the_cycles_that_fit_in_half_the_wait(cycle_s: float, expected: int) -> None:
    lim, _ = limit()
    lim.observe_cycle(cycle_s)
    assert lim.cycle_s == cycle_s
    assert lim.value == expected
    assert expected == max(1, min(4, 1 + int(QUEUE_SHARE * 3.0 / cycle_s)))


def test_cycles_are_planned_on_their_average_plus_one_deviation() -> None:
    """One slow Allocate among steady cycles lowers the limit for a while (queues are sums of cycles: their spread
    matters), and steady cycles bring it back; a cluster that really slows down keeps it low."""
    lim, changes = limit()
    for _ in range(20):
        lim.observe_cycle(0.4)
    assert lim.cycle_var == 0.0 and lim.value == 4
    lim.observe_cycle(2.0)
    assert lim.cycle_s == pytest.approx(0.4 + CYCLE_WEIGHT * 1.6)
    assert lim.cycle_var == pytest.approx((1 - CYCLE_WEIGHT) * CYCLE_WEIGHT * 1.6**2)
    assert lim.value == 2  # 1 + 1.5 / (0.72 + 0.64)
    for _ in range(20):
        lim.observe_cycle(0.4)
    assert lim.value == 4 and changes == [2, 3, 4]
    for _ in range(20):
        lim.observe_cycle(2.0)
    assert lim.value == 1


def test_the_time_a_bind_takes_to_come_is_served_by_the_lock_meanwhile() -> None:
    """A pod admitted behind n binds waits about n x cycle - dispatch: the later binds come, the more may queue."""
    lim, changes = limit()
    lim.observe_cycle(0.6)
    assert lim.value == 3
    lim.queued("unknown", 5.0)  # a bind whose filter ran on another replica: nothing measured
    assert lim.dispatch_s == 0.0
    for i in range(20):
        lim.reserved(f"p{i}", 10.0 + i)
        lim.queued(f"p{i}", 10.9 + i)
        lim.queued(f"p{i}", 30.0)  # its second try is not a dispatch
    assert lim.dispatch_s == pytest.approx(0.9 * (1 - (1 - CYCLE_WEIGHT) ** 20))
    assert lim.value == 4  # 1 + (1.5 + 0.9) / 0.6
    assert changes == [3, 4]


def test_reservations_whose_bind_never_comes_are_forgotten_oldest_first() -> None:
    lim, _ = limit()
    for i in range(PENDING_MAX + 1):
        lim.reserved(f"p{i}", float(i))
    lim.queued("p0", 1e6)  # forgotten: no sample
    assert lim.dispatch_s == 0.0
    lim.queued(f"p{PENDING_MAX}", PENDING_MAX + 2.0)
    assert lim.dispatch_s == pytest.approx(CYCLE_WEIGHT * 2.0)


def test_a_timeout_raises_the_estimate_at_once_and_measured_cycles_bring_it_back() -> None:
    lim, changes = limit()
    lim.observe_cycle(0.5)  # 1 + 1.5 / 0.5 = 4
    lim.observe(2.8, timed_out=True)
    # raised from at least the longest cycle that still gives the ceiling (1.5 / 3 = 0.5): the limit drops
    assert lim.cycle_s == pytest.approx(0.5 * TIMEOUT_RAISE)
    assert lim.value == 3
    lim.observe(2.8, timed_out=True)  # 0.78 s
    assert lim.value == 2
    for _ in range(30):
        lim.observe_cycle(0.4)
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
    lim.reserved("p", 0.0)
    lim.queued("p", 5.0)
    assert lim.value == 4 and changes == []
