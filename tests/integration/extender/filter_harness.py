"""Harness for extender tests: a seeded store, a running ExtenderService on a free port, an HTTP client.

``running_extender(store, api)`` starts a real replica (snapshot follower, event sink, aiohttp server on
127.0.0.1:0) and yields a :class:`Replica`; events are recorded instead of posted. Used by the filter tests;
the bind/webhook/e2e tests may reuse it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import aiohttp

from vgpu_scheduler.services.extender.events import EventSink
from vgpu_scheduler.services.extender.service import ExtenderDeps, ExtenderService
from vgpu_scheduler.services.extender.snapshot import CacheSettings
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec.register import encode_register_json
from vgpu_scheduler.shared.config import BindAddress, CommonSettings, ExtenderSettings, Service
from vgpu_scheduler.shared.domain.model import NVIDIA, DeviceInfo, NodeInventory
from vgpu_scheduler.shared.k8s import Api
from vgpu_scheduler.shared.metrics import new_registry
from vgpu_scheduler.shared.protocol.events import PodEvent
from vgpu_scheduler.shared.store import Store, SyncMarker
from vgpu_scheduler.shared.vendors.registry import Vendors

WIRE = Path(__file__).resolve().parents[2] / "data" / "kube-scheduler-wire"
FAST_CACHE = CacheSettings(
    feed_block_s=0.05, feed_min_interval_s=0.0, status_interval_s=0.05, backoff_initial_s=0.01, backoff_max_s=0.05
)


def wire(name: str) -> bytes:
    """A captured kube-scheduler body, compacted to one line as it travels on the wire."""
    return json.dumps(json.loads((WIRE / name).read_text()), separators=(",", ":")).encode()


def wire_doc(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((WIRE / name).read_text())
    return doc


def gpu(
    uuid: str, index: int, *, count: int = 10, mem: int = 16384, cores: int = 100, health: bool = True
) -> DeviceInfo:
    return DeviceInfo(
        id=uuid,
        index=index,
        count=count,
        devmem_mib=mem,
        devcore=cores,
        type="NVIDIA-Tesla T4",
        numa=0,
        mode="hami-core",
        health=health,
    )


def node(name: str, gpus: int = 4, **kw: Any) -> NodeInventory:
    """A node with ``gpus`` identical GPUs ``GPU-<name>-<i>``."""
    return NodeInventory(node=name, vendor=NVIDIA, devices=tuple(gpu(f"GPU-{name}-{i}", i, **kw) for i in range(gpus)))


def node_object(
    inv: NodeInventory, *, allocatable: str | None = None, annotations: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The Node a device plugin leaves behind for ``inv``: the register annotation (JSON) and the GPU count in
    ``status.allocatable`` (``allocatable`` overrides it), plus ``annotations``."""
    annos = {keys.NODE_NVIDIA_REGISTER: encode_register_json(inv.devices), **(annotations or {})}
    count = allocatable if allocatable is not None else str(sum(d.count for d in inv.devices))
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": inv.node, "annotations": annos},
        "status": {"allocatable": {"nvidia.com/gpu": count}},
    }


WIRE_NODES = (node("gpu-node-1", 4), node("gpu-node-2", 8))
"""The nodes the captured bodies name: gpu-node-1 with 4 T4s, gpu-node-2 with 8."""


async def seed(store: Store, nodes: Sequence[NodeInventory] = WIRE_NODES, *, synced: bool = True) -> str:
    """Create the store epoch, put the inventories and (optionally) every sync marker; returns the epoch."""
    epoch = await store.meta.ensure_epoch()
    for inv in nodes:
        await store.inventory.put(inv)
    if synced:
        for marker in SyncMarker:
            await store.meta.mark_synced(marker, epoch)
    return epoch


def patched(store: Store, **repos: Any) -> Store:
    """``store`` with some repositories replaced by test doubles (wrappers that intercept calls)."""
    return dataclasses.replace(store, **repos)


