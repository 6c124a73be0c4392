"""The process-local snapshot: every registered node's inventory and usage, kept current by the change feed.

``/filter`` never reads the whole cluster from Redis. This cache loads every node once (the store's snapshot
loader, pipelined in batches), then follows the change stream and re-reads only the nodes whose generation
moved. Each node's domain :class:`~shared.domain.snapshot.NodeSnapshot` (with its O(1) summary) is built once
per generation and shared by every request until the node changes again.

Consistency: generations only move forward here (a late read never replaces a newer one). A feed gap (stream
trimmed past us) reloads everything in the background while serving; a store epoch change (Redis flushed or
restarted empty) drops the cache and answers "not ready" until it is reloaded and the registrar's and
informer's sync markers are back. A stale entry can cost a reservation conflict (the store's script is the
authority), never an over-commit.

Each node policy's order of preference over the cached nodes is kept by :mod:`.ranking`.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from vgpu_scheduler.services.extender.ranking import NodeRanking
from vgpu_scheduler.services.extender.wakeups import NodeWakeups
from vgpu_scheduler.shared.domain.model import NodePolicy
from vgpu_scheduler.shared.domain.plan import Decision, apply_decision
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.errors import TransientError
from vgpu_scheduler.shared.store import ChangeBatch, ChangeEvent, ChangeKind, NodeState, Store, StoreStatus, SyncMarker

logger = logging.getLogger(__name__)

REQUIRED_MARKERS = frozenset({SyncMarker.INVENTORY, SyncMarker.ALLOCATIONS, SyncMarker.QUOTAS})
"""The loads that must be complete in the current store epoch before the extender places pods."""


@dataclass(frozen=True, slots=True)
class CachedNode:
    """One node's domain snapshot at ``generation``; ``seq`` orders installs (for reload bookkeeping)."""

    generation: int
    snapshot: NodeSnapshot
    seq: int


@dataclass(frozen=True, slots=True)
class CacheSettings:
    """Tuning of the snapshot follower."""

    batch_size: int = 500
    """Nodes per pipelined snapshot read."""
    feed_block_s: float = 1.0
    """How long one feed read waits for events."""
    feed_count: int = 1000
    """Events per feed read."""
    feed_min_interval_s: float = 0.05
    """The least time between two feed reads: under load, events are taken in batches instead of one read (and
    its gap check) per reservation, which would cost every request Redis round trips on this event loop."""
    status_interval_s: float = 1.0
    """How often the store epoch and sync markers are re-read while following the feed."""
    backoff_initial_s: float = 0.1
    backoff_max_s: float = 5.0


@dataclass(slots=True)
class CacheStats:
    full_loads: int = 0
    node_reads: int = 0
    events: int = 0
    applied: int = 0
    """Changes of a node's binds in flight applied from the feed entry, without reading the node."""
    gaps: int = 0
    epoch_changes: int = 0
    redis_errors: int = 0
    corrupt_nodes: int = 0


def loop_time() -> float:
    """The event loop's clock (monotonic; the simulated one in ``simulate``), for the feed's pacing."""
    return asyncio.get_running_loop().time()


