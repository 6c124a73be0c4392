"""Patch application in the emulator: RFC 7386 merge patch, RFC 6902 JSON patch, strategic merge as merge."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vgpu_scheduler.shared.emulator.patch import JSON_PATCH, MERGE, STRATEGIC, apply_patch, json_patch, merge_patch
from vgpu_scheduler.shared.emulator.status import ApiError

BASE: dict[str, Any] = {"metadata": {"name": "n", "annotations": {"a": "1", "b": "2"}}, "spec": {"x": [1, 2]}}

MERGE_CASES = [
    ("set-key", {"metadata": {"annotations": {"c": "3"}}}, {"a": "1", "b": "2", "c": "3"}),
    ("replace-key", {"metadata": {"annotations": {"a": "9"}}}, {"a": "9", "b": "2"}),
    ("null-deletes", {"metadata": {"annotations": {"a": None}}}, {"b": "2"}),
    ("null-missing-is-noop", {"metadata": {"annotations": {"zz": None}}}, {"a": "1", "b": "2"}),
]


@pytest.mark.parametrize(("patch", "annotations"), [c[1:] for c in MERGE_CASES], ids=[c[0] for c in MERGE_CASES])
def test_merge_patch_annotations(patch: dict[str, Any], annotations: dict[str, str]) -> None:
    before = copy.deepcopy(BASE)
    out = merge_patch(BASE, patch)
    assert out["metadata"]["annotations"] == annotations
    assert before == BASE  # the target is never modified


def test_merge_patch_replaces_lists_and_non_objects() -> None:
    assert merge_patch(BASE, {"spec": {"x": [3]}})["spec"]["x"] == [3]
    assert merge_patch(BASE, {"spec": "s"})["spec"] == "s"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=3),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=3), children, max_size=3),
    max_leaves=10,
)


@given(
    st.dictionaries(st.text(max_size=3), json_values, max_size=4),
    st.dictionaries(st.text(max_size=3), json_values, max_size=4),
)
def test_merge_patch_is_idempotent(target: dict[str, Any], patch: dict[str, Any]) -> None:
    once = merge_patch(target, patch)
    assert merge_patch(once, patch) == once


def test_strategic_merge_applies_as_merge_and_refuses_directives() -> None:
    assert apply_patch(STRATEGIC, BASE, {"metadata": {"labels": {"k": "v"}}})["metadata"]["labels"] == {"k": "v"}
    with pytest.raises(ApiError) as info:
        apply_patch(STRATEGIC, BASE, {"spec": {"$patch": "replace"}})
    assert info.value.code == 415


def test_unknown_patch_type_is_415() -> None:
    with pytest.raises(ApiError) as info:
        apply_patch("application/apply-patch+yaml", BASE, {})
    assert info.value.code == 415


JSON_PATCH_CASES = [
    ("add-key", [{"op": "add", "path": "/metadata/labels", "value": {"k": "v"}}], ["metadata", "labels"], {"k": "v"}),
    (
        "escaped-key",
        [{"op": "add", "path": "/metadata/annotations/hami.io~1x", "value": "1"}],
        ["metadata", "annotations", "hami.io/x"],
        "1",
    ),
    ("append", [{"op": "add", "path": "/spec/x/-", "value": 3}], ["spec", "x"], [1, 2, 3]),
    ("insert", [{"op": "add", "path": "/spec/x/0", "value": 0}], ["spec", "x"], [0, 1, 2]),
    ("remove", [{"op": "remove", "path": "/spec/x/1"}], ["spec", "x"], [1]),
    (
        "replace",
        [{"op": "replace", "path": "/metadata/annotations/a", "value": "z"}],
        ["metadata", "annotations", "a"],
        "z",
    ),
    (
        "move",
        [{"op": "move", "from": "/metadata/annotations/a", "path": "/metadata/annotations/c"}],
        ["metadata", "annotations"],
        {"b": "2", "c": "1"},
    ),
    ("copy", [{"op": "copy", "from": "/spec/x", "path": "/spec/y"}], ["spec", "y"], [1, 2]),
    ("test-ok", [{"op": "test", "path": "/spec/x/0", "value": 1}], ["spec", "x"], [1, 2]),
]


@pytest.mark.parametrize(
    ("ops", "path", "expected"), [c[1:] for c in JSON_PATCH_CASES], ids=[c[0] for c in JSON_PATCH_CASES]
)
def test_json_patch(ops: list[Any], path: list[str], expected: Any) -> None:
    out = apply_patch(JSON_PATCH, BASE, ops)
    for part in path:
        out = out[part]
    assert out == expected


@pytest.mark.parametrize(
    "ops",
    [
        [{"op": "test", "path": "/spec/x/0", "value": 5}],
        [{"op": "remove", "path": "/nope"}],
        [{"op": "replace", "path": "/spec/x/7", "value": 1}],
        [{"op": "add", "path": "/spec/x/notanumber", "value": 1}],
    ],
    ids=["test-fails", "remove-missing", "replace-out-of-range", "bad-index"],
)
def test_json_patch_failures_are_422(ops: list[Any]) -> None:
    with pytest.raises(ApiError) as info:
        json_patch(BASE, ops)
    assert info.value.code == 422


@pytest.mark.parametrize(
    "ops",
    [{"op": "add"}, [{"op": "frobnicate", "path": "/a"}], [{"path": "/a"}]],
    ids=["not-a-list", "unknown-op", "no-op"],
)
def test_malformed_json_patch_is_400(ops: Any) -> None:
    with pytest.raises(ApiError) as info:
        json_patch(BASE, ops)
    assert info.value.code == 400


def test_merge_media_type_with_charset() -> None:
    assert apply_patch(MERGE + "; charset=utf-8", BASE, {"spec": None}) == {"metadata": BASE["metadata"]}
