"""Fixtures of the extender tests: a store on the real redis-server fixture, the API emulator and an Api on it.

(Written by extender helper A for the filter tests; the bind/webhook tests may add their own fixtures here.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from shared.emulator import Emulator
from shared.k8s import Api, KubeClient, KubeSettings, open_client
from shared.store import Store, connect


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[Store]:
    s = Store.create(connect(redis_url), prefix="x")
    try:
        yield s
    finally:
        await s.aclose()


@pytest.fixture
async def other_store(redis_url: str) -> AsyncIterator[Store]:
    """A second, independent client of the same Redis (another replica, or a racing writer)."""
    s = Store.create(connect(redis_url), prefix="x")
    try:
        yield s
    finally:
        await s.aclose()


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
def api(kube: KubeClient) -> Api:
    return Api(kube, component="vgpu-scheduler", instance="test-extender", clock=lambda: 1_700_000_000.0)
