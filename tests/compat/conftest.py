"""Fixtures of the wire-compatibility tests: a recording API emulator, an Api on it, a Store on the real
redis-server fixture."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.compat.kit import RecordingEmulator
from vgpu_scheduler.shared.k8s import Api, KubeClient, KubeSettings, open_client
from vgpu_scheduler.shared.store import Store, connect

SCHEDULER = "vgpu-scheduler"


@pytest.fixture
async def emulator() -> AsyncIterator[RecordingEmulator]:
    em = RecordingEmulator()
    await em.start()
    try:
        yield em
    finally:
        await em.stop()


@pytest.fixture
async def kube(emulator: RecordingEmulator) -> AsyncIterator[KubeClient]:
    async with open_client(KubeSettings(server=emulator.url, qps=0, timeout_s=5.0)) as client:
        yield client


@pytest.fixture
def api(kube: KubeClient) -> Api:
    return Api(kube, component=SCHEDULER, instance="compat")


@pytest.fixture
def plugin_api(kube: KubeClient) -> Api:
    """The device plugin's own client (its writes are the plugin's, not ours)."""
    return Api(kube, component="hami-device-plugin", instance="node")


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[Store]:
    s = Store.create(connect(redis_url), prefix="compat")
    try:
        yield s
    finally:
        await s.aclose()
