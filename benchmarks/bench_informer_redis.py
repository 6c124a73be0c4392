"""The informer's Redis work per pod, the way before and the way now: client CPU per pod in this process.

Run: ``.venv/bin/python -m benchmarks.bench_informer_redis [--url redis://…] [--pods 1500] [--rounds 3]``.
Without ``--url`` a private ``redis-server`` is started on a free port. Per pod, as the informer does it:

* ``record``: confirm the extender's reservation and record the quota charge, as two script calls one after the
  other (before) and as ``Store.record_observed``'s one pipeline (now);
* ``lock``: the settled bind's node lock, read (``inspect``) and then released (before), and released by one
  ``release_settled`` call (now). The lock is taken for each pod beforehand, outside the timing.

Prints microseconds of this process' CPU per pod (``time.process_time``) for each round; Redis' own time is
not in it. Figures only, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

from benchmarks.bench_store import _alloc, _inventory, _redis_server
from vgpu_scheduler.shared.domain.allocation import Allocation
from vgpu_scheduler.shared.runtime import fast_loop_factory
from vgpu_scheduler.shared.store import PodQuotaCharge, Store, connect

NODES = 50


async def _bench(url: str, pods: int, rounds: int) -> None:
    store = Store.create(connect(url), prefix="bench-informer")
    try:
        await store.purge()
        for i in range(NODES):
            await store.inventory.put(_inventory(f"n{i}"))
        allocs = [_alloc(f"u{i}", f"n{i % NODES}", i % 8) for i in range(pods)]
        for a in allocs:  # what /filter leaves: a reservation and a quota charge
            await store.reservations.reserve(a)
            await store.quota.charge(a.namespace, a.pod_uid, 1000, 5)
        charge = PodQuotaCharge(1000, 5)
        await store.record_observed(allocs[0], charge)  # loads the scripts

        async def record_before(a: Allocation) -> None:
            await store.reservations.record(a)
            await store.quota.record(a.namespace, a.pod_uid, charge.mem_mib, charge.cores_pct)

        async def record_now(a: Allocation) -> None:
            await store.record_observed(a, charge)

        def owner(a: Allocation) -> str:
            return f"{a.namespace}/{a.name}"

        async def lock_before(a: Allocation) -> None:
            info = await store.locks.inspect(a.node)
            assert info is not None
            await store.locks.release(a.node, info.owner, token=info.token)

        async def lock_now(a: Allocation) -> None:
            released, _ = await store.locks.release_settled(a.node, owner(a), None)
            assert released

        async def timed(fn: Callable[[Allocation], Awaitable[None]], locked: bool) -> float:
            total = 0.0
            for a in allocs:
                if locked:
                    await store.locks.acquire(a.node, owner(a), ttl_s=300)
                started = time.process_time()
                await fn(a)
                total += time.process_time() - started
            return total / len(allocs) * 1e6

        cases = (
            ("record, two calls (before)", record_before, False),
            ("record, one pipeline (now)", record_now, False),
            ("lock, read + release (before)", lock_before, True),
            ("lock, one call (now)", lock_now, True),
        )
        print(f"# {pods} pods on {NODES} nodes, {rounds} rounds: this process' CPU, microseconds per pod")
        for label, fn, locked in cases:
            figures = [await timed(fn, locked) for _ in range(rounds)]
            print(f"{label:32s}" + "".join(f"{f:8.0f}" for f in figures))
    finally:
        await store.purge()
        await store.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a Redis to use (default: a private redis-server)")
    parser.add_argument("--pods", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        url = args.url or stack.enter_context(_redis_server())
        with asyncio.Runner(loop_factory=fast_loop_factory()) as runner:
            runner.run(_bench(url, args.pods, args.rounds))


if __name__ == "__main__":
    main()
