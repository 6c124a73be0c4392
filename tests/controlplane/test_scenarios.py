"""Scenarios on the real control plane (kube-apiserver + kube-scheduler configured as the chart does, our
services as processes, the HAMi device-plugin emulator), each ending with the audit from the API's objects."""

from __future__ import annotations

from pathlib import Path

from tests.controlplane.control import ApiServer, Cleanup
from tests.controlplane.harness import Settings, gpu_pod
from tests.controlplane.scenario import Scenario, run_scenario


async def test_smoke(kube_apiserver: ApiServer, kube_cleanup: Cleanup, redis_url: str, tmp_path: Path) -> None:
    pods = [gpu_pod(f"p{i:03d}") for i in range(20)]
    scenario = Scenario("smoke", pods, Settings(replicas=1), nodes=5)
    outcome = await run_scenario(kube_apiserver, kube_cleanup, redis_url, tmp_path, scenario)
    print(outcome.report.summary(), outcome.pods_per_s, outcome.scheduler_errors, outcome.lock_waits)
    outcome.report.check()
