"""One leadership term of the registrar: nodes in, fenced inventory writes out.

A :class:`NodeSync` lives exactly as long as this process holds the lease. It mirrors the Nodes the informer
delivers, asks every enabled vendor (pure) what each one means, and makes Redis agree:

* a node has one inventory holding the devices of every vendor registered on it
  (:func:`~shared.vendors.catalog.observe_node`): each vendor is registered, unregistered or invalid on its own,
  so a node whose DCU plugin died keeps its NVIDIA devices; a vendor whose device IDs collide with an earlier
  vendor's on the node is left out (reported like a malformed value, reason ``uuid_collision``);
* an inventory is written only when it differs from what this term last wrote (the store's ``put`` bumps the
  generation and appends the change event only when the bytes changed, too);
* a node update that changes nothing a vendor reads (every pod's bind sets and clears the node-lock annotation
  ``hami.io/mutex.lock``; status heartbeats change only conditions) is not observed again: what a vendor reads
  (the other annotations, labels, allocatable and capacity) is compared with what was last observed, and only a
  difference (or a time-dependent handshake) decodes the registration again;
* a node that is gone, or where no vendor is registered, has its inventory deleted;
* every write carries the term's :class:`~shared.store.Fence`; a refused write raises
  :class:`~shared.store.StaleFenceError`, which ends the term (``stale`` is set, nothing more is written);
* a *full pass* re-evaluates the nodes, deletes every Redis inventory of a node it did not register, and marks
  the store's ``inventory`` synced marker. The first full pass of a term (after the first list) and any pass
  that finds the store flushed (new epoch, missing marker, or a node set that differs from what was written)
  forget what was written and put every node again: Redis is rebuilt from the API.

Malformed values are reported once per distinct (node, vendor, annotation, value): a warning log, a counted
metric reason and a Warning event on the node naming the vendor. Handshake values (each vendor's own key) are
merge-patched onto the node in one patch, guarded by the resourceVersion they were judged from.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from vgpu_scheduler.services.registrar.metrics import (
    UUID_COLLISION,
    HandshakeResult,
    PassTrigger,
    RegistrarMetrics,
    WriteOp,
)
from vgpu_scheduler.services.registrar.vendor import Invalid, NodeView, NotRegistered, Registered, Unregistered
from vgpu_scheduler.shared.domain.model import NodeInventory
from vgpu_scheduler.shared.errors import ConflictError, DecodeError, NotFoundError, PermanentError, TransientError
from vgpu_scheduler.shared.k8s import Api, EventKind, EventType, KubeObject, WatchEvent
from vgpu_scheduler.shared.k8s.objects import resource_version_of
from vgpu_scheduler.shared.store import Fence, StaleFenceError, Store, SyncMarker
from vgpu_scheduler.shared.vendors.base import NodeLockKind
from vgpu_scheduler.shared.vendors.catalog import (
    NodeObservation,
    NodeObserver,
    UuidCollision,
    inventory_vendor,
    observe_node,
)

logger = logging.getLogger(__name__)

INVALID_EVENT_REASON = "InvalidDeviceRegistration"

_NOT_READ = frozenset({NodeLockKind.HAMI.value})
"""Node annotations no vendor's registration reads, which change with every bind (the node lock)."""

_Inputs = tuple[dict[str, str], Mapping[str, str], Mapping[str, Any], Mapping[str, Any]]


def _inputs(view: NodeView) -> _Inputs:
    """What the vendors read from a node (everything of its :class:`NodeView` but the resourceVersion and the
    annotations in ``_NOT_READ``), for an equality check."""
    annotations = dict(view.annotations)
    for key in _NOT_READ:
        annotations.pop(key, None)
    return annotations, view.labels, view.allocatable, view.capacity


