"""RFC 6902 JSON Patch: compute a patch between two JSON documents and apply one. Pure: no I/O.

The webhook answers with ``create_patch(original_pod, mutated_pod)`` (as controller-runtime's
``PatchResponseFromRaw`` does), and ``simulate`` applies the same operations to workload pods with
:func:`apply_patch` (difference 16). Path tokens are escaped per RFC 6901: ``~`` → ``~0``, ``/`` → ``~1``,
so ``limits/nvidia.com/gpu`` becomes ``.../limits/nvidia.com~1gpu``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any, Final

from vgpu_scheduler.shared.errors import DecodeError

_WHAT: Final = "json patch"
JsonPatch = list[dict[str, Any]]


def escape_token(token: str) -> str:
    """Escape one reference token for a JSON pointer (RFC 6901 §3)."""
    return token.replace("~", "~0").replace("/", "~1")


def pointer(*tokens: str | int) -> str:
    """Build a JSON pointer from raw tokens, e.g. ``pointer("spec", "containers", 0)`` → ``/spec/containers/0``."""
    return "".join("/" + escape_token(str(t)) for t in tokens)


def parse_pointer(path: str) -> list[str]:
    """Split a JSON pointer into unescaped tokens; ``""`` is the whole document."""
    if path == "":
        return []
    if not path.startswith("/"):
        raise DecodeError(_WHAT, "pointer must be empty or start with '/'", path)
    tokens = []
    for raw in path[1:].split("/"):
        rest = raw.replace("~0", "").replace("~1", "")
        if "~" in rest:
            raise DecodeError(_WHAT, "invalid '~' escape in pointer", path)
        tokens.append(raw.replace("~1", "/").replace("~0", "~"))
    return tokens


# --------------------------------------------------------------------------------------------
# Creating a patch
# --------------------------------------------------------------------------------------------


def create_patch(original: Any, mutated: Any) -> JsonPatch:
    """Operations that turn ``original`` into ``mutated``: ``add``/``remove``/``replace`` only.

    Objects are compared key by key; arrays element by element, with trailing elements added (in order)
    or removed (from the end). A change of JSON type is one ``replace``.
    """
    ops: JsonPatch = []
    _diff(original, mutated, [], ops)
    return ops


def _same(a: Any, b: Any) -> bool:
    """JSON equality: ``true`` is not ``1``, ``1`` and ``1.0`` are the same number."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict | list) or isinstance(b, dict | list):
        return False
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return type(a) is type(b) and a == b


def _diff(a: Any, b: Any, path: list[str | int], ops: JsonPatch) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in a:
            if key not in b:
                ops.append({"op": "remove", "path": pointer(*path, key)})
        for key, value in b.items():
            if key in a:
                _diff(a[key], value, [*path, key], ops)
            else:
                ops.append({"op": "add", "path": pointer(*path, key), "value": copy.deepcopy(value)})
    elif isinstance(a, list) and isinstance(b, list):
        common = min(len(a), len(b))
        for i in range(common):
            _diff(a[i], b[i], [*path, i], ops)
        for i in range(common, len(b)):
            ops.append({"op": "add", "path": pointer(*path, i), "value": copy.deepcopy(b[i])})
        for i in reversed(range(common, len(a))):
            ops.append({"op": "remove", "path": pointer(*path, i)})
    elif not _same(a, b):
        ops.append({"op": "replace", "path": pointer(*path), "value": copy.deepcopy(b)})


# --------------------------------------------------------------------------------------------
# Applying a patch
# --------------------------------------------------------------------------------------------


def apply_patch(document: Any, ops: Sequence[Mapping[str, Any]]) -> Any:
    """Apply RFC 6902 operations to a deep copy of ``document`` and return it; the input is not modified.

    Supports ``add``, ``remove``, ``replace``, ``move``, ``copy`` and ``test``. Any operation that does not
    apply (missing target, bad index, failed test, malformed operation) raises :class:`DecodeError`.
    """
    if not isinstance(ops, list | tuple):
        raise DecodeError(_WHAT, "a patch must be an array of operations")
    doc = copy.deepcopy(document)
    for i, op in enumerate(ops):
        doc = _apply_one(doc, op, i)
    return doc


def _apply_one(doc: Any, op: Mapping[str, Any], i: int) -> Any:
    if not isinstance(op, Mapping):
        raise DecodeError(_WHAT, f"operation {i} is not an object")
    kind = op.get("op")
    path = op.get("path")
    if not isinstance(path, str):
        raise DecodeError(_WHAT, f"operation {i} has no string 'path'")
    if kind in ("add", "replace", "test") and "value" not in op:
        raise DecodeError(_WHAT, f"operation {i} ({kind}) has no 'value'", path)
    if kind == "add":
        return _add(doc, parse_pointer(path), copy.deepcopy(op["value"]), path)
    if kind == "remove":
        doc, _ = _remove(doc, parse_pointer(path), path)
        return doc
    if kind == "replace":
        doc, _ = _remove(doc, parse_pointer(path), path)
        return _add(doc, parse_pointer(path), copy.deepcopy(op["value"]), path)
    if kind == "test":
        if not _same(_get(doc, parse_pointer(path), path), op["value"]):
            raise DecodeError(_WHAT, f"operation {i}: test failed", path)
        return doc
    if kind in ("move", "copy"):
        source = op.get("from")
        if not isinstance(source, str):
            raise DecodeError(_WHAT, f"operation {i} ({kind}) has no string 'from'", path)
        if kind == "move":
            if path.startswith(source + "/"):
                raise DecodeError(_WHAT, f"operation {i}: cannot move a value into itself", path)
            doc, value = _remove(doc, parse_pointer(source), source)
        else:
            value = copy.deepcopy(_get(doc, parse_pointer(source), source))
        return _add(doc, parse_pointer(path), value, path)
    raise DecodeError(_WHAT, f"operation {i} has unknown op {kind!r}", path)


def _index(container: list[Any], token: str, path: str, *, allow_end: bool) -> int:
    if allow_end and token == "-":
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token[0] == "0") or not token.isascii():
        raise DecodeError(_WHAT, f"bad array index {token!r}", path)
    index = int(token)
    limit = len(container) if allow_end else len(container) - 1
    if index > limit:
        raise DecodeError(_WHAT, f"array index {index} out of range (length {len(container)})", path)
    return index


def _get(doc: Any, tokens: list[str], path: str) -> Any:
    node = doc
    for token in tokens:
        if isinstance(node, dict):
            if token not in node:
                raise DecodeError(_WHAT, "path does not exist", path)
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(node, token, path, allow_end=False)]
        else:
            raise DecodeError(_WHAT, "path goes through a scalar", path)
    return node


def _add(doc: Any, tokens: list[str], value: Any, path: str) -> Any:
    if not tokens:
        return value
    parent = _get(doc, tokens[:-1], path)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, path, allow_end=True), value)
    else:
        raise DecodeError(_WHAT, "parent of the target is not an object or array", path)
    return doc


def _remove(doc: Any, tokens: list[str], path: str) -> tuple[Any, Any]:
    if not tokens:
        return None, doc
    parent = _get(doc, tokens[:-1], path)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise DecodeError(_WHAT, "path does not exist", path)
        return doc, parent.pop(last)
    if isinstance(parent, list):
        return doc, parent.pop(_index(parent, last, path, allow_end=False))
    raise DecodeError(_WHAT, "parent of the target is not an object or array", path)
