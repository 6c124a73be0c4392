"""Label and field selector parsing and matching, as the API server does it."""

from __future__ import annotations

from typing import Any

import pytest

from vgpu_scheduler.shared.emulator.resources import resolve
from vgpu_scheduler.shared.emulator.selectors import field_value, parse_field_selector, parse_label_selector
from vgpu_scheduler.shared.emulator.status import ApiError

LABELS = {"gpu": "on", "zone": "a", "tier": "3", "hami.io/vgpu-node": "node-1"}

LABEL_CASES = [
    ("", True),
    ("gpu=on", True),
    ("gpu==on", True),
    ("gpu=off", False),
    ("gpu!=off", True),
    ("missing!=x", True),  # != matches objects without the key
    ("gpu", True),
    ("missing", False),
    ("!missing", True),
    ("!gpu", False),
    ("zone in (a,b)", True),
    ("zone in (b, c)", False),
    ("zone notin (b,c)", True),
    ("missing notin (b)", True),
    ("missing in (b)", False),
    ("gpu=on,zone in (a,b),!missing", True),
    ("gpu=on,zone=b", False),
    ("tier>2", True),
    ("tier<2", False),
    ("hami.io/vgpu-node=node-1", True),
    ("missing=", False),
]


@pytest.mark.parametrize(("text", "expected"), LABEL_CASES, ids=[c[0] or "empty" for c in LABEL_CASES])
def test_label_selector_matches(text: str, expected: bool) -> None:
    assert parse_label_selector(text).matches(LABELS) is expected


def test_empty_value_matches_an_empty_label() -> None:
    assert parse_label_selector("k=").matches({"k": ""})


@pytest.mark.parametrize("text", ["=x", "a b", "k in ()", "k in (a", "k=v=w", "k in (a b)"], ids=str)
def test_bad_label_selector_is_400(text: str) -> None:
    with pytest.raises(ApiError) as info:
        parse_label_selector(text)
    assert info.value.code == 400
    assert "unable to parse requirement" in info.value.message


POD: dict[str, Any] = {
    "metadata": {"name": "p1", "namespace": "ns1"},
    "spec": {"nodeName": "node-1", "hostNetwork": False},
    "status": {"phase": "Running"},
}
UNBOUND: dict[str, Any] = {"metadata": {"name": "p2", "namespace": "ns1"}, "spec": {}, "status": {"phase": "Pending"}}

FIELD_CASES: list[tuple[str, dict[str, Any], bool]] = [
    ("spec.nodeName=node-1", POD, True),
    ("spec.nodeName==node-1", POD, True),
    ("spec.nodeName=node-2", POD, False),
    ("spec.nodeName!=node-2", POD, True),
    ("spec.nodeName=", UNBOUND, True),
    ("spec.nodeName=", POD, False),
    ("metadata.name=p1,metadata.namespace=ns1", POD, True),
    ("metadata.namespace=ns2", POD, False),
    ("status.phase!=Succeeded,status.phase!=Failed", POD, True),
    ("spec.hostNetwork=false", POD, True),
]


@pytest.mark.parametrize(
    ("text", "obj", "expected"), FIELD_CASES, ids=[f"{c[0]}-{c[1]['metadata']['name']}" for c in FIELD_CASES]
)
def test_field_selector_matches(text: str, obj: dict[str, Any], expected: bool) -> None:
    assert parse_field_selector(text, resolve("pods").field_labels).matches(obj) is expected


def test_unsupported_field_is_400_with_the_server_message() -> None:
    with pytest.raises(ApiError) as info:
        parse_field_selector("spec.unschedulable=true", resolve("pods").field_labels)
    assert info.value.code == 400
    assert info.value.message == "field label not supported: spec.unschedulable"


def test_field_selector_without_operator_is_400() -> None:
    with pytest.raises(ApiError) as info:
        parse_field_selector("spec.nodeName", resolve("pods").field_labels)
    assert info.value.code == 400


def test_event_source_field_is_the_source_component() -> None:
    assert field_value({"source": {"component": "vgpu"}}, "source") == "vgpu"
