"""Waiting for a wave of evictions to settle, from watch events (no polling): every evicted pod gone from the API,
and for each one a replacement bound, i.e. a new pod of the same controller (owner reference with
``controller: true``) that was not there when the wave began, not being deleted, with ``spec.nodeName`` set.

:class:`PodWatch` keeps the pods of the namespaces involved through one informer each (list, then watch; the
informer re-lists on 410); every event wakes the waiters, which re-read the known set. :class:`Wave` is the state
one wave waits on: :meth:`Wave.progress` is pure over the pods seen.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, TypeVar

from vgpu_scheduler.shared.domain.defragmodel import Move
from vgpu_scheduler.shared.k8s import Informer, KubeClient, KubeObject, Resource, WatchEvent
from vgpu_scheduler.shared.k8s.objects import controller_of, meta, uid_of
from vgpu_scheduler.shared.runtime import cancel_until_done

T = TypeVar("T")


class Stopped(Exception):
    """The stop event was set while waiting (SIGTERM)."""


class PodWatch:
    """The pods of some namespaces as the API shows them, kept current by watches (module docstring)."""

    def __init__(
        self,
        client: KubeClient,
        namespaces: Iterable[str],
        *,
        stop: asyncio.Event | None = None,
        ready_timeout_s: float = 60.0,
    ) -> None:
        self._ready_timeout_s = ready_timeout_s
        self._changed = asyncio.Event()
        self._stop = stop or asyncio.Event()
        self._informers = [
            Informer(client, Resource.PODS, self._on_event, namespace=ns) for ns in sorted(set(namespaces))
        ]
        self._tasks: list[asyncio.Task[None]] = []

    async def _on_event(self, event: WatchEvent) -> None:
        self._changed.set()

    async def __aenter__(self) -> PodWatch:
        self._tasks = [asyncio.create_task(i.run(), name=f"defrag-watch:{i.resource.name}") for i in self._informers]
        try:
            await self.until(lambda: all(i.ready.is_set() for i in self._informers) or None, self._ready_timeout_s)
        except BaseException:
            await cancel_until_done(self._tasks)
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await cancel_until_done(self._tasks)

    def pods(self) -> list[KubeObject]:
        return [p for i in self._informers for p in i.objects()]

    def get(self, namespace: str, name: str) -> KubeObject | None:
        for i in self._informers:
            pod = i.get(name, namespace)
            if pod is not None:
                return pod
        return None

    async def until(self, check: Callable[[], T | None], timeout_s: float | None) -> T:
        """Wait until ``check()`` answers something (re-asked after every watch event); TimeoutError after
        ``timeout_s``, :class:`Stopped` when the stop event is set first."""
        async with asyncio.timeout(timeout_s):
            while True:
                self._changed.clear()
                answer = check()
                if answer is not None:
                    return answer
                self._raise_if_ended()
                await self._next()

    def _raise_if_ended(self) -> None:
        if self._stop.is_set():
            raise Stopped
        for t in self._tasks:
            if t.done() and not t.cancelled() and t.exception() is not None:
                raise RuntimeError("a pod watch failed") from t.exception()

    async def _next(self) -> None:
        """Wait for a watch event, the stop event or the end of a watch task."""
        waits = [asyncio.ensure_future(self._changed.wait()), asyncio.ensure_future(self._stop.wait())]
        try:
            await asyncio.wait([*waits, *self._tasks], return_when=asyncio.FIRST_COMPLETED)
        finally:
            await cancel_until_done(waits)


def _owner_uid(pod: Mapping[str, Any]) -> str | None:
    ref = controller_of(pod)
    return str(ref.get("uid")) if ref is not None and ref.get("uid") else None


def _owner_name(pod: Mapping[str, Any]) -> str:
    ref = controller_of(pod)
    return f"{ref.get('kind')} {ref.get('name')}" if ref is not None else "no controller"


@dataclass
class Wave:
    """One wave of evictions: each move, its pod's controller, and the pods there were before the wave."""

    moves: list[Move] = field(default_factory=list)
    owners: dict[str, str | None] = field(default_factory=dict)
    """Per evicted pod UID, its controller's UID (None: nothing recreates it)."""
    owner_names: dict[str, str] = field(default_factory=dict)
    before: frozenset[str] = frozenset()
    """UIDs of every pod seen when the wave began: none of them is a replacement."""

    @classmethod
    def begin(cls, pods: Iterable[Mapping[str, Any]]) -> Wave:
        return cls(before=frozenset(uid_of(p) for p in pods))

    def evicted(self, move: Move, pod: Mapping[str, Any]) -> None:
        """``pod`` (the move's, as seen just before its eviction) was evicted."""
        self.moves.append(move)
        self.owners[move.uid] = _owner_uid(pod)
        self.owner_names[move.uid] = _owner_name(pod)

    def progress(self, pods: Iterable[Mapping[str, Any]]) -> tuple[dict[str, KubeObject], list[str]]:
        """Per settled move (its pod UID: gone, and a replacement bound), the replacement (an empty dict when
        nothing recreates the pod); and, for the others, what each still waits for."""
        present = {uid_of(p) for p in pods}
        fresh: dict[str, list[KubeObject]] = {}
        for p in pods:
            owner = _owner_uid(p)
            if owner is None or uid_of(p) in self.before or meta(p).get("deletionTimestamp"):
                continue
            if (p.get("spec") or {}).get("nodeName"):
                fresh.setdefault(owner, []).append(dict(p))
        for replacements in fresh.values():
            replacements.sort(key=lambda p: (str(meta(p).get("creationTimestamp") or ""), uid_of(p)))
        settled: dict[str, KubeObject] = {}
        waiting: list[str] = []
        for move in self.moves:
            owner = self.owners.get(move.uid)
            gone = move.uid not in present
            replacement = fresh[owner].pop(0) if owner is not None and fresh.get(owner) else None
            if gone and (owner is None or replacement is not None):
                settled[move.uid] = replacement or {}
                continue
            if not gone:
                waiting.append(f"{move.key} is still there")
            if owner is not None and replacement is None:
                waiting.append(f"no replacement of {move.key} ({self.owner_names[move.uid]}) bound yet")
        return settled, waiting