@dataclass
class ProcessMemory:
    """What the registrar remembers across terms (not in Redis): malformed values already reported (node →
    vendor → (source, value)), and the (node, vendor) pairs whose device plugin was seen answering the handshake
    with ``Reported``."""

    reported_invalid: dict[str, dict[str, tuple[str, str]]] = field(default_factory=dict)
    reporters: set[tuple[str, str]] = field(default_factory=set)

    def forget(self, node: str) -> None:
        self.reported_invalid.pop(node, None)
        self.reporters = {r for r in self.reporters if r[0] != node}

    def valid(self, node: str, vendor: str) -> None:
        """``vendor`` is fine on ``node`` again: a later malformed value is reported anew."""
        seen = self.reported_invalid.get(node)
        if seen is not None:
            seen.pop(vendor, None)
            if not seen:
                del self.reported_invalid[node]

    def first_report(self, node: str, vendor: str, key: tuple[str, str]) -> bool:
        """Remember ``key`` as reported for (node, vendor); False when it was the last one reported already."""
        seen = self.reported_invalid.setdefault(node, {})
        if seen.get(vendor) == key:
            return False
        seen[vendor] = key
        return True


class NodeSync:
    """The writer of one leadership term (see the module docstring). Not reusable across terms."""

    def __init__(
        self,
        *,
        store: Store,
        api: Api,
        metrics: RegistrarMetrics,
        fence: Fence,
        memory: ProcessMemory,
        clock: Callable[[], float],
        epoch: str | None = None,
        vendors: Sequence[NodeObserver] = (),
        vendor: NodeObserver | None = None,
    ) -> None:
        """``vendors`` are observed on every node, in order (their devices are merged in that order); ``vendor``
        is the one-vendor form (kept for existing callers)."""
        self._store = store
        self._api = api
        self._vendors: tuple[NodeObserver, ...] = tuple(vendors) or ((vendor,) if vendor is not None else ())
        if not self._vendors:
            raise ValueError("NodeSync needs at least one vendor")
        self._metrics = metrics
        self._fence = fence
        self._memory = memory
        self._clock = clock
        self._lock = asyncio.Lock()
        self._nodes: dict[str, KubeObject] = {}
        self._written: dict[str, NodeInventory] = {}
        self._registered: dict[str, tuple[str, ...]] = {}  # node -> the vendors of its written inventory
        self._vendor_nodes: dict[str, set[str]] = {v.name: set() for v in self._vendors}
        self._absent: set[str] = set()  # confirmed not in Redis during this term
        self._evaluated: dict[str, str] = {}  # node -> resourceVersion last evaluated
        self._observed: dict[str, _Inputs] = {}  # node -> what the vendors read at its last completed evaluation
        self._time_dependent: set[str] = set()  # handshake nodes: their state changes with time alone
        self._handshake_sent: dict[str, str] = {}  # node -> resourceVersion a handshake was written for
        self._listed = False
        self.epoch = epoch
        """The store epoch this term's writes belong to (a change means Redis was flushed)."""
        self.synced = asyncio.Event()
        """Set after the first full pass of the term (Redis rebuilt and marked synced)."""
        self.stale = asyncio.Event()
        """Set when a fenced write was refused: the term is over."""

    # ---- informer events -----------------------------------------------------------------------------------

    async def on_event(self, ev: WatchEvent) -> None:
        """The informer's handler. Redis outages raise TransientError (the informer redelivers the event)."""
        if self.stale.is_set():
            return
        try:
            if ev.kind is EventKind.RELISTED:
                trigger = PassTrigger.RELIST if self._listed else PassTrigger.LEASE
                await self.full_pass(trigger)
                self._listed = True
                return
            view = NodeView.of(ev.obj)
            async with self._lock:
                if ev.kind is EventKind.DELETED:
                    self._nodes.pop(view.name, None)
                    self._memory.forget(view.name)
                    await self._forget(view.name)
                else:
                    self._nodes[view.name] = ev.obj
                    if self._unchanged(view):
                        self._evaluated[view.name] = view.resource_version
                        self._metrics.unchanged_nodes.inc()
                    else:
                        await self._apply(ev.obj, view)
        except StaleFenceError:
            self._fenced_out()
        except TransientError:
            self._metrics.errors.inc()
            raise  # the informer redelivers the event after a backoff

    # ---- full passes ---------------------------------------------------------------------------------------

    async def full_pass(self, trigger: PassTrigger) -> None:
        """Re-evaluate the known nodes, delete inventories of nodes not registered, mark ``inventory`` synced.

        ``PERIODIC`` passes re-evaluate only nodes whose state depends on time (the handshake) unless the store
        turns out flushed; every other trigger (and a flushed store) rebuilds Redis from scratch.
        """
        if self.stale.is_set():
            return
        try:
            async with self._lock:
                await self._full_pass(trigger)
        except StaleFenceError:
            self._fenced_out()

    async def _full_pass(self, trigger: PassTrigger) -> None:
        epoch = await self._store.meta.ensure_epoch()
        in_redis = set(await self._store.inventory.list_nodes())
        flushed = (self.epoch is not None and epoch != self.epoch) or not set(self._written) <= in_redis
        if flushed:
            logger.warning(
                "redis does not hold what was written (flushed?), rebuilding",
                extra={"epoch": epoch, "in_redis": len(in_redis), "written": len(self._written)},
            )
            trigger = PassTrigger.FLUSH
            self._written.clear()
            self._registered.clear()
            for nodes in self._vendor_nodes.values():
                nodes.clear()
            self._absent.clear()
            self._evaluated.clear()
            self._observed.clear()
        self._metrics.passes.labels(trigger.value).inc()
        for name, obj in list(self._nodes.items()):
            if flushed or name in self._time_dependent or self._evaluated.get(name) != resource_version_of(obj):
                await self._apply(obj)
        for name in sorted(in_redis - self._written.keys() - self._absent):
            await self._delete(name, "gone")  # a node that is gone, or that this term does not register
        marked = await self._store.meta.mark_synced(SyncMarker.INVENTORY, epoch, self._fence)
        if not marked:  # flushed while we were writing: the next pass rebuilds
            logger.warning("redis flushed during a full pass; the next pass rebuilds", extra={"epoch": epoch})
            self.epoch = ""
            return
        self.epoch = epoch
        if not self.synced.is_set():
            logger.info(
                "inventory synced",
                extra={"trigger": trigger.value, "nodes": len(self._nodes), "registered": len(self._written)},
            )
        self.synced.set()

    # ---- one node ------------------------------------------------------------------------------------------

    def _observe(self, view: NodeView) -> NodeObservation:
        now_local = datetime.fromtimestamp(self._clock())
        reporters = self._memory.reporters
        return observe_node(self._vendors, view, now_local, lambda vendor: (view.name, vendor) in reporters)

    def _unchanged(self, view: NodeView) -> bool:
        """Whether an update of the node changed nothing a vendor reads since its last completed evaluation (and
        its state does not depend on time): observing it again would find the same."""
        seen = self._observed.get(view.name)
        return seen is not None and view.name not in self._time_dependent and seen == _inputs(view)

    async def _apply(self, obj: KubeObject, view: NodeView | None = None) -> None:
        view = view if view is not None else NodeView.of(obj)
        name = view.name
        self._observed.pop(name, None)  # until this evaluation completes
        seen = self._observe(view)
        self._evaluated[name] = view.resource_version
        if seen.legacy:
            self._time_dependent.add(name)
        else:
            self._time_dependent.discard(name)
        collided = {c.vendor for c in seen.merged.collisions}
        handshakes: dict[str, str] = {}  # vendor -> value to write on its handshake key
        gone: dict[str, Unregistered] = {}
        for vendor, obs in seen.observations.items():
            if isinstance(obs, Registered):
                if obs.reporter:
                    self._memory.reporters.add((name, vendor))
                if obs.handshake is not None:
                    handshakes[vendor] = obs.handshake
                if vendor not in collided:
                    self._memory.valid(name, vendor)
            elif isinstance(obs, NotRegistered):
                self._memory.valid(name, vendor)
                gone[vendor] = obs.reason
            else:
                await self._report_invalid(obj, view, vendor, obs)
        for collision in seen.merged.collisions:
            await self._report_collision(obj, view, collision)
        before = self._registered.get(name, ())
        if seen.merged.inventory is not None:
            await self._put(seen.merged.inventory, seen.registered)
            if handshakes:
                await self._write_handshake(view, handshakes)
        else:
            await self._drop(name, _why(seen))
        now = self._registered.get(name, ())
        for vendor in before:
            reason = gone.get(vendor)
            if vendor not in now and reason is not None:
                self._metrics.unregistered.labels(vendor, reason.value).inc()
                logger.info("vendor unregistered", extra={"node": name, "vendor": vendor, "reason": reason.value})
        if not self.stale.is_set():
            self._observed[name] = _inputs(view)

    async def _forget(self, name: str) -> None:
        self._evaluated.pop(name, None)
        self._observed.pop(name, None)
        self._time_dependent.discard(name)
        self._handshake_sent.pop(name, None)
        await self._drop(name, "gone")

    def _set_registered(self, node: str, vendors: tuple[str, ...]) -> None:
        before = self._registered.get(node, ())
        if vendors:
            self._registered[node] = vendors
        else:
            self._registered.pop(node, None)
        for vendor in {*before, *vendors}:
            nodes = self._vendor_nodes.setdefault(vendor, set())
            if vendor in vendors:
                nodes.add(node)
            else:
                nodes.discard(node)
            self._metrics.nodes_registered.labels(vendor).set(len(nodes))

    async def _put(self, inv: NodeInventory, vendors: tuple[str, ...]) -> None:
        if self._written.get(inv.node) == inv:
            self._metrics.skipped.inc()
            return
        try:
            result = await self._store.inventory.put(inv, self._fence)
        except DecodeError as e:  # a node name the key layout cannot hold
            logger.error("node name unusable as a redis key", extra={"node": inv.node, "error": str(e)})
            return
        self._metrics.wrote(WriteOp.PUT, result.changed)
        self._written[inv.node] = inv
        self._absent.discard(inv.node)
        self._set_registered(inv.node, vendors)
        if result.changed:
            logger.info(
                "inventory registered",
                extra={
                    "node": inv.node,
                    "vendor": inv.vendor,
                    "devices": len(inv.devices),
                    "cordoned": sorted(inv.cordoned),
                    "generation": result.generation,
                },
            )

    async def _drop(self, name: str, why: str) -> None:
        if name in self._absent:
            return
        await self._delete(name, why)

    async def _delete(self, name: str, why: str) -> None:
        try:
            result = await self._store.inventory.delete(name, self._fence)
        except DecodeError as e:
            logger.error("node name unusable as a redis key", extra={"node": name, "error": str(e)})
            return
        self._metrics.wrote(WriteOp.DELETE, result.changed)
        vendors = self._registered.get(name, ())
        self._written.pop(name, None)
        self._absent.add(name)
        self._set_registered(name, ())
        if result.changed:
            logger.info(
                "inventory removed",
                extra={"node": name, "vendor": inventory_vendor(vendors), "reason": why},
            )

    async def _write_handshake(self, view: NodeView, values: dict[str, str]) -> None:
        """Merge-patch each vendor's ``Requesting_`` onto its own handshake key, in one patch."""
        if self._handshake_sent.get(view.name) == view.resource_version or self.stale.is_set():
            return
        keys = {v.name: v.handshake_key for v in self._vendors}
        annotations = {key: values[vendor] for vendor, key in keys.items() if key and vendor in values}
        vendors = [vendor for vendor, key in keys.items() if key and vendor in values]
        if not annotations:
            return
        try:
            await self._api.patch_node_metadata(
                view.name, annotations=annotations, resource_version=view.resource_version or None
            )
        except (ConflictError, NotFoundError):
            # the node changed (or went) since we judged it: its next event is judged afresh
            for vendor in vendors:
                self._metrics.handshake_writes.labels(vendor, HandshakeResult.CONFLICT.value).inc()
            self._handshake_sent[view.name] = view.resource_version
            return
        except (TransientError, PermanentError) as e:
            for vendor in vendors:
                self._metrics.handshake_writes.labels(vendor, HandshakeResult.FAILED.value).inc()
            logger.warning("handshake write failed", extra={"node": view.name, "vendors": vendors, "error": str(e)})
            return
        self._handshake_sent[view.name] = view.resource_version
        for vendor in vendors:
            self._metrics.handshake_writes.labels(vendor, HandshakeResult.WRITTEN.value).inc()
        logger.debug("handshake requested", extra={"node": view.name, "annotations": annotations})

    async def _report_invalid(self, obj: KubeObject, view: NodeView, vendor: str, obs: Invalid) -> None:
        if not self._memory.first_report(view.name, vendor, (obs.source, obs.value)):
            return
        self._metrics.decode_errors.labels(vendor, obs.failure.value).inc()
        logger.warning(
            "malformed node value, vendor not registered",
            extra={"node": view.name, "vendor": vendor, "reason": obs.failure.value, "error": str(obs.error)},
        )
        message = f"{obs.error}; the node's {vendor} devices are not registered until this is fixed"
        await self._warn(obj, view, message)

    async def _report_collision(self, obj: KubeObject, view: NodeView, c: UuidCollision) -> None:
        key = (f"device IDs of {c.owner}", ",".join(c.uuids))
        if not self._memory.first_report(view.name, c.vendor, key):
            return
        self._metrics.decode_errors.labels(c.vendor, UUID_COLLISION).inc()
        logger.warning(
            "device IDs collide across vendors, vendor not registered",
            extra={"node": view.name, "vendor": c.vendor, "owner": c.owner, "uuids": list(c.uuids)},
        )
        await self._warn(obj, view, c.message)

    async def _warn(self, obj: KubeObject, view: NodeView, message: str) -> None:
        try:
            await self._api.node_event(obj, reason=INVALID_EVENT_REASON, message=message, event_type=EventType.WARNING)
        except (TransientError, PermanentError, ConflictError, NotFoundError) as e:
            self._metrics.events.labels(INVALID_EVENT_REASON, "failed").inc()
            logger.warning("node event failed", extra={"node": view.name, "error": str(e)})
            return
        self._metrics.events.labels(INVALID_EVENT_REASON, "created").inc()

    def _fenced_out(self) -> None:
        if not self.stale.is_set():
            logger.warning("write refused: another registrar holds the lease now", extra={"token": self._fence.token})
        self.stale.set()

    # ---- introspection (tests, readiness) ------------------------------------------------------------------

    @property
    def registered(self) -> Set[str]:
        """Nodes whose inventory this term wrote."""
        return self._written.keys()

    @property
    def known(self) -> Set[str]:
        """Nodes this term has seen (from the informer), registered or not."""
        return self._nodes.keys()


def _why(seen: NodeObservation) -> str:
    """Why no vendor is registered on a node, for the log: ``<vendor>:<reason>`` per vendor."""
    parts = []
    for vendor, obs in seen.observations.items():
        if isinstance(obs, NotRegistered):
            parts.append(f"{vendor}:{obs.reason.value}")
        elif isinstance(obs, Invalid):
            parts.append(f"{vendor}:invalid_{obs.failure.value}")
        else:
            parts.append(f"{vendor}:uuid_collision")
    return ",".join(parts)
