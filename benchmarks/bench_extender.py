"""Extender figures over HTTP: /filter latency at 1,000 and 5,000 nodes × 8 GPUs, /filter+/bind throughput with 1
and 4 replicas, and the extender's memory (RSS) at 5,000 nodes.

Run: ``.venv/bin/python -m benchmarks.bench_extender [--nodes 1000,5000] [--requests 2000] [--pods 1500]
[--latency-only]``.

Everything is real and local: a private ``redis-server`` on a free port, the Kubernetes API emulator in its own
process (with a simulated device plugin that settles each bind at once: it marks the pod ``bind-phase: success``
and removes the node's lock, as HAMi's plugin does after Allocate), and each extender replica is the real
``vgpu-scheduler extender`` process (JSON logs, one INFO line per decision, discarded). The client is a minimal
keep-alive HTTP/1.1 client so that its own overhead stays small; latency is measured at the client (round trip)
and, for the server side, as the mean of ``vgpu_extender_request_duration_seconds``. Prints figures only.

The processes and the HTTP client are :mod:`benchmarks.harness`; this module seeds the cluster and measures.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import aiohttp

from benchmarks.harness import Http, extender_process, free_port, informer_process, process, redis_server
from tests.controlplane.rss import rss_mib
from vgpu_scheduler.shared.domain.accounting import collapse
from vgpu_scheduler.shared.domain.allocation import Allocation
from vgpu_scheduler.shared.domain.model import ContainerDevice, DeviceInfo, NodeInventory
from vgpu_scheduler.shared.store import Store, SyncMarker, connect

GPUS = 8
POD_TEMPLATE: dict[str, Any] = json.loads(
    (Path(__file__).resolve().parent.parent / "tests/data/kube-scheduler-wire/001-filter.json").read_text()
)["Pod"]


# ---- the emulator process with a simulated device plugin --------------------------------------------------------


@contextlib.contextmanager
def _emulator() -> Iterator[str]:
    port = free_port()
    with process([sys.executable, "-m", "benchmarks.bench_extender", "--serve-emulator", str(port)], port, "emulator"):
        yield f"http://127.0.0.1:{port}"


async def _serve_emulator(port: int) -> None:
    from vgpu_scheduler.shared.emulator import Emulator
    from vgpu_scheduler.shared.emulator.server import WriteRecord

    em = Emulator(bookmark_interval_s=None, history_limit=100_000)
    loop = asyncio.get_running_loop()

    def settle(ns: str, pod: str, node: str) -> None:
        with contextlib.suppress(KeyError):
            em.patch("Pod", ns, pod, {"metadata": {"annotations": {"hami.io/bind-phase": "success"}}})
            em.patch("Node", None, node, {"metadata": {"annotations": {"hami.io/mutex.lock": None}}})

    def device_plugin(rec: WriteRecord) -> None:
        if rec.subresource == "binding":
            node = rec.body.get("target", {}).get("name", "")
            loop.call_soon(settle, rec.namespace, rec.name, node)

    em.hooks.append(device_plugin)
    await em.start(port=port)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await em.stop()


# ---- the floor: aiohttp + the body + two Redis round trips, no decoding or planning -----------------------------


async def _floor_calls(store: Store) -> None:
    """The two Redis round trips of a /filter: a pipelined read, then one script call (as the reservation)."""
    await store.reservations.node_and_quota("uid", "default")
    await store.meta.ensure_epoch()


async def _serve_floor(port: int, redis_url: str) -> None:
    """What any Python extender of this shape pays per /filter before doing its job: the HTTP server reads the
    body, makes the same two Redis round trips (a pipelined read, then one script call), answers a fixed body."""
    from aiohttp import web

    from vgpu_scheduler.shared.ops import start_server

    store = Store.create(connect(redis_url), prefix="floor")
    answer = (
        b'{"Nodes":null,"NodeNames":["node-00001"],"FailedNodes":null,"FailedAndUnresolvableNodes":null,"Error":""}'
    )

    async def handle(request: web.Request) -> web.Response:
        await request.read()
        await _floor_calls(store)
        return web.Response(body=answer, content_type="application/json")

    async def ready(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application(client_max_size=2 << 20)
    app.router.add_post("/filter", handle)
    app.router.add_get("/readyz", ready)
    server = await start_server(app, f"127.0.0.1:{port}")
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await server.stop()
    await store.aclose()


@contextlib.contextmanager
def _floor(redis_url: str) -> Iterator[str]:
    port = free_port()
    cmd = [sys.executable, "-m", "benchmarks.bench_extender", "--serve-floor", str(port), "--floor-redis", redis_url]
    with process(cmd, port, "floor server"):
        yield f"http://127.0.0.1:{port}"


async def _floor_latency(url: str, nodes: int, requests: int) -> None:
    names = _names(nodes)
    body = _filter_body("floor", names)
    http = Http(url)
    rtts: list[float] = []
    try:
        for i in range(requests + 50):
            t = time.perf_counter()
            await http.request("POST", "/filter", body)
            if i >= 50:
                rtts.append(time.perf_counter() - t)
    finally:
        await http.close()
    print(
        f"  floor (aiohttp + the same body + two Redis round trips, no decoding, no planning): "
        f"p50 {_pct(rtts, 0.5):.2f} ms, p99 {_pct(rtts, 0.99):.2f} ms"
    )


# ---- cluster set-up ----------------------------------------------------------------------------------------------


def _inventory(name: str) -> NodeInventory:
    devices = tuple(
        DeviceInfo(f"GPU-{name}-{i}", i, 10, 81920, 100, "NVIDIA-A100-SXM4-80GB", i // 4, "hami-core", True)
        for i in range(GPUS)
    )
    return NodeInventory(node=name, vendor="NVIDIA", devices=devices)


def _names(n: int) -> list[str]:
    return [f"node-{i:05d}" for i in range(n)]


async def _seed(redis_url: str, nodes: int) -> None:
    """Inventories for every node, background usage on a third of them, epoch and sync markers."""
    store = Store.create(connect(redis_url), prefix="vgpu")
    try:
        await store.client.flushall()
        epoch = await store.meta.ensure_epoch()
        sem = asyncio.Semaphore(64)

        async def put(i: int, name: str) -> None:
            async with sem:
                await store.inventory.put(_inventory(name))
                if i % 3 == 0:
                    for j in range(3):
                        devices = ((ContainerDevice(f"GPU-{name}-{j}", 4000, 20),),)
                        uid = f"seed-{i}-{j}"
                        seeded = Allocation(uid, "seed", uid, name, devices, collapse(devices, 0))
                        await store.reservations.record(seeded)

        await asyncio.gather(*(put(i, n) for i, n in enumerate(_names(nodes))))
        for marker in SyncMarker:
            await store.meta.mark_synced(marker, epoch)
    finally:
        await store.aclose()


async def _wait_ready(url: str, deadline_s: float = 120.0) -> float:
    started = time.monotonic()
    async with aiohttp.ClientSession() as http:
        while time.monotonic() - started < deadline_s:
            with contextlib.suppress(aiohttp.ClientError):
                async with http.get(url + "/readyz") as r:
                    if r.status == 200:
                        return time.monotonic() - started
            await asyncio.sleep(0.05)
    raise SystemExit(f"{url} not ready within {deadline_s}s")


def _filter_body(uid: str, names: Sequence[str], *, gpus: int = 1, pod: dict[str, Any] | None = None) -> bytes:
    p = json.loads(json.dumps(pod or POD_TEMPLATE))
    if pod is None:
        p["metadata"]["uid"] = uid
        p["metadata"]["name"] = f"bench-{uid}"
    p["spec"]["containers"][0]["resources"] = {
        "limits": {"nvidia.com/gpu": str(gpus), "nvidia.com/gpumem": "1000", "nvidia.com/gpucores": "10"}
    }
    return json.dumps({"Pod": p, "Nodes": None, "NodeNames": list(names)}, separators=(",", ":")).encode()


async def _server_mean_ms(url: str, verb: str) -> tuple[float, float]:
    async with aiohttp.ClientSession() as http, http.get(url + "/metrics") as r:
        text = await r.text()
    total = count = 0.0
    for line in text.splitlines():
        if line.startswith(f'vgpu_extender_request_duration_seconds_sum{{verb="{verb}"}}'):
            total = float(line.split()[-1])
        if line.startswith(f'vgpu_extender_request_duration_seconds_count{{verb="{verb}"}}'):
            count = float(line.split()[-1])
    return total, count


def _pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))] * 1000


# ---- measurements ------------------------------------------------------------------------------------------------


async def _latency(url: str, nodes: int, requests: int, label: str) -> None:
    names = _names(nodes)
    bodies = [_filter_body(f"lat-{label}-{i}", names) for i in range(requests + 50)]
    http = Http(url)
    try:
        for body in bodies[:50]:  # warm-up (and the first reservations)
            await http.request("POST", "/filter", body)
        sum0, count0 = await _server_mean_ms(url, "filter")
        rtts: list[float] = []
        for body in bodies[50:]:
            t = time.perf_counter()
            status, answer = await http.request("POST", "/filter", body)
            rtts.append(time.perf_counter() - t)
            assert status == 200 and b'"NodeNames":["' in answer, answer[:300]
        sum1, count1 = await _server_mean_ms(url, "filter")
        failing = _filter_body(f"fail-{label}", names, gpus=GPUS + 1)
        fails: list[float] = []
        for _ in range(max(requests // 10, 20)):  # the same pod again and again, as kube-scheduler retries it
            t = time.perf_counter()
            status, answer = await http.request("POST", "/filter", failing)
            fails.append(time.perf_counter() - t)
            assert b'"FailedAndUnresolvableNodes":{' in answer
    finally:
        await http.close()
    body_kib = len(bodies[-1]) / 1024
    server_ms = (sum1 - sum0) / max(count1 - count0, 1) * 1000
    print(
        f"  /filter, {nodes} candidate names per request ({body_kib:.0f} KiB body), {requests} sequential pods: "
        f"p50 {_pct(rtts, 0.5):.2f} ms, p90 {_pct(rtts, 0.9):.2f} ms, p99 {_pct(rtts, 0.99):.2f} ms, "
        f"max {max(rtts) * 1000:.2f} ms (client round trip); server-side mean {server_ms:.2f} ms"
    )
    print(
        f"  /filter of a pod no node fits ({GPUS + 1} GPUs: every node evaluated, every reason listed), "
        f"{len(fails)} retries: p50 {_pct(fails, 0.5):.2f} ms, p99 {_pct(fails, 0.99):.2f} ms, "
        f"max {max(fails) * 1000:.2f} ms"
    )


async def _create_pods(kube_url: str, count: int, tag: str) -> list[dict[str, Any]]:
    created: list[dict[str, Any]] = []
    sem = asyncio.Semaphore(32)
    async with aiohttp.ClientSession() as http:

        async def one(i: int) -> None:
            pod = json.loads(json.dumps(POD_TEMPLATE))
            pod["metadata"] = {"name": f"tp-{tag}-{i}", "namespace": "default"}
            pod["spec"]["containers"][0]["resources"] = {
                "limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000", "nvidia.com/gpucores": "10"}
            }
            pod["spec"]["schedulerName"] = "vgpu-scheduler"
            async with sem, http.post(f"{kube_url}/api/v1/namespaces/default/pods", json=pod) as r:
                assert r.status == 201, await r.text()
                created.append(await r.json())

        await asyncio.gather(*(one(i) for i in range(count)))
    return created


async def _create_nodes(kube_url: str, names: Sequence[str]) -> None:
    sem = asyncio.Semaphore(32)
    async with aiohttp.ClientSession() as http:

        async def one(name: str) -> None:
            node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
            async with sem, http.post(f"{kube_url}/api/v1/nodes", json=node) as r:
                assert r.status in (201, 409), await r.text()

        await asyncio.gather(*(one(n) for n in names))


class _Tally:
    def __init__(self) -> None:
        self.bound = 0
        self.failed = 0
        self.errors: collections.Counter[str] = collections.Counter()

    def fail(self, text: str) -> None:
        self.failed += 1
        self.errors[text[:110]] += 1


async def _filter_pod(http: Http, pod: dict[str, Any], names: Sequence[str], tally: _Tally) -> str | None:
    _, raw = await http.request("POST", "/filter", _filter_body("", names, pod=pod))
    answer = json.loads(raw)
    if not answer.get("NodeNames"):
        tally.fail(f"filter: {answer.get('Error') or 'no node fits'}")
        return None
    node: str = answer["NodeNames"][0]
    return node


async def _bind_pod(http: Http, pod: dict[str, Any], node: str, tally: _Tally) -> None:
    meta = pod["metadata"]
    bind = {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"], "Node": node}
    _, raw = await http.request("POST", "/bind", json.dumps(bind).encode())
    error = json.loads(raw).get("Error")
    if error:
        tally.fail(f"bind: {error}")
    else:
        tally.bound += 1


async def _throughput(
    urls: Sequence[str], kube_url: str, nodes: int, pods: int, workers: int, tag: str, *, sequential_filters: bool
) -> None:
    """kube-scheduler's shape (``sequential_filters``): one scheduling loop filters pod after pod (round-robin over
    the replicas, as the Service spreads them) and hands each placed pod to ``workers`` concurrent binders.
    Otherwise ``workers`` independent clients each filter then bind (a stress shape: concurrent plans race)."""
    names = _names(nodes)
    created = await _create_pods(kube_url, pods, tag)
    tally = _Tally()
    conns = [Http(urls[i % len(urls)]) for i in range(workers)]
    started = time.perf_counter()
    try:
        if sequential_filters:
            filters = [Http(u) for u in urls]
            binds: asyncio.Queue[tuple[dict[str, Any], str] | None] = asyncio.Queue()

            async def binder(http: Http) -> None:
                while (item := await binds.get()) is not None:
                    await _bind_pod(http, *item, tally)

            async def scheduler() -> None:
                for i, pod in enumerate(created):
                    node = await _filter_pod(filters[i % len(filters)], pod, names, tally)
                    if node is not None:
                        binds.put_nowait((pod, node))
                for _ in conns:
                    binds.put_nowait(None)

            try:
                await asyncio.gather(scheduler(), *(binder(c) for c in conns))
            finally:
                for f in filters:
                    await f.close()
        else:
            queue = list(reversed(created))

            async def client(http: Http) -> None:
                while queue:
                    pod = queue.pop()
                    node = await _filter_pod(http, pod, names, tally)
                    if node is not None:
                        await _bind_pod(http, pod, node, tally)

            await asyncio.gather(*(client(c) for c in conns))
    finally:
        for c in conns:
            await c.close()
    wall = time.perf_counter() - started
    shape = (
        f"sequential /filter (kube-scheduler's loop) + {workers} concurrent /bind"
        if sequential_filters
        else f"{workers} concurrent filter+bind clients"
    )
    print(
        f"  /filter+/bind, {len(urls)} replica(s), {shape}, {nodes} nodes: "
        f"{tally.bound / wall:.0f} pods/s ({tally.bound} bound, {tally.failed} failed, {wall:.1f} s)"
    )
    for text, n in tally.errors.most_common(2):
        print(f"    {n} × {text}")


def _config_args(args: argparse.Namespace) -> list[str]:
    """The extender's ``--device-config-file`` when one was given (e.g. one enabling every vendor)."""
    return [f"--device-config-file={args.device_config_file}"] if args.device_config_file else []


