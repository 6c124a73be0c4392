"""The emulated kubelet (tests/controlplane/devplugin.py) outlasts an API server it cannot reach."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from tests.controlplane import devplugin
from tests.controlplane.devplugin import HamiDevicePlugin
from vgpu_scheduler.shared.errors import NotFoundError, TransientError
from vgpu_scheduler.shared.k8s import KubeClient


class Flaky(HamiDevicePlugin):
    """Allocate fails with ``errors`` in turn, then succeeds."""

    def __init__(self, errors: list[Exception]) -> None:
        super().__init__(kube=cast(KubeClient, SimpleNamespace(core=None)), latency_s=0.0)  # never called
        self.errors = errors
        self.calls = 0

    async def allocate(self, node: str, ns: str, name: str) -> None:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        self.succeeded.add(f"{ns}/{name}")


async def test_an_admission_cut_off_by_the_api_server_is_tried_again_until_it_passes() -> None:
    plugin = Flaky([TransientError("Cannot connect"), TransientError("Cannot connect")])
    await plugin._kubelet("n1", "default", "p")
    assert plugin.calls == 3
    assert plugin.succeeded == {"default/p"}
    assert plugin.failures == []


async def test_an_api_server_that_stays_away_fails_the_admission_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(devplugin, "API_ATTEMPTS", 3)
    plugin = Flaky([TransientError("Cannot connect")] * 5)
    await plugin._kubelet("n1", "default", "p")
    assert plugin.calls == 3
    assert len(plugin.failures) == 1 and "API unreachable during Allocate" in plugin.failures[0]


async def test_an_api_error_that_is_not_transient_is_not_retried() -> None:
    errors: list[Any] = [NotFoundError("no such pod")]
    plugin = Flaky(errors)
    await plugin._kubelet("n1", "default", "p")
    assert plugin.calls == 1
    assert len(plugin.failures) == 1 and "API error during Allocate" in plugin.failures[0]
