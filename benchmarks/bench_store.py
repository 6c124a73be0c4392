"""Store figures: reserve latency under concurrency, and pipelined snapshot loads of many nodes.

Run: ``.venv/bin/python -m benchmarks.bench_store [--url redis://…] [--nodes 1000] [--reserves 2000]``.
Without ``--url`` a private ``redis-server`` is started on a free port (and the embedded fakeredis is measured
too, with smaller numbers). Prints figures only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator

from vgpu_scheduler.shared.domain.accounting import collapse
from vgpu_scheduler.shared.domain.allocation import Allocation
from vgpu_scheduler.shared.domain.model import ContainerDevice, DeviceInfo, NodeInventory
from vgpu_scheduler.shared.store import Reserved, Store, connect

GPUS = 8


def _inventory(name: str) -> NodeInventory:
    devices = tuple(
        DeviceInfo(f"GPU-{name}-{i}", i, 10, 81920, 100, "NVIDIA-A100", i // 4, "hami-core", True) for i in range(GPUS)
    )
    return NodeInventory(node=name, vendor="NVIDIA", devices=devices)


def _alloc(uid: str, node: str, gpu: int, mem: int = 1000, cores: int = 5) -> Allocation:
    devices = ((ContainerDevice(f"GPU-{node}-{gpu}", mem, cores),),)
    return Allocation(uid, "bench", uid, node, devices, collapse(devices, 0))


def _pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))] * 1000


@contextlib.contextmanager
def _redis_server() -> Iterator[str]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server not found; pass --url")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    workdir = tempfile.mkdtemp(prefix="bench-redis-")
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", workdir],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(200):
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.1):
                break
            time.sleep(0.02)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)


async def _bench(label: str, url: str | None, nodes: int, reserves: int, concurrency: int) -> None:
    store = Store.create(connect(url), prefix="bench")
    try:
        await store.purge()  # only the bench prefix: --url may point at a Redis that holds other data
        names = [f"node-{i:05d}" for i in range(nodes)]
        started = time.perf_counter()
        for n in names:
            await store.inventory.put(_inventory(n))
        put_s = time.perf_counter() - started
        # some usage everywhere: 3 pods per node
        for i, n in enumerate(names):
            for j in range(3):
                await store.reservations.record(_alloc(f"seed-{i}-{j}", n, j))

        loads = []
        for _ in range(5):
            t = time.perf_counter()
            await store.snapshots.load(names)
            loads.append(time.perf_counter() - t)

        hot = names[0]
        latencies: list[float] = []
        conflicts = 0
        queue = list(range(reserves))

        async def worker() -> None:
            nonlocal conflicts
            while queue:
                i = queue.pop()
                t = time.perf_counter()
                result = await store.reservations.reserve(_alloc(f"pod-{i}", hot, i % GPUS, mem=100, cores=1))
                latencies.append(time.perf_counter() - t)
                if isinstance(result, Reserved):
                    await store.reservations.release(f"pod-{i}", node=hot)
                else:
                    conflicts += 1

        t = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - t
        print(f"[{label}] {nodes} nodes × {GPUS} GPUs")
        print(f"  put inventory: {put_s / nodes * 1000:.3f} ms/node (sequential)")
        print(f"  snapshot load of all nodes: p50 {statistics.median(loads) * 1000:.1f} ms")
        print(
            f"  reserve on one node, {concurrency} concurrent: p50 {_pct(latencies, 0.5):.2f} ms, "
            f"p99 {_pct(latencies, 0.99):.2f} ms, {reserves / wall:.0f} reserve+release/s, {conflicts} conflicts"
        )
    finally:
        await store.purge()
        await store.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", default=None)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--reserves", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    if args.url:
        asyncio.run(_bench("redis", args.url, args.nodes, args.reserves, args.concurrency))
    else:
        with _redis_server() as url:
            asyncio.run(_bench("redis", url, args.nodes, args.reserves, args.concurrency))
    asyncio.run(_bench("embedded", None, max(args.nodes // 10, 1), max(args.reserves // 10, 1), args.concurrency))


if __name__ == "__main__":
    main()
