"""Fixtures of the executor's tests: an Api on the API emulator (``emulator``, ``kube`` and ``store`` come from
``tests/integration/conftest.py``) and the fragmented cluster."""

from __future__ import annotations

import pytest

from tests.integration.defrag.cluster import Cluster
from vgpu_scheduler.shared.emulator import Emulator
from vgpu_scheduler.shared.k8s import Api, KubeClient
from vgpu_scheduler.shared.store import Store


@pytest.fixture
def api(kube: KubeClient) -> Api:
    return Api(kube, component="vgpu-scheduler", instance="test-defrag")


@pytest.fixture
def cluster(emulator: Emulator, store: Store) -> Cluster:
    return Cluster(emulator, store)
