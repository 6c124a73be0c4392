"""The informer service: Pods, ResourceQuotas and Nodes → allocations, usage, quotas and node-lock releases in Redis.

One instance is active at a time (the Redis lease ``informer``, with fencing); the others stand by and take over
within one lease TTL. A leadership *term*:

* watches Pods (accounting, :mod:`services.informer.accounting`), ResourceQuotas (limits) and Nodes (the node-lock
  annotation, :mod:`services.informer.locks`);
* reconciles Redis against fresh API lists once all three caches are loaded, then every
  ``--reconcile-interval`` (:mod:`services.informer.reconcile`), and marks the store synced for the extender;
* collects reservations never confirmed within ``--reservation-grace``, or made for a pod already deleted
  (:mod:`services.informer.expiry`);
* sweeps node locks for timeouts (``--node-lock-timeout``) and for releases it may have missed;
* watches the store epoch: a flushed Redis is rebuilt at once (the lease goes with the flush, so the term also
  ends and a new one — here or on a standby — starts with a full rebuild).

Every Redis write passes the term's fence; a refused write (``StaleFenceError``) ends the term and the instance
stands by. ``stop`` ends everything and releases the lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry

from vgpu_scheduler.services.informer.accounting import Accountant
from vgpu_scheduler.services.informer.expiry import ReservationExpiry
from vgpu_scheduler.services.informer.labels import PodLabeler
from vgpu_scheduler.services.informer.locks import NodeLockReleaser
from vgpu_scheduler.services.informer.metrics import (
    AllocationView,
    DeviceIndex,
    InformerMetrics,
    Malformed,
    PodAllocationCollector,
)
from vgpu_scheduler.services.informer.pods import pod_facts
from vgpu_scheduler.services.informer.quotas import combine, limited_namespaces, namespace_limits, read_quota
from vgpu_scheduler.services.informer.reconcile import Reconciler, ReconcileReport
from vgpu_scheduler.services.informer.reporting import ProblemReporter
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.config import InformerSettings
from vgpu_scheduler.shared.coord import Lease, LeaseKeeper
from vgpu_scheduler.shared.errors import TransientError
from vgpu_scheduler.shared.k8s import Api, EventKind, Informer, KubeClient, KubeObject, Resource, WatchEvent
from vgpu_scheduler.shared.k8s import InformerSettings as WatchSettings
from vgpu_scheduler.shared.k8s.objects import annotations_of, key_of, name_of, namespace_of
from vgpu_scheduler.shared.runtime import FailureStreak, cancel_until_done
from vgpu_scheduler.shared.store import Fence, StaleFenceError, Store, SyncMarker
from vgpu_scheduler.shared.vendors.catalog import enabled_vendors
from vgpu_scheduler.shared.vendors.registry import Vendors

logger = logging.getLogger(__name__)

LEASE_NAME = "informer"
UNREADABLE_QUOTA = "UnreadableQuotaLimit"


@dataclass(frozen=True)
class InformerTuning:
    """Intervals that are not flags (tests shorten them). ``None`` derives a default from the settings."""

    watch: WatchSettings = field(default_factory=WatchSettings)
    lease_retry_s: float | None = None  # standby: lease ttl / 3
    lock_sweep_s: float | None = None  # min(node-lock-timeout / 10, 10 s)
    reservation_sweep_s: float | None = None  # min(reservation-grace / 4, 15 s)
    epoch_check_s: float = 5.0
    retry_s: float = 5.0  # after a failed reconcile pass
    orphan_recheck_s: float = 30.0  # after a pass that found quota charges of no pod: the pass that refunds them
    list_timeout_s: float = 60.0
    plugin_release_grace_s: float = 3.0  # the device plugin removes a settled holder's lock annotation itself


@dataclass(frozen=True)
class InformerDeps:
    """Everything the informer uses, built by the composition root (``main.run``, all-in-one, simulate)."""

    store: Store
    kube: KubeClient
    api: Api
    registry: CollectorRegistry
    instance_id: str
    clock: Callable[[], float] = time.time
    tuning: InformerTuning = field(default_factory=InformerTuning)


async def _wait(event: asyncio.Event, timeout_s: float) -> bool:
    """Wait for ``event`` at most ``timeout_s``; True if it is set."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout_s):
            await event.wait()
    return event.is_set()


