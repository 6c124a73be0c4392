"""The informer in-process: the real service against the Kubernetes API emulator and the real redis-server.

``harness`` gives a running informer (``async with harness.run() as svc``) whose every interval is short and whose
clock is injected (``harness.clock.advance(s)``), so timeouts are tested without waiting. ``eventually`` awaits
a condition (re-checked as state changes), never a fixed sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from tests.audit import quota_usage_from_pods, store_quota_usage, store_usage, usage_from_pods
from tests.builders import inventory
from tests.unit.informer.builders import devices
from tests.waiting import eventually
from vgpu_scheduler.services.informer.service import InformerDeps, InformerService, InformerTuning
from vgpu_scheduler.shared.config import CommonSettings, InformerSettings, Service
from vgpu_scheduler.shared.domain.accounting import collapse
from vgpu_scheduler.shared.domain.allocation import Allocation
from vgpu_scheduler.shared.emulator import Emulator
from vgpu_scheduler.shared.k8s import Api, KubeClient
from vgpu_scheduler.shared.k8s import InformerSettings as WatchSettings
from vgpu_scheduler.shared.store import Store
from vgpu_scheduler.shared.vendors.registry import Vendors

FAST_WATCH = WatchSettings(watch_timeout_s=30, read_grace_s=5, backoff_initial_s=0.01, backoff_max_s=0.05)
TUNING = InformerTuning(
    watch=FAST_WATCH,
    lease_retry_s=0.05,
    lock_sweep_s=0.05,
    reservation_sweep_s=0.05,
    epoch_check_s=0.05,
    retry_s=0.05,
    plugin_release_grace_s=0.2,
)


class Clock:
    """Wall time plus an offset tests move forward."""

    def __init__(self) -> None:
        self.offset_s = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset_s

    def advance(self, seconds: float) -> None:
        self.offset_s += seconds


def settings(
    instance: str = "informer-a",
    *,
    grace_s: float = 120.0,
    lock_timeout_s: float = 300.0,
    reconcile_s: float = 300.0,
    lease_ttl_s: float = 15.0,
) -> InformerSettings:
    return InformerSettings(
        common=CommonSettings(service=Service.INFORMER, instance_id=instance),
        lease_ttl_s=lease_ttl_s,
        reconcile_interval_s=reconcile_s,
        reservation_grace_s=grace_s,
        node_lock_timeout_s=lock_timeout_s,
    )


@dataclass
class Harness:
    emulator: Emulator
    kube: KubeClient
    store: Store
    clock: Clock = field(default_factory=Clock)

    @property
    def api(self) -> Api:
        return Api(self.kube, component="vgpu-scheduler", instance="test")

    def service(
        self,
        cfg: InformerSettings | None = None,
        registry: CollectorRegistry | None = None,
        vendors: Vendors | None = None,
        tuning: InformerTuning | None = None,
    ) -> InformerService:
        cfg = cfg or settings()
        deps = InformerDeps(
            store=self.store,
            kube=self.kube,
            api=self.api,
            registry=registry or CollectorRegistry(),
            instance_id=cfg.common.instance_id,
            clock=self.clock,
            tuning=tuning or TUNING,
        )
        return InformerService(cfg, deps, vendors=vendors)

    @contextlib.asynccontextmanager
    async def run(
        self,
        cfg: InformerSettings | None = None,
        *,
        wait_synced: bool = True,
        audit: bool = True,
        vendors: Vendors | None = None,
        tuning: InformerTuning | None = None,
    ) -> AsyncIterator[InformerService]:
        """Run an informer until the block ends; then (unless the block failed or ``audit=False``) check that
        Redis equals the usage recomputed from the API's pods, stop it cleanly and check it returned."""
        svc = self.service(cfg, vendors=vendors, tuning=tuning)
        stop = asyncio.Event()
        task = asyncio.create_task(svc.run(stop), name=f"test-informer:{svc.deps.instance_id}")
        try:
            if wait_synced:
                await asyncio.wait_for(svc.synced.wait(), 10)
            yield svc
            if audit:
                await self.assert_audit()
        finally:
            stop.set()
            await asyncio.wait_for(task, 10)

    async def put_inventory(self, *names: str, n: int = 4, **gpu: Any) -> None:
        for name in names:
            await self.store.inventory.put(inventory(name, n=n, **gpu))

    def pods(self) -> list[dict[str, Any]]:
        return self.emulator.list("pods")

    async def audit_ok(self) -> bool:
        pods = self.pods()
        return await store_usage(self.store) == usage_from_pods(pods) and await store_quota_usage(
            self.store
        ) == quota_usage_from_pods(pods)

    async def assert_audit(self) -> None:
        """Usage and quota usage in Redis == recomputed from the API's pods (awaited: events are asynchronous)."""
        await eventually(self.audit_ok, what="Redis usage == usage recomputed from the API's pods")
        pods = self.pods()
        assert await store_usage(self.store) == usage_from_pods(pods)
        assert await store_quota_usage(self.store) == quota_usage_from_pods(pods)


@pytest.fixture
def harness(emulator: Emulator, kube: KubeClient, store: Store) -> Harness:
    return Harness(emulator, kube, store)


def fake_allocation(uid: str, node: str, uuid: str, mem: int, cores: int, ns: str = "default") -> Allocation:
    devs = devices([(uuid, mem, cores)])
    return Allocation(
        pod_uid=uid, namespace=ns, name=f"ghost-{uid}", node=node, devices=devs, charges=collapse(devs, 0)
    )


def metric(svc: InformerService, name: str, **labels: str) -> float:
    value = svc.deps.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value
