"""List pages: the ``limit`` and ``continue`` query parameters of a list, as the API server answers them.

A list asked with ``limit=N`` gets at most N items and, when more follow, ``metadata.continue`` (a token) and
``metadata.remainingItemCount``; the next page is asked with the same query plus ``continue=<token>``. Items come in
key order (namespace, name) and a page continues after the last key of the one before. One difference is kept on
purpose: the API server reads every page at the first page's resourceVersion (a consistent list, 410 once that
version is compacted), the emulator reads each page as things stand then, so objects created or deleted between
pages may appear or be missed, which a caller must tolerate anyway once the list is read.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from typing import Any

from vgpu_scheduler.shared.emulator.status import bad_request
from vgpu_scheduler.shared.emulator.store import Key, Obj


def _token(key: Key) -> str:
    raw = json.dumps({"start": list(key)}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode()


def _start_after(token: str) -> Key:
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        ns, name = data["start"]
        return str(ns), str(name)
    except (binascii.Error, ValueError, KeyError, TypeError) as e:
        raise bad_request(f"continue key is not valid: {e}") from None


def _key(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def page(items: Sequence[Obj], rv: int, query: Mapping[str, str]) -> tuple[list[Obj], Obj]:
    """The page of ``items`` (every match, in key order, at resourceVersion ``rv``) that ``query`` asks for, and
    the list's ``metadata``."""
    raw_limit = query.get("limit") or "0"
    try:
        limit = int(raw_limit)
    except ValueError:
        raise bad_request(f"invalid limit {raw_limit!r}") from None
    token = query.get("continue") or ""
    if token:
        after = _start_after(token)
        items = [o for o in items if _key(o) > after]
    meta: Obj = {"resourceVersion": str(rv)}
    if limit <= 0 or len(items) <= limit:
        return list(items), meta
    out = list(items[:limit])
    meta["continue"] = _token(_key(out[-1]))
    meta["remainingItemCount"] = len(items) - limit
    return out, meta
