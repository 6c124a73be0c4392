"""Where a ``/filter`` call spends its time: the extender in-process, no HTTP, no event posting.

Run: ``.venv/bin/python -m benchmarks.profile_filter [--nodes 1000] [--requests 2000] [--profile]``.

A private ``redis-server`` on a free port is seeded like ``bench_extender`` (N nodes × 8 GPUs, a third carrying
pods); one ``ExtenderService`` runs in this process on the extender's event loop (uvloop; ``--asyncio-loop`` for
asyncio's own), with its snapshot follower, JSON logs to /dev/null, events recorded instead of posted, the API
emulator in-process but unused by /filter. Then ``FilterHandler.filter_body`` is
called sequentially with bodies naming every node, and the script prints its p50/p99 and the process CPU per call
next to the floor (two Redis round trips of the same kind alone); then the same for a pod no node fits (9 GPUs:
every node evaluated, every reason listed, as kube-scheduler retries it). ``--profile`` adds cProfile's top
functions by own time for both. ``--multi`` gives every pod a second container (2 GPUs; the pod no node fits
asks 1 GPU and then 9), the pods that can reach the card-assignment search (``shared/domain/assignment.py``).
Prints figures only.

``--wait-replicas N`` measures what the failover guarantee costs (docs/store.md, failover): N replicas of the
private Redis are started (``--replicaof``), and two extenders run in this process on the same Redis, one whose
store waits for N replicas after each reservation (``WAIT``, as with a Sentinel URL) and one that does not. Their
``filter_body`` calls alternate in ``--rounds`` rounds, so that both see the same machine load; each round prints
p50 and CPU per call, then the median over the rounds. Prints figures only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import json
import os
import pstats
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

import redis as sync_redis

from benchmarks.bench_extender import GPUS, _filter_body, _floor_calls, _names, _pct, _seed
from benchmarks.harness import free_port, process, redis_server
from vgpu_scheduler.services.extender.events import EventSink
from vgpu_scheduler.services.extender.service import ExtenderDeps, ExtenderService
from vgpu_scheduler.shared.config import BindAddress, CommonSettings, ExtenderSettings, Service
from vgpu_scheduler.shared.config.values import LogFormat
from vgpu_scheduler.shared.emulator import Emulator
from vgpu_scheduler.shared.k8s import Api, KubeSettings, open_client
from vgpu_scheduler.shared.logs import configure_logging
from vgpu_scheduler.shared.metrics import new_registry
from vgpu_scheduler.shared.protocol.events import PodEvent
from vgpu_scheduler.shared.runtime import fast_loop_factory
from vgpu_scheduler.shared.store import Store, connect


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


def _second_container(body: bytes, gpus: int) -> bytes:
    """The same /filter body with a second container asking ``gpus`` GPUs (``--multi``)."""
    args = json.loads(body)
    containers = args["Pod"]["spec"]["containers"]
    second = json.loads(json.dumps(containers[0]))
    second["name"] = f"{second['name']}-second"
    limits = {"nvidia.com/gpu": str(gpus), "nvidia.com/gpumem": "1000", "nvidia.com/gpucores": "10"}
    second["resources"] = {"limits": limits}
    containers.append(second)
    return json.dumps(args, separators=(",", ":")).encode()


async def _run(redis_url: str, nodes: int, requests: int, profile: bool, multi: bool = False) -> None:
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
                await _measure(service, store, nodes, requests, profile, multi)
            finally:
                stop.set()
                await task
    finally:
        await store.aclose()
        await emulator.stop()


async def _measure(
    service: ExtenderService, store: Store, nodes: int, requests: int, profile: bool, multi: bool
) -> None:
    names = _names(nodes)
    bodies = [_filter_body(f"prof-{i}", names) for i in range(requests + 50)]
    if multi:
        bodies = [_second_container(b, 2) for b in bodies]
    for body in bodies[:50]:  # warm-up
        await service.filter.filter_body(body)

    async def floor(body: bytes) -> None:
        await _floor_calls(store)

    shape = "two containers (1 GPU + 2 GPUs)" if multi else "one container"
    print(f"[{nodes} nodes × 8 GPUs, {requests} sequential /filter calls, in-process, pods of {shape}]")
    await _timed("floor (two Redis round trips, as /filter makes)", floor, bodies[50:])
    profiler = cProfile.Profile() if profile else None
    if profiler is not None:
        profiler.enable()
    await _timed("FilterHandler.filter_body", service.filter.filter_body, bodies[50:])
    _report(profiler)
    unfit_body = _filter_body("prof-unfit", names, gpus=1 if multi else GPUS + 1)
    if multi:
        unfit_body = _second_container(unfit_body, GPUS + 1)
    unfit = [unfit_body] * max(requests // 10, 20)
    profiler = cProfile.Profile() if profile else None
    if profiler is not None:
        profiler.enable()
    unfit_shape = f"1 GPU, then {GPUS + 1}" if multi else f"{GPUS + 1} GPUs"
    await _timed(f"the same for a pod no node fits ({unfit_shape})", service.filter.filter_body, unfit)
    _report(profiler)


def _report(profiler: cProfile.Profile | None) -> None:
    if profiler is not None:
        profiler.disable()
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(30)
        print(out.getvalue())


async def _extender(store: Store, kube: Any, name: str) -> tuple[ExtenderService, asyncio.Event, asyncio.Task[None]]:
    common = CommonSettings(service=Service.EXTENDER, instance_id=name)
    settings = ExtenderSettings(common=common, http_bind=BindAddress("127.0.0.1", 0), scheduler_name="vgpu-scheduler")
    deps = ExtenderDeps(
        store=store,
        api=Api(kube, component="vgpu-scheduler", instance=name),
        registry=new_registry(process_metrics=False),
        instance_id=name,
        nvidia=common.nvidia,
        event_sink=EventSink(_discard),
    )
    service = ExtenderService(settings, deps)
    stop = asyncio.Event()
    task = asyncio.create_task(service.run(stop), name=f"profile-extender-{name}")
    await service.ready.wait()
    return service, stop, task


async def _round(call: Callable[[bytes], Awaitable[object]], bodies: list[bytes]) -> tuple[float, float]:
    """p50 and process CPU per call, both in ms."""
    rtts: list[float] = []
    cpu = time.process_time()
    for body in bodies:
        t = time.perf_counter()
        await call(body)
        rtts.append(time.perf_counter() - t)
    return _pct(rtts, 0.5), (time.process_time() - cpu) / len(bodies) * 1000


async def _compare_wait(redis_url: str, nodes: int, requests: int, replicas: int, rounds: int) -> None:
    await _seed(redis_url, nodes)
    emulator = Emulator(bookmark_interval_s=None)
    await emulator.start()
    plain = Store.create(connect(redis_url), prefix="vgpu")
    waiting = Store.create(connect(redis_url), prefix="vgpu", wait_replicas=replicas)
    try:
        async with open_client(KubeSettings(server=emulator.url, qps=0, timeout_s=5.0)) as kube:
            started = [await _extender(plain, kube, "no-wait"), await _extender(waiting, kube, "wait")]
            try:
                names = _names(nodes)
                per_round = max(requests // rounds, 1)
                bodies = [_filter_body(f"cmp-{i}", names) for i in range(2 * per_round * rounds + 100)]
                for service, _, _ in started:  # warm-up
                    for body in bodies[:50]:
                        await service.filter.filter_body(body)
                    bodies = bodies[50:]
                print(
                    f"[{nodes} nodes × 8 GPUs, {rounds} rounds × {per_round} sequential /filter calls each, "
                    f"in-process; WAIT {replicas} replica(s) vs none, alternating]"
                )
                figures: dict[str, list[tuple[float, float]]] = {"no-wait": [], "wait": []}
                for r in range(rounds):
                    for (service, _, _), label in zip(started, ("no-wait", "wait"), strict=True):
                        chunk, bodies = bodies[:per_round], bodies[per_round:]
                        p50, cpu = await _round(service.filter.filter_body, chunk)
                        figures[label].append((p50, cpu))
                        print(f"  round {r + 1} {label:>7}: p50 {p50:.2f} ms, CPU {cpu:.2f} ms per call")
                stats = await plain.client.info("commandstats")
                waits = stats.get("cmdstat_wait", {}).get("calls", 0) if isinstance(stats, dict) else "?"
                print(f"  WAIT calls the primary served: {waits}")
                for label, values in figures.items():
                    p50s = sorted(v[0] for v in values)
                    cpus = sorted(v[1] for v in values)
                    print(
                        f"  median of rounds, {label:>7}: p50 {p50s[len(p50s) // 2]:.2f} ms, "
                        f"CPU {cpus[len(cpus) // 2]:.2f} ms per call"
                    )
            finally:
                for _, stop, task in started:
                    stop.set()
                    await task
    finally:
        await plain.aclose()
        await waiting.aclose()
        await emulator.stop()


@contextlib.contextmanager
def _replicas(redis_url: str, count: int) -> Iterator[None]:
    """``count`` replicas of the Redis at ``redis_url`` (a private one), online before this returns."""
    primary_port = int(redis_url.rsplit(":", 1)[1].split("/", maxsplit=1)[0])
    with contextlib.ExitStack() as stack:
        for _ in range(count):
            port = free_port()
            workdir = tempfile.mkdtemp(prefix="bench-replica-")
            stack.callback(shutil.rmtree, workdir, True)
            cmd = [
                shutil.which("redis-server") or "redis-server",
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                workdir,
                "--replicaof",
                "127.0.0.1",
                str(primary_port),
            ]
            stack.enter_context(process(cmd, port, "redis-server replica"))
        client = sync_redis.Redis.from_url(redis_url)
        try:
            for _ in range(500):
                if str(client.info("replication").get("connected_slaves")) == str(count) and all(
                    v.get("state") == "online"
                    for k, v in client.info("replication").items()
                    if k.startswith("slave") and isinstance(v, dict)
                ):
                    break
                time.sleep(0.02)
            else:
                raise SystemExit("the replicas did not come online")
        finally:
            client.close()
        yield


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--profile", action="store_true", help="print cProfile's top functions (slows calls down)")
    parser.add_argument("--multi", action="store_true", help="pods of two containers (the assignment search's case)")
    parser.add_argument("--wait-replicas", type=int, default=0, help="compare /filter with and without WAIT")
    parser.add_argument("--rounds", type=int, default=5, help="with --wait-replicas: alternating rounds")
    parser.add_argument(
        "--asyncio-loop", action="store_true", help="run on asyncio's own loop instead of the extender's (uvloop)"
    )
    args = parser.parse_args()
    loop_factory = None if args.asyncio_loop else fast_loop_factory()
    with (
        redis_server() as redis_url,
        open(os.devnull, "w") as devnull,
        asyncio.Runner(loop_factory=loop_factory) as runner,
    ):
        configure_logging(fmt=LogFormat.JSON, stream=devnull)  # JSON lines, as the process writes them
        if args.wait_replicas > 0:
            with _replicas(redis_url, args.wait_replicas):
                runner.run(_compare_wait(redis_url, args.nodes, args.requests, args.wait_replicas, args.rounds))
        else:
            runner.run(_run(redis_url, args.nodes, args.requests, args.profile, args.multi))


if __name__ == "__main__":
    main()
