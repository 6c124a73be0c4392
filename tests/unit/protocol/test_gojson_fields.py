"""gojson.optional_object / optional_string: absent or null is Go's zero value; a wrong type is one DecodeError."""

from __future__ import annotations

from typing import Any

import pytest

from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.protocol import gojson


@pytest.mark.parametrize(
    ("parent", "want"),
    [
        pytest.param({}, None, id="absent"),
        pytest.param({"spec": None}, None, id="null"),
        pytest.param({"spec": {}}, {}, id="empty-object"),
        pytest.param({"spec": {"a": 1}}, {"a": 1}, id="object"),
    ],
)
def test_optional_object(parent: dict[str, Any], want: dict[str, Any] | None) -> None:
    assert gojson.optional_object(parent, "spec", "pod", "spec") == want


@pytest.mark.parametrize(
    ("parent", "want"),
    [
        pytest.param({}, "", id="absent"),
        pytest.param({"name": None}, "", id="null"),
        pytest.param({"name": "x"}, "x", id="string"),
    ],
)
def test_optional_string(parent: dict[str, Any], want: str) -> None:
    assert gojson.optional_string(parent, "name", "pod", "metadata.name") == want


@pytest.mark.parametrize(
    ("value", "type_name"),
    [
        pytest.param([], "array", id="array"),
        pytest.param(1, "number", id="number"),
        pytest.param(True, "boolean", id="bool"),
    ],
)
def test_wrong_types_name_the_field_and_the_type(value: object, type_name: str) -> None:
    with pytest.raises(DecodeError) as obj:
        gojson.optional_object({"spec": value}, "spec", "pod", "spec")
    assert (obj.value.what, obj.value.detail) == ("pod", f"spec must be an object, got {type_name}")
    with pytest.raises(DecodeError) as text:
        gojson.optional_string({"name": value}, "name", "admission review", "request.name")
    assert (text.value.what, text.value.detail) == (
        "admission review",
        f"request.name must be a string, got {type_name}",
    )
