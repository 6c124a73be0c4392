"""An embedded cluster: the API emulator, one Store and the REAL registrar, informer and extender in this process.

``async with EmbeddedCluster(settings, cluster) as ec:`` starts the emulator on a free loopback port seeded with
the cluster's objects, connects the store (embedded fakeredis via ``connect(None)`` unless ``redis_url`` is given),
opens one kube client against the emulator, runs the three services as named tasks (the extender's HTTP app on a
free port) and waits until all three are ready. ``ec.driver()`` then plays kube-scheduler and the device plugin
against them. Leaving the block sets the stop event and waits for every service to return.

Determinism: before each ``/filter`` the driver waits until the extender's snapshot cache has caught up with every
node's generation in the store; after each settle it waits until the informer has confirmed the pod's allocation
and released its node lock in Redis. Those Redis writes announce nothing, so the wait re-reads them with a short
backoff until they hold (bounded by ``settle_timeout_s``); what is awaited is the condition, never a fixed delay.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import aiohttp
from prometheus_client import CollectorRegistry

from services.allinone.service import AllInOneDeps, AllInOneService
from services.extender.service import ExtenderService
from services.extender.snapshot import CacheSettings
from services.simulate.driver import Defaults, Driver, Extenders, KubeHttp, local_admission
from services.simulate.manifests import Cluster
from shared.config import AllInOneSettings, BindAddress, SimulateSettings
from shared.domain.model import QuotaState
from shared.emulator import Emulator
from shared.k8s import KubeClient, KubeSettings, open_client
from shared.store import ReservationState, Store, connect

logger = logging.getLogger(__name__)

KubeObject = dict[str, Any]


class HarnessError(RuntimeError):
    """The embedded services did not start, or did not reach a state in time."""


@dataclass(frozen=True, slots=True)
class HarnessTiming:
    ready_timeout_s: float = 60.0
    """How long the three services may take to become ready."""
    settle_timeout_s: float = 30.0
    """How long one pod's settle (or the snapshot catch-up) may take."""
    poll_initial_s: float = 0.001
    poll_max_s: float = 0.02


async def wait_until(
    check: Callable[[], Awaitable[bool]], *, what: str, timeout_s: float, initial_s: float, max_s: float
) -> None:
    """Re-evaluate ``check`` (a Redis read) with a doubling backoff until it holds; HarnessError after ``timeout_s``."""
    delay = initial_s
    try:
        async with asyncio.timeout(timeout_s):
            while not await check():
                await asyncio.sleep(delay)
                delay = min(delay * 2, max_s)
    except TimeoutError:
        raise HarnessError(f"timed out after {timeout_s:g}s waiting for {what}") from None


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
        self.emulator = Emulator()
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
        await self.emulator.start()
        self._stack.push_async_callback(self.emulator.stop)
        for obj in self.cluster.objects():
            self.emulator.put(obj)
        store = Store.create(
            connect(common.redis_url, password_file=common.redis_password_file), prefix=common.key_prefix
        )
        self.store = store
        self._stack.push_async_callback(store.aclose)
        if self.purge_store:
            self._stack.push_async_callback(store.purge)
        kube: KubeClient = await self._stack.enter_async_context(
            open_client(KubeSettings(server=self.emulator.url, qps=0, burst=1, timeout_s=10.0))
        )
        settings = _with_free_port(self.settings)
        deps = AllInOneDeps(
            store=store,
            kube=kube,
            registry=CollectorRegistry(),
            instance_id=common.instance_id,
            cache_settings=CacheSettings(status_interval_s=0.05),
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
    def extender_url(self) -> str:
        server = self.extender.server
        assert server is not None
        return server.url

    def driver(self) -> Driver:
        """A driver against these services (local admission with the store's quota, waits for determinism)."""
        assert self.session is not None and self.store is not None
        ext = self.settings.extender
        store = self.store

        async def quota(namespace: str) -> QuotaState | None:
            return await store.quota.get(namespace)

        return Driver(
            KubeHttp(self.session, self.emulator.url),
            Extenders(self.session, [self.extender_url]),
            local_admission(
                cfg=self.settings.common.nvidia,
                scheduler_name=ext.scheduler_name,
                force_overwrite_default_scheduler=ext.force_overwrite_default_scheduler,
                quota=quota,
            ),
            cfg=self.settings.common.nvidia,
            defaults=Defaults(ext.node_policy, ext.gpu_policy),
            before_filter=self.snapshot_caught_up,
            after_settle=self.informer_settled,
        )

    async def _poll(self, check: Callable[[], Awaitable[bool]], what: str) -> None:
        t = self.timing
        await wait_until(check, what=what, timeout_s=t.settle_timeout_s, initial_s=t.poll_initial_s, max_s=t.poll_max_s)

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

    async def informer_settled(self, pod: KubeObject) -> None:
        """Wait until the informer confirmed the pod's allocation and released its node lock in Redis."""
        assert self.store is not None
        store = self.store
        meta = pod["metadata"]
        uid, owner = meta["uid"], f"{meta['namespace']}/{meta['name']}"
        node = (pod.get("spec") or {}).get("nodeName")
        holds = "hami.io/vgpu-node" in (meta.get("annotations") or {})

        async def settled() -> bool:
            if holds:
                rec = await store.reservations.get(uid)
                if rec is None or rec.state is not ReservationState.CONFIRMED:
                    return False
            if node:
                lock = await store.locks.inspect(node)
                if lock is not None and lock.owner == owner:
                    return False
            return True

        await self._poll(settled, f"the informer to settle {owner}")
