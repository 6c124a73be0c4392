"""Pure parts of the comparison and the driver: policy combinations, candidates, labels, local admission."""

from __future__ import annotations

from typing import Any

import pytest

from vgpu_scheduler.services.simulate.compare import (
    DEFAULT_COMBINATIONS,
    Combination,
    Outcome,
    parse_policies,
    render_comparison,
)
from vgpu_scheduler.services.simulate.driver import (
    Defaults,
    candidate_names,
    effective_policies,
    local_admission,
    scheduler_annotations,
)
from vgpu_scheduler.shared.domain.model import GpuPolicy, GpuPolicyToken, NodePolicy, NvidiaConfig
from vgpu_scheduler.shared.domain.quota import QuotaLimits, QuotaState
from vgpu_scheduler.shared.errors import ConfigError

B, S, T, N = GpuPolicyToken.BINPACK, GpuPolicyToken.SPREAD, GpuPolicyToken.TOPOLOGY_AWARE, GpuPolicyToken.NUMA


def test_default_combinations_are_node_binpack_spread_by_gpu_binpack_spread_topology() -> None:
    assert [c.label for c in DEFAULT_COMBINATIONS] == [
        "binpack/binpack",
        "binpack/spread",
        "binpack/topology-aware",
        "spread/binpack",
        "spread/spread",
        "spread/topology-aware",
    ]


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        pytest.param(["binpack/spread"], [(NodePolicy.BINPACK, (S,))], id="one"),
        pytest.param(
            ["binpack/spread; spread/topology-aware"],
            [(NodePolicy.BINPACK, (S,)), (NodePolicy.SPREAD, (T,))],
            id="semicolon",
        ),
        pytest.param(
            ["spread/binpack,numa", "binpack/binpack spread/binpack,numa"],
            [(NodePolicy.SPREAD, (B, N)), (NodePolicy.BINPACK, (B,))],
            id="chain-repeat-dedupe",
        ),
    ],
)
def test_parse_policies(values: list[str], expected: list[tuple[NodePolicy, tuple[GpuPolicyToken, ...]]]) -> None:
    assert [(c.node, c.gpu.tokens) for c in parse_policies(values)] == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param("binpack", "expected NODE/GPU", id="no-slash"),
        pytest.param("tight/spread", "unknown node scheduler policy 'tight'", id="node"),
        pytest.param("binpack/best", "unknown GPU scheduler policy token 'best'", id="gpu"),
        pytest.param(" ; ", "no NODE/GPU combination", id="empty"),
    ],
)
def test_parse_policies_errors(value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_policies([value])


def test_render_comparison_one_row_per_combination() -> None:
    summary = {
        "pods": 10,
        "placed": 8,
        "pending": 2,
        "nodes_touched": 3,
        "gpu": {"memory_utilisation": 0.5, "core_utilisation": 0.25},
        "fragmentation": {"ratio": 0.125},
        "contention": {"binds_retried": 4, "lock_waits": 7},
    }
    rows = [(c, Outcome((), summary)) for c in DEFAULT_COMBINATIONS[:2]]
    lines = render_comparison(rows).splitlines()
    assert lines[0].split() == [
        "NODE",
        "GPU",
        "PLACED",
        "PENDING",
        "GPU",
        "MEM",
        "GPU",
        "CORES",
        "FRAGMENTATION",
        "NODES",
        "TOUCHED",
        "BIND",
        "RETRIES",
        "LOCK",
        "WAITS",
    ]
    assert lines[1].split() == ["binpack", "binpack", "8/10", "2", "50.0%", "25.0%", "12.5%", "3", "4", "7"]
    assert len(lines) == 3


def _node(name: str, labels: dict[str, str] | None = None, unschedulable: bool = False) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": {"unschedulable": unschedulable}}


def test_candidates_are_schedulable_nodes_matching_the_node_selector() -> None:
    nodes = [_node("a", {"zone": "x"}), _node("b", {"zone": "y"}), _node("c", {"zone": "x"}, unschedulable=True)]
    assert candidate_names({"spec": {}}, nodes) == ["a", "b"]
    assert candidate_names({"spec": {"nodeSelector": {"zone": "x"}}}, nodes) == ["a"]


DEFAULTS = Defaults(NodePolicy.BINPACK, GpuPolicy((S,)))


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        pytest.param({}, ("binpack", "spread"), id="defaults"),
        pytest.param(
            {"hami.io/node-scheduler-policy": "spread", "hami.io/gpu-scheduler-policy": "binpack,numa"},
            ("spread", "binpack,numa"),
            id="overrides",
        ),
        pytest.param({"hami.io/gpu-scheduler-policy": "best"}, ("binpack", "spread"), id="invalid-keeps-defaults"),
    ],
)
def test_effective_policies(annotations: dict[str, str], expected: tuple[str, str]) -> None:
    assert effective_policies({"metadata": {"annotations": annotations}}, DEFAULTS) == expected


def test_scheduler_annotations_are_the_hami_keys_the_pod_did_not_carry() -> None:
    original = {"metadata": {"annotations": {"hami.io/gpu-scheduler-policy": "binpack", "team": "a"}}}
    final = {
        "metadata": {
            "annotations": {
                "hami.io/gpu-scheduler-policy": "binpack",
                "team": "a",
                "hami.io/vgpu-node": "n1",
                "hami.io/bind-phase": "success",
            }
        }
    }
    assert scheduler_annotations(original, final) == {"hami.io/vgpu-node": "n1", "hami.io/bind-phase": "success"}


def _gpu_pod(limits: dict[str, Any], namespace: str = "ns") -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": namespace},
        "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]},
    }


async def test_local_admission_mutates_denies_and_checks_quota() -> None:
    states = {"ns": QuotaState(QuotaLimits(mem_mib=5000)), "free": QuotaState()}

    async def quota(ns: str) -> QuotaState | None:
        return states.get(ns)

    admit = local_admission(
        cfg=NvidiaConfig(), scheduler_name="hami-scheduler", force_overwrite_default_scheduler=True, quota=quota
    )
    bare = await admit(_gpu_pod({"nvidia.com/gpu": "1"}))
    assert bare.pod is not None
    assert bare.pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpucores"] == "100"  # difference 16
    assert bare.pod["spec"]["schedulerName"] == "hami-scheduler"
    over = await admit(_gpu_pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "6000"}))
    assert over.pod is None and over.message == "admission denied: exceeding resource quota"
    fits = await admit(_gpu_pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "6000"}, namespace="free"))
    assert fits.pod is not None
    bad = await admit(_gpu_pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "120"}))
    assert bad.pod is None and bad.message == (
        'admission denied: container "main": nvidia.com/gpumem-percentage is a percentage of one GPU: "120" is more '
        "than 100; use 100 for a whole GPU"
    )


def test_combination_label() -> None:
    assert Combination(NodePolicy.SPREAD, GpuPolicy((B, N))).label == "spread/binpack,numa"
