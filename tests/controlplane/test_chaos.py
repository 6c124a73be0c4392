"""Chaos on the real control plane (``tests/controlplane/chaos.py``, ``benchmarks/chaos.py`` at size): a churning
workload while faults are injected at random (seeded) moments, then the audit once the run has settled.

* ``slow``: every fault of ``chaos_faults.fault_names`` (each extender replica, the informer and the registrar
  killed and restarted, a Redis failover, Redis restarted empty, kube-scheduler and the API server restarted, one
  replica cut off from Redis and another SIGSTOPped, each for longer than a bind's claim, nodes rebooted, cards
  unhealthy and back) on 12 nodes and 200 pods.
* the default run: a smoke version, a few faults on 4 nodes and 40 pods.

Each must end with the final audit clean: no device over capacity, no pod bound without its allocation, no quota
over its limit, no pod pending that fits, no bind unsettled, no lock, reservation or record without a pod left in
Redis, Redis' usage equal to the pods'; every fault injected; no process crashed. The figures are printed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.chaos import report
from tests.controlplane.chaos import ChaosSpec, run_chaos
from tests.controlplane.chaos_faults import fault_names
from tests.controlplane.control import ApiServer
from tests.controlplane.fixtures import own_control_plane


@pytest.fixture
def api() -> Iterator[ApiServer]:
    """A control plane of the test's own: the run restarts its API server."""
    with own_control_plane() as server:
        yield server


async def _run_clean(api: ApiServer, tmp: Path, spec: ChaosSpec) -> None:
    outcome = await run_chaos(api, tmp, spec)
    print("\n" + "\n".join(report(outcome)))
    wanted = spec.faults or fault_names(spec.replicas, spec.node_reboots, spec.card_faults)
    assert sorted(f.name for f in outcome.faults) == sorted(wanted)
    assert [f for f in outcome.faults if f.error] == []
    assert outcome.crashed == []
    assert outcome.cleanup_error is None
    assert outcome.final is not None
    assert outcome.final.clean(), outcome.final.line() + "\n" + "\n".join(outcome.final.other + outcome.final.stuck)
    assert all(c.over_capacity == 0 and c.bound_without_allocation == 0 and c.quota_over == 0 for c in outcome.checks)
    assert outcome.bound > 0


@pytest.mark.timeout(240)
async def test_smoke_kills_failover_and_pause(api: ApiServer, tmp_path: Path) -> None:
    spec = ChaosSpec(
        nodes=4, pods=40, duration_s=30, replicas=2, stall_s=8, pause_s=8, audit_every_s=10, settle_s=150,
        faults=("kill:extender-0", "kill:informer", "redis-failover", "pause"),
    )  # fmt: skip
    await _run_clean(api, tmp_path, spec)


@pytest.mark.slow
@pytest.mark.timeout(1500)
async def test_every_fault_on_a_churning_cluster(api: ApiServer, tmp_path: Path) -> None:
    spec = ChaosSpec(nodes=12, pods=200, duration_s=240, replicas=3, stall_s=60, pause_s=60, settle_s=420)
    await _run_clean(api, tmp_path, spec)
