"""Fixtures of the extender tests: a store (prefix ``x``) on the real redis-server fixture and an Api on the API
emulator (``emulator`` and ``kube`` come from ``tests/integration/conftest.py``).

(Written by extender helper A for the filter tests; the bind/webhook tests may add their own fixtures here.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from vgpu_scheduler.shared.k8s import Api, KubeClient
from vgpu_scheduler.shared.store import Store, connect


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
def api(kube: KubeClient) -> Api:
    return Api(kube, component="vgpu-scheduler", instance="test-extender", clock=lambda: 1_700_000_000.0)
