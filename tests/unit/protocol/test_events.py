"""HAMi's filter and bind event texts."""

from __future__ import annotations

import pytest

from vgpu_scheduler.shared.protocol.events import (
    MAX_MESSAGE_BYTES,
    EventReason,
    EventType,
    PodEvent,
    bind_failure_event,
    bind_success_event,
    filter_events,
    filter_failure_events,
    filter_success_event,
    reason_types,
    truncate,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2/4 CardInsufficientMemory, 2/4 CardNotHealth", ("CardInsufficientMemory", "CardNotHealth")),
        ("1/1 ResourceQuotaNotFit", ("ResourceQuotaNotFit",)),
        ("node unregistered", ("node unregistered",)),
        ("NodeInsufficientDevice", ("NodeInsufficientDevice",)),
        ("", ()),
    ],
    ids=["two", "one", "plain", "plain-reason", "empty"],
)
def test_reason_types(text: str, expected: tuple[str, ...]) -> None:
    assert reason_types(text) == expected


def warn(message: str) -> PodEvent:
    return PodEvent(EventType.WARNING, EventReason.FILTERING_FAILED, message)


def test_failure_events_one_per_reason_type_then_summary() -> None:
    failed = {
        "node-b": "2/4 CardInsufficientMemory, 2/4 CardNotHealth",
        "node-a": "4/4 CardInsufficientMemory",
        "node-c": "node unregistered",
        "node-d": "4/4 CardInsufficientMemory",  # the same text as node-a
    }
    assert filter_failure_events(failed, total_nodes=4) == [
        warn("3 nodes CardInsufficientMemory(node-a,node-b,node-d)"),
        warn("1 nodes CardNotHealth(node-b)"),
        warn("1 nodes node unregistered(node-c)"),
        warn("no available node, 4 nodes do not meet"),
    ]


def test_failure_summary_defaults_to_failed_count() -> None:
    assert filter_failure_events({"n1": "1/1 CardNotHealth"})[-1] == warn("no available node, 1 nodes do not meet")
    assert filter_failure_events({}) == [warn("no available node, 0 nodes do not meet")]


def test_success_event_prints_scores_with_two_decimals() -> None:
    event = filter_success_event("node-2", [("node-1", 1.5), ("node-2", 2.345678)], total_nodes=5)
    assert event == PodEvent(
        EventType.NORMAL,
        EventReason.FILTERING_SUCCEED,
        "find fit node(node-2), 3 nodes not fit, 2 nodes fit(node-1:1.50,node-2:2.35)",
    )


def test_filter_events_dispatch() -> None:
    assert filter_events(failed_nodes={"a": "1/1 CardNotHealth"}, total_nodes=2, chosen="b", fit_scores=[("b", 0)]) == [
        PodEvent(
            EventType.NORMAL, EventReason.FILTERING_SUCCEED, "find fit node(b), 1 nodes not fit, 1 nodes fit(b:0.00)"
        )
    ]
    assert filter_events(failed_nodes={"a": "1/1 CardNotHealth"}, total_nodes=1) == [
        warn("1 nodes CardNotHealth(a)"),
        warn("no available node, 1 nodes do not meet"),
    ]


def test_bind_events() -> None:
    assert bind_success_event("gpu-node-1", "default", "gpu-pod-1") == PodEvent(
        EventType.NORMAL, EventReason.BINDING_SUCCEED, "Successfully binding node [gpu-node-1] to default/gpu-pod-1"
    )
    assert bind_failure_event("node lock busy") == PodEvent(
        EventType.WARNING, EventReason.BINDING_FAILED, "node lock busy"
    )


def test_long_messages_are_truncated_on_a_character_boundary() -> None:
    failed = {f"node-{i:05d}": "1/1 CardNotHealth" for i in range(500)}
    event = filter_failure_events(failed)[0]
    assert len(event.message.encode()) <= MAX_MESSAGE_BYTES
    assert event.message.startswith("500 nodes CardNotHealth(node-00000,node-00001,")
    assert event.message.endswith("...")
    assert truncate("é" * 600, 10) == "ééé..."
    assert truncate("short") == "short"
