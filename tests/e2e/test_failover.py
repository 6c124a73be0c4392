"""Redis that survives a machine: the whole system on a Sentinel-managed Redis (a primary, two replicas, three
Sentinels: real ``redis-server`` and ``redis-server --sentinel`` processes) while several extender replicas
schedule pods, a share of them twice at once, and the primary is SIGKILLed mid-run. Sentinel promotes a
replica; every component follows it without a restart. Audited from the API objects: 0 devices over capacity at
any API state, 0 bound pods without their allocation, 0 pods lost; Redis agrees with the pods afterwards. The
time until the system serves again is printed."""

from __future__ import annotations

import asyncio
import functools
import random
import time
from collections.abc import Callable

import pytest

from tests.e2e.cluster import Cluster, ClusterSpec, eventually, running_cluster
from tests.e2e.driver import random_specs
from tests.e2e.redisproc import SentinelGroup
from tests.e2e.test_duplicates import DuplicatingScheduler, audit_from_api
from vgpu_scheduler.shared.errors import TransientError


async def _all_ready(c: Cluster) -> bool:
    results = await asyncio.gather(*(r.service.readiness() for r in c.replicas if r.alive))
    return all(ok for ok, _ in results)


async def _new_epoch(c: Cluster, old: str | None) -> bool:
    try:
        return (await c.store.meta.status()).epoch not in (None, old)
    except TransientError:  # the test's own client meeting the failover: ask again
        return False


async def _failover(
    *, pods: int, share: float, seed: int, nodes: int = 6, replicas: int = 3, kills: int = 1, wait: int | None = None
) -> None:
    async with SentinelGroup() as group:
        spec = ClusterSpec(
            nodes=nodes, gpus_per_node=4, replicas=replicas, registrar_resync_s=0.5, redis_wait_replicas=wait
        )
        async with running_cluster(group.url, spec) as c:
            specs = random_specs(random.Random(seed), pods)
            sched = DuplicatingScheduler(c, share=share, seed=seed, workers=10, max_attempts=400)
            timings: list[tuple[float, float]] = []

            async def kill_primary_mid_run() -> None:
                for k in range(kills):
                    target = (k + 1) * pods // (kills + 2)

                    def bound_at_least(n: int) -> Callable[[], bool]:
                        return lambda: len(sched.out.bound) >= n

                    await eventually(bound_at_least(target), 120, what=f"{target} pods bound")
                    bound_before = len(sched.out.bound)
                    epoch = (await c.store.meta.status()).epoch
                    killed_at = time.monotonic()
                    await group.kill_primary()
                    # not ready is observed (the store epoch changed), then ready again
                    await eventually(lambda: _all_ready(c), 60, what="every extender ready after the failover")
                    ready_s = time.monotonic() - killed_at
                    await eventually(functools.partial(_new_epoch, c, epoch), 30, what="a new store epoch (rebuilt)")
                    await eventually(bound_at_least(bound_before + 1), 60, what="a pod bound after the failover")
                    timings.append((ready_s, time.monotonic() - killed_at))
                    await group.revive()  # the killed Redis pod restarts, empty, as a replica

            killer = asyncio.create_task(kill_primary_mid_run(), name="e2e:kill-primary")
            try:
                out = await sched.run(specs)
            finally:
                await killer
            assert group.kills == kills
            await eventually(lambda: not c.plugin.busy, 30, what="device plugin idle")
            audit_from_api(c, specs, out)
            assert len(out.bound) >= pods // 3
            # a bind caught mid-flight keeps its pod's devices until its claim runs out (tens of seconds)
            await eventually(c.audit_matches, 90, what="Redis usage == usage recomputed from the API's pods")
            # each new primary started a new store epoch: every replica dropped its snapshot and reloaded it
            assert all(r.service.cache.stats.epoch_changes >= kills for r in c.replicas)
            not_ready = c.metric_sum("vgpu_filter_outcomes_total", outcome="not_ready")
            after = "; ".join(
                f"extenders ready again {r:.2f}s, next pod bound {b:.2f}s after a kill" for r, b in timings
            )
            print(f"\nfailover x{kills}: bound {len(out.bound)}, refused {len(out.refused)}; {after}")
            print(f"filters answered not-ready meanwhile: {not_ready:.0f}")


@pytest.mark.timeout(400)  # its waits (each with its own message) bound it; 46 s alone, over 120 s under load
async def test_primary_killed_mid_run_with_three_extender_replicas() -> None:
    await _failover(pods=60, share=0.1, seed=21)


@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_primary_killed_twice_with_every_pod_scheduled_twice_on_four_replicas() -> None:
    await _failover(pods=400, share=1.0, seed=22, nodes=16, replicas=4, kills=2)
