"""Where a ``/filter`` call spends its time: the extender in-process, no HTTP, no event posting.

Run: ``.venv/bin/python -m benchmarks.profile_filter [--nodes 1000] [--requests 2000] [--profile]``.

A private ``redis-server`` on a free port is seeded like ``bench_extender`` (N nodes × 8 GPUs, a third carrying
pods); one ``ExtenderService`` runs in this process (snapshot follower, JSON logs to /dev/null, events recorded
instead of posted, the API emulator in-process but unused by /filter). Then ``FilterHandler.filter_body`` is
called sequentially with bodies naming every node, and the script prints its p50/p99 and the process CPU per call
next to the floor (two Redis round trips of the same kind alone); then the same for a pod no node fits (9 GPUs:
every node evaluated, every reason listed, as kube-scheduler retries it). ``--profile`` adds cProfile's top
functions by own time for both. Prints figures only.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import os
import pstats
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from benchmarks.bench_extender import GPUS, _filter_body, _floor_calls, _names, _pct, _redis_server, _seed
from services.extender.events import EventSink
from services.extender.service import ExtenderDeps, ExtenderService
from shared.config import BindAddress, CommonSettings, ExtenderSettings, Service
from shared.config.values import LogFormat
from shared.emulator import Emulator
from shared.k8s import Api, KubeSettings, open_client
from shared.logs import configure_logging
from shared.metrics import new_registry
from shared.protocol.events import PodEvent
from shared.store import Store, connect


async def _discard(pod: Mapping[str, Any], event: PodEvent) -> None:
    return None


async def _timed(label: str, call: Callable[[bytes], Awaitable[object]], bodies: list[bytes]) -> None:
    rtts: list[float] = []
    cpu = time.process_time()
    for body in bodies:
        t = time.perf_counter()
        await call(body)
        rtts.append(time.perf_counter() - t)
    cpu_ms = (time.process_time() - cpu) / len(bodies) * 1000
    print(f"  {label}: p50 {_pct(rtts, 0.5):.2f} ms, p99 {_pct(rtts, 0.99):.2f} ms, CPU {cpu_ms:.2f} ms per call")


async def _run(redis_url: str, nodes: int, requests: int, profile: bool) -> None:
    await _seed(redis_url, nodes)
    emulator = Emulator(bookmark_interval_s=None)
    await emulator.start()
    store = Store.create(connect(redis_url), prefix="vgpu")
    try:
        async with open_client(KubeSettings(server=emulator.url, qps=0, timeout_s=5.0)) as kube:
            common = CommonSettings(service=Service.EXTENDER, instance_id="profile")
            settings = ExtenderSettings(
                common=common, http_bind=BindAddress("127.0.0.1", 0), scheduler_name="vgpu-scheduler"
            )
            deps = ExtenderDeps(
                store=store,
                api=Api(kube, component="vgpu-scheduler", instance="profile"),
                registry=new_registry(process_metrics=False),
                instance_id="profile",
                nvidia=common.nvidia,
                event_sink=EventSink(_discard),
            )
            service = ExtenderService(settings, deps)
            stop = asyncio.Event()
            task = asyncio.create_task(service.run(stop), name="profile-extender")
            try:
                await service.ready.wait()
                await _measure(service, store, nodes, requests, profile)
            finally:
                stop.set()
                await task
    finally:
        await store.aclose()
        await emulator.stop()


async def _measure(service: ExtenderService, store: Store, nodes: int, requests: int, profile: bool) -> None:
    names = _names(nodes)
    bodies = [_filter_body(f"prof-{i}", names) for i in range(requests + 50)]
    for body in bodies[:50]:  # warm-up
        await service.filter.filter_body(body)

    async def floor(body: bytes) -> None:
        await _floor_calls(store)

    print(f"[{nodes} nodes × 8 GPUs, {requests} sequential /filter calls, in-process]")
    await _timed("floor (two Redis round trips, as /filter makes)", floor, bodies[50:])
    profiler = cProfile.Profile() if profile else None
    if profiler is not None:
        profiler.enable()
    await _timed("FilterHandler.filter_body", service.filter.filter_body, bodies[50:])
    _report(profiler)
    unfit = [_filter_body("prof-unfit", names, gpus=GPUS + 1)] * max(requests // 10, 20)
    profiler = cProfile.Profile() if profile else None
    if profiler is not None:
        profiler.enable()
    await _timed(f"the same for a pod no node fits ({GPUS + 1} GPUs)", service.filter.filter_body, unfit)
    _report(profiler)


def _report(profiler: cProfile.Profile | None) -> None:
    if profiler is not None:
        profiler.disable()
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(30)
        print(out.getvalue())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--profile", action="store_true", help="print cProfile's top functions (slows calls down)")
    args = parser.parse_args()
    with _redis_server() as redis_url, open(os.devnull, "w") as devnull:
        configure_logging(fmt=LogFormat.JSON, stream=devnull)  # JSON lines, as the process writes them
        asyncio.run(_run(redis_url, args.nodes, args.requests, args.profile))


if __name__ == "__main__":
    main()
