"""Wire-level test kit: an API emulator that records every write request as it arrived (method, path, content
type, raw body), a pinned local time zone, and a real extender replica whose Events go to the API server."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry

from tests.integration.extender.filter_harness import FAST_CACHE, settings
from vgpu_scheduler.services.extender.events import EventSink, api_poster
from vgpu_scheduler.services.extender.service import ExtenderDeps, ExtenderService
from vgpu_scheduler.services.informer.service import InformerDeps, InformerService, InformerTuning
from vgpu_scheduler.shared.config import CommonSettings, ExtenderSettings, InformerSettings, Service
from vgpu_scheduler.shared.emulator import Emulator
from vgpu_scheduler.shared.k8s import Api, KubeClient
from vgpu_scheduler.shared.k8s import InformerSettings as WatchSettings
from vgpu_scheduler.shared.metrics import new_registry
from vgpu_scheduler.shared.store import Store

MERGE_PATCH = "application/merge-patch+json"
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?\Z")


def invalid_label_values(body: bytes) -> list[str]:
    """The API server's label-value validation of a write body (≤ 63 characters, alphanumeric at both ends,
    ``-_.`` inside): the values it would refuse with 422 Invalid. The emulator itself does not validate."""
    try:
        doc = json.loads(body)
    except ValueError:
        return []
    labels = ((doc.get("metadata") or {}).get("labels") or {}) if isinstance(doc, dict) else {}
    return [
        f"{k}={v}" for k, v in labels.items() if v is not None and (len(str(v)) > 63 or not _LABEL_VALUE.match(str(v)))
    ]


@dataclass(frozen=True)
class RawWrite:
    """One write request exactly as the API server received it."""

    method: str
    path: str
    content_type: str
    body: bytes

    @property
    def doc(self) -> Any:
        return json.loads(self.body)

    @property
    def is_event(self) -> bool:
        return self.path.endswith("/events")


class RecordingEmulator(Emulator):
    """The emulator plus a middleware recording every non-GET request before it is handled, and refusing label
    values the real API server refuses (422)."""

    def __init__(self) -> None:
        super().__init__(bookmark_interval_s=None)
        self.raw: list[RawWrite] = []

    def create_app(self) -> web.Application:
        app = super().create_app()

        @web.middleware
        async def record(
            request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
        ) -> web.StreamResponse:
            if request.method != "GET":
                body = await request.read()  # cached: the handler reads it again
                self.raw.append(RawWrite(request.method, request.path, request.headers.get("Content-Type", ""), body))
                invalid = invalid_label_values(body)
                if invalid:
                    status = {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "status": "Failure",
                        "message": f"metadata.labels: Invalid value: {invalid}: must be no more than 63 characters",
                        "reason": "Invalid",
                        "code": 422,
                    }
                    return web.json_response(status, status=422)
            return await handler(request)

        app.middlewares.append(record)
        return app

    def pod(self, namespace: str, name: str) -> dict[str, Any]:
        obj = self.get("Pod", namespace, name)
        assert obj is not None, f"no pod {namespace}/{name}"
        return obj

    def node(self, name: str) -> dict[str, Any]:
        obj = self.get("Node", None, name)
        assert obj is not None, f"no node {name}"
        return obj

    def writes(self, *, events: bool = False) -> list[RawWrite]:
        """The recorded writes, Events left out unless asked for."""
        return [w for w in self.raw if events or not w.is_event]


@contextlib.contextmanager
def local_zone(tz: str) -> Iterator[None]:
    """Run with the process' local time zone set to the POSIX ``TZ`` string ``tz`` (e.g. ``CST-8``: UTC+8)."""
    old = os.environ.get("TZ")
    os.environ["TZ"] = tz
    time.tzset()
    try:
        yield
    finally:
        if old is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = old
        time.tzset()


@dataclass
class Extender:
    service: ExtenderService
    url: str
    http: aiohttp.ClientSession

    async def post(self, verb: str, body: Any) -> Any:
        async with self.http.post(f"{self.url}/{verb}", json=body) as r:
            assert r.status == 200, (r.status, await r.text())
            return await r.json()

    async def flush_events(self) -> None:
        assert await self.service.deps.event_sink.flush(5.0)


@contextlib.asynccontextmanager
async def running_extender(
    store: Store, api: Api, extender_settings: ExtenderSettings | None = None
) -> AsyncIterator[Extender]:
    """A real replica on a free port; its Events are posted to the API server through ``api``."""
    s = extender_settings or settings()
    deps = ExtenderDeps(
        store=store,
        api=api,
        registry=new_registry(process_metrics=False),
        instance_id="compat",
        nvidia=s.common.nvidia,
        event_sink=EventSink(api_poster(api)),
        cache_settings=FAST_CACHE,
    )
    service = ExtenderService(s, deps, drain_timeout_s=5.0)
    stop = asyncio.Event()
    task = asyncio.create_task(service.run(stop), name="compat-extender")
    try:
        async with asyncio.timeout(10):
            for event in (service.listening, service.ready):
                waiter = asyncio.create_task(event.wait(), name="compat-extender-wait")
                await asyncio.wait({waiter, task}, return_when=asyncio.FIRST_COMPLETED)
                if task.done():
                    waiter.cancel()
                    task.result()
        assert service.server is not None
        async with aiohttp.ClientSession() as http:
            yield Extender(service, service.server.url, http)
    finally:
        stop.set()
        async with asyncio.timeout(15):
            await task


@contextlib.asynccontextmanager
async def running_informer(store: Store, kube: KubeClient, api: Api) -> AsyncIterator[InformerService]:
    """The real informer (accounting, node-lock release), ready (leading and synced) when the block starts."""
    service = InformerService(
        InformerSettings(
            common=CommonSettings(service=Service.INFORMER, instance_id="compat-informer"), lease_ttl_s=10.0
        ),
        InformerDeps(
            store=store,
            kube=kube,
            api=api,
            registry=CollectorRegistry(),
            instance_id="compat-informer",
            tuning=InformerTuning(
                watch=WatchSettings(watch_timeout_s=60, read_grace_s=10, backoff_initial_s=0.01, backoff_max_s=0.1),
                lease_retry_s=0.1,
                lock_sweep_s=0.2,
                reservation_sweep_s=0.5,
                epoch_check_s=0.5,
                retry_s=0.1,
            ),
        ),
    )
    stop = asyncio.Event()
    task = asyncio.create_task(service.run(stop), name="compat-informer")
    try:
        async with asyncio.timeout(10):
            waiter = asyncio.create_task(service.synced.wait(), name="compat-informer-synced")
            await asyncio.wait({waiter, task}, return_when=asyncio.FIRST_COMPLETED)
            if task.done():
                waiter.cancel()
                task.result()
        yield service
    finally:
        stop.set()
        async with asyncio.timeout(15):
            await task
