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


def pool(name: str, nodes: int, allocatable: dict[str, str], *devices: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodes": nodes, "devices": list(devices), "allocatable": allocatable}
    return {"apiVersion": "v1", "kind": "NodePool", "metadata": {"name": name}, "spec": spec}


def test_device_resources_no_enabled_vendor_serves_stay_pending_with_kube_schedulers_reason(tmp_path: Path) -> None:
    cluster = write(tmp_path / "cluster.yaml", NVIDIA_POOL)
    workload = write(
        tmp_path / "workload.yaml",
        pod("dcu", {"limits": {"hygon.com/dcunum": "1"}}),
        pod("npu", {"limits": {"huawei.com/Ascend910B3": "1"}}),
        pod("typo", {"limits": {"nvidia.com/gpus": "1"}}),
    )
    code, text, err = run_cli("simulate", "--cluster", cluster, "--workload", workload)
    assert code == 0, err
    lines = {line.split()[0]: line for line in text.splitlines() if line.startswith("default/")}
    # Hygon is on by default (as in HAMi): the DCU pod is ours and the extender finds no DCU on these nodes
    assert lines["default/dcu"].endswith("  -     NodeInsufficientDevice (3 nodes)")
    assert lines["default/npu"].endswith("0/3 nodes are available: 3 Insufficient huawei.com/Ascend910B3.")
    assert lines["default/typo"].endswith("0/3 nodes are available: 3 Insufficient nvidia.com/gpus.")
    assert "placed 0/3, pending 3" in text and "no GPU requested" not in text

    out = run_cli_json("simulate", "--cluster", cluster, "--workload", workload)
    typo = next(p for p in out["pods"] if p["name"] == "typo")
    assert typo["node"] is None
    assert typo["reasons"] == {f"node-a100-0{i}": "Insufficient nvidia.com/gpus" for i in (1, 2, 3)}
    assert out["summary"]["pending_reasons"]["Insufficient nvidia.com/gpus"] == 1


def test_cpu_memory_and_pods_are_fitted_against_allocatable(tmp_path: Path) -> None:
    small = pool(
        "small",
        2,
        {"cpu": "2", "memory": "4Gi", "pods": "2"},
        {"vendor": "NVIDIA", "type": "NVIDIA T4", "count": 1, "memory": "16Gi"},
    )
    cluster = write(tmp_path / "cluster.yaml", small)
    gpu = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}
    workload = write(
        tmp_path / "workload.yaml",
        pod("cpu-a", {"requests": {"cpu": "1500m"}}),
        pod("cpu-b", {"requests": {"cpu": "1500m"}}),
        pod("cpu-c", {"requests": {"cpu": "1500m"}}),  # 0.5 cpu left on each node
        pod("gpu-big-memory", {"limits": {**gpu, "memory": "8Gi"}}),  # the GPU fits; the memory does not
        pod("gpu-a", {"limits": gpu}),
        pod("gpu-b", {"limits": gpu}),  # each node now holds two pods: pods: 2
        pod("one-more", {}),
    )
    out = run_cli_json("simulate", "--cluster", cluster, "--workload", workload)
    by_name = {p["name"]: p for p in out["pods"]}
    assert by_name["cpu-a"]["node"] and by_name["cpu-b"]["node"]
    assert by_name["cpu-a"]["node"] != by_name["cpu-b"]["node"]
    assert by_name["cpu-c"]["reasons"] == {"small-01": "Insufficient cpu", "small-02": "Insufficient cpu"}
    assert by_name["gpu-big-memory"]["reasons"] == {
        "small-01": "Insufficient memory",
        "small-02": "Insufficient memory",
    }
    assert by_name["gpu-a"]["node"] and by_name["gpu-b"]["node"]
    assert by_name["one-more"]["reasons"] == {"small-01": "Too many pods", "small-02": "Too many pods"}
    code, text, err = run_cli("simulate", "--cluster", cluster, "--workload", workload)
    assert code == 0, err
    line = next(x for x in text.splitlines() if x.startswith("default/gpu-big-memory "))
    assert line.endswith("0/2 nodes are available: 2 Insufficient memory.")


