"""The emulator's list pages (``limit``/``continue``): cut in key order, continued after the last key, the
count of what remains, and 400 for a limit or token it cannot read."""

from __future__ import annotations

import pytest

from vgpu_scheduler.shared.emulator.paging import page
from vgpu_scheduler.shared.emulator.status import ApiError
from vgpu_scheduler.shared.emulator.store import Obj


def _objs(*keys: tuple[str, str]) -> list[Obj]:
    return [{"metadata": {"namespace": ns, "name": name}} for ns, name in keys]


ITEMS = _objs(("a", "x"), ("a", "y"), ("b", "x"), ("b", "z"), ("c", "w"))


def _names(objs: list[Obj]) -> list[str]:
    return [f"{o['metadata']['namespace']}/{o['metadata']['name']}" for o in objs]


def test_without_a_limit_every_item_comes_in_one_answer() -> None:
    items, meta = page(ITEMS, 42, {})
    assert _names(items) == ["a/x", "a/y", "b/x", "b/z", "c/w"]
    assert meta == {"resourceVersion": "42"}
    assert page(ITEMS, 42, {"limit": "5"})[1] == {"resourceVersion": "42"}  # nothing left: no token


def test_pages_follow_one_another_to_the_end() -> None:
    first, meta = page(ITEMS, 42, {"limit": "2"})
    assert _names(first) == ["a/x", "a/y"] and meta["remainingItemCount"] == 3
    second, meta = page(ITEMS, 42, {"limit": "2", "continue": meta["continue"]})
    assert _names(second) == ["b/x", "b/z"] and meta["remainingItemCount"] == 1
    last, meta = page(ITEMS, 42, {"limit": "2", "continue": meta["continue"]})
    assert _names(last) == ["c/w"] and "continue" not in meta


def test_a_page_continues_after_the_last_key_even_when_it_is_gone() -> None:
    _, meta = page(ITEMS, 42, {"limit": "2"})
    rest = [o for o in ITEMS if o["metadata"]["name"] != "y"]  # a/y deleted between the pages
    items, _ = page(rest, 43, {"limit": "2", "continue": meta["continue"]})
    assert _names(items) == ["b/x", "b/z"]


@pytest.mark.parametrize("query", [{"limit": "many"}, {"continue": "not a token"}, {"continue": "e30="}])
def test_an_unreadable_limit_or_token_is_a_bad_request(query: dict[str, str]) -> None:
    with pytest.raises(ApiError) as e:
        page(ITEMS, 42, query)
    assert e.value.code == 400
