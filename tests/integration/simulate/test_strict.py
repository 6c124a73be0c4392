"""``simulate`` leaves Pending what a real cluster leaves Pending, through the CLI as a user runs it: pods the API
server's validation refuses, and (below) pods kube-scheduler's own NodeResourcesFit refuses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.integration.simulate.conftest import run_cli, run_cli_json

NVIDIA_POOL = {
    "apiVersion": "v1",
    "kind": "NodePool",
    "metadata": {"name": "node-a100"},
    "spec": {"nodes": 3, "devices": [{"vendor": "NVIDIA", "type": "NVIDIA A100", "count": 2, "memory": "40Gi"}]},
}


def pod(name: str, resources: dict[str, Any], **spec: Any) -> dict[str, Any]:
    container = {"name": "main", "image": "x", "resources": resources}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"containers": [container], **spec}}


def write(path: Path, *docs: dict[str, Any]) -> str:
    path.write_text(yaml.safe_dump_all(list(docs)), encoding="utf-8")
    return str(path)


def test_a_pod_the_api_server_refuses_is_never_placed_and_says_why(tmp_path: Path) -> None:
    cluster = write(tmp_path / "cluster.yaml", NVIDIA_POOL)
    workload = write(
        tmp_path / "workload.yaml",
        pod("requests-only", {"requests": {"nvidia.com/gpu": "1"}}),
        pod("unequal", {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "2"}}),
        pod("fine", {"limits": {"nvidia.com/gpu": "1"}}),
    )
    out = run_cli_json("simulate", "--cluster", cluster, "--workload", workload)
    by_name = {p["name"]: p for p in out["pods"]}
    assert by_name["requests-only"]["node"] is None
    assert by_name["requests-only"]["reasons"] == {
        "*": 'Pod "requests-only" is invalid: spec.containers[0].resources.limits: Required value: '
        "Limit must be set for non overcommitable resources"
    }
    assert by_name["unequal"]["node"] is None
    assert by_name["unequal"]["reasons"] == {
        "*": 'Pod "unequal" is invalid: spec.containers[0].resources.requests: Invalid value: "2": '
        "must be equal to nvidia.com/gpu limit of 1"
    }
    assert by_name["fine"]["node"] is not None
    assert (out["summary"]["placed"], out["summary"]["pending"]) == (1, 2)

    code, text, err = run_cli("simulate", "--cluster", cluster, "--workload", workload)
    assert code == 0, err
    line = next(x for x in text.splitlines() if x.startswith("default/requests-only "))
    assert "Limit must be set for non overcommitable resources" in line


def test_a_running_pod_the_api_server_would_refuse_is_a_bad_manifest(tmp_path: Path) -> None:
    running = pod("old", {"requests": {"nvidia.com/gpu": "1"}}, nodeName="node-a100-01")
    cluster = write(tmp_path / "cluster.yaml", NVIDIA_POOL, running)
    workload = write(tmp_path / "workload.yaml", pod("fine", {"limits": {"nvidia.com/gpu": "1"}}))
    code, out, err = run_cli("simulate", "--cluster", cluster, "--workload", workload)
    assert code == 2 and out == ""
    assert err.strip() == (
        f'vgpu-scheduler: error: {cluster}: document 2: Pod "old" is invalid: '
        "spec.containers[0].resources.limits: Required value: Limit must be set for non overcommitable resources"
    )
