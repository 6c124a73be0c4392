"""Scenarios on the real control plane: kube-apiserver and kube-scheduler v1.36 configured as the chart configures
it, our services as real processes, the webhook registered as a MutatingWebhookConfiguration over TLS, and the
HAMi device-plugin emulator. Each ends with the audit from the API's objects (``tests/controlplane/audit.py``).

The audit raises :class:`CorrectnessError` (over-commit, bad allocation, plugin failure, crash) or
:class:`Collapse` (pods left pending that could fit, binds never settled, locks left behind); either fails the
scenario. (Before bind-aware placement and the API budget fix, the scenarios with the flag defaults collapsed
under the real scheduler's concurrent binds: 41/60 bound, 482 scheduler errors.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.controlplane.control import ApiServer, Cleanup
from tests.controlplane.harness import BindWatch, NodeShape, Settings, System, gpu_container, gpu_pod
from tests.controlplane.scenario import Outcome, Scenario, run_scenario
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(300)


def shared_mix(n: int, prefix: str = "p") -> list[dict[str, Any]]:
    """Shared pods of 1–4 GB and 10–30 % of a card, one in six a whole card (``gpucores: 100``)."""
    pods = []
    for i in range(n):
        if i % 6 == 5:
            pods.append(gpu_pod(f"{prefix}{i:04d}", mem=None, cores=100))
        else:
            pods.append(gpu_pod(f"{prefix}{i:04d}", mem=1000 * (1 + i % 4), cores=10 * (1 + i % 3)))
    return pods


def _report(outcome: Outcome) -> None:
    print(
        f"\n{outcome.report.summary()}; {outcome.pods_per_s:.1f} pods/s, bind p50 {outcome.percentile(50):.2f}s "
        f"p99 {outcome.percentile(99):.2f}s, {outcome.scheduler_errors} scheduler errors, "
        f"{outcome.lock_waits} lock waits, rejected {len(outcome.rejected)}"
    )


async def _run(api: ApiServer, cleanup: Cleanup, redis_url: str, tmp: Path, scenario: Scenario, **kw: Any) -> Outcome:
    outcome = await run_scenario(api, cleanup, redis_url, tmp, scenario, **kw)
    _report(outcome)
    return outcome


async def test_binpack_one_replica_shared_and_whole_cards(
    kube_apiserver: ApiServer, kube_cleanup: Cleanup, redis_url: str, tmp_path: Path
) -> None:
    scenario = Scenario("binpack-1", shared_mix(120), Settings(replicas=1, node_policy="binpack"))
    outcome = await _run(kube_apiserver, kube_cleanup, redis_url, tmp_path, scenario)
    assert outcome.created == 120 and not outcome.rejected
    outcome.report.check()
    # Every pod is bound, or no node could take it in the final state (the audit's exhaustive check): binds run in
    # parallel across nodes, so the shared pods of the first burst land on more nodes (and, with the GPU spread
    # policy, on more cards) than one-at-a-time packing would use, and a whole-card pod late in the run may find
    # no idle card.
    assert outcome.report.bound + outcome.report.unschedulable == 120
    assert outcome.report.bound >= 110


async def test_spread_two_replicas_webhook_init_sidecar_topology(
    kube_apiserver: ApiServer, kube_cleanup: Cleanup, redis_url: str, tmp_path: Path
) -> None:
    """Spread over 2 replicas; pods without a schedulerName (the webhook sets it), bare ``nvidia.com/gpu: 1``
    (the webhook makes it a whole card), pods with a GPU init container and a GPU sidecar, and 2-GPU pods
    choosing by the nodes' topology scores."""
    pods = shared_mix(80)
    pods += [gpu_pod(f"hook{i:03d}", scheduler=None, mem=None, cores=None) for i in range(15)]
    pods += [
        gpu_pod(f"init{i:03d}", init=[gpu_container("warm"), gpu_container("proxy", sidecar=True)]) for i in range(10)
    ]
    topo = {"hami.io/gpu-scheduler-policy": "topology-aware"}
    pods += [gpu_pod(f"topo{i:03d}", gpus=2, mem=2000, cores=20, annotations=topo) for i in range(10)]
    scenario = Scenario(
        "spread-2",
        pods,
        Settings(replicas=2, node_policy="spread"),
        shape=NodeShape(gpus=4, topology=True),
    )
    outcome = await _run(kube_apiserver, kube_cleanup, redis_url, tmp_path, scenario)
    assert not outcome.rejected, outcome.rejected
    outcome.report.check()
    assert outcome.report.bound == len(pods)


