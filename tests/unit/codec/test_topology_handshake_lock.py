"""Node annotations besides the register: topology scores, the handshake, the node lock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.codec.strategies import (
    aware_whole_seconds,
    int64,
    naive_whole_seconds,
    nonempty_text,
    text,
    text_without,
)
from vgpu_scheduler.shared.codec.handshake import HandshakeKind, format_requesting, parse_handshake
from vgpu_scheduler.shared.codec.nodelock import (
    NodeLock,
    encode_node_lock,
    format_rfc3339,
    parse_node_lock,
    parse_rfc3339,
)
from vgpu_scheduler.shared.codec.topology import decode_topology, encode_topology
from vgpu_scheduler.shared.errors import DecodeError

# --- topology ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("null", {}, id="null"),
        pytest.param("[]", {}, id="empty"),
        pytest.param('[{"uuid":"a"}]', {"a": {}}, id="no-scores"),
        pytest.param('[{"uuid":"a","score":{"b":1}},{"uuid":"a","score":{"b":2}}]', {"a": {"b": 1}}, id="first-wins"),
        pytest.param('[{"score":{"b":1}},{"UUID":"a","Score":{"b":-3}}]', {"a": {"b": -3}}, id="no-uuid-ignored"),
        pytest.param('[{"uuid":"a","score":{"b":null,"c":1,"c":2}}]', {"a": {"b": 0, "c": 2}}, id="go-map-semantics"),
    ],
)
def test_decode_topology(value: str, expected: dict[str, dict[str, int]]) -> None:
    assert decode_topology(value) == expected


@pytest.mark.parametrize(
    "value", ["", "{}", '[{"uuid":"a","score":{"b":1.5}}]', '[{"uuid":"a","score":[]}]', '[{"uuid":1}]', "[1]"]
)
def test_decode_topology_rejects(value: str) -> None:
    with pytest.raises(DecodeError) as e:
        decode_topology(value)
    assert e.value.what.startswith("hami.io/node-nvidia-score")


@settings(deadline=None)
@given(st.dictionaries(nonempty_text, st.dictionaries(text, int64, max_size=4), max_size=4))
def test_topology_round_trip(scores: dict[str, dict[str, int]]) -> None:
    assert decode_topology(encode_topology(scores)) == scores


# --- handshake -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "at"),
    [
        ("Requesting_2025-06-13 9:07:40", datetime(2025, 6, 13, 9, 7, 40)),
        ("Requesting_2025-06-13 09:07:40.5", datetime(2025, 6, 13, 9, 7, 40, 500000)),
        ("Deleted_2024.02.29 23:59:59", datetime(2024, 2, 29, 23, 59, 59)),
    ],
)
def test_handshake_go_parse_leniencies(value: str, at: datetime) -> None:
    assert parse_handshake(value).at == at


def test_handshake_reported_with_named_zone_and_no_monotonic() -> None:
    h = parse_handshake("Reported 2024-01-23 12:30:04 +0800 CST")
    assert h.kind is HandshakeKind.REPORTED
    assert h.at == datetime(2024, 1, 23, 4, 30, 4, tzinfo=UTC)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "Requesting_",
        "Requesting_2025-13-01 00:00:00",
        "Requesting_2025-02-30 00:00:00",
        "Requesting_2025-06-13 24:00:00",
        "Requesting_2025-06-13 09:60:00",
        "Requesting_2025-06-13T09:07:40",
        "Requesting_2025-06.13 09:07:40",
        "requesting_2025-06-13 09:07:40",
        "Requesting 2025-06-13 09:07:40",
        "Deleted_2025-06-13",
        "Reported yesterday",
        "Reported 2024-01-23 04:30:04 +2500 X",
        "Requesting_2025-06-13 09:07:40 ",
    ],
)
def test_handshake_rejects(value: str) -> None:
    with pytest.raises(DecodeError) as e:
        parse_handshake(value)
    assert e.value.what == "hami.io/node-handshake"


def test_format_requesting_needs_naive_local_time() -> None:
    with pytest.raises(ValueError, match="naive"):
        format_requesting(datetime(2025, 1, 1, tzinfo=UTC))


@settings(deadline=None)
@given(naive_whole_seconds)
def test_requesting_round_trip(at: datetime) -> None:
    h = parse_handshake(format_requesting(at))
    assert (h.kind, h.at) == (HandshakeKind.REQUESTING, at)


# --- node lock -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(
            "2025-01-23T10:00:00.123456789+08:00,default,p",
            NodeLock(datetime(2025, 1, 23, 2, 0, 0, 123456, tzinfo=UTC), "default", "p"),
            id="fraction",
        ),
        pytest.param("2025-01-23T1:00:00Z", NodeLock(datetime(2025, 1, 23, 1, tzinfo=UTC)), id="one-digit-hour"),
        pytest.param(
            "2025-01-23T10:00:00Z,,", NodeLock(datetime(2025, 1, 23, 10, tzinfo=UTC), "", ""), id="empty-owner"
        ),
    ],
)
def test_parse_node_lock(value: str, expected: NodeLock) -> None:
    assert parse_node_lock(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        "2025-01-23T10:00:00Z,default",
        "2025-01-23T10:00:00Z,default,p,extra",
        "2025-01-23 10:00:00Z,default,p",
        "2025-01-23t10:00:00z",
        "2025-01-23T10:00:00+24:00",
        "2025-13-23T10:00:00Z",
        "2025-01-23T10:00:00",
        "",
        "yesterday,default,p",
    ],
)
def test_parse_node_lock_rejects(value: str) -> None:
    with pytest.raises(DecodeError) as e:
        parse_node_lock(value)
    assert e.value.what == "hami.io/mutex.lock"


def test_owner_check() -> None:
    lock = parse_node_lock("2025-01-23T10:00:00Z,default,p")
    assert lock.owned_by("default", "p") and not lock.owned_by("default", "q") and not lock.legacy
    assert not parse_node_lock("2025-01-23T10:00:00Z").owned_by("default", "p")


def test_format_rfc3339_offsets() -> None:
    assert format_rfc3339(datetime(2025, 1, 2, 3, 4, 5, 999, tzinfo=timezone(-timedelta(hours=5, minutes=30)))) == (
        "2025-01-02T03:04:05-05:30"
    )
    assert format_rfc3339(datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(0)))) == "2025-01-02T03:04:05Z"
    assert parse_rfc3339("2025-01-02T03:04:05-05:30").utcoffset() == -timedelta(hours=5, minutes=30)


def test_encode_node_lock_refusals() -> None:
    at = datetime(2025, 1, 23, tzinfo=UTC)
    with pytest.raises(ValueError, match="aware"):
        encode_node_lock(datetime(2025, 1, 23), "ns", "p")
    for ns, name in [("a,b", "p"), ("", "p"), ("ns", ""), ("ns", None)]:
        with pytest.raises(DecodeError):
            encode_node_lock(at, ns, name)


@settings(deadline=None)
@given(aware_whole_seconds, text_without(",", min_size=1), text_without(",", min_size=1))
def test_node_lock_round_trip(at: datetime, namespace: str, name: str) -> None:
    lock = parse_node_lock(encode_node_lock(at, namespace, name))
    assert lock == NodeLock(at, namespace, name)
    assert lock.at.utcoffset() == at.utcoffset()
    legacy = parse_node_lock(encode_node_lock(at))
    assert legacy.at == at and legacy.legacy
