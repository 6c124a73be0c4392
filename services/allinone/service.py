"""The registrar, informer and extender in one process, sharing one Store, one kube client and one registry.

``AllInOneService(settings, deps).run(stop)`` runs the three services' ``run(stop)`` as named tasks until ``stop`` is
set, then lets each return (the extender drains its HTTP server, the registrar and informer give their leases up).
If one of them fails, the others are stopped the same way and the failure is raised. ``ready`` is set once all three
are ready; :meth:`readiness` is their combined ``/readyz``.

``staged=True`` starts the extender only once the registrar and informer are ready (``simulate`` does this so the
extender's first look at the store finds it synced); a deployment starts all three at once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry

from vgpu_scheduler.services.extender.events import EventSink, api_poster
from vgpu_scheduler.services.extender.service import ExtenderDeps, ExtenderService
from vgpu_scheduler.services.extender.snapshot import CacheSettings
from vgpu_scheduler.services.informer.service import InformerDeps, InformerService
from vgpu_scheduler.services.registrar.service import RegistrarDeps, RegistrarService, RegistrarTuning
from vgpu_scheduler.shared.config import AllInOneSettings, SimulateSettings
from vgpu_scheduler.shared.k8s import Api, KubeClient
from vgpu_scheduler.shared.runtime import wait_then_cancel
from vgpu_scheduler.shared.store import Store
from vgpu_scheduler.shared.vendors.catalog import enabled_vendors, with_handshake_timeout
from vgpu_scheduler.shared.vendors.registry import Vendors

logger = logging.getLogger(__name__)

DEFAULT_COMPONENT = "vgpu-scheduler"
"""The Events' ``source.component`` when ``--scheduler-name`` is empty."""
STOP_DEADLINE_S = 20.0
"""How long the services may take to return after ``stop`` (the extender drains within its own deadline)."""


@dataclass(frozen=True)
class AllInOneDeps:
    """What the three services share, built by the composition root (or by ``simulate``'s harness)."""

    store: Store
    kube: KubeClient
    registry: CollectorRegistry
    instance_id: str
    clock: Callable[[], float] = time.time
    cache_settings: CacheSettings | None = None
    """The extender's snapshot-follower tuning (None: its defaults)."""
    rng: random.Random | None = None
    """The extender's node-lock retry jitter (None: unseeded; ``simulate`` seeds it for reproducible runs)."""
    vendors: Vendors | None = None
    """The enabled device vendors (None: those the device config enables, as the separate services do)."""
    lock_wakeups: bool = True
    """Binds waiting for a busy node lock are woken by the node's change (False: ``simulate``, whose seeded backoff
    on its own clock must decide alone, so that runs are reproducible)."""


class ServiceFailed(RuntimeError):
    """One of the composed services ended on its own (a bug or an unrecoverable error)."""


class AllInOneService:
    """See the module docstring."""

    def __init__(
        self,
        settings: AllInOneSettings | SimulateSettings,
        deps: AllInOneDeps,
        *,
        staged: bool = False,
        drain_timeout_s: float = 10.0,
    ) -> None:
        self.settings = settings
        self.deps = deps
        self.staged = staged
        common = settings.common
        self.vendors = (
            deps.vendors
            if deps.vendors is not None
            else enabled_vendors(common.nvidia, common.device_sections, common.enable_flags)
        )
        """The vendors the informer and the extender serve (the registrar observes the same, with its handshake
        timeout)."""
        component = settings.extender.scheduler_name or DEFAULT_COMPONENT
        api = Api(deps.kube, component=component, instance=deps.instance_id, clock=deps.clock)
        self.registrar = RegistrarService(
            settings.registrar,
            RegistrarDeps(
                store=deps.store, kube=deps.kube, registry=deps.registry, instance_id=deps.instance_id, clock=deps.clock
            ),
            vendors=(
                tuple(with_handshake_timeout(deps.vendors, RegistrarTuning().handshake_timeout_s))
                if deps.vendors is not None
                else None
            ),
        )
        self.informer = InformerService(
            settings.informer,
            InformerDeps(
                store=deps.store,
                kube=deps.kube,
                api=api,
                registry=deps.registry,
                instance_id=deps.instance_id,
                clock=deps.clock,
            ),
            vendors=self.vendors,
        )
        extender_deps = ExtenderDeps(
            store=deps.store,
            api=api,
            registry=deps.registry,
            instance_id=deps.instance_id,
            nvidia=common.nvidia,
            event_sink=EventSink(api_poster(api), normal_per_s=settings.extender.success_event_rate),
            clock=deps.clock,
            rng=deps.rng,
            vendors=self.vendors,
        )
        if deps.cache_settings is not None:
            extender_deps = dataclasses.replace(extender_deps, cache_settings=deps.cache_settings)
        self.extender = ExtenderService(
            settings.extender, extender_deps, drain_timeout_s=drain_timeout_s, lock_wakeups=deps.lock_wakeups
        )
        self.ready = asyncio.Event()

    async def readiness(self) -> tuple[bool, str]:
        """Ready when all three are: ``registrar: ...; informer: ...; extender: ...``."""
        parts = []
        ok = True
        for name, check in (
            ("registrar", self.registrar.readiness),
            ("informer", self.informer.readiness),
            ("extender", self.extender.readiness),
        ):
            good, detail = await check()
            ok = ok and good
            parts.append(f"{name}: {detail}")
        return ok, "; ".join(parts)

    async def run(self, stop: asyncio.Event) -> None:
        """Run the three until ``stop``; stop them all when one ends; raise :class:`ServiceFailed` for that one."""
        inner = asyncio.Event()  # what the services see: set on ``stop`` or when one of them ends
        tasks: dict[asyncio.Task[None], str] = {}

        def start(name: str, service: RegistrarService | InformerService | ExtenderService) -> None:
            tasks[asyncio.create_task(service.run(inner), name=f"all-in-one:{name}")] = name

        start("registrar", self.registrar)
        start("informer", self.informer)
        if not self.staged:
            start("extender", self.extender)
        stop_wait = asyncio.create_task(stop.wait(), name="all-in-one:stop-wait")
        backend = asyncio.create_task(self._backend_ready(), name="all-in-one:backend-ready")
        ready = asyncio.create_task(self._all_ready(), name="all-in-one:ready-watch")
        helpers = (stop_wait, backend, ready)
        failed: str | None = None
        try:
            while not stop.is_set():
                watched: list[asyncio.Future[Any]] = [*tasks, stop_wait]
                if not backend.done():
                    watched.append(backend)
                done, _ = await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
                ended = [name for t, name in tasks.items() if t in done]
                if ended:
                    failed = ended[0]
                    break
                if backend in done and self.staged and "extender" not in tasks.values():
                    start("extender", self.extender)
        finally:
            inner.set()
            for t in helpers:
                t.cancel()
            if tasks:
                await wait_then_cancel(tasks, grace_s=STOP_DEADLINE_S)
            await asyncio.gather(*helpers, *tasks, return_exceptions=True)
        errors = [t.exception() for t in tasks if not t.cancelled() and t.exception() is not None]
        if errors:
            raise ServiceFailed(f"{failed or 'a service'} failed: {errors[0]!r}") from errors[0]
        if failed is not None and not stop.is_set():
            raise ServiceFailed(f"{failed} ended unexpectedly")

    async def _backend_ready(self) -> None:
        await self.registrar.ready.wait()
        await self.informer.synced.wait()

    async def _all_ready(self) -> None:
        await self._backend_ready()
        await self.extender.ready.wait()
        self.ready.set()
        logger.info("all-in-one ready")