def settings(**overrides: Any) -> ExtenderSettings:
    common = CommonSettings(service=Service.EXTENDER, instance_id="test-extender")
    base = ExtenderSettings(common=common, http_bind=BindAddress("127.0.0.1", 0), scheduler_name="vgpu-scheduler")
    return replace(base, **overrides)


@dataclass
class Replica:
    """A running extender replica and a client session to it."""

    service: ExtenderService
    url: str
    http: aiohttp.ClientSession
    stop: asyncio.Event
    task: asyncio.Task[None]
    events: list[tuple[Mapping[str, Any], PodEvent]] = field(default_factory=list)

    async def post(self, path: str, body: bytes | str) -> tuple[int, Any]:
        """POST ``body``; (status, parsed JSON or text)."""
        raw = body.encode() if isinstance(body, str) else body
        data: bytes | io.BytesIO = io.BytesIO(raw) if len(raw) > 256 * 1024 else raw  # aiohttp warns on big bytes
        async with self.http.post(self.url + path, data=data, headers={"Content-Type": "application/json"}) as r:
            text = await r.text()
            try:
                return r.status, json.loads(text)
            except ValueError:
                return r.status, text

    def metric(self, name: str, **labels: str) -> float:
        """One sample of the replica's registry (0 when absent)."""
        return self.service.deps.registry.get_sample_value(name, labels) or 0.0

    async def flushed_events(self) -> list[tuple[Mapping[str, Any], PodEvent]]:
        """The events recorded so far, after the sink has handled everything queued."""
        assert await self.service.deps.event_sink.flush(5.0)
        return list(self.events)

    async def get(self, path: str) -> tuple[int, str]:
        async with self.http.get(self.url + path) as r:
            return r.status, await r.text()

    async def filter(self, body: bytes | str | Mapping[str, Any]) -> dict[str, Any]:
        """POST /filter and return the ``ExtenderFilterResult`` (asserting HTTP 200)."""
        raw = json.dumps(body).encode() if isinstance(body, Mapping) else body
        status, answer = await self.post("/filter", raw)
        assert status == 200, (status, answer)
        assert isinstance(answer, dict)
        return answer


@contextlib.asynccontextmanager
async def running_extender(
    store: Store,
    api: Api,
    *,
    extender_settings: ExtenderSettings | None = None,
    cache_settings: CacheSettings = FAST_CACHE,
    wait_ready: bool = True,
    drain_timeout_s: float = 5.0,
    vendors: Vendors | None = None,
    freeze_gc_when_ready: bool = False,
) -> AsyncIterator[Replica]:
    """Run one replica until the block ends (then stop it and wait for its drain)."""
    recorded: list[tuple[Mapping[str, Any], PodEvent]] = []

    async def record(pod: Mapping[str, Any], event: PodEvent) -> None:
        recorded.append((pod, event))

    deps = ExtenderDeps(
        store=store,
        api=api,
        registry=new_registry(process_metrics=False),
        instance_id="test-extender",
        nvidia=(extender_settings or settings()).common.nvidia,
        event_sink=EventSink(record),
        cache_settings=cache_settings,
        vendors=vendors,
    )
    service = ExtenderService(
        extender_settings or settings(),
        deps,
        drain_timeout_s=drain_timeout_s,
        freeze_gc_when_ready=freeze_gc_when_ready,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(service.run(stop), name="test-extender")
    try:
        async with asyncio.timeout(10):
            listening = asyncio.create_task(service.listening.wait(), name="test-extender-listening")
            await asyncio.wait({listening, task}, return_when=asyncio.FIRST_COMPLETED)
            if task.done():
                listening.cancel()
                task.result()
            if wait_ready:
                await service.ready.wait()
        assert service.server is not None
        async with aiohttp.ClientSession() as http:
            yield Replica(service=service, url=service.server.url, http=http, stop=stop, task=task, events=recorded)
    finally:
        stop.set()
        async with asyncio.timeout(15):
            await task
