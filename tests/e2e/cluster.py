"""The whole system in one process for end-to-end tests: the API emulator, the real registrar, the real informer,
several extender replicas (each its own aiohttp server on a free port, its own Redis and kube clients, its own
metrics registry), a simulated device plugin and a capacity monitor, all against the real redis-server fixture.

``async with running_cluster(redis_url, ClusterSpec(...)) as c:`` starts everything, waits until every service is
ready, yields the :class:`Cluster`, then stops everything in reverse order and checks each stopped cleanly.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from prometheus_client import CollectorRegistry

from tests import waiting
from tests.audit import quota_usage_from_pods, store_quota_usage, store_usage, usage_from_pods
from tests.e2e.devplugin import CapacityMonitor, DevicePlugin
from tests.integration.extender.bindkit import gpu, node_obj
from vgpu_scheduler.services.extender.events import EventSink
from vgpu_scheduler.services.extender.service import ExtenderDeps, ExtenderService
from vgpu_scheduler.services.extender.snapshot import CacheSettings
from vgpu_scheduler.services.informer.service import InformerDeps, InformerService, InformerTuning
from vgpu_scheduler.services.registrar.service import RegistrarDeps, RegistrarService, RegistrarTuning
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.config import (
    BindAddress,
    CommonSettings,
    ExtenderSettings,
    InformerSettings,
    RegistrarSettings,
    Service,
)
from vgpu_scheduler.shared.emulator import Emulator
from vgpu_scheduler.shared.k8s import Api, KubeClient, KubeSettings, open_client
from vgpu_scheduler.shared.k8s import InformerSettings as WatchSettings
from vgpu_scheduler.shared.protocol.events import PodEvent
from vgpu_scheduler.shared.store import Store, connect

SCHEDULER = "vgpu-scheduler"
FAST_WATCH = WatchSettings(watch_timeout_s=60, read_grace_s=10, backoff_initial_s=0.01, backoff_max_s=0.1)
FAST_CACHE = CacheSettings(feed_block_s=0.2, status_interval_s=0.2, backoff_initial_s=0.01, backoff_max_s=0.1)


@dataclass(frozen=True)
class ClusterSpec:
    nodes: int = 8
    gpus_per_node: int = 4
    slots: int = 10
    mem_mib: int = 16384
    cores: int = 100
    replicas: int = 3
    node_lock_timeout_s: float = 300.0
    stuck_nodes: frozenset[str] = frozenset()
    """Nodes whose device plugin never answers Allocate (their locks must time out)."""
    quotas: dict[str, dict[str, str]] = field(default_factory=dict)
    """namespace → ResourceQuota ``spec.hard``."""
    registrar_resync_s: float = 15.0
    redis_wait_replicas: int | None = None
    """``--redis-wait-replicas`` of every component (None: the default, 1 with a Sentinel URL)."""
    bind_aware: bool = True
    """``--bind-aware-placement``: False places by the node policy alone (tests that predict exact nodes)."""
    """The registrar's full pass (how soon it notices a flushed Redis)."""

    def node_names(self) -> list[str]:
        return [f"node-{i:03d}" for i in range(self.nodes)]


@dataclass
class Replica:
    service: ExtenderService
    url: str
    events: list[tuple[str, PodEvent]]
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def alive(self) -> bool:
        return not self.stop.is_set()

    def kill(self) -> None:
        """Stop this replica (it drains in-flight requests; new connections are refused)."""
        self.stop.set()

    def metric(self, name: str, **labels: str) -> float:
        value = self.service.deps.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value


@dataclass
class Cluster:
    spec: ClusterSpec
    em: Emulator
    store: Store
    http: aiohttp.ClientSession
    replicas: list[Replica]
    registrar: RegistrarService
    informer: InformerService
    plugin: DevicePlugin
    monitor: CapacityMonitor
    api: Api

    def pods(self) -> list[dict[str, Any]]:
        return self.em.list("pods")

    async def audit_matches(self) -> bool:
        """Redis usage and quota usage == recomputed from the API's pods."""
        pods = self.pods()
        return await store_usage(self.store) == usage_from_pods(pods) and await store_quota_usage(
            self.store
        ) == quota_usage_from_pods(pods)

    async def locks_released(self) -> bool:
        """No node carries a lock annotation and no Redis node lock is held."""
        for node in self.em.list("nodes"):
            if keys.NODE_LOCK in (node["metadata"].get("annotations") or {}):
                return False
        infos = await asyncio.gather(*(self.store.locks.inspect(n) for n in self.spec.node_names()))
        return all(i is None for i in infos)

    def metric_sum(self, name: str, **labels: str) -> float:
        return sum(r.metric(name, **labels) for r in self.replicas)


async def eventually(check: Callable[[], Awaitable[bool] | bool], timeout_s: float = 20.0, what: str = "") -> None:
    """:func:`tests.waiting.eventually` with the longer default a whole cluster needs."""
    await waiting.eventually(check, timeout_s, what)


def _common(service: Service, instance: str) -> CommonSettings:
    return CommonSettings(service=service, instance_id=instance)


@contextlib.asynccontextmanager
async def _task(name: str, run: Callable[[asyncio.Event], Coroutine[Any, Any, None]]) -> AsyncIterator[asyncio.Event]:
    """Run ``run(stop)`` in a named task for the block; then set ``stop`` and await it (its errors propagate)."""
    stop = asyncio.Event()
    task: asyncio.Task[None] = asyncio.create_task(run(stop), name=name)
    try:
        yield stop
    finally:
        stop.set()
        async with asyncio.timeout(20):
            await task


