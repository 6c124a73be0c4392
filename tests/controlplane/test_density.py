"""Node binpack packs a burst on the real control plane: the pods land on the fewest nodes, the best first (equal
scores by name), while the binds run in parallel; spread, the same burst, uses every node.

kube-scheduler filters the burst's pods one after another and binds them asynchronously; each node takes one bind
at a time (HAMi's node lock). The extender passes over a node only once its lock cannot serve the binds queued
there within most of a bind's wait (services/extender/bindlimit.py); a node of two cards never reaches that, so
the burst fills nodes two by two, in order. ``simulate`` plays the same burst on the same nodes
the same way. The bench (benchmarks/bench_cluster.py) measures it at size, beside the minimum
(tests/controlplane/density.py).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.controlplane.control import ApiServer, Cleanup
from tests.controlplane.density import minimum_nodes
from tests.controlplane.harness import NodeShape, Settings, gpu_node, gpu_pod
from tests.controlplane.scenario import Scenario, run_scenario

pytestmark = pytest.mark.timeout(300)

NODES = 10
SHAPE = NodeShape(gpus=2)


def _burst(n: int) -> list[dict[str, object]]:
    return [gpu_pod(f"w{i:03d}", mem=None, cores=None) for i in range(n)]


@pytest.mark.parametrize("replicas", [1, 2])
async def test_a_binpack_burst_fills_the_fewest_nodes_in_order(
    kube_apiserver: ApiServer, kube_cleanup: Cleanup, redis_url: str, tmp_path: Path, replicas: int
) -> None:
    pods = _burst(12)
    scenario = Scenario(
        f"pack-{replicas}", pods, Settings(replicas=replicas, node_policy="binpack"), nodes=NODES, shape=SHAPE
    )
    outcome = await run_scenario(kube_apiserver, kube_cleanup, redis_url, tmp_path, scenario)
    outcome.report.check()
    assert outcome.bound == len(pods)
    per_node = Counter(p["spec"]["nodeName"] for p in outcome.pods)
    assert len(per_node) == minimum_nodes(pods, SHAPE) == 6
    assert set(per_node.values()) == {SHAPE.gpus}  # every node it opened is full
    names = sorted(per_node)
    assert [n.rsplit("-n", 1)[1] for n in names] == [f"{i:04d}" for i in range(6)]  # the first six by name
    if replicas == 1:  # simulate, the same nodes and burst: the same nodes, each as full
        simulated = await _simulate(tmp_path, pods)
        assert Counter(n.rsplit("-n", 1)[1] for n in simulated) == Counter(n.rsplit("-n", 1)[1] for n in per_node)
        assert Counter(simulated.values()) == Counter(per_node.values())


async def test_a_spread_burst_uses_every_node(
    kube_apiserver: ApiServer, kube_cleanup: Cleanup, redis_url: str, tmp_path: Path
) -> None:
    pods = _burst(12)
    scenario = Scenario("spread", pods, Settings(replicas=1, node_policy="spread"), nodes=NODES, shape=SHAPE)
    outcome = await run_scenario(kube_apiserver, kube_cleanup, redis_url, tmp_path, scenario)
    outcome.report.check()
    assert outcome.bound == len(pods)
    assert len({p["spec"]["nodeName"] for p in outcome.pods}) == NODES


async def _simulate(tmp: Path, pods: list[dict[str, Any]]) -> Counter[str]:
    """``vgpu-scheduler simulate`` of the burst on ``NODES`` nodes of ``SHAPE``: pods per node."""
    nodes = [gpu_node(f"sim-n{i:04d}", SHAPE, {}) for i in range(NODES)]
    workload = [{**p, "metadata": {**p["metadata"], "namespace": "default"}} for p in pods]
    for p in workload:
        p["spec"] = {k: v for k, v in p["spec"].items() if k != "schedulerName"}
    (tmp / "cluster.yaml").write_text(yaml.safe_dump_all(nodes))
    (tmp / "workload.yaml").write_text(yaml.safe_dump_all(workload))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "vgpu_scheduler.services.cli", "simulate", "--cluster", str(tmp / "cluster.yaml"),
        "--workload", str(tmp / "workload.yaml"), "--output", "json", "--log-level", "warning",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    report = json.loads(out)
    assert report["summary"]["placed"] == len(pods)
    return Counter(p["node"] for p in report["pods"])
