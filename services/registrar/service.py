"""The registrar service: Nodes → device inventories in Redis, one active instance at a time.

Standby: try the Redis lease ``registrar`` every ``min(remaining ttl, ttl/3)`` (so a dead leader's lease is taken
within one TTL of its last renewal). Leader (one *term*): keep the lease renewed (``LeaseKeeper``), start a
fresh node informer — its first list rebuilds Redis (:mod:`services.registrar.sync`) — and run a full pass every
``resync_interval_s`` (handshake timeouts, flushed-store detection). The term ends when ``stop`` is set (the
lease is released, so a standby takes over at once), when the lease is lost, or when a fenced write is refused
(a successor holds the lease): the informer is stopped and the process goes back to standby.

Readiness: a leader is ready once its term's first full pass has completed (Redis rebuilt, ``inventory``
marked synced); a standby is ready while Redis answers its lease attempts (it is a healthy spare, and the
extender judges inventory readiness from the store's marker, not from us).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry

from vgpu_scheduler.services.registrar.metrics import PassTrigger, RegistrarMetrics, StepDown
from vgpu_scheduler.services.registrar.sync import NodeSync, ProcessMemory
from vgpu_scheduler.services.registrar.vendor import HANDSHAKE_TIMEOUT_S
from vgpu_scheduler.shared.config import RegistrarSettings
from vgpu_scheduler.shared.coord import Lease, LeaseKeeper
from vgpu_scheduler.shared.errors import TransientError
from vgpu_scheduler.shared.k8s import Api, Informer, InformerSettings, KubeClient, Resource
from vgpu_scheduler.shared.runtime import cancel_until_done
from vgpu_scheduler.shared.store import StaleFenceError, Store
from vgpu_scheduler.shared.vendors.catalog import NodeObserver, enabled_vendors, with_handshake_timeout

logger = logging.getLogger(__name__)

LEASE_NAME = "registrar"
EVENT_COMPONENT = "vgpu-scheduler-registrar"


@dataclass(frozen=True)
class RegistrarDeps:
    """What the registrar is given: the store, a kube client, the metrics registry, this process' identity and
    a wall clock (epoch seconds; the handshake's ``Requesting_`` times are read and written in its local time)."""

    store: Store
    kube: KubeClient
    registry: CollectorRegistry
    instance_id: str
    clock: Callable[[], float] = time.time


@dataclass(frozen=True)
class RegistrarTuning:
    """Knobs that are not command-line flags (tests and ``simulate`` shorten them)."""

    lease_name: str = LEASE_NAME
    resync_interval_s: float = 15.0
    """Full pass period (HAMi re-registers every 15 s): handshake timeouts, flushed-store detection."""
    handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S
    informer: InformerSettings = field(default_factory=InformerSettings)
    standby_retry_max_s: float | None = None
    """Longest wait between lease attempts (default ttl/3)."""
    event_component: str = EVENT_COMPONENT


def label_selector(pairs: Sequence[tuple[str, str]]) -> str | None:
    """``--node-label-selector`` pairs as a Kubernetes label selector (``k=v,k2=v2``), None when empty."""
    return ",".join(f"{k}={v}" for k, v in pairs) or None


class RegistrarService:
    """See the module docstring. ``run(stop)`` until ``stop`` is set; ``ready`` is set when first ready."""

    def __init__(
        self,
        settings: RegistrarSettings,
        deps: RegistrarDeps,
        *,
        tuning: RegistrarTuning | None = None,
        vendor: NodeObserver | None = None,
        vendors: Sequence[NodeObserver] | None = None,
    ) -> None:
        """``vendors`` (default: every vendor the device config enables, NVIDIA first, with the tuning's handshake
        timeout) are observed on every node; ``vendor`` alone observes just that one."""
        self.settings = settings
        self.deps = deps
        self.tuning = tuning or RegistrarTuning()
        if vendors is None:
            if vendor is not None:
                vendors = (vendor,)
            else:
                common = settings.common
                enabled = enabled_vendors(common.nvidia, common.device_sections, common.enable_flags)
                vendors = tuple(with_handshake_timeout(enabled, self.tuning.handshake_timeout_s))
        self.vendors: tuple[NodeObserver, ...] = tuple(vendors)
        self.metrics = RegistrarMetrics(deps.registry)
        self.api = Api(deps.kube, component=self.tuning.event_component, instance=deps.instance_id, clock=deps.clock)
        self.lease = Lease(deps.store.leases, self.tuning.lease_name, deps.instance_id, settings.lease_ttl_s)
        self.ready = asyncio.Event()
        self._memory = ProcessMemory()
        self._sync: NodeSync | None = None
        self._standby_ok = False
        self._acquired = False
        self._holder = ""
        self._resync = asyncio.Event()
        self.terms = 0
        """How many leadership terms this process has started (tests and logs)."""

    # ---- status --------------------------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        """True during a leadership term (until it ends; a refused write ends it at once)."""
        return self._sync is not None and not self._sync.stale.is_set()

    @property
    def sync(self) -> NodeSync | None:
        """The current term's writer (None on a standby)."""
        return self._sync

    async def readiness(self) -> tuple[bool, str]:
        """``/readyz``: a leader with a completed pass, or a standby whose lease attempts reach Redis."""
        sync = self._sync
        if sync is not None:
            if sync.stale.is_set():
                return False, "leader term ending (a successor holds the lease)"
            if sync.synced.is_set():
                return True, f"leader, inventory synced ({len(sync.registered)} nodes registered)"
            return False, "leader, first pass in progress"
        if self._acquired:
            return False, "leader, starting a term"
        if self._standby_ok:
            return True, f"standby (lease held by {self._holder or 'nobody'})"
        return False, "standby, redis not reachable yet"

    def request_resync(self) -> None:
        """Ask the leader for a full pass now (no effect on a standby)."""
        self._resync.set()

    # ---- the loop ------------------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Standby ⇄ leader until ``stop`` is set; then give the lease up and return."""
        logger.info(
            "registrar starting",
            extra={"instance": self.deps.instance_id, "lease_ttl_s": self.settings.lease_ttl_s},
        )
        self.metrics.leader.set(0)
        try:
            while not stop.is_set():
                if not await self._standby(stop):
                    break
                await self._lead(stop)
        finally:
            self.metrics.leader.set(0)
            logger.info("registrar stopped", extra={"instance": self.deps.instance_id})

    async def _standby(self, stop: asyncio.Event) -> bool:
        """Wait until we hold the lease; False if ``stop`` came first."""
        ttl = self.settings.lease_ttl_s
        retry_max = self.tuning.standby_retry_max_s or ttl / 3
        while not stop.is_set():
            delay = retry_max
            try:
                if await self.lease.try_acquire():
                    self._acquired = True  # a leader from now on, not ready until its first pass
                    self._standby_ok = True
                    return True
                info = await self.lease.current()
                self._standby_ok = True
                self._holder = info.holder if info is not None else ""
                if info is not None:
                    delay = min(retry_max, info.ttl_ms / 1000 + 0.01)
                self.ready.set()
            except TransientError as e:
                self._standby_ok = False
                self.metrics.errors.inc()
                logger.warning("lease attempt failed", extra={"error": str(e)})
            await _wait_any([stop], delay)
        return False

    async def _lead(self, stop: asyncio.Event) -> None:
        """One leadership term (see the module docstring)."""
        self.terms += 1
        fence = self.lease.fence
        logger.info("registrar leading", extra={"instance": self.deps.instance_id, "token": fence.token})
        self.metrics.leader.set(1)
        reason = StepDown.STOP
        try:
            async with LeaseKeeper(self.lease) as keeper:
                try:
                    epoch = await self.deps.store.meta.ensure_epoch()
                except TransientError as e:
                    self.metrics.errors.inc()
                    logger.warning("redis unavailable at the start of a term", extra={"error": str(e)})
                    reason = StepDown.REDIS_ERROR
                    return
                sync = NodeSync(
                    store=self.deps.store,
                    api=self.api,
                    vendors=self.vendors,
                    metrics=self.metrics,
                    fence=fence,
                    memory=self._memory,
                    clock=self.deps.clock,
                    epoch=epoch,
                )
                self._sync = sync
                reason = await self._term(stop, keeper, sync)
        finally:
            self._sync = None
            self._acquired = False
            self.metrics.leader.set(0)
            for v in self.vendors:
                self.metrics.nodes_registered.labels(v.name).set(0)
            self.metrics.step_downs.labels(reason.value).inc()
            logger.info("registrar leadership ended", extra={"reason": reason.value, "token": fence.token})

    async def _term(self, stop: asyncio.Event, keeper: LeaseKeeper, sync: NodeSync) -> StepDown:
        informer = Informer(
            self.deps.kube,
            Resource.NODES,
            sync.on_event,
            label_selector=label_selector(self.settings.node_label_selector),
            settings=self.tuning.informer,
        )
        self._resync.clear()
        task = asyncio.create_task(informer.run(), name="registrar:node-informer")
        try:
            while True:
                first = not sync.synced.is_set()
                ends = [stop, keeper.lost, sync.stale]
                await _wait_any(
                    [*ends, self._resync, sync.synced if first else None], self.tuning.resync_interval_s, task
                )
                if task.done():
                    task.result()  # the informer ends only on a bug: let the supervisor see it
                    raise RuntimeError("node informer ended unexpectedly")
                if stop.is_set():
                    return StepDown.STOP
                if keeper.lost.is_set():
                    return StepDown.LEASE_LOST
                if sync.stale.is_set():
                    return StepDown.STALE_FENCE
                if not sync.synced.is_set():
                    continue  # the first pass runs when the informer's first list completes
                if first:
                    self.ready.set()
                    continue
                self._resync.clear()
                try:
                    await sync.full_pass(PassTrigger.PERIODIC)
                except TransientError as e:
                    self.metrics.errors.inc()
                    logger.warning("full pass failed, will retry", extra={"error": str(e)})
        finally:
            await cancel_until_done([task])
            if not task.cancelled() and task.exception() is not None:
                logger.debug("node informer ended with an error", extra={"error": repr(task.exception())})


async def _wait_any(
    events: Sequence[asyncio.Event | None], timeout_s: float, task: asyncio.Task[None] | None = None
) -> None:
    """Return when any of ``events`` is set, ``task`` finishes, or ``timeout_s`` passes."""
    live = [e for e in events if e is not None]
    if any(e.is_set() for e in live) or (task is not None and task.done()):
        return
    waiters = [asyncio.create_task(e.wait(), name="registrar:wait") for e in live]
    pending: set[asyncio.Task[Any]] = set(waiters)
    if task is not None:
        pending.add(task)
    try:
        await asyncio.wait(pending, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)


__all__ = [
    "EVENT_COMPONENT",
    "LEASE_NAME",
    "RegistrarDeps",
    "RegistrarService",
    "RegistrarTuning",
    "StaleFenceError",
    "label_selector",
]
