"""The chaos run's RSS log (tests/controlplane/rss.py): the summary table and the timeline it prints."""

from __future__ import annotations

from tests.controlplane.rss import RssLog


def log_of(samples: list[tuple[float, dict[str, float]]]) -> RssLog:
    return RssLog(samples=samples)


def test_the_table_gives_first_mid_max_last_and_the_second_half_change() -> None:
    log = log_of([(0, {"a": 100}), (30, {"a": 120}), (60, {"a": 110, "b": 50}), (90, {"a": 130, "b": 70})])
    header, a, b = log.table()
    assert header.split()[:6] == ["PROCESS", "FIRST", "MID", "MAX", "LAST", "2ND"]
    assert a.split() == ["a", "100", "110", "130", "130", "+20.0"]
    assert b.split() == ["b", "50", "50", "70", "70", "+20.0"]


def test_the_timeline_picks_evenly_spread_samples_with_the_first_and_the_last() -> None:
    log = log_of([(10.0 * i, {"a": 100.0 + i}) for i in range(13)])
    header, row = log.timeline(points=5)
    assert header.split()[1:6] == ["0s", "30s", "60s", "90s", "120s"]
    assert row.split() == ["a", "100", "103", "106", "109", "112"]


def test_a_process_missing_from_a_picked_sample_shows_a_dash() -> None:
    log = log_of([(0, {"a": 1}), (30, {"a": 2, "b": 5}), (60, {"a": 3})])
    _, a, b = log.timeline(points=3)
    assert a.split() == ["a", "1", "2", "3"]
    assert b.split() == ["b", "-", "5", "-"]


def test_fewer_samples_than_points_shows_each_once_and_nothing_shows_nothing() -> None:
    log = log_of([(0, {"a": 1}), (30, {"a": 2})])
    header, row = log.timeline(points=7)
    assert header.split()[1:3] == ["0s", "30s"] and row.split() == ["a", "1", "2"]
    assert RssLog().timeline() == [] and RssLog().table() == []
