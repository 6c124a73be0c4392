"""Test helpers for the registrar: node builders, a controllable clock, a bounded ``eventually``, a running
registrar, and a TCP proxy that can freeze a process' Redis traffic (a paused leader)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry

from vgpu_scheduler.services.registrar.service import RegistrarDeps, RegistrarService, RegistrarTuning
from vgpu_scheduler.shared.config import CommonSettings, RegistrarSettings, Service
from vgpu_scheduler.shared.k8s import InformerSettings, KubeClient
from vgpu_scheduler.shared.store import Store
from vgpu_scheduler.shared.vendors.catalog import NodeObserver

REGISTER = "hami.io/node-nvidia-register"
SCORE = "hami.io/node-nvidia-score"
HANDSHAKE = "hami.io/node-handshake"
CORDON = "hami.io/device-cordon"

FAST_INFORMER = InformerSettings(watch_timeout_s=30, read_grace_s=5, backoff_initial_s=0.01, backoff_max_s=0.1)


def json_register(*uuids: str, mem: int = 16384) -> str:
    """A v2.8+ JSON register annotation with one healthy GPU per UUID (index = position)."""
    items = []
    for i, u in enumerate(uuids):
        index = f'"index":{i},' if i else ""
        items.append(
            f'{{"id":"{u}",{index}"count":10,"devmem":{mem},"devcore":100,"type":"NVIDIA-Tesla T4",'
            f'"mode":"hami-core","health":true}}'
        )
    return "[" + ",".join(items) + "]"


def make_node(
    name: str,
    *,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    gpus: str | int = "4",
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "8"}},
    }


@dataclass
class FakeClock:
    """A wall clock (epoch seconds) the test moves by hand."""

    now: float = field(default_factory=time.time)

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def settings(
    *, instance: str = "r1", ttl_s: float = 5.0, selector: tuple[tuple[str, str], ...] = ()
) -> RegistrarSettings:
    return RegistrarSettings(
        common=CommonSettings(service=Service.REGISTRAR, instance_id=instance),
        node_label_selector=selector,
        lease_ttl_s=ttl_s,
    )


@dataclass
class Running:
    """A registrar running in a task; ``close()`` sets its stop event and awaits it."""

    service: RegistrarService
    registry: CollectorRegistry
    stop: asyncio.Event
    task: asyncio.Task[None]

    def metric(self, name: str, **labels: str) -> float:
        value = self.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value

    async def close(self) -> None:
        self.stop.set()
        await asyncio.wait_for(self.task, 15)


@contextlib.asynccontextmanager
async def running_registrar(
    store: Store,
    kube: KubeClient,
    *,
    instance: str = "r1",
    ttl_s: float = 5.0,
    clock: Callable[[], float] = time.time,
    selector: tuple[tuple[str, str], ...] = (),
    resync_interval_s: float = 3600.0,
    wait_ready: bool = True,
    vendors: Sequence[NodeObserver] | None = None,
) -> AsyncIterator[Running]:
    registry = CollectorRegistry()
    service = RegistrarService(
        settings(instance=instance, ttl_s=ttl_s, selector=selector),
        RegistrarDeps(store=store, kube=kube, registry=registry, instance_id=instance, clock=clock),
        tuning=RegistrarTuning(resync_interval_s=resync_interval_s, informer=FAST_INFORMER),
        vendors=vendors,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(service.run(stop), name=f"registrar:{instance}")
    r = Running(service, registry, stop, task)
    try:
        if wait_ready:
            ready = asyncio.create_task(service.ready.wait(), name="test:ready")
            done, _ = await asyncio.wait({ready, task}, timeout=15, return_when=asyncio.FIRST_COMPLETED)
            ready.cancel()
            await asyncio.gather(ready, return_exceptions=True)
            if task in done:
                task.result()
            assert service.ready.is_set(), "registrar did not become ready"
        yield r
    finally:
        if not task.done():
            await r.close()
        elif not task.cancelled():
            task.result()


class PausableProxy:
    """A TCP proxy in front of Redis. ``pause()`` holds every byte in both directions (the process behind it is
    frozen as far as Redis can tell); ``resume()`` delivers what was held, in order."""

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._open = asyncio.Event()
        self._open.set()
        self._server: asyncio.Server | None = None
        self._pumps: set[asyncio.Task[None]] = set()
        self.port = 0

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return f"redis://127.0.0.1:{self.port}/0"

    def pause(self) -> None:
        self._open.clear()

    def resume(self) -> None:
        self._open.set()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for t in list(self._pumps):
            t.cancel()
        await asyncio.gather(*self._pumps, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self._target)
        pumps = [
            asyncio.create_task(self._pump(reader, up_writer), name="proxy:up"),
            asyncio.create_task(self._pump(up_reader, writer), name="proxy:down"),
        ]
        self._pumps.update(pumps)
        try:
            await asyncio.gather(*pumps, return_exceptions=True)
        finally:
            self._pumps.difference_update(pumps)
            for w in (writer, up_writer):
                w.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                await self._open.wait()
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()