async def test_quota_denial(kube_apiserver: ApiServer, kube_cleanup: Cleanup, redis_url: str, tmp_path: Path) -> None:
    """A namespace with 10,000 MiB of GPU memory: the 3,000 MiB pods beyond it are refused by the webhook's
    pre-check or left unschedulable by the filter, never bound over the quota."""
    pods = [gpu_pod(f"q{i:02d}", mem=3000, cores=10) for i in range(6)]
    scenario = Scenario(
        "quota",
        pods,
        Settings(replicas=1),
        nodes=4,
        quota={"limits.nvidia.com/gpumem": "10000"},
        stall_s=8,
    )
    outcome = await _run(kube_apiserver, kube_cleanup, redis_url, tmp_path, scenario)
    outcome.report.check()
    assert outcome.report.bound == 3  # 3 × 3000 MiB ≤ 10000 < 4 × 3000
    assert len(outcome.rejected) + outcome.report.unschedulable == 3, (outcome.rejected, outcome.report.notes)


async def test_one_extender_killed_mid_run(
    kube_apiserver: ApiServer, kube_cleanup: Cleanup, redis_url: str, tmp_path: Path
) -> None:
    """Two replicas; replica 0 is SIGKILLed once 30 pods are bound: the other one finishes the run."""
    # a bind cut off between its pod patch and the Binding holds that pod's devices until its claim expires
    # (--bind-timeout plus a few call deadlines, about 40 s with the chart's settings): then a retry takes over
    scenario = Scenario(
        "kill", shared_mix(100), Settings(replicas=2), kill_extender_after=30, deadline_s=240, stall_s=60
    )
    outcome = await _run(kube_apiserver, kube_cleanup, redis_url, tmp_path, scenario)
    outcome.report.check()
    assert outcome.report.bound == 100


async def test_flag_defaults_two_replicas(
    kube_apiserver: ApiServer, kube_cleanup: Cleanup, redis_url: str, tmp_path: Path
) -> None:
    """The issue's reproduction, small: every flag at its default (``--kube-qps 5``), two replicas."""
    scenario = Scenario("defaults", shared_mix(60), Settings(replicas=2, chart=False), deadline_s=45, stall_s=10)
    outcome = await _run(kube_apiserver, kube_cleanup, redis_url, tmp_path, scenario)
    outcome.report.check()
    assert outcome.report.bound == 60


async def test_webhook_mutates_through_the_api_server(
    kube_apiserver: ApiServer, kube_cleanup: Cleanup, redis_url: str, tmp_path: Path
) -> None:
    """A pod created without a schedulerName comes back from the API server with ``vgpu-scheduler`` and a whole
    card: the API server called our webhook over TLS at its registered URL."""
    seen: dict[str, Any] = {}

    async def inspect(system: System, watch: BindWatch) -> None:
        await eventually(lambda: "bare" in watch.bound, 60, "the bare pod bound")
        seen.update(system.api.request("GET", f"/api/v1/namespaces/{ns_of(system)}/pods/bare"))

    def ns_of(system: System) -> str:
        return system.services[0].log.parent.name

    scenario = Scenario("webhook", [gpu_pod("bare", scheduler=None, mem=None, cores=None)], Settings(), nodes=2)
    outcome = await _run(kube_apiserver, kube_cleanup, redis_url, tmp_path, scenario, during=inspect)
    outcome.report.check()
    assert seen["spec"]["schedulerName"] == "vgpu-scheduler"
    limits = seen["spec"]["containers"][0]["resources"]["limits"]
    assert limits.get("nvidia.com/gpucores") == "100", limits


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("chart", [False, True], ids=["flag-defaults", "chart-settings"])
async def test_issue_reproduction_100_nodes_500_pods(
    kube_apiserver: ApiServer, kube_cleanup: Cleanup, redis_url: str, tmp_path: Path, chart: bool
) -> None:
    """The issue's run: 100 nodes × 8 GPUs, registrar + informer + 2 extenders, 500 shared pods."""
    scenario = Scenario(
        "issue",
        shared_mix(500),
        Settings(replicas=2, chart=chart),
        nodes=100,
        shape=NodeShape(gpus=8),
        deadline_s=300,
        stall_s=60,
    )
    outcome = await _run(kube_apiserver, kube_cleanup, redis_url, tmp_path, scenario)
    outcome.report.check()
    assert outcome.report.bound == 500