class InformerService:
    """See the module docstring. ``ready`` is set when first ready (standby: Redis answered; leader: synced);
    ``synced`` is set while this instance leads and its store is synced (cleared on a flush or on losing the
    lease). ``legacy_metrics`` (default: ``--legacy-metrics``) also exports HAMi's legacy names of the
    per-container and MIG gauges."""

    def __init__(
        self,
        settings: InformerSettings,
        deps: InformerDeps,
        *,
        legacy_metrics: bool | None = None,
        vendors: Vendors | None = None,
    ) -> None:
        self.settings = settings
        self.deps = deps
        common = settings.common
        self.vendors = vendors or enabled_vendors(common.nvidia, common.device_sections, common.enable_flags)
        """Every enabled vendor (default: from the device config): whose pods are ours and whose allocated
        annotations are read."""
        self.metrics = InformerMetrics(deps.registry)
        legacy = settings.legacy_metrics if legacy_metrics is None else legacy_metrics
        deps.registry.register(PodAllocationCollector(self.allocation_view, legacy=legacy))
        self.ready = asyncio.Event()
        self.synced = asyncio.Event()
        self._term: _Term | None = None
        self._redis_error: str | None = None
        self.synced_epoch: str | None = None  # the store epoch of the last complete pass (survives terms)

    @property
    def leading(self) -> bool:
        return self._term is not None

    @property
    def term(self) -> _Term:
        """The current leadership term (tests drive passes through it). RuntimeError when standing by."""
        if self._term is None:
            raise RuntimeError("the informer does not lead")
        return self._term

    def allocation_view(self) -> AllocationView | None:
        """What the scrape-time HAMi gauges show: the current term's recorded allocations and GPU indices; None
        while standing by (only the leader exports them)."""
        term = self._term
        if term is None:
            return None
        return AllocationView(allocations=term.accountant.recorded, device_indices=term.device_index.indices)

    async def run(self, stop: asyncio.Event) -> None:
        """Stand by for the lease, lead while it is held, until ``stop``; then release it and return."""
        lease = Lease(self.deps.store.leases, LEASE_NAME, self.deps.instance_id, self.settings.lease_ttl_s)
        retry_s = self.deps.tuning.lease_retry_s or self.settings.lease_ttl_s / 3
        while not stop.is_set():
            try:
                got = await lease.try_acquire()
                self._redis_error = None
            except TransientError as e:
                got = False
                self._redis_error = str(e)
                logger.warning("lease attempt failed", extra={"lease": LEASE_NAME, "error": str(e)})
            if got:
                await self._lead(lease, stop)
                continue
            if self._redis_error is None:
                self.ready.set()
            await _wait(stop, retry_s)

    async def _lead(self, lease: Lease, stop: asyncio.Event) -> None:
        self.metrics.leader.set(1)
        logger.info("leading", extra={"lease": LEASE_NAME, "token": lease.token, "instance": self.deps.instance_id})
        try:
            async with LeaseKeeper(lease) as keeper:
                self._term = _Term(self, lease.fence)
                await self._term.run(stop, keeper.lost)
        except StaleFenceError as e:
            logger.warning("fenced out (the lease has another holder or is gone): standing by", extra={"error": str(e)})
        finally:
            self._term = None
            self.synced.clear()
            self.metrics.leader.set(0)
            self.metrics.pods_tracked.set(0)  # only the leader reports what it tracks
            self.metrics.locks_held.set(0)

    async def readiness(self) -> tuple[bool, str]:
        """Ready while Redis answers and either standing by or leading with a synced store."""
        try:
            await self.deps.store.meta.ping()
        except TransientError as e:
            return False, f"redis: {e}"
        if self._term is None:
            return True, "standby"
        if self.synced.is_set():
            return True, "leader, synced"
        return False, "leader, loading pods and quotas"