def _chunks(items: Sequence[str], size: int) -> Iterable[Sequence[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


class SnapshotCache:
    """Every registered node's current snapshot, followed from the store's change feed.

    Run :meth:`run` as a background task; ``loaded`` is set after the first full load. Request handlers use
    :meth:`get` / :meth:`lookup` (no I/O), :meth:`not_ready_reason` (no I/O), :meth:`refresh` after a reservation
    conflict and :meth:`apply_local` after their own reservation.
    """

    def __init__(
        self,
        store: Store,
        settings: CacheSettings | None = None,
        *,
        required: frozenset[SyncMarker] = REQUIRED_MARKERS,
        on_reload: Callable[[str], None] | None = None,
        on_node_reads: Callable[[int], None] | None = None,
        binds_per_node: int = 1,
        wakeups: NodeWakeups | None = None,
        on_lock_cycle: Callable[[float], None] | None = None,
    ) -> None:
        self.wakeups = wakeups
        """Told of every node the change feed names (binds waiting for a node's lock: :mod:`.wakeups`)."""
        self._store = store
        self._binds_per_node = max(1, binds_per_node)
        self._settings = settings or CacheSettings()
        self._required = required
        self._on_reload = on_reload or (lambda reason: None)
        self._on_node_reads = on_node_reads or (lambda n: None)
        self.on_lock_cycle = on_lock_cycle
        """Told how long each node lock was held, taken to released as the feed shows them (the bind limit)."""
        self._lock_taken: dict[str, float] = {}
        """When the feed showed each node's lock taken (the loop's clock), until it shows the release."""
        self._nodes: dict[str, CachedNode] = {}
        self._snaps: dict[str, NodeSnapshot] = {}
        """``name → snapshot`` for the request path (the same snapshots as ``_nodes``, looked up in C)."""
        self._ranking = {policy: NodeRanking(policy) for policy in NodePolicy}
        """The names of ``_snaps`` in each node policy's order of preference."""
        self._gone: dict[str, int] = {}
        self._inflight: dict[str, int] = {}
        """Binds in flight per node (locks held, reservations not yet confirmed), as last read or made here."""
        self._busy: set[str] = set()
        """Nodes with ``binds_per_node`` binds or more in flight: see ``busy``."""
        self._seq = itertools.count(1)
        self._last_id: str | None = None
        self._epoch: str | None = None
        self._status: StoreStatus | None = None
        self._status_at = 0.0
        self._read_at = 0.0
        self._redis_error: str | None = None
        self._reload_reason: str | None = "start"
        self._holds_registered = False
        """The last full load began after the registrar's full sync of its epoch, so it holds every node the
        registrar registered (a load that began earlier may lag behind the feed: it is repeated once the sync
        marker appears, and the extender is not ready meanwhile)."""
        self._closing = False
        self.loaded = asyncio.Event()
        self._changed = asyncio.Event()
        self.stats = CacheStats()

    # ---- request path (no I/O) -----------------------------------------------------------------------------------

    def get(self, node: str) -> NodeSnapshot | None:
        """The node's current snapshot, or None when it is not registered (or not loaded yet)."""
        return self._snaps.get(node)

    def lookup(self, names: Sequence[str]) -> tuple[list[NodeSnapshot], list[str]]:
        """The snapshots of ``names`` in order, and the names that are not registered."""
        found = list(map(self._snaps.get, names))
        present: list[NodeSnapshot] = list(filter(None, found))  # C loops: no per-name Python code when all are known
        if len(present) == len(found):
            return present, []
        return present, [n for n, s in zip(names, found, strict=True) if s is None]

    @property
    def busy(self) -> frozenset[str] | set[str]:
        """The nodes with ``binds_per_node`` (``--max-binds-per-node``) binds or more in flight, as last read (a
        live view: do not keep it across an ``await``).

        HAMi's device plugin learns which pod it allocates from the node lock, so a node takes one bind at a time
        until its Allocate settles, and the others queue behind it; ``plan`` prefers the other nodes, so binds run
        in parallel across nodes."""
        return self._busy

    @property
    def binds_per_node(self) -> int:
        return self._binds_per_node

    def set_binds_per_node(self, limit: int) -> None:
        """Change the number of binds in flight that makes a node busy (:mod:`services.extender.bindlimit`)."""
        limit = max(1, limit)
        if limit == self._binds_per_node:
            return
        self._binds_per_node = limit
        self._busy = {node for node, count in self._inflight.items() if count >= limit}

    def _set_inflight(self, node: str, count: int) -> None:
        if count > 0:
            self._inflight[node] = count
        else:
            self._inflight.pop(node, None)
        if count >= self._binds_per_node:
            self._busy.add(node)
        else:
            self._busy.discard(node)

    def lookup_tiers(self, names: Sequence[str]) -> tuple[list[NodeSnapshot], list[NodeSnapshot], list[str]]:
        """``lookup`` split in two: the snapshots of ``names`` without a bind in flight, those with one (both in
        order), and the names that are not registered. The split runs in C: no per-name Python code."""
        busy = self._busy
        if not busy or busy.isdisjoint(names):
            free, missing = self.lookup(names)
            return free, [], missing
        free, missing = self.lookup(list(itertools.filterfalse(busy.__contains__, names)))
        taken, gone = self.lookup(list(filter(busy.__contains__, names)))
        return free, taken, missing + gone

    def ranked(
        self, policy: NodePolicy, candidates: AbstractSet[str], busy: bool | None = None
    ) -> Iterator[NodeSnapshot]:
        """The snapshots of the registered ``candidates`` in ``policy``'s order of preference (``rank_key``): all of
        them (``busy`` None), those without a bind in flight (False) or those with one (True).

        Lazy, and a live view: consume it before the next ``await``. Each node walked past costs C code only: the
        bind-in-flight test first (the cache's own name objects, found by identity), then the candidates' (names
        decoded from the request: compared by value)."""
        names: Iterable[str] = self._ranking[policy].names
        if busy is not None:
            names = (filter if busy else itertools.filterfalse)(self._busy.__contains__, names)
        return map(self._snaps.__getitem__, filter(candidates.__contains__, names))

    def generation(self, node: str) -> int | None:
        cached = self._nodes.get(node)
        return None if cached is None else cached.generation

    def snapshots(self) -> dict[str, NodeSnapshot]:
        """A consistent copy of every node's snapshot (for scrape-time metrics)."""
        return dict(self._snaps)

    def __len__(self) -> int:
        return len(self._nodes)

    @property
    def epoch(self) -> str | None:
        """The store epoch the snapshot was loaded in (a reservation planned on it is refused in another)."""
        return self._epoch

    def not_ready_reason(self) -> str | None:
        """Why placements must not be made right now (None: ready), from what the follower last saw."""
        if self._redis_error is not None:
            return f"redis unavailable: {self._redis_error}"
        if not self.loaded.is_set():
            return "node snapshot not loaded yet"
        return self._status_problem(self._status)

    def _status_problem(self, status: StoreStatus | None) -> str | None:
        if status is None:
            return "store status not read yet"
        if status.epoch is None:
            return "store is empty (flushed or restarted): waiting for the registrar and informer to re-sync"
        if status.epoch != self._epoch:
            return "store epoch changed: reloading the node snapshot"
        missing = sorted(m.value for m in self._required if not status.is_synced(m))
        if missing:
            return f"store not synced yet (missing: {', '.join(missing)})"
        if SyncMarker.INVENTORY in self._required and not self._holds_registered:
            return "node snapshot was loaded before the registrar's sync: reloading it"
        return None

    # ---- request path (I/O) ------------------------------------------------------------------------------------

    async def refresh(self, names: Iterable[str]) -> None:
        """Re-read ``names`` from Redis now (after a reservation conflict or a release)."""
        await self._read_nodes(sorted(set(names)))

    async def verify(self) -> str | None:
        """Re-read the store status now; the not-ready reason, if any (use when Redis looks flushed)."""
        await self._check_status()
        return self.not_ready_reason()

    def apply_local(self, decision: Decision, generation: int) -> bool:
        """Install the node as it is after our own reservation, without a Redis read, when the reservation's
        ``generation`` directly follows the cached one. False otherwise (the feed brings the node soon)."""
        cached = self._nodes.get(decision.node)
        if cached is None or cached.generation != generation - 1:
            return False
        self._install_snapshot(decision.node, generation, apply_decision(cached.snapshot, decision))
        return True

    def mark_busy(self, node: str) -> None:
        """Record a bind in flight on ``node`` now (our own reservation there), ahead of the feed."""
        if node in self._nodes:
            self._set_inflight(node, self._inflight.get(node, 0) + 1)

    async def wait_until(self, predicate: Callable[[], bool], timeout_s: float | None) -> None:
        """Wait until ``predicate()`` holds, re-checking after every change (``timeout_s`` None: no limit)."""
        async with asyncio.timeout(timeout_s):
            while not predicate():
                changed = self._changed
                await changed.wait()

    # ---- follower ------------------------------------------------------------------------------------------------

    def _time_lock_cycles(self, events: Sequence[ChangeEvent]) -> None:
        """Time every node lock the feed shows taken and then released (a release without a seen acquisition, from
        before this replica followed, counts nothing)."""
        if self.on_lock_cycle is None:
            return
        now = loop_time()
        for event in events:
            if event.lock_taken:
                self._lock_taken[event.node] = now
            elif event.lock_released:
                taken = self._lock_taken.pop(event.node, None)
                if taken is not None:
                    self.on_lock_cycle(now - taken)

    def close(self) -> None:
        """Make :meth:`run` return at its next turn. Cancel it too: this covers a cancellation lost inside
        redis-py (on Python 3.11 ``asyncio.wait_for`` drops a cancel that races a finished send)."""
        self._closing = True

    async def run(self) -> None:
        """Load everything, then follow the feed until cancelled or closed. Redis trouble is retried with backoff."""
        backoff = self._settings.backoff_initial_s
        while not self._closing:
            try:
                if self._reload_reason is not None:
                    await self._full_load(self._reload_reason)
                pause = self._settings.feed_min_interval_s - (loop_time() - self._read_at)
                if pause > 0:
                    await asyncio.sleep(pause)
                self._read_at = loop_time()
                batch = await self._store.feed.read(
                    self._last_id or "0-0", block_s=self._settings.feed_block_s, count=self._settings.feed_count
                )
                self._redis_ok()
                await self._follow(batch)
                if loop_time() - self._status_at >= self._settings.status_interval_s:
                    await self._check_status()
                backoff = self._settings.backoff_initial_s
            except TransientError as e:
                self.stats.redis_errors += 1
                if self._redis_error is None:
                    logger.warning("redis unavailable: snapshot follower waiting", extra={"error": str(e)})
                self._redis_error = str(e)
                self._notify()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self._settings.backoff_max_s)
                try:
                    await self._check_status()
                except TransientError:
                    continue

    async def _follow(self, batch: ChangeBatch) -> None:
        if batch.gap:
            if self.wakeups is not None:
                self.wakeups.notify_all()
            self.stats.gaps += 1
            logger.warning("change feed gap: reloading every node", extra={"after": self._last_id})
            self._reload_reason = "gap"
            return
        self.stats.events += len(batch.events)
        stale: dict[str, None] = {}
        moved = False
        self._time_lock_cycles(batch.events)
        for event in batch.events:
            # A bind waiting for the node's lock is woken by its release (or the node going or changing shape),
            # not by every reservation and acquisition there: those would only make it try and fail again.
            if self.wakeups is not None and (event.lock_released or event.kind is not ChangeKind.USAGE):
                self.wakeups.notify(event.node)
            if event.node in stale:
                continue  # the read below brings its latest state
            cached = self._nodes.get(event.node)
            known = cached.generation if cached is not None else self._gone.get(event.node, 0)
            if event.generation <= known:
                continue
            if cached is not None and event.binds_in_flight is not None and event.generation == known + 1:
                # only its binds in flight moved since the generation we hold: no read
                self._nodes[event.node] = CachedNode(event.generation, cached.snapshot, next(self._seq))
                self._set_inflight(event.node, event.binds_in_flight)
                self.stats.applied += 1
                moved = True
            else:
                stale[event.node] = None
        if stale:
            await self._read_nodes(list(stale))
        elif moved:
            self._notify()
        self._last_id = batch.last_id

    async def _check_status(self) -> None:
        status = await self._store.meta.status()
        self._status_at = loop_time()
        self._redis_ok()
        self._status = status
        if self.loaded.is_set() and status.epoch != self._epoch and self._reload_reason != "epoch":
            self.stats.epoch_changes += 1
            if self._epoch is None:  # a first start: the snapshot was loaded before any store epoch existed
                logger.info("store epoch established: reloading the node snapshot", extra={"epoch": status.epoch})
            else:
                logger.warning(
                    "store epoch changed: dropping the node snapshot",
                    extra={"epoch": status.epoch, "old_epoch": self._epoch},
                )
            self._nodes = {}
            self._snaps = {}
            for ranking in self._ranking.values():
                ranking.clear()
            self._gone = {}
            self._busy = set()
            self._inflight = {}
            self._lock_taken = {}
            self.loaded.clear()
            self._reload_reason = "epoch"
        elif (
            self.loaded.is_set()
            and not self._holds_registered
            and self._reload_reason is None
            and status.epoch == self._epoch
            and status.is_synced(SyncMarker.INVENTORY)
        ):
            self._reload_reason = "synced"  # the follower reloads at its next turn
        self._notify()

    async def _full_load(self, reason: str) -> None:
        started = time.monotonic()
        status = await self._store.meta.status()
        last_id = await self._store.feed.latest_id()
        names = await self._store.inventory.list_nodes()
        load_seq = next(self._seq)
        listed = set(names)
        for chunk in _chunks(names, self._settings.batch_size):
            await self._read_nodes(chunk)
        for name in [n for n, c in self._nodes.items() if n not in listed and c.seq < load_seq]:
            self._remove(name)
        self._epoch = status.epoch
        self._holds_registered = status.epoch is not None and status.is_synced(SyncMarker.INVENTORY)
        self._status = status
        self._status_at = loop_time()
        self._last_id = last_id
        self._reload_reason = None
        self.stats.full_loads += 1
        self._on_reload(reason)
        self.loaded.set()
        self._notify()
        logger.info(
            "node snapshot loaded",
            extra={"reason": reason, "nodes": len(self._nodes), "seconds": round(time.monotonic() - started, 3)},
        )

    async def _read_nodes(self, names: Sequence[str]) -> None:
        if not names:
            return
        stored = await self._store.snapshots.load(names)
        self.stats.node_reads += len(names)
        self._on_node_reads(len(names))
        self._redis_ok()
        for name, state in stored.items():
            if state.error is not None:
                self.stats.corrupt_nodes += 1
                logger.warning(
                    "node data in redis does not decode: node skipped", extra={"node": name, "error": str(state.error)}
                )
            self._install(name, state)
        self._notify()

    def _install(self, name: str, stored: NodeState) -> None:
        cached = self._nodes.get(name)
        if cached is not None and cached.generation > stored.generation:
            return
        self._set_inflight(name, stored.binds_in_flight)
        if stored.inventory is None or not stored.inventory.devices:
            if cached is not None or stored.generation > self._gone.get(name, -1):
                self._remove(name)
                self._gone[name] = stored.generation
            return
        if stored.generation < self._gone.get(name, -1):
            return
        self._gone.pop(name, None)
        if cached is not None and cached.generation == stored.generation:
            return
        self._install_snapshot(name, stored.generation, NodeSnapshot(stored.inventory, dict(stored.usage)))

    def _install_snapshot(self, name: str, generation: int, snapshot: NodeSnapshot) -> None:
        self._nodes[name] = CachedNode(generation=generation, snapshot=snapshot, seq=next(self._seq))
        old = self._snaps.get(name)
        self._snaps[name] = snapshot
        for ranking in self._ranking.values():
            ranking.replace(old, snapshot)

    def _remove(self, name: str) -> None:
        self._nodes.pop(name, None)
        old = self._snaps.pop(name, None)
        if old is not None:
            for ranking in self._ranking.values():
                ranking.replace(old, None)
        self._set_inflight(name, 0)

    def _redis_ok(self) -> None:
        if self._redis_error is not None:
            logger.info("redis reachable again")
            self._redis_error = None

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
