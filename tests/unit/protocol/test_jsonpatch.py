"""RFC 6902 patch creation and application, with the RFC's own examples and a round-trip property."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.protocol.jsonpatch import apply_patch, create_patch, escape_token, parse_pointer, pointer


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [
        (
            ("spec", "containers", 0, "resources", "limits", "nvidia.com/gpu"),
            "/spec/containers/0/resources/limits/nvidia.com~1gpu",
        ),
        (("a~b", "c/d", "~1"), "/a~0b/c~1d/~01"),
        ((), ""),
        (("",), "/"),
    ],
    ids=["resource-name", "tilde-and-slash", "root", "empty-key"],
)
def test_pointer_escaping(tokens: tuple[str | int, ...], expected: str) -> None:
    assert pointer(*tokens) == expected
    assert parse_pointer(expected) == [str(t) for t in tokens]


def test_escape_order_matters() -> None:
    assert escape_token("~/") == "~0~1"
    assert parse_pointer("/~01") == ["~1"]


@pytest.mark.parametrize("path", ["a/b", "/a~2", "/~"], ids=["no-slash", "bad-escape", "lone-tilde"])
def test_bad_pointers(path: str) -> None:
    with pytest.raises(DecodeError, match="json patch"):
        parse_pointer(path)


# RFC 6902 appendix A examples (subset), plus the shapes the webhook produces.
APPLY_CASES: list[tuple[str, Any, list[dict[str, Any]], Any]] = [
    ("A1-add-member", {"foo": "bar"}, [{"op": "add", "path": "/baz", "value": "qux"}], {"foo": "bar", "baz": "qux"}),
    (
        "A2-add-array-element",
        {"foo": ["bar", "baz"]},
        [{"op": "add", "path": "/foo/1", "value": "qux"}],
        {"foo": ["bar", "qux", "baz"]},
    ),
    ("A3-remove-member", {"baz": "qux", "foo": "bar"}, [{"op": "remove", "path": "/baz"}], {"foo": "bar"}),
    (
        "A4-remove-element",
        {"foo": ["bar", "qux", "baz"]},
        [{"op": "remove", "path": "/foo/1"}],
        {"foo": ["bar", "baz"]},
    ),
    (
        "A5-replace",
        {"baz": "qux", "foo": "bar"},
        [{"op": "replace", "path": "/baz", "value": "boo"}],
        {"baz": "boo", "foo": "bar"},
    ),
    (
        "A6-move",
        {"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}},
        [{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}],
        {"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}},
    ),
    (
        "A8-test-ok",
        {"baz": "qux", "foo": ["a", 2, "c"]},
        [{"op": "test", "path": "/baz", "value": "qux"}, {"op": "test", "path": "/foo/1", "value": 2}],
        {"baz": "qux", "foo": ["a", 2, "c"]},
    ),
    (
        "A10-add-nested",
        {"foo": "bar"},
        [{"op": "add", "path": "/child", "value": {"grandchild": {}}}],
        {"foo": "bar", "child": {"grandchild": {}}},
    ),
    (
        "A16-append",
        {"foo": ["bar"]},
        [{"op": "add", "path": "/foo/-", "value": ["abc", "def"]}],
        {"foo": ["bar", ["abc", "def"]]},
    ),
    ("copy", {"a": {"x": 1}}, [{"op": "copy", "from": "/a", "path": "/b"}], {"a": {"x": 1}, "b": {"x": 1}}),
    ("replace-root", {"a": 1}, [{"op": "replace", "path": "", "value": [1]}], [1]),
    (
        "escaped-resource",
        {"limits": {}},
        [{"op": "add", "path": "/limits/nvidia.com~1gpucores", "value": "100"}],
        {"limits": {"nvidia.com/gpucores": "100"}},
    ),
]


@pytest.mark.parametrize(("doc", "ops", "expected"), [c[1:] for c in APPLY_CASES], ids=[c[0] for c in APPLY_CASES])
def test_apply(doc: Any, ops: list[dict[str, Any]], expected: Any) -> None:
    before = repr(doc)
    assert apply_patch(doc, ops) == expected
    assert repr(doc) == before, "the input document must not be modified"


BAD_APPLY: list[tuple[str, Any, Any, str]] = [
    ("A9-test-fails", {"baz": "qux"}, [{"op": "test", "path": "/baz", "value": "bar"}], "test failed"),
    ("test-bool-vs-int", {"a": 1}, [{"op": "test", "path": "/a", "value": True}], "test failed"),
    (
        "A12-add-missing-parent",
        {"foo": "bar"},
        [{"op": "add", "path": "/baz/bat", "value": "qux"}],
        "path does not exist",
    ),
    ("remove-missing", {"a": 1}, [{"op": "remove", "path": "/b"}], "path does not exist"),
    ("replace-missing", {"a": 1}, [{"op": "replace", "path": "/b", "value": 2}], "path does not exist"),
    ("index-past-end", {"a": [1]}, [{"op": "add", "path": "/a/2", "value": 2}], "out of range"),
    ("remove-past-end", {"a": [1]}, [{"op": "remove", "path": "/a/1"}], "out of range"),
    ("leading-zero", {"a": [1, 2]}, [{"op": "remove", "path": "/a/01"}], "bad array index"),
    ("negative", {"a": [1, 2]}, [{"op": "remove", "path": "/a/-1"}], "bad array index"),
    ("A15-no-value", {"a": 1}, [{"op": "add", "path": "/b"}], "has no 'value'"),
    ("unknown-op", {"a": 1}, [{"op": "merge", "path": "/a"}], "unknown op"),
    ("no-path", {"a": 1}, [{"op": "remove"}], "no string 'path'"),
    ("op-not-object", {"a": 1}, ["remove"], "not an object"),
    ("not-a-list", {"a": 1}, "remove", "array of operations"),
    ("through-scalar", {"a": 1}, [{"op": "add", "path": "/a/b", "value": 1}], "not an object or array"),
    ("move-into-itself", {"a": {"b": 1}}, [{"op": "move", "from": "/a", "path": "/a/c"}], "into itself"),
]


@pytest.mark.parametrize(("doc", "ops", "message"), [c[1:] for c in BAD_APPLY], ids=[c[0] for c in BAD_APPLY])
def test_apply_rejects(doc: Any, ops: Any, message: str) -> None:
    with pytest.raises(DecodeError, match="json patch") as e:
        apply_patch(doc, ops)
    assert message in str(e.value)


CREATE_CASES: list[tuple[str, Any, Any, list[dict[str, Any]]]] = [
    ("equal", {"a": [1, {"b": None}]}, {"a": [1, {"b": None}]}, []),
    (
        "add-map-when-absent",
        {"resources": {}},
        {"resources": {"limits": {"nvidia.com/gpucores": "100"}}},
        [{"op": "add", "path": "/resources/limits", "value": {"nvidia.com/gpucores": "100"}}],
    ),
    (
        "add-into-existing-map",
        {"limits": {"nvidia.com/gpu": "1"}},
        {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "100"}},
        [{"op": "add", "path": "/limits/nvidia.com~1gpucores", "value": "100"}],
    ),
    (
        "append-env",
        {"env": [{"name": "A", "value": "1"}]},
        {"env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}, {"name": "C", "value": "3"}]},
        [
            {"op": "add", "path": "/env/1", "value": {"name": "B", "value": "2"}},
            {"op": "add", "path": "/env/2", "value": {"name": "C", "value": "3"}},
        ],
    ),
    (
        "replace-scalar",
        {"schedulerName": "default-scheduler"},
        {"schedulerName": "hami"},
        [{"op": "replace", "path": "/schedulerName", "value": "hami"}],
    ),
    (
        "null-to-value",
        {"runtimeClassName": None},
        {"runtimeClassName": "nvidia"},
        [{"op": "replace", "path": "/runtimeClassName", "value": "nvidia"}],
    ),
    ("bool-vs-int", {"a": True}, {"a": 1}, [{"op": "replace", "path": "/a", "value": 1}]),
    (
        "shrink-array",
        {"a": [1, 2, 3]},
        {"a": [1]},
        [{"op": "remove", "path": "/a/2"}, {"op": "remove", "path": "/a/1"}],
    ),
    ("remove-key", {"a": 1, "b": 2}, {"b": 2}, [{"op": "remove", "path": "/a"}]),
    ("type-change", {"a": {"x": 1}}, {"a": [1]}, [{"op": "replace", "path": "/a", "value": [1]}]),
]


@pytest.mark.parametrize(("a", "b", "ops"), [c[1:] for c in CREATE_CASES], ids=[c[0] for c in CREATE_CASES])
def test_create_patch(a: Any, b: Any, ops: list[dict[str, Any]]) -> None:
    assert create_patch(a, b) == ops
    assert apply_patch(a, ops) == b


def test_created_values_are_copies() -> None:
    value = {"x": [1]}
    ops = create_patch({}, {"v": value})
    value["x"].append(2)
    assert ops == [{"op": "add", "path": "/v", "value": {"x": [1]}}]


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | st.text(max_size=4),
    lambda c: (
        st.lists(c, max_size=4) | st.dictionaries(st.sampled_from(["a", "b", "a/b", "~", "~1", ""]), c, max_size=4)
    ),
    max_leaves=15,
)


@given(JSON, JSON)
def test_round_trip(a: Any, b: Any) -> None:
    # Compare as canonical JSON so that ``true`` and ``1`` are told apart.
    assert canonical(apply_patch(a, create_patch(a, b))) == canonical(b)
    assert create_patch(b, b) == []


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True)
