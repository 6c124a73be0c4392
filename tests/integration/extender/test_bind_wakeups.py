"""A bind waiting for a busy node lock tries again when the node changes, not only after its backoff.

The backoff is made an hour long here, so a bind that was not woken could not finish within the test's wait: the
release (the holder's lock given back in Redis, the node's change delivered as the change-feed follower delivers
it) must be what lets it through."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.integration.extender.bindkit import Harness, allocation, harness, pod_obj
from tests.integration.extender.test_bind import NODE, args_for
from tests.waiting import eventually
from vgpu_scheduler.services.extender import bindlock
from vgpu_scheduler.services.extender.bind import BindOutcome
from vgpu_scheduler.services.extender.wakeups import NodeWakeups


@pytest.fixture
async def h(redis_url: str) -> AsyncIterator[Harness]:
    async with harness(redis_url) as hh:
        await hh.seed_node(NODE)
        yield hh


async def _reserved(h: Harness) -> dict[str, Any]:
    pod = h.create_pod(pod_obj("p1"))
    await h.reserve_pod(pod, allocation(pod, NODE, (0, 1000, 10)))
    return pod


@pytest.mark.parametrize("wake", ["node", "all"])
async def test_a_release_wakes_the_waiting_bind(h: Harness, monkeypatch: pytest.MonkeyPatch, wake: str) -> None:
    monkeypatch.setattr(bindlock, "_BACKOFF_INITIAL_S", 3600.0)
    monkeypatch.setattr(bindlock, "_BACKOFF_INITIAL_WOKEN_S", 3600.0)
    monkeypatch.setattr(bindlock, "_BACKOFF_MAX_WOKEN_S", 3600.0)
    pod = await _reserved(h)
    held = await h.store.locks.acquire(NODE, "default/holder", 300.0)
    wakeups = NodeWakeups()
    binder = h.binder(lock_wait_s=7200.0, wakeups=wakeups)
    tries: list[str] = []
    real_acquire = h.store.locks.acquire

    async def counted(*args: Any, **kw: Any) -> Any:
        tries.append(args[0])
        return await real_acquire(*args, **kw)

    monkeypatch.setattr(h.store.locks, "acquire", counted)
    bind = asyncio.create_task(binder.bind(args_for(pod)))
    await eventually(lambda: len(tries) >= 1 and len(wakeups) == 1, what="the bind found the lock busy and waits")
    wakeups.notify("another-node")  # another node's change does not wake it
    await asyncio.sleep(0)
    assert not bind.done() and len(tries) == 1
    assert await h.store.locks.release(NODE, "default/holder", held.token)  # type: ignore[union-attr]
    if wake == "node":
        wakeups.notify(NODE)
    else:
        wakeups.notify_all()  # a gap in the feed
    result = await asyncio.wait_for(bind, 60)
    assert result.outcome is BindOutcome.BOUND, result
    assert tries == [NODE, NODE]  # the busy try, then the one the release woke
