"""The real ``vgpu-scheduler informer`` process: ops endpoints, accounting, SIGTERM → lease released, exit 0."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import aiohttp

from tests.process import first_listening, http_get, service_process
from tests.unit.informer.builders import pod
from tests.waiting import eventually
from vgpu_scheduler.shared.domain.model import DeviceUsage
from vgpu_scheduler.shared.emulator import Emulator
from vgpu_scheduler.shared.store import Store, SyncMarker


async def test_process_serves_accounts_and_stops_on_sigterm(
    emulator: Emulator, store: Store, redis_url: str, tmp_path: Path
) -> None:
    emulator.put(pod("p1", "ns", node="n1", app=[[("GPU-1", 3000, 30)]], phase="Running"))
    log = tmp_path / "informer.log"
    async with service_process(
        log,
        "informer",
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
            assert await http_get(session, f"{base}/readyz") == (200, "leader, synced\n")
            status, metrics = await http_get(session, f"{base}/metrics")
            assert status == 200
            assert "vgpu_informer_leader 1.0" in metrics
            assert "vgpu_informer_pods_tracked 1.0" in metrics
            assert 'vgpu_informer_reconcile_repairs_total{kind="missing_allocation"} 0.0' in metrics
            assert 'vgpu_informer_locks_released_total{cause="timeout"} 0.0' in metrics
            assert "vgpu_scheduler_build_info" in metrics
        assert await store.usage.node_usage("n1") == {"GPU-1": DeviceUsage(1, 3000, 30)}
        assert (await store.meta.status()).is_synced(SyncMarker.ALLOCATIONS)
        lease = await store.leases.inspect("informer")
        assert lease is not None and lease.holder == "e2e"

        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
        assert await store.leases.inspect("informer") is None  # given up, not left to expire
