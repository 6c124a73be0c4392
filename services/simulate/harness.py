"""An embedded cluster: the API emulator, one Store and the REAL registrar, informer and extender in this process.

``async with EmbeddedCluster(settings, cluster) as ec:`` starts the emulator on a free loopback port seeded with
the cluster's objects, connects the store (embedded fakeredis via ``connect(None)`` unless ``redis_url`` is given),
opens one kube client against the emulator, runs the three services as named tasks (the extender's HTTP app on a
free port) and waits until all three are ready. ``ec.driver()`` then plays kube-scheduler and the device plugin
against them. Leaving the block sets the stop event and waits for every service to return. Every party (the
registrar, informer and extender, the driver's admission and device plugins) serves the vendors the settings' device
config enables (:attr:`EmbeddedCluster.vendors`).

Determinism: before each ``/filter`` the driver waits until the extender's snapshot cache has caught up with every
node's generation in the store, so a filter never plans on a stale snapshot. Binds run concurrently, as
kube-scheduler runs them; on the simulated clock (:mod:`services.simulate.clock`, which ``simulate`` uses with the
embedded store) their interleaving depends only on the order of events, and the extender's node-lock retry jitter
is seeded, so the same input gives the same run.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import aiohttp
from prometheus_client import CollectorRegistry

from vgpu_scheduler.services.allinone.service import AllInOneDeps, AllInOneService
from vgpu_scheduler.services.extender.service import ExtenderService
from vgpu_scheduler.services.extender.snapshot import CacheSettings, SnapshotCache
from vgpu_scheduler.services.simulate.admission import local_admission
from vgpu_scheduler.services.simulate.clock import VirtualClockLoop
from vgpu_scheduler.services.simulate.driver import Defaults, Driver
from vgpu_scheduler.services.simulate.kubehttp import Extenders, KubeHttp
from vgpu_scheduler.services.simulate.manifests import Cluster, Workload
from vgpu_scheduler.services.simulate.priority import PriorityAdmission
from vgpu_scheduler.services.simulate.timing import SchedulerTiming
from vgpu_scheduler.shared.config import AllInOneSettings, BindAddress, SimulateSettings
from vgpu_scheduler.shared.domain.quota import QuotaState
from vgpu_scheduler.shared.emulator import Emulator
from vgpu_scheduler.shared.k8s import KubeClient, KubeSettings, open_client
from vgpu_scheduler.shared.store import Store, connect
from vgpu_scheduler.shared.vendors.registry import Vendors

logger = logging.getLogger(__name__)

KubeObject = dict[str, Any]


class HarnessError(RuntimeError):
    """The embedded services did not start, or did not reach a state in time."""


@dataclass(frozen=True, slots=True)
class HarnessTiming:
    ready_timeout_s: float = 60.0
    """How long the three services may take to become ready."""
    settle_timeout_s: float = 30.0
    """How long the snapshot catch-up before a filter may take."""
    scheduler: SchedulerTiming = field(default_factory=SchedulerTiming)
    """kube-scheduler's backoffs and extender timeout, the device plugin's Allocate latency."""
    seed: int = 0
    """Seeds the extender's node-lock retry jitter (reproducible runs)."""


def with_store_prefix(settings: SimulateSettings, prefix: str) -> SimulateSettings:
    """The same settings with another Redis key prefix (each compared run gets a fresh keyspace)."""
    common = dataclasses.replace(settings.common, key_prefix=prefix)
    return SimulateSettings(
        common=common,
        registrar=dataclasses.replace(settings.registrar, common=common),
        informer=dataclasses.replace(settings.informer, common=common),
        extender=dataclasses.replace(settings.extender, common=common),
    )


def _with_free_port(settings: SimulateSettings | AllInOneSettings) -> SimulateSettings | AllInOneSettings:
    """The extender on a free loopback port (``127.0.0.1:0``), whatever ``--http_bind`` says."""
    extender = dataclasses.replace(settings.extender, http_bind=BindAddress("127.0.0.1", 0))
    return dataclasses.replace(settings, extender=extender)


SIMULATED_LEASE_TTL_S = 3600.0
"""The registrar's and informer's lease TTL on the simulated clock. Lease expiry is judged by the store's wall clock
while renewals follow the simulated one, which stands still while the process computes: with the usual 15 s, a
busy machine would let a lease lapse mid-run. One process holds both leases anyway."""


