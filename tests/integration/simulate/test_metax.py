"""``simulate`` with MetaX GPUs and no device config at all (MetaX is on by default, as in HAMi): whole GPUs, one a
container, HAMi's two pod keys, a mixed NVIDIA+MetaX node, and a pod asking for more GPUs than any node has left
stays pending with the reason; MetaX sGPUs shared by memory and cores, whole cards, a bad QoS policy refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.integration.simulate.conftest import run_cli, run_cli_json

POOLS: list[dict[str, Any]] = [
    {"name": "mx", "devices": [{"vendor": "Metax-GPU", "count": 2, "memory": 65536, "split": 1}]},
    {
        "name": "mix",
        "devices": [
            {"vendor": "NVIDIA", "type": "NVIDIA T4", "count": 1, "memory": 16384},
            {"vendor": "Metax-GPU", "count": 1, "memory": 65536, "split": 1},
        ],
    },
]
PODS: list[tuple[str, list[dict[str, Any]]]] = [
    ("two-ctr", [{"metax-tech.com/gpu": 1}, {"metax-tech.com/gpu": 1}]),  # two GPUs: only the mx node has two
    ("one", [{"metax-tech.com/gpu": 1}]),
    ("nv-mx", [{"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}, {"metax-tech.com/gpu": 1}]),
    ("late", [{"metax-tech.com/gpu": 1}]),  # every GPU is taken
]


def _files(tmp: Path) -> tuple[Path, Path]:
    cluster, workload = tmp / "cluster.yaml", tmp / "workload.yaml"
    cluster.write_text(yaml.safe_dump_all(
        {"apiVersion": "v1", "kind": "NodePool", "metadata": {"name": p["name"]}, "spec": {"devices": p["devices"]}}
        for p in POOLS
    ), encoding="utf-8")  # fmt: skip
    workload.write_text(yaml.safe_dump_all(
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
         "spec": {"containers": [{"name": f"c{i}", "image": "x",
                                  "resources": {"limits": {k: str(v) for k, v in lim.items()}}}
                                 for i, lim in enumerate(limits)]}}
        for name, limits in PODS
    ), encoding="utf-8")  # fmt: skip
    return cluster, workload


def test_metax_gpus_are_scheduled_whole_with_no_device_config(tmp_path: Path) -> None:
    cluster, workload = _files(tmp_path)
    out = run_cli_json("simulate", "--cluster", str(cluster), "--workload", str(workload))
    pods = {p["name"]: p for p in out["pods"]}
    two = pods["two-ctr"]
    assert two["node"] == "mx-01", two["reasons"]
    first, second, tail = two["annotations"]["hami.io/metax-gpu-devices-allocated"].split(";")
    assert tail == "" and first != second  # a GPU for each container
    assert first.startswith("mx-01-metax-") and first.endswith(",Metax-GPU,65536,100:")
    assert (
        two["annotations"]["hami.io/metax-gpu-devices-to-allocate"]
        == (two["annotations"]["hami.io/metax-gpu-devices-allocated"])
    )
    assert pods["one"]["node"] == "mix-01"  # the last free MetaX GPU
    assert pods["nv-mx"]["node"] is None and pods["late"]["node"] is None
    assert pods["late"]["reasons"] == {
        "mx-01": "2/2 CardTimeSlicingExhausted",
        "mix-01": "1/1 CardTimeSlicingExhausted",
    }
    by_vendor = out["summary"]["by_vendor"]["Metax-GPU"]
    assert (by_vendor["devices"], by_vendor["devices_used"], by_vendor["memory_allocated_mib"]) == (3, 3, 3 * 65536)


def test_a_metax_pool_must_describe_gpus_as_hami_registers_them(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "NodePool", "metadata": {"name": "mx"},
                                       "spec": {"devices": [{"vendor": "Metax-GPU", "count": 2, "memory": 32768}]}}),
                       encoding="utf-8")  # fmt: skip
    workload = tmp_path / "workload.yaml"
    workload.write_text("", encoding="utf-8")
    code, _, err = run_cli("simulate", "--cluster", str(cluster), "--workload", str(workload))
    assert code != 0 and "65536 MiB, 100 cores and one slot" in err, err


SGPU_POOL = {"name": "sg", "devices": [{"vendor": "Metax-SGPU", "count": 2, "memory": 32768, "split": 4}]}
SGPU_PODS: list[tuple[str, dict[str, str], dict[str, str]]] = [
    ("shared", {"metax-tech.com/sgpu": "1", "metax-tech.com/vcore": "50", "metax-tech.com/vmemory": "8"}, {}),
    ("whole-two", {"metax-tech.com/sgpu": "2"}, {}),  # two whole cards: one is shared already
    ("whole-one", {"metax-tech.com/sgpu": "1"}, {"metax-tech.com/sgpu-qos-policy": "fixed-share"}),
    ("bad-qos", {"metax-tech.com/sgpu": "1"}, {"metax-tech.com/sgpu-qos-policy": "gold"}),
]


def test_metax_sgpus_share_cards_with_no_device_config(tmp_path: Path) -> None:
    cluster, workload = tmp_path / "cluster.yaml", tmp_path / "workload.yaml"
    cluster.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "NodePool", "metadata": {"name": "sg"},
                                       "spec": {"devices": SGPU_POOL["devices"]}}), encoding="utf-8")  # fmt: skip
    workload.write_text(yaml.safe_dump_all(
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", "annotations": annos},
         "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": limits}}]}}
        for name, limits, annos in SGPU_PODS
    ), encoding="utf-8")  # fmt: skip
    out = run_cli_json("simulate", "--cluster", str(cluster), "--workload", str(workload))
    pods = {p["name"]: p for p in out["pods"]}
    shared = pods["shared"]["annotations"]
    card, rest = shared["hami.io/metax-sgpu-devices-allocated"].split(",", 1)
    assert pods["shared"]["node"] == "sg-01" and rest == "Metax-SGPU,8192,50:;"  # 8 GiB, half the compute
    assert shared["hami.io/metax-sgpu-devices-to-allocate"] == shared["hami.io/metax-sgpu-devices-allocated"]
    # two whole cards: the shared one has too little memory left
    assert pods["whole-two"]["node"] is None
    assert pods["whole-two"]["reasons"] == {
        "sg-01": "1/2 AllocatedCardsInsufficientRequest, 1/2 CardInsufficientMemory"
    }
    whole = pods["whole-one"]["annotations"]["hami.io/metax-sgpu-devices-allocated"]
    assert whole.endswith(",Metax-SGPU,32768,100:;") and not whole.startswith(card)  # the other card, whole
    assert pods["bad-qos"]["node"] is None
    assert "must be set one of [best-effort, fixed-share, burst-share]" in pods["bad-qos"]["reasons"]["*"]
    by_vendor = out["summary"]["by_vendor"]["Metax-SGPU"]
    assert (by_vendor["devices"], by_vendor["devices_used"]) == (2, 2)
