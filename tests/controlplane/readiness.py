"""The chart's readiness probe on the extender replicas (``readinessProbe``: ``GET /readyz`` every 5 s, 5 s timeout,
unready after 2 failures in a row, ready again after one success), acting on the harness' balancer as the
extenders' Service's endpoints do: a replica that is not ready gets no new connection; the ones open stay open.
The webhook's balancer is not gated: the chart's webhook Service publishes replicas that are not ready (admission
needs no Redis)."""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp

from tests.controlplane.harness import System

PERIOD_S = 5.0
TIMEOUT_S = 5.0
FAILURES = 2


async def probe_readiness(system: System) -> None:
    """Probe every replica for ever (cancel to stop)."""
    misses: dict[int, int] = {}
    ctx = system.api.ssl_context()
    async with aiohttp.ClientSession(trust_env=False) as session:

        async def probe(i: int, url: str) -> None:
            ok = False
            with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
                timeout = aiohttp.ClientTimeout(total=TIMEOUT_S)
                async with session.get(f"{url}/readyz", ssl=ctx, timeout=timeout) as resp:
                    ok = resp.status == 200
            misses[i] = 0 if ok else misses.get(i, 0) + 1
            if ok:
                system.balancer.unready.discard(i)
            elif misses[i] >= FAILURES:
                system.balancer.unready.add(i)

        while True:
            await asyncio.gather(*(probe(i, url) for i, url in enumerate(system.extender_urls)))
            await asyncio.sleep(PERIOD_S)  # the probe's period
