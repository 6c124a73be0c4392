"""The extender's shared list of the cluster's pods for preemption (services/extender/preempt.py, RecentPods): the
preemptions worked out at once share one list; a list older than its age, or one that failed, is made again."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from vgpu_scheduler.services.extender.preempt import RecentPods


class Lister:
    def __init__(self) -> None:
        self.calls = 0
        self.release = asyncio.Event()
        self.fail = False

    async def __call__(self) -> Sequence[Mapping[str, Any]]:
        self.calls += 1
        await self.release.wait()
        if self.fail:
            raise ConnectionError("API server unreachable")
        return [{"metadata": {"name": f"list-{self.calls}"}}]


async def test_preemptions_at_once_share_one_list() -> None:
    lister = Lister()
    pods = RecentPods(lister, max_age_s=60.0)
    waiting = [asyncio.create_task(pods.get()) for _ in range(5)]
    await asyncio.sleep(0)
    lister.release.set()
    lists = await asyncio.gather(*waiting)
    assert lister.calls == 1
    assert all(got is lists[0] for got in lists)
    assert (await pods.get()) is lists[0]  # still young: no request
    assert lister.calls == 1


async def test_a_list_older_than_its_age_is_made_again() -> None:
    lister = Lister()
    lister.release.set()
    pods = RecentPods(lister, max_age_s=0.0)
    first = await pods.get()
    await asyncio.sleep(0.01)
    second = await pods.get()
    assert lister.calls == 2
    assert first[0]["metadata"]["name"] == "list-1" and second[0]["metadata"]["name"] == "list-2"


async def test_a_failed_list_fails_its_callers_and_the_next_call_lists_again() -> None:
    lister = Lister()
    lister.release.set()
    lister.fail = True
    pods = RecentPods(lister, max_age_s=60.0)
    with pytest.raises(ConnectionError):
        await pods.get()
    lister.fail = False
    assert (await pods.get())[0]["metadata"]["name"] == "list-2"


async def test_a_cancelled_caller_does_not_cancel_the_list_the_others_await() -> None:
    lister = Lister()
    pods = RecentPods(lister, max_age_s=60.0)
    cancelled, other = asyncio.create_task(pods.get()), asyncio.create_task(pods.get())
    await asyncio.sleep(0)
    cancelled.cancel()
    lister.release.set()
    assert (await other)[0]["metadata"]["name"] == "list-1"
    assert lister.calls == 1


def holds(pods: RecentPods) -> bool:
    return pods._listing is not None


async def test_a_stale_list_is_let_go() -> None:
    lister = Lister()
    lister.release.set()
    pods = RecentPods(lister, max_age_s=0.01)
    await pods.get()
    assert holds(pods)
    await asyncio.sleep(0.05)  # the let-go is a timer of max_age_s: nothing else to await
    assert not holds(pods)
    await pods.get()
    assert lister.calls == 2
