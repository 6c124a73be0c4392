"""Kubernetes Events about pods, posted off the request path.

Handlers ``submit`` a batch of :class:`~shared.protocol.events.PodEvent` and return at once; one worker task
(``run``) posts them through the API with a deadline each. A full queue drops the batch (counted): an event is
worth less than a fast answer to kube-scheduler. ``once_key`` suppresses repeats, e.g. one batch of
``FilteringFailed`` events per pod and failure kind while kube-scheduler keeps retrying it.

``Normal`` events (``FilteringSucceed``, ``BindingSucceed``: two API writes per placed pod) are sampled: at most
``normal_per_s`` per second (``--success-event-rate``), the rest skipped and counted. Under load they would cost
the API server as much as the binds themselves, and kube-scheduler records its own ``Scheduled`` event for every
pod anyway. Warnings are never sampled.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from typing import Any

from vgpu_scheduler.shared.errors import VgpuError
from vgpu_scheduler.shared.k8s import Api
from vgpu_scheduler.shared.k8s.objects import name_of, namespace_of
from vgpu_scheduler.shared.protocol.events import EventType, PodEvent

logger = logging.getLogger(__name__)

PostEvent = Callable[[Mapping[str, Any], PodEvent], Awaitable[None]]
"""``post(pod, event)``: record one event on a pod (raises on failure)."""


def api_poster(api: Api, *, timeout_s: float = 5.0) -> PostEvent:
    """A :data:`PostEvent` that creates a core/v1 Event through ``api`` (component ``--scheduler-name``)."""

    async def post(pod: Mapping[str, Any], event: PodEvent) -> None:
        await api.create_event(
            "Pod", pod, reason=event.reason.value, message=event.message, event_type=event.type, timeout_s=timeout_s
        )

    return post


class EventSink:
    """A bounded queue of pod events and the worker that posts them."""

    def __init__(
        self,
        post: PostEvent,
        *,
        capacity: int = 1024,
        remember: int = 10_000,
        normal_per_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._post = post
        self._normal_per_s = normal_per_s
        self._normal_burst = max(2.0 * normal_per_s, 1.0)
        self._normal_tokens = self._normal_burst
        self._normal_at = clock()
        self._clock = clock
        self.sampled_out = 0
        self._queue: asyncio.Queue[tuple[Mapping[str, Any], tuple[PodEvent, ...]]] = asyncio.Queue(capacity)
        self._seen: OrderedDict[Hashable, None] = OrderedDict()
        self._remember = remember
        self.posted = 0
        self.dropped = 0
        self._on_posted: Callable[[], None] = _nothing
        self._on_dropped: Callable[[], None] = _nothing
        self._on_sampled_out: Callable[[], None] = _nothing

    def set_hooks(
        self,
        *,
        on_posted: Callable[[], None],
        on_dropped: Callable[[], None],
        on_sampled_out: Callable[[], None] | None = None,
    ) -> None:
        """Count posted, dropped and sampled-out events somewhere else too (the service wires its metrics here)."""
        self._on_posted, self._on_dropped = on_posted, on_dropped
        self._on_sampled_out = on_sampled_out or _nothing

    def _sample(self, events: Sequence[PodEvent]) -> tuple[PodEvent, ...]:
        """``events`` less the Normal ones over the rate (``normal_per_s`` <= 0: no limit)."""
        if self._normal_per_s <= 0:
            return tuple(events)
        now = self._clock()
        self._normal_tokens = min(
            self._normal_burst, self._normal_tokens + (now - self._normal_at) * self._normal_per_s
        )
        self._normal_at = now
        kept: list[PodEvent] = []
        for event in events:
            if event.type is EventType.NORMAL:
                if self._normal_tokens < 1.0:
                    self.sampled_out += 1
                    self._on_sampled_out()
                    continue
                self._normal_tokens -= 1.0
            kept.append(event)
        return tuple(kept)

    def submit(self, pod: Mapping[str, Any], events: Sequence[PodEvent], *, once_key: Hashable | None = None) -> bool:
        """Queue ``events`` for ``pod`` without waiting. False when suppressed by ``once_key`` or dropped."""
        events = self._sample(events)
        if not events:
            return False
        if once_key is not None:
            if once_key in self._seen:
                self._seen.move_to_end(once_key)
                return False
            self._seen[once_key] = None
            if len(self._seen) > self._remember:
                self._seen.popitem(last=False)
        try:
            self._queue.put_nowait((pod, tuple(events)))
        except asyncio.QueueFull:
            self._drop(len(events))
            logger.warning("event queue full: events dropped", extra={"events": len(events)})
            return False
        return True

    def suppressed(self, once_key: Hashable) -> bool:
        """Whether :meth:`submit` would suppress events under ``once_key`` now; when so, the key counts as seen
        again, as a suppressed submit would count it (lets a caller skip building events nobody will post)."""
        if once_key in self._seen:
            self._seen.move_to_end(once_key)
            return True
        return False

    def forget(self, once_key: Hashable) -> None:
        """Allow ``once_key`` again (e.g. the pod was scheduled, so a later failure is news)."""
        self._seen.pop(once_key, None)

    @property
    def pending(self) -> int:
        return self._queue.qsize()

    async def run(self) -> None:
        """Post queued events until cancelled. A failed post is logged and counted, never retried."""
        while True:
            pod, events = await self._queue.get()
            try:
                for event in events:
                    await self._post_one(pod, event)
            finally:
                self._queue.task_done()

    async def _post_one(self, pod: Mapping[str, Any], event: PodEvent) -> None:
        try:
            await self._post(pod, event)
        except (VgpuError, OSError, TimeoutError) as e:
            self._drop(1)
            logger.warning(
                "event not posted",
                extra={
                    "pod": f"{namespace_of(pod)}/{name_of(pod)}",
                    "reason": event.reason.value,
                    "error": str(e),
                },
            )
            return
        self.posted += 1
        self._on_posted()

    async def flush(self, timeout_s: float) -> bool:
        """Wait until every queued event was handled (needs ``run`` going); False if ``timeout_s`` passed first."""
        try:
            async with asyncio.timeout(timeout_s):
                await self._queue.join()
        except TimeoutError:
            return False
        return True

    def _drop(self, n: int) -> None:
        self.dropped += n
        for _ in range(n):
            self._on_dropped()


def _nothing() -> None:
    return None
