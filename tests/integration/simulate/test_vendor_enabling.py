"""``simulate`` enables device families as HAMi does: with no device config, a Hygon DCU pod is scheduled with a
device (on by default; its core percentage above 100 capped as HAMi caps it), and an Ascend pod without
``--enable-ascend`` is not ours: kube-scheduler's native fit places it on a node that advertises its resource,
with no device allocated and nothing counted; with the flag, the same pod gets an NPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.simulate.conftest import run_cli_json

CLUSTER = [
    {"apiVersion": "v1", "kind": "NodePool", "metadata": {"name": "dcu"},
     "spec": {"nodes": 1, "devices": [{"vendor": "DCU", "count": 2, "memory": "16Gi", "cores": 100}]}},
    {"apiVersion": "v1", "kind": "NodePool", "metadata": {"name": "npu"},
     "spec": {"nodes": 1, "devices": [{"vendor": "Ascend910B3", "count": 2, "memory": "64Gi", "cores": 20}]}},
]  # fmt: skip


def _pod(name: str, limits: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "main", "image": "x", "resources": {"limits": limits}}]},
    }


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("enabling")
    cluster, workload = d / "cluster.yaml", d / "workload.yaml"
    cluster.write_text(yaml.safe_dump_all(CLUSTER))
    pods = [
        _pod("npu-1", {"huawei.com/Ascend910B3": "1"}),
        _pod("dcu-1", {"hygon.com/dcunum": "1", "hygon.com/dcucores": "150"}),
    ]
    workload.write_text(yaml.safe_dump_all(pods))
    return cluster, workload


def test_without_the_flag_an_ascend_pod_takes_the_native_path(files: tuple[Path, Path]) -> None:
    cluster, workload = files
    out = run_cli_json("simulate", "--cluster", str(cluster), "--workload", str(workload))
    pods = {p["name"]: p for p in out["pods"]}
    # not ours: kube-scheduler's own fit binds it where huawei.com/Ascend910B3 is advertised, with no device
    # allocated; HAMi's Ascend plugin there finds no allocation for it, so the kubelet rejects the pod
    npu = pods["npu-1"]
    assert npu["node"] is None and not any(k.startswith("hami.io/") for k in npu["annotations"])
    [(node, reason)] = npu["reasons"].items()
    assert node == "npu-01" and reason.startswith("UnexpectedAdmissionError"), npu["reasons"]
    # on by default: a device, the cores capped at 100 (HAMi's Fit), no device config needed
    dcu = pods["dcu-1"]
    assert dcu["node"] == "dcu-01"
    [entry] = [e for e in dcu["annotations"]["hami.io/dcu-devices-allocated"].split(":") if e.strip(";")]
    assert entry.split(",")[1:] == ["DCU", "16384", "100"]
    assert set(out["summary"]["by_vendor"]) == {"DCU"}  # nothing counted for the Ascend pod


def test_with_the_flag_the_same_ascend_pod_gets_an_npu(files: tuple[Path, Path]) -> None:
    cluster, workload = files
    out = run_cli_json("simulate", "--cluster", str(cluster), "--workload", str(workload), "--enable-ascend")
    npu = {p["name"]: p for p in out["pods"]}["npu-1"]
    assert npu["node"] == "npu-01"
    assert npu["annotations"]["hami.io/Ascend910B3-devices-allocated"].split(",")[1] == "Ascend910B3"
    assert set(out["summary"]["by_vendor"]) == {"DCU", "Ascend910B3"}
