"""Fixtures: the Kubernetes API emulator on a free port, a real kubernetes-asyncio client against it, builders,
and a recorder handler for informers."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from vgpu_scheduler.shared.k8s import Api, EventKind, Informer, InformerSettings, KubeClient, WatchEvent

FAST = InformerSettings(watch_timeout_s=30, read_grace_s=5, backoff_initial_s=0.01, backoff_max_s=0.05)


def make_pod(
    name: str,
    namespace: str = "default",
    *,
    node: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    phase: str = "Pending",
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "busybox"}]}
    if node is not None:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}, "annotations": annotations or {}},
        "spec": spec,
        "status": {"phase": phase},
    }


def make_node(
    name: str, *, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
        "status": {"allocatable": {"nvidia.com/gpu": "4"}},
    }


class Recorder:
    """An informer handler that queues every event; tests await them with a timeout."""

    def __init__(self) -> None:
        self.events: list[WatchEvent] = []
        self.queue: asyncio.Queue[WatchEvent] = asyncio.Queue()
        self.fail_with: list[BaseException] = []  # raised (one each) by the next calls

    async def __call__(self, ev: WatchEvent) -> None:
        if self.fail_with:
            raise self.fail_with.pop(0)
        self.events.append(ev)
        self.queue.put_nowait(ev)

    async def next(self, timeout_s: float = 5.0) -> WatchEvent:
        return await asyncio.wait_for(self.queue.get(), timeout_s)

    async def until_relisted(self, timeout_s: float = 5.0) -> list[WatchEvent]:
        """Every event up to and including the next RELISTED marker."""
        out: list[WatchEvent] = []
        while True:
            ev = await self.next(timeout_s)
            out.append(ev)
            if ev.kind is EventKind.RELISTED:
                return out

    def drained(self) -> list[WatchEvent]:
        out = []
        while not self.queue.empty():
            out.append(self.queue.get_nowait())
        return out


def summary(events: list[WatchEvent]) -> list[tuple[str, str]]:
    return [(ev.kind.value, ev.obj.get("metadata", {}).get("name", "")) for ev in events]


@pytest.fixture
def api(kube: KubeClient) -> Api:
    return Api(kube, component="vgpu-scheduler", instance="test-1", clock=lambda: 1_700_000_000.0)


@contextlib.asynccontextmanager
async def running(informer: Informer) -> AsyncIterator[asyncio.Task[None]]:
    """Run an informer in a named task; cancel and await it on exit."""
    task = asyncio.create_task(informer.run(), name=f"informer-{informer.resource.name.lower()}")
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


WaitFor = Callable[[Callable[[], bool]], Awaitable[None]]
