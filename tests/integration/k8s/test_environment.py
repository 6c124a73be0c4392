"""The proxy environment is read once, when the client opens, not on every API call (no HAMi protocol involved)."""

from __future__ import annotations

import pytest

from vgpu_scheduler.shared.emulator import Emulator
from vgpu_scheduler.shared.errors import TransientError
from vgpu_scheduler.shared.k8s import Api, KubeSettings, open_client

DEAD_PROXY = "http://127.0.0.1:9"  # discard port: nothing listens there


async def test_a_proxy_set_after_opening_is_not_consulted(emulator: Emulator, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    async with open_client(KubeSettings(server=emulator.url, qps=0, timeout_s=5.0)) as kube:
        monkeypatch.setenv("HTTP_PROXY", DEAD_PROXY)
        assert await Api(kube, component="t").list_nodes() == []


async def test_the_environment_proxy_is_honoured(emulator: Emulator, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.setenv("HTTP_PROXY", DEAD_PROXY)
    async with open_client(KubeSettings(server=emulator.url, qps=0, timeout_s=2.0)) as kube:
        with pytest.raises(TransientError):
            await Api(kube, component="t").list_nodes()


async def test_no_proxy_is_honoured(emulator: Emulator, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", DEAD_PROXY)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    async with open_client(KubeSettings(server=emulator.url, qps=0, timeout_s=5.0)) as kube:
        assert await Api(kube, component="t").list_nodes() == []
