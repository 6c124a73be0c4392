"""The real ``vgpu-scheduler registrar`` process: ops endpoints, registration, SIGTERM → lease released, exit 0."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import aiohttp

from tests.integration.registrar.helpers import REGISTER, json_register, make_node
from tests.process import first_listening, http_get, service_process
from tests.waiting import eventually
from vgpu_scheduler.shared.emulator import Emulator
from vgpu_scheduler.shared.store import Store, SyncMarker


async def test_process_serves_registers_and_stops_on_sigterm(
    emulator: Emulator, store: Store, redis_url: str, tmp_path: Path
) -> None:
    emulator.put(make_node("n1", annotations={REGISTER: json_register("GPU-1")}))
    log = tmp_path / "registrar.log"
    async with service_process(
        log,
        "registrar",
        f"--redis-url={redis_url}",
        "--key-prefix=t",
        f"--kube-server={emulator.url}",
        "--metrics-bind-address=127.0.0.1:0",
        "--lease-ttl=5s",
        "--instance-id=e2e",
    ) as proc:
        base = f"http://{await first_listening(proc, log)}"
        async with aiohttp.ClientSession() as session:
            assert await http_get(session, f"{base}/healthz") == (200, "ok\n")

            async def ready() -> bool:
                status, _ = await http_get(session, f"{base}/readyz")
                return status == 200

            await eventually(ready, 30, "readyz 200")
            status, text = await http_get(session, f"{base}/readyz")
            assert text.startswith("leader, inventory synced (1 nodes registered)")
            status, metrics = await http_get(session, f"{base}/metrics")
            assert status == 200
            assert "vgpu_registrar_leader 1.0" in metrics
            assert 'vgpu_registrar_nodes_registered{vendor="NVIDIA"} 1.0' in metrics
            assert "vgpu_scheduler_build_info" in metrics
        assert await store.inventory.list_nodes() == ["n1"]
        assert (await store.meta.status()).is_synced(SyncMarker.INVENTORY)
        lease = await store.leases.inspect("registrar")
        assert lease is not None and lease.holder == "e2e"

        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
        assert await store.leases.inspect("registrar") is None  # given up, not left to expire
