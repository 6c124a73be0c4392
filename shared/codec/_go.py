"""Go standard-library parsing and JSON rules the HAMi wire formats depend on (private to ``shared.codec``).

HAMi is written in Go, so its annotation formats inherit ``strconv`` and ``encoding/json`` behaviour: signs on
integers, fixed-width int32 ranges, ``ParseBool``'s six spellings, ``TrimSpace``'s whitespace set, JSON keys
matched case-insensitively, ``null`` leaving a field at its zero value, HTML-safe string escaping. Python's
``int()``, ``str.strip()`` and ``json`` differ on each of these, so the codecs go through here instead.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, NoReturn

from vgpu_scheduler.shared.errors import DecodeError

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
UINT32_MAX = 2**32 - 1
UINT64_MAX = 2**64 - 1

_INT_RE = re.compile(r"[+-]?[0-9]+\Z")

GO_SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680" + "".join(chr(c) for c in range(0x2000, 0x200B)) + "\u2028\u2029\u202f\u205f\u3000"
)
"""``unicode.IsSpace``: what Go's ``strings.TrimSpace`` removes (Python's ``strip()`` also removes \\x1c-\\x1f)."""

JSON_SPACE = " \t\n\r"
"""Whitespace allowed between JSON tokens (same set in Go and Python)."""

_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def fail(what: str, detail: str, part: str | None = None) -> NoReturn:
    """Raise the codec's one error type."""
    raise DecodeError(what, detail, part)


def trim_space(s: str) -> str:
    """Go ``strings.TrimSpace``."""
    return s.strip(GO_SPACE)


def go_upper(s: str) -> str:
    """Go ``strings.ToUpper``: simple (one-to-one) case mapping, so ``ß`` stays ``ß`` instead of becoming ``SS``."""
    return "".join(u if len(u := c.upper()) == 1 else c for c in s)


def parse_int(text: str, bits: int, what: str, part: str | None = None) -> int:
    """Go ``strconv.ParseInt(text, 10, bits)``: optional sign, ASCII digits only, range-checked."""
    if not _INT_RE.match(text):
        fail(what, f"not a base-10 integer: {text!r}", part if part is not None else text)
    try:
        value = int(text)
    except ValueError:  # more digits than Python converts; far outside any Go range anyway
        fail(what, "integer out of range", part if part is not None else text)
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    if not lo <= value <= hi:
        fail(what, f"integer out of int{bits} range: {text}", part if part is not None else text)
    return value


def parse_bool(text: str, what: str, part: str | None = None) -> bool:
    """Go ``strconv.ParseBool``: exactly ``1 t T TRUE true True`` / ``0 f F FALSE false False``."""
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    fail(what, f"not a Go boolean: {text!r}", part if part is not None else text)


# ------------------------------------------------------------------------------------------------
# JSON, the way Go's encoding/json reads and writes it
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JsonFraction:
    """A JSON number with a fraction or exponent. Go refuses it for integer fields, so it is kept apart."""

    text: str


class JsonObject(dict[str, Any]):
    """A decoded JSON object that also keeps every key/value pair in order, duplicates included.

    Go decodes duplicate keys one after the other (so ``{"a":1,"a":null}`` leaves ``a`` at 1); a plain dict
    keeps only the last value.
    """

    __slots__ = ("pairs",)

    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        super().__init__(pairs)
        self.pairs = pairs


def _pairs(obj: dict[str, Any]) -> list[tuple[str, Any]]:
    return obj.pairs if isinstance(obj, JsonObject) else list(obj.items())


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


def loads(value: str, what: str) -> Any:
    """Parse JSON text strictly (no NaN/Infinity; non-integer numbers kept as :class:`JsonFraction`)."""
    try:
        return json.loads(
            value, parse_float=JsonFraction, parse_constant=_reject_constant, object_pairs_hook=JsonObject
        )
    except RecursionError:
        fail(what, "JSON nested too deeply", value)
    except ValueError as e:
        fail(what, f"invalid JSON: {e}", value)


