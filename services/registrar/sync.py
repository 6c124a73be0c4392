"""One leadership term of the registrar: nodes in, fenced inventory writes out.

A :class:`NodeSync` lives exactly as long as this process holds the lease. It mirrors the Nodes the informer
delivers, asks the vendor (pure) what each one means, and makes Redis agree:

* an inventory is written only when it differs from what this term last wrote (the store's ``put`` bumps the
  generation and appends the change event only when the bytes changed, too);
* a node that is gone, dead, or malformed has its inventory deleted;
* every write carries the term's :class:`~shared.store.Fence`; a refused write raises
  :class:`~shared.store.StaleFenceError`, which ends the term (``stale`` is set, nothing more is written);
* a *full pass* re-evaluates the nodes, deletes every Redis inventory of a node it did not register, and marks
  the store's ``inventory`` synced marker. The first full pass of a term (after the first list) and any pass
  that finds the store flushed (new epoch, missing marker, or a node set that differs from what was written)
  forget what was written and put every node again: Redis is rebuilt from the API.

Malformed values are reported once per distinct (node, annotation, value): a warning log, a counted metric
reason and a Warning event on the node. Handshake values are merge-patched onto the node, guarded by the
resourceVersion they were judged from.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Set
from dataclasses import dataclass, field
from datetime import datetime

from services.registrar.metrics import HandshakeResult, PassTrigger, RegistrarMetrics, WriteOp
from services.registrar.vendor import Invalid, NodeView, NotRegistered, Observation, Registered, Unregistered, Vendor
from shared.domain.model import NodeInventory
from shared.errors import ConflictError, DecodeError, NotFoundError, PermanentError, TransientError
from shared.k8s import Api, EventKind, EventType, KubeObject, WatchEvent
from shared.k8s.objects import resource_version_of
from shared.store import Fence, StaleFenceError, Store, SyncMarker

logger = logging.getLogger(__name__)

INVALID_EVENT_REASON = "InvalidDeviceRegistration"


@dataclass
class ProcessMemory:
    """What the registrar remembers across terms (not in Redis): malformed values already reported, and nodes
    whose device plugin was seen answering the handshake with ``Reported``."""

    reported_invalid: dict[str, tuple[str, str]] = field(default_factory=dict)
    reporters: set[str] = field(default_factory=set)

    def forget(self, node: str) -> None:
        self.reported_invalid.pop(node, None)
        self.reporters.discard(node)


class NodeSync:
    """The writer of one leadership term (see the module docstring). Not reusable across terms."""

    def __init__(
        self,
        *,
        store: Store,
        api: Api,
        vendor: Vendor,
        metrics: RegistrarMetrics,
        fence: Fence,
        memory: ProcessMemory,
        clock: Callable[[], float],
        epoch: str | None = None,
    ) -> None:
        self._store = store
        self._api = api
        self._vendor = vendor
        self._metrics = metrics
        self._fence = fence
        self._memory = memory
        self._clock = clock
        self._lock = asyncio.Lock()
        self._nodes: dict[str, KubeObject] = {}
        self._written: dict[str, NodeInventory] = {}
        self._absent: set[str] = set()  # confirmed not in Redis during this term
        self._evaluated: dict[str, str] = {}  # node -> resourceVersion last evaluated
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
                    await self._apply(ev.obj)
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
            self._absent.clear()
            self._evaluated.clear()
        self._metrics.passes.labels(trigger.value).inc()
        for name, obj in list(self._nodes.items()):
            if flushed or name in self._time_dependent or self._evaluated.get(name) != resource_version_of(obj):
                await self._apply(obj)
        for name in sorted(in_redis - self._written.keys() - self._absent):
            await self._delete(name, None)  # a node that is gone, or that this term does not register
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

    def _observe(self, view: NodeView) -> Observation:
        now_local = datetime.fromtimestamp(self._clock())
        return self._vendor.observe(view, now_local, reported_before=view.name in self._memory.reporters)

    async def _apply(self, obj: KubeObject) -> None:
        view = NodeView.of(obj)
        name = view.name
        obs = self._observe(view)
        self._evaluated[name] = view.resource_version
        legacy = not isinstance(obs, Invalid) and obs.legacy
        if legacy:
            self._time_dependent.add(name)
        else:
            self._time_dependent.discard(name)
        if isinstance(obs, Registered):
            self._memory.reported_invalid.pop(name, None)
            if obs.reporter:
                self._memory.reporters.add(name)
            await self._put(obs.inventory)
            if obs.handshake is not None:
                await self._write_handshake(view, obs.handshake)
        elif isinstance(obs, NotRegistered):
            self._memory.reported_invalid.pop(name, None)
            await self._drop(name, obs.reason)
        else:
            await self._report_invalid(obj, view, obs)
            await self._drop(name, None)

    async def _forget(self, name: str) -> None:
        self._evaluated.pop(name, None)
        self._time_dependent.discard(name)
        self._handshake_sent.pop(name, None)
        await self._drop(name, None)

    async def _put(self, inv: NodeInventory) -> None:
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
        self._metrics.nodes_registered.labels(self._vendor.name).set(len(self._written))
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

    async def _drop(self, name: str, reason: Unregistered | None) -> None:
        if name in self._absent:
            return
        was_registered = name in self._written
        await self._delete(name, reason)
        if was_registered and reason is not None:
            self._metrics.unregistered.labels(self._vendor.name, reason.value).inc()

    async def _delete(self, name: str, reason: Unregistered | None) -> None:
        try:
            result = await self._store.inventory.delete(name, self._fence)
        except DecodeError as e:
            logger.error("node name unusable as a redis key", extra={"node": name, "error": str(e)})
            return
        self._metrics.wrote(WriteOp.DELETE, result.changed)
        self._written.pop(name, None)
        self._absent.add(name)
        self._metrics.nodes_registered.labels(self._vendor.name).set(len(self._written))
        if result.changed:
            logger.info(
                "inventory removed",
                extra={"node": name, "vendor": self._vendor.name, "reason": reason.value if reason else "gone"},
            )

    async def _write_handshake(self, view: NodeView, value: str) -> None:
        if self._handshake_sent.get(view.name) == view.resource_version or self.stale.is_set():
            return
        vendor = self._vendor.name
        try:
            await self._api.patch_node_metadata(
                view.name,
                annotations={self._vendor.handshake_key: value},
                resource_version=view.resource_version or None,
            )
        except (ConflictError, NotFoundError):
            # the node changed (or went) since we judged it: its next event is judged afresh
            self._metrics.handshake_writes.labels(vendor, HandshakeResult.CONFLICT.value).inc()
            self._handshake_sent[view.name] = view.resource_version
            return
        except (TransientError, PermanentError) as e:
            self._metrics.handshake_writes.labels(vendor, HandshakeResult.FAILED.value).inc()
            logger.warning("handshake write failed", extra={"node": view.name, "error": str(e)})
            return
        self._handshake_sent[view.name] = view.resource_version
        self._metrics.handshake_writes.labels(vendor, HandshakeResult.WRITTEN.value).inc()
        logger.debug("handshake requested", extra={"node": view.name, "value": value})

    async def _report_invalid(self, obj: KubeObject, view: NodeView, obs: Invalid) -> None:
        key = (obs.source, obs.value)
        if self._memory.reported_invalid.get(view.name) == key:
            return
        self._memory.reported_invalid[view.name] = key
        self._metrics.decode_errors.labels(self._vendor.name, obs.failure.value).inc()
        logger.warning(
            "malformed node value, vendor not registered",
            extra={
                "node": view.name,
                "vendor": self._vendor.name,
                "reason": obs.failure.value,
                "error": str(obs.error),
            },
        )
        message = f"{obs.error}; the node's {self._vendor.name} devices are not registered until this is fixed"
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
