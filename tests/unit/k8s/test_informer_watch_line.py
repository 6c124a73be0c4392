"""One watch line decoded as the stdlib would: orjson first, the stdlib for what orjson refuses."""

from __future__ import annotations

import json

import pytest

from vgpu_scheduler.shared.k8s.informer import _loads


@pytest.mark.parametrize(
    "line",
    [
        b'{"type":"MODIFIED","object":{"metadata":{"name":"p","annotations":{"a":"\\u00e9\\ud83d\\ude00"}}}}\n',
        b'{"type":"ADDED","object":{"metadata":{"annotations":{"a":"\\ud800"}}}}',  # orjson refuses it
        b'{"type":"ADDED","object":{"spec":{"max":9223372036854775807,"min":-9223372036854775808}}}',  # int64
        b'{"type":"ADDED","object":{"x":1.5e300,"y":-0,"z":[true,false,null]}}',
    ],
)
def test_a_line_reads_as_the_stdlib_reads_it(line: bytes) -> None:
    assert _loads(line) == json.loads(line)


@pytest.mark.parametrize("line", [b'{"type":"ADDED","object":{', b"", b"\xff"])
def test_a_torn_line_is_a_value_error(line: bytes) -> None:
    with pytest.raises(ValueError):
        _loads(line)
