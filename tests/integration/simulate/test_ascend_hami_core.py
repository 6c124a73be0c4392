"""``simulate`` with Ascend's hami-core soft split: a NodePool whose nodes carry ``hami-vnpu-core: "true"`` (what
HAMi's Ascend device plugin writes on a soft-split node) next to a template pool. hami-core pods land only on the
soft-split node with their memory as written and their AI-core percent; on the template node they get HAMi's
``ModeNotFit``; a pod without the mode fits either kind; an AI-core percent without the mode is denied at
admission. (The runtime list ``huawei.com/<chip>`` is not part of the JSON output, which keeps ``hami.io/`` keys.)
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.integration.simulate.conftest import run_cli_json

CLUSTER = [
    {"apiVersion": "v1", "kind": "NodePool", "metadata": {"name": "tpl"},
     "spec": {"nodes": 1, "devices": [{"vendor": "Ascend910B3", "count": 2, "memory": "64Gi", "cores": 20}]}},
    {"apiVersion": "v1", "kind": "NodePool", "metadata": {"name": "soft", "annotations": {"hami-vnpu-core": "true"}},
     "spec": {"nodes": 1, "devices": [{"vendor": "Ascend910B3", "count": 2, "memory": "64Gi", "cores": 20}]}},
]  # fmt: skip
HAMI_CORE = {"huawei.com/vnpu-mode": "hami-core"}


def _pod(name: str, limits: dict[str, str], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "annotations": annotations or {}},
        "spec": {"containers": [{"name": "main", "image": "x", "resources": {"limits": limits}}]},
    }


def _npu(memory: str | None = None, core: str | None = None, count: str = "1") -> dict[str, str]:
    limits = {"huawei.com/Ascend910B3": count}
    if memory is not None:
        limits["huawei.com/Ascend910B3-memory"] = memory
    if core is not None:
        limits["huawei.com/Ascend910B3-core"] = core
    return limits


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    d = tmp_path_factory.mktemp("hami-core")
    cluster, workload = d / "cluster.yaml", d / "workload.yaml"
    cluster.write_text(yaml.safe_dump_all(CLUSTER))
    pods = [
        _pod("soft-1", _npu("10000", "30"), HAMI_CORE),
        _pod("soft-2", _npu("10000", "30"), HAMI_CORE),
        _pod("soft-big", _npu(core="80", count="2"), HAMI_CORE),  # two whole NPUs at 80 %: none left
        _pod("tpl-1", _npu("12000")),
        _pod("core-no-mode", _npu("10000", "30")),
    ]
    workload.write_text(yaml.safe_dump_all(pods))
    out = run_cli_json("simulate", "--cluster", str(cluster), "--workload", str(workload), "--enable-ascend")
    return {p["name"]: p for p in out["pods"]}


def _entries(pod: dict[str, Any]) -> list[list[str]]:
    value = pod["annotations"]["hami.io/Ascend910B3-devices-allocated"]
    return [e.split(",") for e in value.split(":") if e.strip(";")]


def test_hami_core_pods_land_on_the_soft_split_node(result: dict[str, dict[str, Any]]) -> None:
    for name in ("soft-1", "soft-2"):
        pod = result[name]
        assert pod["node"] == "soft-01", pod
        [entry] = _entries(pod)
        assert entry[1:] == ["Ascend910B3", "10000", "30"], entry  # memory as written, the core percent


def test_a_hami_core_pod_gets_mode_not_fit_on_a_template_node(result: dict[str, dict[str, Any]]) -> None:
    big = result["soft-big"]
    assert big["node"] is None
    assert big["reasons"]["tpl-01"] == "1/2 ModeNotFit", big["reasons"]
    # the soft-split node is the right kind, but two whole NPUs are no longer free there
    assert big["reasons"]["soft-01"] == "2/2 CardInsufficientMemory", big["reasons"]


def test_a_pod_without_the_mode_gets_a_template(result: dict[str, dict[str, Any]]) -> None:
    pod = result["tpl-1"]
    assert pod["node"] in ("tpl-01", "soft-01"), pod
    [entry] = _entries(pod)
    assert entry[1:] == ["Ascend910B3", "16384", "0"], entry  # rounded up to vir05_1c_16g


def test_an_ai_core_percent_without_the_mode_is_denied(result: dict[str, dict[str, Any]]) -> None:
    pod = result["core-no-mode"]
    assert pod["node"] is None
    [message] = pod["reasons"].values()
    assert message.startswith("admission denied: "), message
    assert "add the pod annotation huawei.com/vnpu-mode: hami-core" in message, message
