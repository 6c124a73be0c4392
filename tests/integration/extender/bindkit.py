"""Builders and a harness for the /bind and /webhook tests: the API emulator, a real kube client, a Store on the
redis-server fixture, and a Binder wired to them. Also used by tests/e2e."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry

from tests.integration.extender import filter_harness as fh
from vgpu_scheduler.services.extender.bind import Binder
from vgpu_scheduler.services.extender.bindhint import bind_hint_for
from vgpu_scheduler.services.extender.events import EventSink
from vgpu_scheduler.services.extender.metrics import ExtenderMetrics
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.domain.accounting import collapse
from vgpu_scheduler.shared.domain.allocation import Allocation
from vgpu_scheduler.shared.domain.model import ContainerDevice, DeviceInfo, NodeInventory, NvidiaConfig
from vgpu_scheduler.shared.emulator import Emulator, WriteRecord
from vgpu_scheduler.shared.k8s import Api, KubeSettings, open_client
from vgpu_scheduler.shared.protocol.events import PodEvent
from vgpu_scheduler.shared.store import Store, connect

NOW = 1_800_000_000.0


def gpu(node: str, index: int, *, count: int = 10, mem: int = 16384, cores: int = 100) -> DeviceInfo:
    """GPU ``index`` of ``node`` (UUID ``GPU-<node>-<index>``), as filter_harness builds it."""
    return fh.gpu(f"GPU-{node}-{index}", index, count=count, mem=mem, cores=cores)


def inventory(node: str, n: int = 2, **kw: Any) -> NodeInventory:
    return fh.node(node, n, **kw)


def node_obj(name: str, *, n: int = 2, annotations: Mapping[str, str] | None = None, **kw: Any) -> dict[str, Any]:
    """A Node as the device plugin leaves it (filter_harness.node_object), labelled ``gpu: on``."""
    obj = fh.node_object(fh.node(name, n, **kw), annotations=annotations)
    obj["metadata"]["labels"] = {"gpu": "on"}
    return obj


def pod_obj(
    name: str,
    namespace: str = "default",
    *,
    gpus: int = 1,
    mem: int | None = 1000,
    cores: int | None = 10,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    scheduler: str = "vgpu-scheduler",
) -> dict[str, Any]:
    """A pending pod with one container asking ``gpus`` GPUs (``gpus=0``: no GPU resource at all)."""
    limits: dict[str, str] = {}
    if gpus:
        limits["nvidia.com/gpu"] = str(gpus)
        if mem is not None:
            limits["nvidia.com/gpumem"] = str(mem)
        if cores is not None:
            limits["nvidia.com/gpucores"] = str(cores)
    container: dict[str, Any] = {"name": "main", "image": "busybox", "resources": {"limits": limits}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(labels or {}),
            "annotations": dict(annotations or {}),
        },
        "spec": {"schedulerName": scheduler, "containers": [container]},
        "status": {"phase": "Pending"},
    }


def allocation(pod: Mapping[str, Any], node: str, *devices: tuple[int, int, int]) -> Allocation:
    """The allocation of a one-container pod: (device index, mem MiB, cores %) per device."""
    meta = pod["metadata"]
    ctr = tuple(ContainerDevice(uuid=f"GPU-{node}-{i}", used_mem_mib=m, used_cores=c) for i, m, c in devices)
    return Allocation(
        pod_uid=meta["uid"],
        namespace=meta["namespace"],
        name=meta["name"],
        node=node,
        devices=(ctr,),
        charges=collapse((ctr,), 0, ()),
    )


@dataclass
class Recorded:
    """Events the sink posted, in order."""

    events: list[tuple[str, PodEvent]] = field(default_factory=list)

    async def post(self, pod: Mapping[str, Any], event: PodEvent) -> None:
        self.events.append((pod.get("metadata", {}).get("name", ""), event))


@dataclass
class Harness:
    em: Emulator
    api: Api
    store: Store
    writes: list[WriteRecord]
    registry: CollectorRegistry
    metrics: ExtenderMetrics
    sink: EventSink
    posted: Recorded
    nvidia: NvidiaConfig = field(default_factory=NvidiaConfig)
    hints: bool = False
    """Reserve as ``/filter`` does, with the bind hint of the pod as created (the bind then does not read it)."""

    def binder(self, **kw: Any) -> Binder:
        opts: dict[str, Any] = {
            "node_lock_timeout_s": 300.0,
            "pod_group_wait_s": 2.0,
            "lock_wait_s": 0.3,
            "clock": lambda: NOW,
        }
        opts.update(kw)
        return Binder(
            store=self.store, api=self.api, nvidia=self.nvidia, events=self.sink, metrics=self.metrics, **opts
        )

    def create_pod(self, pod: dict[str, Any]) -> dict[str, Any]:
        return self.em.put(pod)

    async def seed_node(self, name: str, *, n: int = 2, **kw: Any) -> dict[str, Any]:
        await self.store.inventory.put(inventory(name, n, **kw))
        return self.em.put(node_obj(name, n=n, **kw))

    async def reserve(self, alloc: Allocation, *, quota: bool = True, hint: str = "") -> None:
        from vgpu_scheduler.shared.store import Reserved

        if quota:
            await self.store.quota.charge(alloc.namespace, alloc.pod_uid, alloc.quota_mem_mib, alloc.quota_cores_pct)
        result = await self.store.reservations.reserve(alloc, hint=hint)
        assert isinstance(result, Reserved), result

    async def reserve_pod(self, pod: Mapping[str, Any], alloc: Allocation, *, quota: bool = True) -> None:
        """:meth:`reserve` the pod's allocation, with the pod's bind hint (as ``/filter`` writes it) when
        :attr:`hints` is set."""
        hint = bind_hint_for(pod, (keys.DEVICES_ALLOCATED,)) if self.hints else ""
        await self.reserve(alloc, quota=quota, hint=hint)

    def pod(self, name: str, namespace: str = "default") -> dict[str, Any]:
        obj = self.em.get("Pod", namespace, name)
        assert obj is not None
        return obj

    def node(self, name: str) -> dict[str, Any]:
        obj = self.em.get("Node", None, name)
        assert obj is not None
        return obj

    def outcome_count(self, outcome: str) -> float:
        value = self.registry.get_sample_value("vgpu_bind_outcomes_total", {"outcome": outcome})
        return value or 0.0


@contextlib.asynccontextmanager
async def harness(redis_url: str) -> AsyncIterator[Harness]:
    """Emulator + kube client + Store + metrics + a running event sink; everything closed on exit."""
    import asyncio

    em = Emulator(bookmark_interval_s=None)
    await em.start()
    writes: list[WriteRecord] = []
    em.hooks.append(writes.append)
    store = Store.create(connect(redis_url), prefix="t")
    registry = CollectorRegistry()
    posted = Recorded()
    sink = EventSink(posted.post)
    task = asyncio.create_task(sink.run(), name="test-event-sink")
    try:
        async with open_client(KubeSettings(server=em.url, qps=0, timeout_s=5.0)) as client:
            api = Api(client, component="vgpu-scheduler", instance="test", clock=lambda: NOW)
            yield Harness(em, api, store, writes, registry, ExtenderMetrics(registry), sink, posted)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await store.aclose()
        await em.stop()