def test_the_bundled_cluster_without_a_device_config_places_no_vendor_pod_without_its_device(tmp_path: Path) -> None:
    """No device config and no ``--enable-ascend``: Hygon, Cambricon and AMD are on by default (as in HAMi) and their
    pods are placed with their devices; Ascend is opt-in, so its pods are left to kube-scheduler alone. A node whose
    device plugin advertises the resource gets the pod bound and the kubelet rejects it (HAMi's plugin holds no
    allocation for it); no Ascend pod is ever counted placed."""
    from vgpu_scheduler.services.simulate.main import EXAMPLE_CLUSTER, EXAMPLE_WORKLOAD

    out = run_cli_json("simulate", "--cluster", str(EXAMPLE_CLUSTER), "--workload", str(EXAMPLE_WORKLOAD))
    workload = {p["metadata"]["name"]: p for p in yaml.safe_load_all(EXAMPLE_WORKLOAD.read_text()) if p}
    counted = {"ascend": 0, "default-on": 0, "placed-default-on": 0}
    for result in out["pods"]:
        spec = workload[result["name"]]["spec"]
        names = {n for c in spec["containers"] for section in (c.get("resources") or {}).values() for n in section}
        domains = {n.split("/")[0] for n in names}
        if "huawei.com" in domains:
            counted["ascend"] += 1
            assert result["node"] is None, result
            assert not any(k.startswith("hami.io/") for k in result["annotations"]), result
        elif domains & {"hygon.com", "cambricon.com", "amd.com"}:
            counted["default-on"] += 1
            if result["node"] is not None:
                counted["placed-default-on"] += 1
                allocated = [k for k in result["annotations"] if k.endswith("-devices-allocated")]
                assert allocated, result  # placed with its device, never "(no GPU requested)"
    assert counted["ascend"] >= 5 and counted["default-on"] >= 10 and counted["placed-default-on"] >= 10, counted


def test_a_malformed_node_registration_stops_with_one_line(tmp_path: Path) -> None:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1", "annotations": {"hami.io/node-nvidia-register": '[{"id":"x","count":"ten"}]'}},
        "status": {"allocatable": {"nvidia.com/gpu": "10"}},
    }
    cluster = write(tmp_path / "cluster.yaml", NVIDIA_POOL, node)
    workload = write(tmp_path / "workload.yaml", pod("fine", {"limits": {"nvidia.com/gpu": "1"}}))
    code, out, err = run_cli("simulate", "--cluster", cluster, "--workload", workload)
    assert (code, out) == (2, "")
    assert err == (
        f"vgpu-scheduler: error: {cluster}: document 2: "
        "metadata.annotations[hami.io/node-nvidia-register][0].count: expected an integer, got string\n"
    )


def test_pending_reasons_are_grouped_with_counts_on_readable_lines(tmp_path: Path) -> None:
    cluster = write(tmp_path / "cluster.yaml", NVIDIA_POOL)
    privileged = {"privileged": True}
    docs = [pod(f"priv-{i}", {"limits": {"nvidia.com/gpu": "1"}}) for i in range(3)]
    for d in docs:
        d["spec"]["containers"][0]["securityContext"] = privileged
    docs += [pod(f"typo-{i}", {"limits": {"nvidia.com/gpus": "1"}}) for i in range(2)]
    workload = write(tmp_path / "workload.yaml", *docs)
    code, text, err = run_cli("simulate", "--cluster", cluster, "--workload", workload)
    assert code == 0, err
    block = text[text.index("pending because") :].splitlines()
    assert block[:4] == [
        "pending because (pods per reason; a pod may have several):",
        "  Insufficient nvidia.com/gpus (2)",
        "  admission denied (3):",
        "    3× container main is privileged",
    ]
    assert all(len(line) <= 120 for line in text[text.index("pending because") :].splitlines()[:-1])
