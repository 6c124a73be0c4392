"""EventSink: events leave the request path, repeats are suppressed by key, a full queue drops (counted), a failed
post is counted and never stops the worker."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from vgpu_scheduler.services.extender.events import EventSink
from vgpu_scheduler.shared.errors import TransientError
from vgpu_scheduler.shared.k8s.objects import pod_ref
from vgpu_scheduler.shared.protocol.events import EventReason, EventType, PodEvent

E1 = PodEvent(EventType.WARNING, EventReason.FILTERING_FAILED, "2 nodes CardInsufficientMemory(a,b)")
E2 = PodEvent(EventType.WARNING, EventReason.FILTERING_FAILED, "no available node, 2 nodes do not meet")
POD = pod_ref("default", "p1", "uid-1")


class Recorder:
    def __init__(self) -> None:
        self.posted: list[tuple[str, str]] = []
        self.fail_next = 0

    async def __call__(self, pod: Mapping[str, Any], event: PodEvent) -> None:
        if self.fail_next:
            self.fail_next -= 1
            raise TransientError("api server unavailable")
        self.posted.append((pod["metadata"]["name"], event.message))


@pytest.fixture
async def running() -> AsyncIterator[tuple[EventSink, Recorder]]:
    rec = Recorder()
    sink = EventSink(rec, capacity=2)
    task = asyncio.create_task(sink.run(), name="event-sink")
    try:
        yield sink, rec
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_submitted_events_are_posted_in_order(running: tuple[EventSink, Recorder]) -> None:
    sink, rec = running
    assert sink.submit(POD, [E1, E2])
    assert await sink.flush(1.0)
    assert rec.posted == [("p1", E1.message), ("p1", E2.message)]
    assert (sink.posted, sink.dropped) == (2, 0)


async def test_the_same_once_key_posts_once_until_forgotten(running: tuple[EventSink, Recorder]) -> None:
    sink, rec = running
    assert sink.submit(POD, [E1], once_key=("uid-1", "unschedulable"))
    assert not sink.submit(POD, [E1], once_key=("uid-1", "unschedulable"))
    assert sink.submit(POD, [E2], once_key=("uid-1", "quota"))
    assert await sink.flush(1.0)
    sink.forget(("uid-1", "unschedulable"))
    assert sink.submit(POD, [E1], once_key=("uid-1", "unschedulable"))
    assert await sink.flush(1.0)
    assert [m for _, m in rec.posted] == [E1.message, E2.message, E1.message]


async def test_a_full_queue_drops_and_counts_without_blocking() -> None:
    rec = Recorder()
    sink = EventSink(rec, capacity=1)
    dropped: list[int] = []
    sink.set_hooks(on_posted=lambda: None, on_dropped=lambda: dropped.append(1))
    assert sink.submit(POD, [E1])
    assert not sink.submit(POD, [E1, E2])  # no worker yet: the queue (capacity 1) is full
    assert (sink.dropped, len(dropped), sink.pending) == (2, 2, 1)


async def test_a_failed_post_is_counted_and_the_worker_goes_on(running: tuple[EventSink, Recorder]) -> None:
    sink, rec = running
    rec.fail_next = 1
    sink.submit(POD, [E1, E2])
    assert await sink.flush(1.0)
    assert rec.posted == [("p1", E2.message)]
    assert (sink.posted, sink.dropped) == (1, 1)


async def test_flush_without_a_worker_times_out() -> None:
    sink = EventSink(Recorder())
    sink.submit(POD, [E1])
    assert not await sink.flush(0.01)


def test_nothing_to_submit_is_not_queued() -> None:
    sink = EventSink(Recorder())
    assert not sink.submit(POD, [])
    assert sink.pending == 0


def test_pod_ref_carries_what_an_event_needs() -> None:
    assert pod_ref("ns", "name", "uid") == {"metadata": {"namespace": "ns", "name": "name", "uid": "uid"}}
    assert pod_ref("ns", "name") == {"metadata": {"namespace": "ns", "name": "name"}}


async def test_normal_events_are_sampled_to_the_rate_and_warnings_never() -> None:
    now = [100.0]
    rec = Recorder()
    sink = EventSink(rec, normal_per_s=2.0, clock=lambda: now[0])  # burst of 4, then 2 per second
    ok = PodEvent(EventType.NORMAL, EventReason.BINDING_SUCCEED, "bound")
    task = asyncio.create_task(sink.run(), name="event-sink")
    try:
        kept = [sink.submit(pod_ref("default", f"p{i}"), [ok, E1]) for i in range(6)]
        assert kept == [True] * 6  # every batch still carries its warning
        assert sink.sampled_out == 2
        now[0] += 1.0  # one second later: two more Normal events may go
        assert [sink.submit(POD, [ok]) for _ in range(3)] == [True, True, False]
        assert await sink.flush(1.0)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert [m for _, m in rec.posted].count(E1.message) == 6
    assert [m for _, m in rec.posted].count("bound") == 6
    assert sink.sampled_out == 3


async def test_no_sampling_without_a_rate(running: tuple[EventSink, Recorder]) -> None:
    sink, rec = running
    ok = PodEvent(EventType.NORMAL, EventReason.BINDING_SUCCEED, "bound")
    assert sink.submit(POD, [ok, ok])
    assert await sink.flush(1.0)
    assert len(rec.posted) == 2 and sink.sampled_out == 0


def test_suppressed_says_what_submit_would_do_and_keeps_the_key_fresh() -> None:
    sink = EventSink(Recorder(), remember=2)
    assert not sink.suppressed("a")
    assert sink.submit(POD, [E1], once_key="a")
    assert sink.submit(POD, [E1], once_key="b")
    assert sink.suppressed("a")  # seen again: now the most recent key
    assert sink.submit(POD, [E1], once_key="c")  # forgets the oldest key, "b"
    assert sink.suppressed("a") and not sink.suppressed("b")
    assert not sink.submit(POD, [E1], once_key="a")
    assert sink.pending == 3
