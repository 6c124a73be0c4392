"""``simulate`` with priorities, preemption and gangs (the bundled ``priority-*.yaml`` example and small files of
its own): the extender's own preemption chooses the victims, they terminate on the simulated clock, the preemptor
binds to the devices they held; a gang binds whole or not at all and leaves nothing reserved."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.simulate.conftest import run_cli, run_cli_json
from vgpu_scheduler.services.simulate.main import EXAMPLES_DIR
from vgpu_scheduler.shared.codec import annotations as keys

CLUSTER = EXAMPLES_DIR / "priority-cluster.yaml"
WORKLOAD = EXAMPLES_DIR / "priority-workload.yaml"


@pytest.fixture(scope="module")
def run() -> dict[str, Any]:
    out: dict[str, Any] = run_cli_json("simulate", "--cluster", str(CLUSTER), "--workload", str(WORKLOAD))
    return out


def pods_of(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in run["pods"]}


def devices(pod: dict[str, Any]) -> set[str]:
    text = pod["annotations"].get(keys.DEVICES_ALLOCATED, "")
    return {d.split(",")[0] for ctr in text.split(";") for d in ctr.split(":") if d}


def test_the_preemptor_evicts_the_least_important_pods_holding_the_devices_it_needs(run: dict[str, Any]) -> None:
    pods = pods_of(run)
    urgent = pods["urgent-train"]
    assert urgent["node"] is not None and urgent["priority"] == 10000, urgent
    victims = {name: p for name, p in pods.items() if p["preempted_by"] == "ml/urgent-train"}
    # three whole cards were needed and every batch card is whole: exactly three victims, all batch (priority 100,
    # below the ring's 1000), all on the node the preemptor was bound to
    assert len(victims) == 3, victims
    assert all(name.startswith("batch-") and p["priority"] == 100 for name, p in victims.items())
    assert all(p["node"] is None and list(p["reasons"]) == [urgent["node"]] for p in victims.values())
    assert all("preempted by ml/urgent-train" in p["reasons"][urgent["node"]] for p in victims.values())
    # the preemptor got exactly the cards its victims held
    assert devices(urgent) == set().union(*(devices(v) for v in victims.values()))
    # the batch pod spared on that node is the one that started first (the most recently started go first)
    spared = [n for n, p in pods.items() if n.startswith("batch-") and p["node"] == urgent["node"]]
    assert len(spared) == 1 and int(spared[0].split("-")[1]) < min(int(n.split("-")[1]) for n in victims), spared
    summary = run["summary"]
    assert summary["preempted"] == 3 and summary["placed"] + summary["pending"] + summary["preempted"] == 18
    evictions = summary["preemption"]["evictions"]
    assert sorted(e["pod"] for e in evictions) == sorted(f"ml/{n}" for n in victims)
    assert all(e["by"] == "ml/urgent-train" and e["node"] == urgent["node"] for e in evictions)
    assert min(e["at_s"] for e in evictions) >= 20  # each took its 20 s grace period on the simulated clock
    assert summary["preemption"]["preemptors"]["ml/urgent-train"]["victims"] == sorted(
        evictions[i]["pod"] for i in range(3)
    )
    assert summary["over_capacity"] == []


def test_a_pod_with_preemption_policy_never_waits(run: dict[str, Any]) -> None:
    polite = pods_of(run)["urgent-polite"]
    assert polite["node"] is None and polite["priority"] == 10000
    assert not [p for p in run["pods"] if p["preempted_by"] == "ml/urgent-polite"]


def test_a_gang_binds_whole_or_not_at_all_and_leaves_nothing_reserved(run: dict[str, Any]) -> None:
    pods = pods_of(run)
    ring = [pods[f"ring-{i}"] for i in range(4)]
    assert all(p["node"] == "t4-03" and p["pod_group"] == "ring" for p in ring)
    allreduce = [pods[f"allreduce-{i}"] for i in range(3)]
    # two of its three members fit in every pass: none is bound, none carries an allocation
    assert all(p["node"] is None and p["annotations"] == {} for p in allreduce), allreduce
    assert run["summary"]["gangs"] == {
        "ml/allreduce": {"min_count": 3, "members": 3, "bound": 0},
        "ml/ring": {"min_count": 4, "members": 4, "bound": 4},
    }
    # what the failed passes reserved was released: the card goes to a later pod (a reservation left behind would
    # hold it for minutes, --reservation-grace)
    late = pods["late-batch"]
    assert late["node"] == "t4-03", late


def test_the_text_report_shows_preemption_and_gangs() -> None:
    code, out, err = run_cli("simulate", "--cluster", str(CLUSTER), "--workload", str(WORKLOAD))
    assert code == 0, err
    assert "placed 11/18, pending 4, preempted 3" in out
    assert "ml/urgent-train (priority 10000) -> t4-02: evicted ml/batch-5, ml/batch-6, ml/batch-7" in out
    assert "gang ml/allreduce: 0/3 members bound, minCount 3 (none bound)" in out
    assert "gang ml/ring: 4/4 members bound, minCount 4 (whole)" in out


def write(tmp_path: Path, docs: list[dict[str, Any]]) -> Path:
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    return path


def gpu_pod(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}}}],
            **spec,
        },
    }


def test_the_api_servers_priority_admission_refuses_what_it_forbids(tmp_path: Path) -> None:
    workload = write(
        tmp_path,
        [
            {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "high"}, "value": 50},
            gpu_pod("unknown-class", priorityClassName="nope"),
            gpu_pod("bare-priority", priority=7),
            gpu_pod("agreeing", priorityClassName="high", priority=50),
            gpu_pod("system", priorityClassName="system-node-critical"),
        ],
    )
    out = run_cli_json("simulate", "--cluster", str(CLUSTER), "--workload", str(workload))
    pods = pods_of(out)
    assert pods["unknown-class"]["reasons"] == {
        "*": 'pods "unknown-class" is forbidden: no PriorityClass with name nope was found'
    }
    assert pods["bare-priority"]["reasons"]["*"].startswith(
        'pods "bare-priority" is forbidden: the integer value of priority (7) must not be provided in pod spec; '
        "priority admission controller computed 0"
    )
    assert pods["agreeing"]["node"] is not None and pods["agreeing"]["priority"] == 50
    assert pods["system"]["priority"] == 2_000_001_000
