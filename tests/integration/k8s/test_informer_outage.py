"""An unreachable API server: the informer retries with capped, jittered exponential backoff, says so at WARNING
only on the 1st, 2nd, 4th, 8th, … consecutive failure (DEBUG otherwise) instead of on every retry, and logs
the recovery at INFO once the server answers."""

from __future__ import annotations

import logging
import random
import socket

import pytest

from tests.integration.k8s.conftest import Recorder, make_node, running
from tests.waiting import eventually
from vgpu_scheduler.shared.emulator import Emulator
from vgpu_scheduler.shared.k8s import Informer, InformerSettings, KubeSettings, Resource, open_client

FAILED = "kubernetes list/watch failed, retrying with backoff"
RECOVERED = "kubernetes list/watch recovered"
SETTINGS = InformerSettings(watch_timeout_s=30, read_grace_s=5, backoff_initial_s=0.005, backoff_max_s=0.04)


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_an_unreachable_server_is_retried_quietly_with_backoff_then_recovery_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    port = _closed_port()
    caplog.set_level(logging.DEBUG, logger="vgpu_scheduler.shared.k8s.informer")
    async with open_client(KubeSettings(server=f"http://127.0.0.1:{port}", timeout_s=2.0)) as kube:
        informer = Informer(kube, Resource.NODES, Recorder(), settings=SETTINGS, rng=random.Random(7))
        async with running(informer):
            await eventually(lambda: informer.stats.errors >= 20, 30, "20 failed attempts")
            failures = [r for r in caplog.records if r.getMessage() == FAILED]
            warned = [r.__dict__["failures"] for r in failures if r.levelno == logging.WARNING]
            n = failures[-1].__dict__["failures"]
            assert warned == [k for k in (1, 2, 4, 8, 16, 32) if k <= n], "WARNING only at powers of two"
            assert all(r.levelno == logging.DEBUG for r in failures if r.__dict__["failures"] not in warned)
            assert [r.__dict__["failures"] for r in failures] == list(range(1, n + 1)), "every failure is logged"
            assert all(0 < r.__dict__["retry_in_s"] <= SETTINGS.backoff_max_s for r in failures), "capped"
            assert "Cannot connect" in failures[0].__dict__["error"] or "Connect" in failures[0].__dict__["error"]

            emulator = Emulator()
            await emulator.start(port=port)
            try:
                emulator.put(make_node("n1"))
                await eventually(lambda: informer.get("n1") is not None, 30, "the informer lists after the outage")
                recovered = [r for r in caplog.records if r.getMessage() == RECOVERED]
                assert len(recovered) == 1 and recovered[0].levelno == logging.INFO
                assert recovered[0].__dict__["failures"] >= 20
            finally:
                await emulator.stop()
