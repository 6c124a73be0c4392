"""``gojson.dumps``: the orjson path writes exactly what the standard library path writes (Go's escapes included),
and what orjson refuses still encodes."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from vgpu_scheduler.shared.protocol import gojson

_TEXT = st.text(alphabet=st.sampled_from(["a", "é", "<", ">", "&", "\u2028", "\u2029", '"', "\\", "\n", "\x01", "😀"]))
_SCALARS = st.none() | st.booleans() | st.integers(min_value=gojson.INT64_MIN, max_value=gojson.INT64_MAX) | _TEXT
_VALUES: st.SearchStrategy[Any] = st.recursive(
    _SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4), max_leaves=20
)


@given(_VALUES)
def test_the_fast_path_writes_the_same_bytes_as_the_standard_library(value: Any) -> None:
    assert gojson.dumps(value) == gojson._dumps_slow(value)


def test_go_escapes_and_raw_utf8() -> None:
    assert gojson.dumps({"m": "<a&b>\u2028\u2029é"}) == '{"m":"\\u003ca\\u0026b\\u003e\\u2028\\u2029é"}'.encode()


def test_what_orjson_refuses_takes_the_slow_path() -> None:
    assert gojson.dumps({"s": "\udc80"}) == b'{"s":"\\udc80"}'  # a lone surrogate, written back as its escape
    assert gojson.dumps({1: 2**70}) == json.dumps({"1": 2**70}, separators=(",", ":")).encode()