_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def _go_string(s: str) -> str:
    """Go replaces an unpaired ``\\uD800``-style escape with U+FFFD when decoding."""
    return _SURROGATE_RE.sub("\ufffd", s)


def _fold_key(key: str) -> str:
    """Go's case-insensitive JSON key match: ASCII case plus the two non-ASCII letters folding into ASCII."""
    return key.lower().replace("\u017f", "s").replace("\u212a", "k")


def struct_fields(obj: Any, fields: Collection[str], what: str, pointers: Collection[str] = ()) -> dict[str, Any]:
    """Map a JSON object onto Go struct field names like ``encoding/json`` does.

    Keys match a field exactly or else case-insensitively; unknown keys are ignored; a later duplicate wins;
    ``null`` leaves a value field untouched (zero value) but clears a pointer field (listed in ``pointers``).
    Returns only the fields that ended up set.
    """
    if not isinstance(obj, dict):
        fail(what, f"expected a JSON object, got {json_kind(obj)}")
    exact = set(fields)
    folded = {_fold_key(f): f for f in fields}
    out: dict[str, Any] = {}
    for key, val in _pairs(obj):
        name = key if key in exact else folded.get(_fold_key(key))
        if name is None:
            continue
        if val is None:
            if name in pointers:
                out.pop(name, None)
            continue
        out[name] = val
    return out


def json_kind(v: Any) -> str:
    """The JSON type name of a decoded value (``null``, ``boolean``, ``number``, ``string``, ``array``,
    ``object``), for error messages."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int | float | JsonFraction):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    return type(v).__name__


def json_int(v: Any, lo: int, hi: int, what: str) -> int:
    """A JSON number decoded into a Go integer field of range ``lo..hi``."""
    if isinstance(v, bool) or not isinstance(v, int | JsonFraction):
        fail(what, f"expected an integer, got {json_kind(v)}")
    if isinstance(v, JsonFraction):
        fail(what, f"not an integer: {v.text}", v.text)
    if not lo <= v <= hi:
        fail(what, f"integer out of range {lo}..{hi}: {v}", str(v))
    return v


def json_str(v: Any, what: str) -> str:
    if not isinstance(v, str):
        fail(what, f"expected a string, got {json_kind(v)}")
    return _go_string(v)


def json_bool(v: Any, what: str) -> bool:
    if not isinstance(v, bool):
        fail(what, f"expected a boolean, got {json_kind(v)}")
    return v


def json_list(v: Any, what: str) -> list[Any]:
    if not isinstance(v, list):
        fail(what, f"expected a JSON array, got {json_kind(v)}")
    return v


def json_map_pairs(v: Any, what: str) -> list[tuple[str, Any]]:
    """The key/value pairs of a JSON object decoded into a Go map (in order; a later duplicate wins)."""
    if not isinstance(v, dict):
        fail(what, f"expected a JSON object, got {json_kind(v)}")
    return [(_go_string(k), val) for k, val in _pairs(v)]


_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def dump_str(s: str) -> str:
    """A JSON string literal exactly as Go's ``json.Marshal`` writes it (HTML-safe escapes, U+2028/9 escaped)."""
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[ch])
        elif o < 0x20 or ch in "<>&" or o in (0x2028, 0x2029):
            out.append(f"\\u{o:04x}")
        elif 0xD800 <= o <= 0xDFFF:
            out.append("\\ufffd")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def dump_object(pairs: list[tuple[str, str]]) -> str:
    """A JSON object from already-encoded values, keys in the given order, no spaces (Go's compact form)."""
    return "{" + ",".join(f"{dump_str(k)}:{v}" for k, v in pairs) + "}"


def dump_array(items: list[str]) -> str:
    return "[" + ",".join(items) + "]"


def each(items: list[Any], what: str, decode: Callable[[Any, str], Any]) -> tuple[Any, ...]:
    """Decode every element of a JSON array, naming the index in errors."""
    return tuple(decode(item, f"{what}[{i}]") for i, item in enumerate(items))