async def _run(args: argparse.Namespace, redis_url: str, kube_url: str) -> None:
    sizes = [int(x) for x in args.nodes.split(",")]
    for nodes in sizes:
        t = time.perf_counter()
        await _seed(redis_url, nodes)
        seed_s = time.perf_counter() - t
        print(
            f"[{nodes} nodes × {GPUS} GPUs] seeded in {seed_s:.1f} s (a third of the nodes carry 3 pods); "
            f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
        )
        with _floor(redis_url) as floor_url:
            await _wait_ready(floor_url)
            await _floor_latency(floor_url, nodes, min(args.requests, 1000))
        with extender_process(redis_url, kube_url, *_config_args(args)) as (url, pid):
            ready_s = await _wait_ready(url)
            print(f"  extender ready in {ready_s:.2f} s (snapshot load), RSS {rss_mib(pid):.0f} MiB")
            await _latency(url, nodes, args.requests, str(nodes))
            print(f"  extender RSS after the run: {rss_mib(pid):.0f} MiB")
    if args.latency_only:
        return
    nodes = sizes[0]
    await _seed(redis_url, nodes)
    await _create_nodes(kube_url, _names(nodes))
    informer = contextlib.ExitStack()
    informer_url = informer.enter_context(informer_process(redis_url, kube_url))
    await _wait_ready(informer_url)
    for replicas in (1, 4):
        with contextlib.ExitStack() as stack:
            procs = [
                stack.enter_context(
                    extender_process(redis_url, kube_url, "--node-scheduler-policy=spread", *_config_args(args))
                )
                for _ in range(replicas)
            ]
            urls = [u for u, _ in procs]
            for u in urls:
                await _wait_ready(u)
            for sequential in (True, False):
                tag = f"r{replicas}{'s' if sequential else 'c'}"
                await _throughput(urls, kube_url, nodes, args.pods, args.workers, tag, sequential_filters=sequential)
    informer.close()
    print(f"  (machine: {os.cpu_count()} CPUs, load average now {os.getloadavg()[0]:.1f}; the client, the emulator,")
    print("   Redis, the informer and the replicas share them)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", default="1000,5000", help="comma list of cluster sizes (default 1000,5000)")
    parser.add_argument("--requests", type=int, default=2000, help="sequential /filter requests per size")
    parser.add_argument("--pods", type=int, default=1500, help="pods per throughput run")
    parser.add_argument("--workers", type=int, default=16, help="concurrent clients in the throughput runs")
    parser.add_argument("--latency-only", action="store_true", help="measure /filter latency only (no throughput)")
    parser.add_argument(
        "--device-config-file", default="", help="the extenders' device config (default: none, NVIDIA only)"
    )
    parser.add_argument("--serve-emulator", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--serve-floor", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--floor-redis", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_floor is not None:
        asyncio.run(_serve_floor(args.serve_floor, args.floor_redis))
        return
    if args.serve_emulator is not None:
        asyncio.run(_serve_emulator(args.serve_emulator))
        return
    with redis_server() as redis_url, _emulator() as kube_url:
        asyncio.run(_run(args, redis_url, kube_url))


if __name__ == "__main__":
    main()
