"""A bigger soak (``-m slow``): more nodes, more replicas, more pods, churn and a killed replica, audited like
the default end-to-end tests."""

from __future__ import annotations

import asyncio
import random

import pytest

from tests.audit import quota_usage_from_pods
from tests.e2e.cluster import ClusterSpec, eventually, running_cluster
from tests.e2e.driver import Churn, SchedulerDriver, random_specs
from tests.e2e.test_e2e import settle_and_audit

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


async def test_soak_thousands_of_pods_across_four_replicas(redis_url: str) -> None:
    spec = ClusterSpec(nodes=24, gpus_per_node=4, replicas=4, quotas={"team-q": {"limits.nvidia.com/gpumem": "60000"}})
    namespaces = ("default", "default", "default", "team-q")
    async with running_cluster(redis_url, spec) as c:
        specs = random_specs(random.Random(2026), 1500, namespaces=namespaces)
        driver = SchedulerDriver(c, workers=24, retry_unschedulable=True, max_attempts=60)
        report = driver.report
        churn_stop = asyncio.Event()
        churn = asyncio.create_task(
            Churn(c, report, namespaces=("default", "team-q"), period_s=0.05).run(churn_stop), name="soak:churn"
        )

        async def kill_one_replica() -> None:
            await eventually(lambda: len(report.bound) >= 300, timeout_s=300, what="300 pods bound")
            c.replicas[1].kill()

        killer = asyncio.create_task(kill_one_replica(), name="soak:killer")
        try:
            await driver.run(specs)
        finally:
            churn_stop.set()
            await churn
            await killer
        assert report.gave_up == []
        assert len(report.bound) + len(report.unschedulable) + len(report.denied) == len(specs)
        assert len(report.bound) > 1000
        await settle_and_audit(c, report)
        assert quota_usage_from_pods(c.pods()).get("team-q", (0, 0))[0] <= 60000
        print(
            f"soak: bound={len(report.bound)} unschedulable={len(report.unschedulable)} denied={len(report.denied)} "
            f"deleted={len(report.deleted)} completed={len(report.completed)} attempts={report.attempts} "
            f"bind_errors={dict(report.bind_errors)} filter_errors={dict(report.filter_errors)} "
            f"unreachable={report.unreachable} conflicts={c.metric_sum('vgpu_reservation_conflicts_total')} "
            f"capacity_checks={c.monitor.checks}"
        )