class _Term:
    """One leadership term: caches, writers and loops, all fenced with one token."""

    def __init__(self, service: InformerService, fence: Fence) -> None:
        self.service = service
        deps, settings = service.deps, service.settings
        self.fence = fence
        self.store = deps.store
        self.api = deps.api
        self.metrics = service.metrics
        self.cfg = settings.common.nvidia
        self.vendors = service.vendors
        self.tuning = deps.tuning
        self.clock = deps.clock
        self.mutex = asyncio.Lock()  # accounting writes vs reconcile passes
        self.reconcile_trigger = asyncio.Event()
        self.device_index = DeviceIndex()  # node → GPU UUID → index, for hami_node_gpu_mig_instance_info
        self.registrations: dict[str, dict[str, Any]] = {}  # node → its annotations but the lock, as last seen
        self.reporter = ProblemReporter(deps.api, self.metrics)
        self.labeler = PodLabeler(deps.api, added=self.metrics.pod_labels_added.inc)
        self.accountant = Accountant(deps.store, fence, self.cfg, self.reporter, self.metrics, vendors=service.vendors)
        watch = self.tuning.watch
        self.pods = Informer(deps.kube, Resource.PODS, self._on_pod, settings=watch)
        self.nodes = Informer(deps.kube, Resource.NODES, self._on_node, settings=watch)
        self.quotas = Informer(deps.kube, Resource.RESOURCEQUOTAS, self._on_quota, settings=watch)
        self.locks = NodeLockReleaser(
            store=deps.store,
            api=deps.api,
            metrics=self.metrics,
            clock=deps.clock,
            timeout_s=settings.node_lock_timeout_s,
            plugin_grace_s=self.tuning.plugin_release_grace_s,
            pod=lambda ns, name: self.pods.get(name, ns),
            node=self.nodes.get,
            node_names=lambda: [name_of(o) for o in self.nodes.objects()],
            still_leader=self.still_leader,
        )
        self.expiry = ReservationExpiry(
            store=deps.store,
            api=deps.api,
            accountant=self.accountant,
            metrics=self.metrics,
            fence=fence,
            mutex=self.mutex,
            clock=deps.clock,
            grace_s=settings.reservation_grace_s,
        )
        self.reconciler = Reconciler(
            store=deps.store,
            fence=fence,
            cfg=self.cfg,
            accountant=self.accountant,
            reporter=self.reporter,
            metrics=self.metrics,
            list_pods=self._list_pods,
            list_quotas=self._list_quotas,
            vendors=service.vendors,
        )

    # ---- lifecycle ---------------------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event, lost: asyncio.Event) -> None:
        """Run every loop until ``stop``, a lost lease or a loop's failure (StaleFenceError is re-raised)."""
        loops: dict[str, Callable[[], Coroutine[Any, Any, None]]] = {
            "pod-informer": self.pods.run,
            "node-informer": self.nodes.run,
            "quota-informer": self.quotas.run,
            "lock-worker": self.locks.run,
            "label-worker": self.labeler.run,
            "lock-sweep": self._lock_sweep_loop,
            "reservation-sweep": self._reservation_loop,
            "reconcile": self._reconcile_loop,
            "epoch-watch": self._epoch_loop,
        }
        tasks = [asyncio.create_task(fn(), name=f"informer:{name}") for name, fn in loops.items()]
        waiters = [
            asyncio.create_task(stop.wait(), name="informer:stop-wait"),
            asyncio.create_task(lost.wait(), name="informer:lease-wait"),
        ]
        try:
            await asyncio.wait([*tasks, *waiters], return_when=asyncio.FIRST_COMPLETED)
        finally:
            await cancel_until_done([*tasks, *waiters])
        if lost.is_set() and not stop.is_set():
            logger.warning("lease lost, standing by", extra={"lease": LEASE_NAME})
        failures = [t.exception() for t in tasks if not t.cancelled() and t.exception() is not None]
        for exc in failures:
            if isinstance(exc, StaleFenceError):
                raise exc
        if failures:
            raise failures[0]  # type: ignore[misc]

    async def still_leader(self) -> bool:
        info = await self.store.leases.inspect(LEASE_NAME)
        return info is not None and info.token == self.fence.token and info.holder == self.service.deps.instance_id

    # ---- API lists for reconcile -------------------------------------------------------------------------------

    async def _list_pods(self) -> list[KubeObject]:
        return await self.api.list_pods(timeout_s=self.tuning.list_timeout_s)

    async def _list_quotas(self) -> list[KubeObject]:
        return await self.api.list_resource_quotas(timeout_s=self.tuning.list_timeout_s)

    # ---- event handlers ----------------------------------------------------------------------------------------

    async def _on_pod(self, ev: WatchEvent) -> None:
        if ev.kind is EventKind.RELISTED:
            return
        deleted = ev.kind is EventKind.DELETED
        facts = pod_facts(ev.obj)
        async with self.mutex:
            if deleted:
                self.expiry.pod_deleted(facts.uid)
                await self.accountant.deleted(ev.obj, facts)
            else:
                await self.accountant.observe(ev.obj, facts=facts)
        if not deleted and facts.node is not None:
            self.labeler.on_pod(ev.obj)
        self.locks.on_pod(facts, deleted)  # last: the worker then sees the updated cache

    async def _on_node(self, ev: WatchEvent) -> None:
        if ev.kind is EventKind.RELISTED:
            return
        deleted = ev.kind is EventKind.DELETED
        name = name_of(ev.obj)
        annotations = annotations_of(ev.obj)
        register = None if deleted else annotations.get(keys.NODE_NVIDIA_REGISTER)
        self.device_index.update(name, register if isinstance(register, str) else None)
        # every vendor's registration is in the node's annotations; the node lock, which every bind sets and
        # clears, is not part of it
        registration = None if deleted else {k: v for k, v in annotations.items() if k != keys.NODE_LOCK}
        before = self.registrations.get(name)
        if registration is None or before != registration:
            self.accountant.forget_totals(name, changed=before is not None and registration is not None)
            if registration is None:
                self.registrations.pop(name, None)
            else:
                self.registrations[name] = registration
        self.locks.on_node(ev.obj, deleted)

    async def _on_quota(self, ev: WatchEvent) -> None:
        if ev.kind is EventKind.RELISTED:
            return
        key = key_of(ev.obj)
        current = [q for q in self.quotas.objects() if key_of(q) != key]
        if ev.kind is not EventKind.DELETED:
            reading = read_quota(ev.obj, self.cfg, self.vendors)
            for problem in reading.problems:
                await self.reporter.report(
                    Malformed.QUOTA_LIMIT, "ResourceQuota", ev.obj, UNREADABLE_QUOTA, str(problem)
                )
            if not reading.problems:
                self.reporter.forget("ResourceQuota", ev.obj)
            current.append(ev.obj)
        else:
            self.reporter.forget("ResourceQuota", ev.obj)
        ns = namespace_of(ev.obj)
        limits = combine(read_quota(q, self.cfg, self.vendors).limits for q in current if namespace_of(q) == ns)
        async with self.mutex:
            state = await self.store.quota.get(ns)
            if state.limits != limits:
                await self.store.quota.set_limits(ns, limits, self.fence)
                logger.info(
                    "quota limits set",
                    extra={"namespace": ns, "mem_mib": limits.mem_mib, "cores_pct": limits.cores_pct},
                )
        self.metrics.quota_namespaces.set(limited_namespaces(namespace_limits(current, self.cfg, self.vendors)))

    # ---- passes (also called directly by tests) ----------------------------------------------------------------

    async def reconcile(self) -> ReconcileReport:
        """One reconcile pass under the mutex; marks the service synced when the store is."""
        async with self.mutex:
            report = await self.reconciler.run_pass()
        if report.synced:
            previous = self.service.synced_epoch
            if report.rebuild and previous is not None and previous != report.epoch:
                self.metrics.store_flushes.inc()
                logger.warning("store was flushed: rebuilt", extra={"old_epoch": previous, "epoch": report.epoch})
            self.service.synced_epoch = report.epoch
            self.service.synced.set()
            self.service.ready.set()
        return report

    async def expire_reservations(self) -> int:
        """One sweep of unconfirmed reservations (:mod:`services.informer.expiry`); returns how many expired."""
        return await self.expiry.sweep()

    # ---- loops -------------------------------------------------------------------------------------------------

    async def _loaded(self) -> None:
        for informer in (self.pods, self.nodes, self.quotas):
            await informer.ready.wait()

    async def _reconcile_loop(self) -> None:
        await self._loaded()
        interval_s = self.service.settings.reconcile_interval_s
        streak = FailureStreak(self.tuning.retry_s, max(interval_s, self.tuning.retry_s))
        while True:
            try:
                report = await self.reconcile()
            except TransientError as e:
                delay_s = streak.failed()
                logger.log(
                    streak.level,
                    "reconcile pass failed, retrying with backoff",
                    extra={"error": str(e), "failures": streak.failures, "retry_in_s": round(delay_s, 3)},
                )
                await _wait(self.reconcile_trigger, delay_s)
                self.reconcile_trigger.clear()
                continue
            if failures := streak.recovered():
                logger.info("reconcile pass succeeded again", extra={"failures": failures})
            if not report.synced:
                continue  # flushed during the pass: again, at once
            # a charge of no pod may be a filter's between charge and reserve: the next pass refunds it, and comes soon
            soon = self.reconciler.suspected_orphans
            await _wait(self.reconcile_trigger, min(interval_s, self.tuning.orphan_recheck_s) if soon else interval_s)
            self.reconcile_trigger.clear()

    async def _epoch_loop(self) -> None:
        while True:
            await asyncio.sleep(self.tuning.epoch_check_s)
            if not self.service.synced.is_set():
                continue
            try:
                status = await self.store.meta.status()
            except TransientError as e:
                logger.warning("store status unreadable", extra={"error": str(e)})
                continue
            if status.epoch != self.service.synced_epoch or not status.is_synced(SyncMarker.ALLOCATIONS):
                logger.warning("store flushed or epoch changed: rebuilding", extra={"epoch": status.epoch})
                self.service.synced.clear()
                self.accountant.replace_cache({})
                self.reconcile_trigger.set()

    async def _lock_sweep_loop(self) -> None:
        settings = self.service.settings
        interval_s = self.tuning.lock_sweep_s or min(settings.node_lock_timeout_s / 10, 10.0)
        await self.nodes.ready.wait()
        await self.pods.ready.wait()
        streak = FailureStreak(interval_s, interval_s)
        while True:
            try:
                await self.locks.sweep()
            except TransientError as e:
                streak.failed()
                logger.log(streak.level, "node lock sweep failed", extra={"error": str(e), "failures": streak.failures})
            else:
                if failures := streak.recovered():
                    logger.info("node lock sweep succeeded again", extra={"failures": failures})
            await asyncio.sleep(interval_s)

    async def _reservation_loop(self) -> None:
        settings = self.service.settings
        interval_s = self.tuning.reservation_sweep_s or min(settings.reservation_grace_s / 4, 15.0)
        await self._loaded()
        streak = FailureStreak(interval_s, interval_s)
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.expire_reservations()
            except TransientError as e:
                streak.failed()
                logger.log(
                    streak.level, "reservation sweep failed", extra={"error": str(e), "failures": streak.failures}
                )
            else:
                if failures := streak.recovered():
                    logger.info("reservation sweep succeeded again", extra={"failures": failures})


__all__ = ["LEASE_NAME", "InformerDeps", "InformerService", "InformerTuning"]
