"""JSON the way Go's ``encoding/json`` reads and writes it, for the wire shapes kube-scheduler exchanges.

Pure: no I/O. Three parts:

* :func:`loads` decodes a request body strictly (UTF-8 only, no ``NaN``/``Infinity``, integers within int64,
  finite floats, bounded nesting) and remembers each object's key/value pairs in document order, so that
  :func:`fold_get` can match struct fields case-insensitively with Go's "last matching key wins" rule.
* :func:`fast_loads` (orjson) decodes the common ``/filter`` body about twice as fast; its caller checks the
  result with :func:`plain_values` and falls back to :func:`loads`.
* :func:`dumps` encodes compactly with Go's escaping of ``<``, ``>``, ``&``, U+2028 and U+2029.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

import orjson

from vgpu_scheduler.shared.codec._go import json_kind
from vgpu_scheduler.shared.errors import DecodeError

INT64_MIN: Final = -(1 << 63)
INT64_MAX: Final = (1 << 63) - 1
_MAX_INT_DIGITS: Final = 19

_GO_ESCAPES: Final = (
    ("<", "\\u003c"),
    (">", "\\u003e"),
    ("&", "\\u0026"),
    ("\u2028", "\\u2028"),
    ("\u2029", "\\u2029"),
)

_SURROGATE_ESCAPE: Final = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATES: Final = re.compile(
    r"\\(?:u([dD][89abAB][0-9a-fA-F]{2})\\u([dD][c-fC-F][0-9a-fA-F]{2})|u([dD][89a-fA-F][0-9a-fA-F]{2})|.)", re.S
)
"""Every backslash escape in order (so an escaped backslash is never mistaken for the start of one): a valid
surrogate pair, a lone surrogate, or anything else."""


def _go_surrogate(m: re.Match[str]) -> str:
    """Go decodes a lone surrogate escape as U+FFFD (Python would keep an unencodable lone surrogate)."""
    return "\\ufffd" if m.group(3) else m.group(0)


MISSING: Final[Any] = object()
"""Returned by :func:`fold_get` when no key matches."""


class Document:
    """A decoded JSON value plus, for every object in it, its key/value pairs in document order."""

    __slots__ = ("_pairs", "value")

    def __init__(self, value: Any, pairs: dict[int, list[tuple[str, Any]]]) -> None:
        self.value = value
        self._pairs = pairs

    def fold_get(self, obj: Mapping[str, Any], name: str) -> Any:
        """The value of field ``name`` in ``obj`` matched as Go does: any case, the last matching key wins."""
        folded = name.casefold()
        pairs = self._pairs.get(id(obj))
        items = pairs if pairs is not None else list(obj.items())
        found: Any = MISSING
        for key, value in items:
            if key.casefold() == folded:
                found = value
        return found


def fold_get(obj: Mapping[str, Any], name: str) -> Any:
    """:meth:`Document.fold_get` for a plain mapping (document order of first appearance)."""
    return Document(obj, {}).fold_get(obj, name)


def loads(body: bytes | str, what: str) -> Document:
    """Decode ``body`` strictly; any malformation raises :class:`DecodeError` naming ``what``."""
    if isinstance(body, bytes | bytearray | memoryview):
        try:
            text = bytes(body).decode("utf-8")
        except UnicodeDecodeError as e:
            raise DecodeError(what, f"body is not valid UTF-8 (byte {e.start})") from e
    else:
        text = body
    if text.startswith("\ufeff"):
        raise DecodeError(what, "body starts with a byte-order mark")
    if not text.strip():
        raise DecodeError(what, "empty body")
    if "\\" in text and "\\u" in text and _SURROGATE_ESCAPE.search(text):  # a 1-char search first: memchr
        text = _SURROGATES.sub(_go_surrogate, text)
    pairs: dict[int, list[tuple[str, Any]]] = {}

    def on_object(items: list[tuple[str, Any]]) -> dict[str, Any]:
        obj = dict(items)
        pairs[id(obj)] = items
        return obj

    def on_int(s: str) -> int:
        if len(s.lstrip("-")) > _MAX_INT_DIGITS:
            raise DecodeError(what, "integer out of int64 range", s)
        v = int(s)
        if not INT64_MIN <= v <= INT64_MAX:
            raise DecodeError(what, "integer out of int64 range", s)
        return v

    def on_float(s: str) -> float:
        v = float(s)
        if v in (float("inf"), float("-inf")):
            raise DecodeError(what, "number out of float64 range", s)
        return v

    def on_constant(s: str) -> Any:
        raise DecodeError(what, "not JSON: non-standard constant", s)

    try:
        value = json.loads(
            text,
            object_pairs_hook=on_object,
            parse_int=on_int,
            parse_float=on_float,
            parse_constant=on_constant,
        )
    except DecodeError:
        raise
    except json.JSONDecodeError as e:
        raise DecodeError(what, f"not JSON: {e.msg} at line {e.lineno} column {e.colno}") from e
    except RecursionError as e:
        raise DecodeError(what, "not JSON: nesting too deep") from e
    except ValueError as e:
        raise DecodeError(what, f"not JSON: {e}") from e
    return Document(value, pairs)


FastDecodeError: Final = orjson.JSONDecodeError
"""What :func:`fast_loads` raises for a body it does not decode."""

fast_loads: Final[Callable[[bytes], Any]] = orjson.loads
"""orjson's decoder: strict RFC 8259 (UTF-8 only, no ``NaN``, no lone surrogate escape), and about twice as fast
as the stdlib's on a body of 1,000 short strings. It does not follow :func:`loads` everywhere: integers up to
uint64 stay integers and larger ones become floats, nesting goes to 1024, and there is no key order. A caller
checks what it decoded with :func:`plain_values` and takes :func:`loads` otherwise."""

FAST_DEPTH: Final = 64
"""How deep :func:`plain_values` accepts nesting: well within what :func:`loads` takes (its parser recurses)."""


def loads_object(body: bytes | str, what: str) -> tuple[Document, dict[str, Any]]:
    """:func:`loads` of a body that must be a JSON object: the document and that object."""
    doc = loads(body, what)
    top = doc.value
    if not isinstance(top, dict):
        raise DecodeError(what, f"expected a JSON object, got {type_name(top)}")
    return doc, top


def plain_values(values: Iterable[Any]) -> bool:
    """Whether :func:`fast_loads` decoded ``values`` as :func:`loads` would have: no float (orjson returns one for an
    integer literal past uint64), every integer within int64 and nothing nested deeper than :data:`FAST_DEPTH`."""
    stack: list[tuple[Iterable[Any], int]] = [(values, 0)]
    while stack:
        items, depth = stack.pop()
        for v in items:
            t = type(v)
            if t is str or v is None or t is bool:
                continue
            if t is dict or t is list:
                if depth >= FAST_DEPTH:
                    return False
                stack.append((v.values() if t is dict else v, depth + 1))
            elif t is not int or not INT64_MIN <= v <= INT64_MAX:
                return False
    return True


_GO_ESCAPES_UTF8: Final = tuple((raw.encode(), escaped.encode()) for raw, escaped in _GO_ESCAPES)


def dumps(value: Any) -> bytes:
    """Encode compactly like Go's ``json.Marshal`` (HTML-safe escapes, raw UTF-8, no NaN).

    orjson writes the same compact form several times faster (a 1,000-node ``/filter`` answer is ~14 KiB); what it
    refuses (a lone surrogate, an integer beyond 64 bits, a type it does not know) takes the standard library's
    path. orjson would write a NaN or an infinity as ``null`` where Go refuses them: no value we encode holds one
    (decoded bodies are finite, :func:`loads`), and the slow path keeps refusing them for anything it encodes."""
    try:
        out = orjson.dumps(value)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return _dumps_slow(value)
    for raw, escaped in _GO_ESCAPES_UTF8:
        if raw in out:
            out = out.replace(raw, escaped)
    return out


def _dumps_slow(value: Any) -> bytes:
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    for raw, escaped in _GO_ESCAPES:
        text = text.replace(raw, escaped)
    # A lone surrogate (only reachable through a "\udXXX" escape in some input) is written back as that escape.
    return text.encode("utf-8", "backslashreplace")


type_name = json_kind
"""The JSON type name of a decoded value, for error messages."""


def optional_object(parent: Mapping[str, Any], key: str, what: str, where: str) -> dict[str, Any] | None:
    """``parent[key]`` as a JSON object; None when absent or null (Go leaves the field zero). Any other type is a
    ``DecodeError(what, "<where> must be an object, got <type>")``."""
    value = parent.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise DecodeError(what, f"{where} must be an object, got {type_name(value)}")
    return value


def optional_string(parent: Mapping[str, Any], key: str, what: str, where: str) -> str:
    """``parent[key]`` as a string; "" when absent or null (Go's zero value). Any other type is a
    ``DecodeError(what, "<where> must be a string, got <type>")``."""
    value = parent.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise DecodeError(what, f"{where} must be a string, got {type_name(value)}")
    return value
