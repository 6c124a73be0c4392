"""Fixtures every integration area shares: the Kubernetes API emulator on a free port, a kubernetes-asyncio client
against it, and a Store (key prefix ``t``) on the real redis-server fixture. An area's conftest may override any
of them (the extender's store uses its own prefix; the store tests run on two backends)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from vgpu_scheduler.shared.emulator import Emulator
from vgpu_scheduler.shared.k8s import KubeClient, KubeSettings, open_client
from vgpu_scheduler.shared.store import Store, connect


@pytest.fixture
async def emulator() -> AsyncIterator[Emulator]:
    em = Emulator(bookmark_interval_s=None)
    await em.start()
    try:
        yield em
    finally:
        await em.stop()


@pytest.fixture
async def kube(emulator: Emulator) -> AsyncIterator[KubeClient]:
    async with open_client(KubeSettings(server=emulator.url, qps=0, timeout_s=5.0)) as client:
        yield client


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[Store]:
    s = Store.create(connect(redis_url), prefix="t")
    try:
        yield s
    finally:
        await s.aclose()
