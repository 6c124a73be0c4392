"""Patch application: JSON merge patch (RFC 7386), JSON patch (RFC 6902), strategic merge as merge.

Strategic merge patch is applied as a merge patch: right for ``metadata`` and ``status`` maps, which is all our
services send; lists are replaced whole instead of merged by key, and ``$patch`` directives are refused.
"""

from __future__ import annotations

import copy
from typing import Any

from vgpu_scheduler.shared.emulator.status import ApiError, bad_request

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: maps merge recursively, ``null`` deletes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result: dict[str, Any] = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _has_directive(patch: Any) -> bool:
    if isinstance(patch, dict):
        return any(k.startswith("$") or _has_directive(v) for k, v in patch.items())
    if isinstance(patch, list):
        return any(_has_directive(v) for v in patch)
    return False


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise bad_request(f"the json patch path {path!r} does not start with '/'")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _index(container: list[Any], token: str, *, adding: bool) -> int:
    if adding and token == "-":
        return len(container)
    if not token.isdigit():
        raise ApiError(422, f"the json patch index {token!r} is not a number")
    idx = int(token)
    if idx > len(container) or (not adding and idx == len(container)):
        raise ApiError(422, f"the json patch index {idx} is out of range")
    return idx


def _parent(doc: Any, tokens: list[str]) -> Any:
    cur = doc
    for token in tokens[:-1]:
        if isinstance(cur, dict) and token in cur:
            cur = cur[token]
        elif isinstance(cur, list):
            cur = cur[_index(cur, token, adding=False)]
        else:
            raise ApiError(422, f"the json patch path to {token!r} does not exist")
    return cur


def _locate(doc: Any, path: str) -> tuple[Any, str] | None:
    """The container holding ``path``'s target and the target's token in it; None when ``path`` is the whole
    document."""
    tokens = _pointer(path)
    return None if not tokens else (_parent(doc, tokens), tokens[-1])


def _get(doc: Any, path: str) -> Any:
    where = _locate(doc, path)
    if where is None:
        return doc
    parent, last = where
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, adding=False)]
    raise ApiError(422, f"the json patch path {path!r} does not exist")


def _missing(doc: Any, path: str) -> bool:
    """True when ``path`` names an absent member of an existing object."""
    tokens = _pointer(path)
    if not tokens:
        return False
    try:
        parent = _parent(doc, tokens)
    except ApiError:
        return False
    return isinstance(parent, dict) and tokens[-1] not in parent


def _add(doc: Any, path: str, value: Any) -> Any:
    where = _locate(doc, path)
    if where is None:
        return value
    parent, last = where
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, adding=True), value)
    else:
        raise ApiError(422, f"the json patch path {path!r} does not exist")
    return doc


def _remove(doc: Any, path: str) -> Any:
    where = _locate(doc, path)
    if where is None:
        raise ApiError(422, "the json patch cannot remove the whole document")
    parent, last = where
    if isinstance(parent, dict) and last in parent:
        del parent[last]
    elif isinstance(parent, list):
        del parent[_index(parent, last, adding=False)]
    else:
        raise ApiError(422, f"the json patch path {path!r} does not exist")
    return doc


def json_patch(target: Any, ops: Any) -> Any:
    """RFC 6902: ``add``, ``remove``, ``replace``, ``move``, ``copy``, ``test``, applied to a copy of ``target``."""
    if not isinstance(ops, list):
        raise bad_request("a json patch must be a JSON array of operations")
    doc = copy.deepcopy(target)
    for op in ops:
        if not isinstance(op, dict) or not isinstance(op.get("op"), str) or not isinstance(op.get("path"), str):
            raise bad_request(f"malformed json patch operation: {op!r}")
        kind, path = op["op"], op["path"]
        if kind in ("add", "replace", "test") and "value" not in op:
            raise bad_request(f"json patch operation {kind!r} needs a value")
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op["value"]))
        elif kind == "remove":
            doc = _remove(doc, path)
        elif kind == "replace":
            _get(doc, path)
            doc = _add(_remove(doc, path), path, copy.deepcopy(op["value"]))
        elif kind in ("move", "copy"):
            source = op.get("from")
            if not isinstance(source, str):
                raise bad_request(f"json patch operation {kind!r} needs 'from'")
            value = copy.deepcopy(_get(doc, source))
            if kind == "move":
                doc = _remove(doc, source)
            doc = _add(doc, path, value)
        elif kind == "test":
            if op["value"] is None and _missing(doc, path):
                continue  # as kube-apiserver: testing for null passes on an absent member (the missing-key idiom)
            if _get(doc, path) != op["value"]:
                raise ApiError(422, f"the json patch test at {path!r} failed")
        else:
            raise bad_request(f"unknown json patch operation {kind!r}")
    return doc


def apply_patch(content_type: str, target: dict[str, Any], patch: Any) -> Any:
    """Apply a patch body of the given media type to ``target`` (never modified); the result is a new object."""
    media = content_type.split(";", 1)[0].strip().lower()
    if media == MERGE:
        return merge_patch(target, patch)
    if media == STRATEGIC:
        if _has_directive(patch):
            raise ApiError(415, "the emulator applies strategic merge patches as merge patches: $ directives refused")
        return merge_patch(target, patch)
    if media == JSON_PATCH:
        return json_patch(target, patch)
    raise ApiError(
        415,
        f"the body of the request was in an unknown format - accepted media types include: {MERGE}, "
        f"{STRATEGIC}, {JSON_PATCH}",
    )
