"""FailureStreak: capped, jittered exponential delays; WARNING only on the 1st, 2nd, 4th, 8th, … failure."""

from __future__ import annotations

import logging
import random

import pytest

from vgpu_scheduler.shared.runtime import FailureStreak


@pytest.mark.parametrize("jitter", [0.0, 0.5, 0.999])
def test_delays_double_from_the_initial_value_up_to_the_cap_jittered_into_the_upper_half(jitter: float) -> None:
    class Fixed(random.Random):
        def random(self) -> float:
            return jitter

    streak = FailureStreak(1.0, 30.0, rng=Fixed())
    delays = [streak.failed() for _ in range(10)]
    bases = [1, 2, 4, 8, 16, 30, 30, 30, 30, 30]
    assert delays == pytest.approx([b / 2 + jitter * b / 2 for b in bases])


def test_jitter_spreads_the_delays_of_many_clients() -> None:
    delays = {round(FailureStreak(1.0, 30.0, rng=random.Random(seed)).failed(), 6) for seed in range(50)}
    assert len(delays) > 40 and min(delays) >= 0.5 and max(delays) <= 1.0


def test_warning_only_at_powers_of_two_and_recovery_reports_the_length() -> None:
    streak = FailureStreak(0.1, 1.0)
    levels = []
    for _ in range(20):
        streak.failed()
        levels.append(streak.level)
    loud = [i + 1 for i, level in enumerate(levels) if level == logging.WARNING]
    assert loud == [1, 2, 4, 8, 16]
    assert set(levels) == {logging.WARNING, logging.DEBUG}
    assert streak.recovered() == 20
    assert streak.recovered() == 0
    assert streak.failed() == pytest.approx(0.1, rel=0.5) and streak.level == logging.WARNING


def test_a_cap_below_the_initial_value_is_the_initial_value() -> None:
    streak = FailureStreak(5.0, 1.0, rng=random.Random(1))
    assert all(2.5 <= streak.failed() <= 5.0 for _ in range(5))