async def _ready(event: asyncio.Event, what: str, timeout_s: float = 20.0) -> None:
    try:
        async with asyncio.timeout(timeout_s):
            await event.wait()
    except TimeoutError:
        raise AssertionError(f"{what} did not become ready within {timeout_s}s") from None


@contextlib.asynccontextmanager
async def running_cluster(redis_url: str, spec: ClusterSpec) -> AsyncIterator[Cluster]:
    """Start the whole system (see the module docstring)."""
    em = Emulator(bookmark_interval_s=None, history_limit=200_000)
    await em.start()
    monitor = CapacityMonitor()
    em.hooks.append(monitor)
    for name in spec.node_names():
        em.put(node_obj(name, n=spec.gpus_per_node, count=spec.slots, mem=spec.mem_mib, cores=spec.cores))
        monitor.add_node(
            tuple(gpu(name, i, count=spec.slots, mem=spec.mem_mib, cores=spec.cores) for i in range(spec.gpus_per_node))
        )
    for ns, hard in spec.quotas.items():
        em.put(
            {
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": {"name": "gpu-quota", "namespace": ns},
                "spec": {"hard": hard},
            }
        )
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(em.stop)

        async def kube_client() -> KubeClient:
            return await stack.enter_async_context(open_client(KubeSettings(server=em.url, qps=0, timeout_s=10.0)))

        async def store_client() -> Store:
            s = Store.create(connect(redis_url), prefix="e2e", wait_replicas=spec.redis_wait_replicas)
            stack.push_async_callback(s.aclose)
            return s

        store = await store_client()
        http = await stack.enter_async_context(aiohttp.ClientSession())

        # registrar
        reg_kube = await kube_client()
        registrar = RegistrarService(
            RegistrarSettings(common=_common(Service.REGISTRAR, "registrar-0"), lease_ttl_s=10.0),
            RegistrarDeps(store=await store_client(), kube=reg_kube, registry=CollectorRegistry(), instance_id="r0"),
            tuning=RegistrarTuning(informer=FAST_WATCH, resync_interval_s=spec.registrar_resync_s),
        )
        await stack.enter_async_context(_task("e2e:registrar", registrar.run))

        # informer
        inf_kube = await kube_client()
        informer = InformerService(
            InformerSettings(
                common=_common(Service.INFORMER, "informer-0"),
                lease_ttl_s=10.0,
                node_lock_timeout_s=spec.node_lock_timeout_s,
            ),
            InformerDeps(
                store=await store_client(),
                kube=inf_kube,
                api=Api(inf_kube, component=SCHEDULER, instance="informer-0"),
                registry=CollectorRegistry(),
                instance_id="informer-0",
                tuning=InformerTuning(
                    watch=FAST_WATCH,
                    lease_retry_s=0.1,
                    lock_sweep_s=0.2,
                    reservation_sweep_s=0.5,
                    epoch_check_s=0.5,
                    retry_s=0.1,
                ),
            ),
        )
        await stack.enter_async_context(_task("e2e:informer", informer.run))

        # extender replicas
        replicas: list[Replica] = []
        for i in range(spec.replicas):
            ext_kube = await kube_client()
            events: list[tuple[str, PodEvent]] = []

            async def record(pod: Any, event: PodEvent, events: list[tuple[str, PodEvent]] = events) -> None:
                events.append((pod.get("metadata", {}).get("name", ""), event))

            settings = ExtenderSettings(
                common=_common(Service.EXTENDER, f"extender-{i}"),
                http_bind=BindAddress("127.0.0.1", 0),
                scheduler_name=SCHEDULER,
                node_lock_timeout_s=spec.node_lock_timeout_s,
                bind_aware_placement=spec.bind_aware,
            )
            service = ExtenderService(
                settings,
                ExtenderDeps(
                    store=await store_client(),
                    api=Api(ext_kube, component=SCHEDULER, instance=f"extender-{i}"),
                    registry=CollectorRegistry(),
                    instance_id=f"extender-{i}",
                    nvidia=settings.common.nvidia,
                    event_sink=EventSink(record),
                    cache_settings=FAST_CACHE,
                ),
                drain_timeout_s=5.0,
            )
            stop = await stack.enter_async_context(_task(f"e2e:extender-{i}", service.run))
            replicas.append(Replica(service, "", events, stop))

        # the node side
        plugin = DevicePlugin(await kube_client(), stuck_nodes=spec.stuck_nodes)
        plugin_task = asyncio.create_task(plugin.run(), name="e2e:device-plugin")

        async def stop_plugin() -> None:
            plugin_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await plugin_task

        stack.push_async_callback(stop_plugin)

        await _ready(registrar.ready, "registrar")
        await _ready(informer.synced, "informer")
        for i, r in enumerate(replicas):
            await _ready(r.service.ready, f"extender-{i}")
            assert r.service.server is not None
            r.url = r.service.server.url
        await _ready(plugin.informer.ready, "device plugin")
        yield Cluster(
            spec=spec,
            em=em,
            store=store,
            http=http,
            replicas=replicas,
            registrar=registrar,
            informer=informer,
            plugin=plugin,
            monitor=monitor,
            api=Api(await kube_client(), component="e2e-user"),
        )
