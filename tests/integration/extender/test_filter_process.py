"""The real ``vgpu-scheduler extender`` process: ready once the store is synced, /filter on the captured body,
/metrics on both ports, SIGTERM → drain and exit 0."""

from __future__ import annotations

import asyncio
import gc
import json
import signal
from pathlib import Path

import aiohttp

from tests.integration.extender.filter_harness import running_extender, seed, wire
from tests.process import listening_addresses, service_process
from tests.waiting import eventually
from vgpu_scheduler.shared.emulator import Emulator
from vgpu_scheduler.shared.k8s import Api
from vgpu_scheduler.shared.store import Store


async def test_process_places_a_pod_and_drains_on_sigterm(
    emulator: Emulator, store: Store, redis_url: str, tmp_path: Path
) -> None:
    await seed(store)
    log = tmp_path / "extender.log"
    async with service_process(
        log,
        "extender",
        f"--redis-url={redis_url}",
        "--key-prefix=x",
        f"--kube-server={emulator.url}",
        "--http_bind=127.0.0.1:0",
        "--metrics-bind-address=127.0.0.1:0",
        "--scheduler-name=vgpu-scheduler",
    ) as proc:

        async def both_listening() -> bool:
            assert proc.returncode is None, log.read_text()
            return len(listening_addresses(log)) == 2

        await eventually(both_listening, 30, "two listening servers")
        async with aiohttp.ClientSession() as http:
            urls = [f"http://{a}" for a in listening_addresses(log)]
            kinds = {}
            for url in urls:
                async with http.post(f"{url}/filter", data=b"{}") as r:
                    kinds[url] = "extender" if r.status == 200 else "ops"
            extender = next(u for u, k in kinds.items() if k == "extender")
            ops = next(u for u, k in kinds.items() if k == "ops")

            async def ready() -> bool:
                async with http.get(f"{extender}/readyz") as r:
                    return r.status == 200

            await eventually(ready, 30, "readyz 200")
            async with http.post(f"{extender}/filter", data=wire("001-filter.json")) as r:
                answer = await r.json()
            assert answer["NodeNames"] == ["gpu-node-1"]
            for url in (extender, ops):
                async with http.get(f"{url}/metrics") as r:
                    text = await r.text()
                assert 'vgpu_filter_outcomes_total{outcome="scheduled"} 1.0' in text
                assert "hami_gpu_memory_limit_bytes" in text
                assert "hami_build_info" in text
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
        records = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
        decisions = [r for r in records if r.get("msg") == "pod scheduled"]
        assert len(decisions) == 1
        assert decisions[0]["level"] == "info"
        assert (decisions[0]["pod"], decisions[0]["node"], decisions[0]["retries"]) == (
            "default/gpu-pod-1",
            "gpu-node-1",
            0,
        )
        assert decisions[0]["devices"] == [["GPU-gpu-node-1-3"]]  # equal idle cards: the last, as HAMi
        assert any(r.get("msg") == "extender draining" for r in records)


async def test_the_extenders_own_process_freezes_what_start_up_made(store: Store, api: Api) -> None:
    """``vgpu-scheduler extender`` asks for it (``freeze_gc_when_ready``): once ready, what start-up made is out of
    the cyclic collector's sight. Tests and ``simulate`` run replicas in a shared process and leave it alone."""

    await seed(store)
    gc.unfreeze()
    try:
        async with running_extender(store, api):
            assert gc.get_freeze_count() == 0
        async with running_extender(store, api, freeze_gc_when_ready=True):
            assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