def _with_long_leases(settings: SimulateSettings | AllInOneSettings) -> SimulateSettings | AllInOneSettings:
    registrar = dataclasses.replace(settings.registrar, lease_ttl_s=SIMULATED_LEASE_TTL_S)
    informer = dataclasses.replace(settings.informer, lease_ttl_s=SIMULATED_LEASE_TTL_S)
    return dataclasses.replace(settings, registrar=registrar, informer=informer)


class EmbeddedCluster:
    """See the module docstring."""

    def __init__(
        self,
        settings: SimulateSettings | AllInOneSettings,
        cluster: Cluster,
        *,
        timing: HarnessTiming | None = None,
        purge_store: bool = False,
    ) -> None:
        self.settings = settings
        self.purge_store = purge_store
        self.cluster = cluster
        self.timing = timing or HarnessTiming()
        self.emulator = Emulator(graceful_pod_deletion=True)  # a preemption's victims terminate as on a cluster
        self.stop = asyncio.Event()
        self._stack = contextlib.AsyncExitStack()
        self._task: asyncio.Task[None] | None = None
        self.store: Store | None = None
        self.services: AllInOneService | None = None
        self.session: aiohttp.ClientSession | None = None

    # ---- lifecycle ---------------------------------------------------------------------------------------------

    async def __aenter__(self) -> EmbeddedCluster:
        try:
            await self._start()
        except BaseException:
            await self._shutdown()
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._shutdown()

    async def _start(self) -> None:
        common = self.settings.common
        # Libraries draw from the global generator too (aiohttp's connection-pool waiter order): seed it, so that a
        # run on the simulated clock is reproducible
        random.seed(self.timing.seed)
        await self.emulator.start()
        self._stack.push_async_callback(self.emulator.stop)
        for obj in self.cluster.objects():
            self.emulator.put(obj)
        store = Store.create(
            connect(common.redis_url, password_file=common.redis_password_file),
            prefix=common.key_prefix,
            wait_replicas=common.redis_wait_replicas,
            wait_timeout_s=common.redis_wait_timeout_s,
        )
        self.store = store
        self._stack.push_async_callback(store.aclose)
        if self.purge_store:
            self._stack.push_async_callback(store.purge)
        kube: KubeClient = await self._stack.enter_async_context(
            open_client(KubeSettings(server=self.emulator.url, qps=0, burst=1, timeout_s=10.0))
        )
        settings = _with_free_port(self.settings)
        if isinstance(asyncio.get_running_loop(), VirtualClockLoop):
            settings = _with_long_leases(settings)
        deps = AllInOneDeps(
            store=store,
            kube=kube,
            registry=CollectorRegistry(),
            instance_id=common.instance_id,
            cache_settings=CacheSettings(status_interval_s=0.05),
            rng=random.Random(self.timing.seed),
            lock_wakeups=False,  # the feed arrives in real time; the seeded backoff on the simulated clock decides
        )
        self.services = AllInOneService(settings, deps, staged=True, drain_timeout_s=2.0)
        self._task = asyncio.create_task(self.services.run(self.stop), name="simulate:services")
        await self._await_ready()
        self.session = aiohttp.ClientSession()

    async def _await_ready(self) -> None:
        """Wait until the services are ready and the extender listens; HarnessError if they end or time runs out."""
        assert self.services is not None and self._task is not None
        events = {"all services": self.services.ready, "extender server": self.services.extender.listening}
        waiters = [asyncio.create_task(e.wait(), name=f"simulate:ready:{k}") for k, e in events.items()]
        try:
            async with asyncio.timeout(self.timing.ready_timeout_s):
                while any(not e.is_set() for e in events.values()):
                    await asyncio.wait([*waiters, self._task], return_when=asyncio.FIRST_COMPLETED)
                    if self._task.done():
                        error = None if self._task.cancelled() else self._task.exception()
                        raise HarnessError(f"the embedded services ended during start-up: {error!r}")
        except TimeoutError:
            missing = ", ".join(k for k, e in events.items() if not e.is_set())
            raise HarnessError(
                f"the embedded services were not ready within {self.timing.ready_timeout_s:g}s (waiting for: {missing})"
            ) from None
        finally:
            for w in waiters:
                w.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)

    async def _shutdown(self) -> None:
        self.stop.set()
        if self.session is not None:
            await self.session.close()
            self.session = None
        task, self._task = self._task, None
        if task is not None:
            try:
                await task
            except Exception as e:  # already stopping: report, do not mask the caller's own exception
                logger.warning("the embedded services ended with an error", extra={"error": repr(e)})
        await self._stack.aclose()

    # ---- the driver and its waits ------------------------------------------------------------------------------

    @property
    def extender(self) -> ExtenderService:
        assert self.services is not None
        return self.services.extender

    @property
    def vendors(self) -> Vendors:
        """The enabled vendors the services run with (from the device config, NVIDIA first)."""
        assert self.services is not None
        return self.services.vendors

    @property
    def extender_url(self) -> str:
        server = self.extender.server
        assert server is not None
        return server.url

    def driver(self, workload: Workload | None = None) -> Driver:
        """A driver against these services (local admission with the store's quota, waits for determinism), with
        the ``workload``'s PriorityClasses and PodGroups."""
        assert self.session is not None and self.store is not None
        ext = self.settings.extender
        store = self.store

        async def quota(namespace: str) -> QuotaState | None:
            return await store.quota.get(namespace)

        simulated = isinstance(asyncio.get_running_loop(), VirtualClockLoop)
        vendors = self.vendors
        driver = Driver(
            KubeHttp(self.session, self.emulator.url),
            Extenders(self.session, [self.extender_url], timeout_s=self.timing.scheduler.http_timeout_s),
            local_admission(
                cfg=self.settings.common.nvidia,
                scheduler_name=ext.scheduler_name,
                force_overwrite_default_scheduler=ext.force_overwrite_default_scheduler,
                quota=quota,
                vendors=vendors,
            ),
            cfg=self.settings.common.nvidia,
            defaults=Defaults(ext.node_policy, ext.gpu_policy),
            before_filter=self.snapshot_caught_up,
            timing=self.timing.scheduler,
            clock="simulated" if simulated else "real",
            vendors=vendors,
            priority=PriorityAdmission(workload.priority_classes if workload is not None else ()),
            pod_groups=workload.pod_groups if workload is not None else (),
            controllers=workload.controllers if workload is not None else (),
            budgets=workload.budgets if workload is not None else (),
            evictions=workload.evictions if workload is not None else (),
            controller_delay_s=self.timing.scheduler.controller_delay_s,
            idle=self.extender_idle,
            after_terminate=self.released,
        )
        defrag = self.extender.autodefrag
        if defrag is not None:
            driver.moves_in_background = True
            driver.defrag_moves = defrag.moves
        return driver

    async def extender_idle(self) -> None:
        """Wait until the extender works out no preemption, checks no gang and carries out no defragmentation plan
        in the background (a plan waiting for the moved pods' replacements or the helped pod's bind counts as done:
        the driver plays those)."""
        if self.extender.autodefrag is not None:  # first: a pod it finds no plan for goes to the preemptor
            await self.extender.autodefrag.idle()
        await self.extender.preemptor.idle()
        await self.extender.gangs.idle()

    async def released(self, pod: KubeObject) -> None:
        """Wait until the informer released what a terminated pod held (it saw the pod end)."""
        assert self.store is not None
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        cache = self.extender.cache
        try:
            async with asyncio.timeout(self.timing.settle_timeout_s):
                while (node := await self.store.reservations.node_of(uid)) is not None:
                    # the release bumps the node's generation, which the extender's cache follows
                    await cache.wait_until(_moved_on(cache, node), timeout_s=None)
        except TimeoutError:
            raise HarnessError(f"timed out waiting for the informer to release the terminated pod {uid}") from None

    async def snapshot_caught_up(self, pod: KubeObject | None = None) -> None:
        """Wait until the extender's snapshot holds every registered node at the store's current generation."""
        assert self.store is not None
        store, cache = self.store, self.extender.cache
        nodes = await store.inventory.list_nodes()
        gens = await store.inventory.generations(nodes)

        def caught_up() -> bool:
            return all((cache.generation(n) or 0) >= g for n, g in gens.items())

        try:
            await cache.wait_until(caught_up, timeout_s=self.timing.settle_timeout_s)
        except TimeoutError:
            raise HarnessError("timed out waiting for the extender's snapshot to catch up with the store") from None


def _moved_on(cache: SnapshotCache, node: str) -> Callable[[], bool]:
    """A predicate: the extender's snapshot of ``node`` has a newer generation than now."""
    seen = cache.generation(node) or 0
    return lambda: (cache.generation(node) or 0) > seen
