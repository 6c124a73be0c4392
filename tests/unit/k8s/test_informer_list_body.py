"""The informer's list step against malformed list bodies: a retried API failure, never a crash of ``run()``."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

import pytest

from vgpu_scheduler.shared.k8s import Informer, InformerSettings, KubeClient, Resource, WatchEvent
from vgpu_scheduler.shared.runtime import cancel_until_done

GOOD = {"metadata": {"resourceVersion": "7"}, "items": [{"metadata": {"name": "n1", "uid": "u1"}}]}


class ListOnlyClient:
    """Answers each list with the next body; a watch never ends (the test stops the informer)."""

    def __init__(self, bodies: list[Any]) -> None:
        self.core = SimpleNamespace(list_node=object())
        self.bodies = bodies

    async def call_json(self, what: str, fn: Any, *args: Any, timeout_s: float | None = None, **kw: Any) -> Any:
        return self.bodies.pop(0)

    async def open_stream(self, *args: Any, **kwargs: Any) -> Any:
        await asyncio.Event().wait()


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param({"metadata": {"resourceVersion": "5"}, "items": [1]}, id="item-not-an-object"),
        pytest.param({"metadata": {"resourceVersion": "5"}, "items": "x"}, id="items-not-a-list"),
        pytest.param({"metadata": {}, "items": []}, id="no-resource-version"),
        pytest.param([], id="body-not-an-object"),
    ],
)
async def test_a_malformed_list_body_is_counted_and_the_list_retried(bad: Any) -> None:
    seen: list[WatchEvent] = []

    async def on_event(ev: WatchEvent) -> None:
        seen.append(ev)

    settings = InformerSettings(backoff_initial_s=0.001, backoff_max_s=0.001)
    client = cast(KubeClient, ListOnlyClient([bad, GOOD]))
    informer = Informer(client, Resource.NODES, on_event, settings=settings)
    task = asyncio.create_task(informer.run(), name="test:informer")
    ready = asyncio.create_task(informer.ready.wait(), name="test:ready")
    try:
        await asyncio.wait([ready, task], timeout=10, return_when=asyncio.FIRST_COMPLETED)
        assert not task.done(), f"run() ended: {task.exception() if not task.cancelled() else 'cancelled'}"
        assert ready.done()
    finally:
        await cancel_until_done([task, ready])
    assert informer.stats.errors == 1 and informer.stats.lists == 1
    assert [e.kind.value for e in seen] == ["ADDED", "RELISTED"]
    assert informer.get("n1") is not None
