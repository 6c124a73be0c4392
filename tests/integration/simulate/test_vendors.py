"""``simulate`` on a mixed-vendor cluster (NodePools of every vendor, a mixed NVIDIA+DCU node): each vendor's pods
land only on its devices, in its units, the refusals name the vendor's devices, runs repeat exactly, and the JSON
only gains fields."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.simulate.conftest import run_cli, run_cli_json
from vgpu_scheduler.services.simulate.main import EXAMPLE_DEVICE_CONFIG
from vgpu_scheduler.services.simulate.manifests import load_cluster
from vgpu_scheduler.shared.devconfig import load_device_config
from vgpu_scheduler.shared.domain.model import NvidiaConfig
from vgpu_scheduler.shared.vendors.catalog import enabled_vendors, observe_node
from vgpu_scheduler.shared.vendors.registration import NodeView

VENDORS = enabled_vendors(
    NvidiaConfig(), load_device_config(str(EXAMPLE_DEVICE_CONFIG)).vendor_sections, {"enable-ascend", "enable-iluvatar"}
)
OLD_SUMMARY_KEYS = {
    "pods", "placed", "pending", "policies", "by_policy", "gpu", "fragmentation", "nodes_touched", "nodes_in_use",
    "pending_reasons", "over_capacity", "contention",
}  # fmt: skip
GPU_KEYS = {
    "devices", "devices_used", "memory_mib", "memory_allocated_mib", "memory_utilisation", "cores",
    "cores_allocated", "core_utilisation",
}  # fmt: skip

POOLS: list[dict[str, Any]] = [
    {"name": "nv", "devices": [{"vendor": "NVIDIA", "type": "NVIDIA T4", "count": 2, "memory": 16384}]},
    {"name": "dcu", "devices": [{"vendor": "DCU", "count": 2, "memory": 16384, "split": 4}]},
    {"name": "mlu", "devices": [{"vendor": "MLU", "type": "MLU370-X4", "count": 2, "memory": 24576}]},
    {"name": "npu", "devices": [{"vendor": "Ascend910B3", "count": 3, "memory": 65536, "cores": 20}]},
    {"name": "amd", "devices": [{"vendor": "AMD", "count": 2, "memory": 32768}]},
    {"name": "ilu", "devices": [{"vendor": "MR-V100", "count": 3, "memory": 16384}]},
    {"name": "biren", "devices": [{"vendor": "Biren", "count": 2, "memory": 65536, "split": 2}]},
    {"name": "va", "devices": [{"vendor": "Vastai", "count": 2, "memory": 16384, "split": 1}]},
    {"name": "mt", "devices": [{"vendor": "Mthreads", "count": 3, "memory": 49152}]},
    {"name": "gcu", "devices": [{"vendor": "GCU", "count": 2, "memory": 100}]},
    {"name": "drs", "devices": [{"vendor": "Enflame", "count": 1, "memory": 40960, "split": 6}]},
    {"name": "xpu", "devices": [{"vendor": "kunlun", "count": 8, "memory": 98304, "split": 100}]},
    {"name": "vxpu", "devices": [{"vendor": "XPU", "count": 8, "memory": 98304, "split": 4}]},
    {
        "name": "mix",
        "devices": [
            {"vendor": "NVIDIA", "type": "NVIDIA T4", "count": 1, "memory": 16384},
            {"vendor": "DCU", "count": 1, "memory": 16384, "split": 4},
        ],
    },
    {"name": "neuron", "devices": [{"vendor": "AWSNeuron", "count": 4, "type": "inf2.24xlarge"}]},
]

# (name, limits per container); the order is the scheduling order
PODS: list[tuple[str, list[dict[str, Any]]]] = [
    ("nv-1", [{"nvidia.com/gpu": 1, "nvidia.com/gpumem": 4000, "nvidia.com/gpucores": 20}]),
    ("dcu-1", [{"hygon.com/dcunum": 1, "hygon.com/dcumem": 4000, "hygon.com/dcucores": 20}]),
    ("dcu-2", [{"hygon.com/dcunum": 2, "hygon.com/dcumem": 6000, "hygon.com/dcucores": 30}]),
    ("mlu-1", [{"cambricon.com/vmlu": 1, "cambricon.com/mlu.smlu.vmemory": 20, "cambricon.com/mlu.smlu.vcore": 25}]),
    ("mlu-2", [{"cambricon.com/vmlu": 1, "cambricon.com/mlu.smlu.vmemory": 7, "cambricon.com/mlu.smlu.vcore": 10}]),
    ("npu-1", [{"huawei.com/Ascend910B3": 1, "huawei.com/Ascend910B3-memory": 12000}]),
    ("npu-2", [{"huawei.com/Ascend910B3": 1, "huawei.com/Ascend910B3-memory": 20000}]),
    ("npu-3", [{"huawei.com/Ascend910B3": 1}]),
    ("amd-1", [{"amd.com/gpu": 1, "amd.com/gpumem": 8000, "amd.com/gpucores": 30}]),
    ("ilu-1", [{"iluvatar.ai/MR-V100-vgpu": 1, "iluvatar.ai/MR-V100.vMem": 8, "iluvatar.ai/MR-V100.vCore": 20}]),
    ("ilu-2", [{"iluvatar.ai/MR-V100-vgpu": 2}]),  # the webhook sets 100 cores per card: two whole cards
    ("biren-1", [{"birentech.com/gpu": 2}]),  # a slot on each card, no memory, no cores
    ("biren-2", [{"birentech.com/gpu": 2}]),  # the second slot on each card
    ("biren-3", [{"birentech.com/gpu": 1}]),  # every slot taken: pending
    ("va-1", [{"vastaitech.com/va": 2}]),
    ("mt-1", [{"mthreads.com/vgpu": 1, "mthreads.com/sgpu-memory": 8, "mthreads.com/sgpu-core": 4}]),
    ("mt-2", [{"mthreads.com/vgpu": 2}]),  # the webhook gives whole GPUs: 16 cores, 96 units of 512 MiB each
    ("gcu-1", [{"enflame.com/gcu": 2}]),  # both whole cards
    ("drs-1", [{"enflame.com/drs-gcu": 3}]),  # the 3g.20gb profile of the simulated card's menu
    ("drs-2", [{"enflame.com/gcu-memory": 6, "enflame.com/gcu-core": 10}]),  # 1g.6gb: the smallest holding both
    (
        "both-1",
        [
            {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 2000},
            {"hygon.com/dcunum": 1, "hygon.com/dcumem": 2000, "hygon.com/dcucores": 20},
        ],
    ),
    ("dcu-huge", [{"hygon.com/dcunum": 1, "hygon.com/dcumem": 20000}]),
    ("kl-1", [{"kunlunxin.com/xpu": 2}]),  # an idle board: the first two XPUs of the left wing
    ("kl-2", [{"kunlunxin.com/xpu": 1}]),  # the wing with the fewest free XPUs that still has one: the left
    ("kl-3", [{"kunlunxin.com/xpu": 3}]),  # 3 XPUs is no group of the board's topology: pending
    ("vx-1", [{"kunlunxin.com/vxpu": 1, "kunlunxin.com/vxpu-memory": 20000}]),  # rounded up to a quarter XPU
    ("vx-2", [{"kunlunxin.com/vxpu": 2}]),  # two whole XPUs
    ("cpu-1", [{"cpu": "1"}]),
    ("neuron-1", [{"aws.amazon.com/neuroncore": 1}]),  # one core of device 0
    ("neuron-2", [{"aws.amazon.com/neuron": 2}]),  # two whole devices in a row: 1 and 2 (0 is in use)
    ("neuron-3", [{"aws.amazon.com/neuroncore": 1}]),  # the other core of device 0
    ("neuron-4", [{"aws.amazon.com/neuroncore": 4}]),  # two whole devices in a row: only device 3 is free
]

VENDOR_ORDER = [
    "NVIDIA", "AMD", "AWSNeuron", "Ascend910B3", "Biren", "DCU", "Enflame", "GCU", "MLU", "MR-V100", "Mthreads",
    "Vastai", "XPU", "kunlun",
]  # fmt: skip
"""The vendors of the figures: NVIDIA first, the others by name."""

VENDOR_OF_KEY = {
    "hami.io/vgpu-devices-allocated": "NVIDIA",
    "hami.io/dcu-devices-allocated": "DCU",
    "hami.io/cambricon-mlu-devices-allocated": "MLU",
    "hami.io/Ascend910B3-devices-allocated": "Ascend910B3",
    "hami.io/amd-devices-allocated": "AMD",
    "hami.io/MR-V100-devices-allocated": "MR-V100",
    "hami.io/Biren-devices-allocated": "Biren",
    "hami.io/Vastai-devices-allocated": "Vastai",
    "hami.io/mthreads-vgpu-devices-allocated": "Mthreads",
    "hami.io/enflame-gcu-devices-allocated": "GCU",
    "hami.io/enflame-vgpu-devices-allocated": "Enflame",
    "hami.io/aws-neuron-devices-allocated": "AWSNeuron",
    "hami.io/kunlun-allocated": "kunlun",
    "hami.io/xpu-devices-allocated": "XPU",
}


def _files(tmp_path: Path) -> tuple[Path, Path]:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        yaml.safe_dump_all(
            {"apiVersion": "v1", "kind": "NodePool", "metadata": {"name": p["name"]}, "spec": {"devices": p["devices"]}}
            for p in POOLS
        ),
        encoding="utf-8",
    )
    workload = tmp_path / "workload.yaml"
    docs = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "containers": [
                    {"name": f"c{i}", "image": "x", "resources": {"limits": {k: str(v) for k, v in lim.items()}}}
                    for i, lim in enumerate(limits)
                ]
            },
        }
        for name, limits in PODS
    ]
    workload.write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    return cluster, workload


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return _files(tmp_path_factory.mktemp("vendors"))


def _run(files: tuple[Path, Path]) -> dict[str, Any]:
    cluster, workload = files
    out: dict[str, Any] = run_cli_json(
        "simulate", "--cluster", str(cluster), "--workload", str(workload),
        "--device-config-file", str(EXAMPLE_DEVICE_CONFIG), "--enable-ascend", "--enable-iluvatar",
    )  # fmt: skip
    return out


@pytest.fixture(scope="module")
def result(files: tuple[Path, Path]) -> dict[str, Any]:
    return _run(files)


def _devices(files: tuple[Path, Path]) -> dict[tuple[str, str], tuple[str, int]]:
    """(node, device id) → (vendor, registered MiB), as the registrar decodes the expanded pools."""
    cluster = load_cluster(files[0], vendors=VENDORS)
    out = {}
    for node in cluster.nodes:
        inv = observe_node(VENDORS, NodeView.of(node), datetime.now()).merged.inventory
        assert inv is not None
        out.update({(node["metadata"]["name"], d.id): (d.vendor, d.devmem_mib) for d in inv.devices})
    return out


def _allocated(pod: dict[str, Any]) -> list[tuple[str, str, int, int]]:
    """(annotation vendor, uuid, MiB, cores) of every device the pod was given."""
    out = []
    for key, vendor in VENDOR_OF_KEY.items():
        for container in pod["annotations"].get(key, "").split(";"):
            for dev in filter(None, container.split(":")):
                uuid, _, mem, cores = dev.split(",")
                out.append((vendor, uuid, int(mem), int(cores)))
    return out


def test_each_vendors_pods_land_only_on_that_vendors_devices(result: dict[str, Any], files: tuple[Path, Path]) -> None:
    devices = _devices(files)
    pods = {p["name"]: p for p in result["pods"]}
    expected_vendors = {
        "nv-1": {"NVIDIA"}, "dcu-1": {"DCU"}, "dcu-2": {"DCU"}, "mlu-1": {"MLU"}, "mlu-2": {"MLU"},
        "npu-1": {"Ascend910B3"}, "npu-2": {"Ascend910B3"}, "npu-3": {"Ascend910B3"}, "amd-1": {"AMD"},
        "both-1": {"NVIDIA", "DCU"}, "ilu-1": {"MR-V100"}, "ilu-2": {"MR-V100"}, "biren-1": {"Biren"},
        "biren-2": {"Biren"}, "va-1": {"Vastai"}, "mt-1": {"Mthreads"}, "mt-2": {"Mthreads"},
        "gcu-1": {"GCU"}, "drs-1": {"Enflame"}, "drs-2": {"Enflame"},
        "kl-1": {"kunlun"}, "kl-2": {"kunlun"}, "vx-1": {"XPU"}, "vx-2": {"XPU"},
    }  # fmt: skip
    for name, vendors in expected_vendors.items():
        pod = pods[name]
        assert pod["node"] is not None, (name, pod["reasons"])
        given = _allocated(pod)
        assert {v for v, *_ in given} == vendors, name
        for vendor, uuid, _, _ in given:
            assert devices[(pod["node"], uuid)][0] == vendor, (name, uuid)
        assert pod["annotations"]["hami.io/bind-phase"] == "success"
    assert pods["both-1"]["node"] == "mix-01"  # the only node with both vendors
    assert pods["dcu-2"]["node"] == "dcu-01"  # two DCUs: only the DCU pool has two
    assert pods["cpu-1"]["node"] is not None and pods["cpu-1"]["annotations"] == {}
    assert result["summary"]["over_capacity"] == []


def test_units_cambricon_256_mib_and_ascend_templates(result: dict[str, Any]) -> None:
    pods = {p["name"]: p for p in result["pods"]}
    mem = {name: [m for _, _, m, _ in _allocated(pods[name])] for name in pods if pods[name]["node"]}
    assert mem["mlu-1"] == [20 * 256]  # cambricon.com/mlu.smlu.vmemory counts 256 MiB units
    assert mem["mlu-2"] == [7 * 256]
    assert mem["npu-1"] == [16384]  # 12000 MiB rounds up to the vir05_1c_16g template
    assert mem["npu-2"] == [32768]  # 20000 MiB → vir10_3c_32g
    assert mem["npu-3"] == [65536]  # no memory asked: the whole NPU
    assert mem["dcu-2"] == [6000, 6000]  # DCU and AMD: MiB as asked
    assert mem["amd-1"] == [8000]
    assert mem["ilu-1"] == [8 * 256]  # iluvatar.ai/<chip>.vMem counts 256 MiB units
    assert mem["ilu-2"] == [16384, 16384]  # two cards, each whole (100 cores), on cards ilu-1 does not use
    mt1, mt2 = (_allocated(pods[n]) for n in ("mt-1", "mt-2"))
    assert [(m, c) for *_, m, c in mt1 + mt2] == [(4096, 4), (49152, 16), (49152, 16)]  # 512 MiB units, 16 cores
    assert not {u for _, u, *_ in mt1} & {u for _, u, *_ in mt2}
    assert "hami.io/mthreads-vgpu-devices-to-allocate" not in pods["mt-2"]["annotations"]  # HAMi writes none
    # Enflame: whole GCU cards (100/100); DRS instances take their profile's memory and ceil-priced cores
    assert [(m, c) for *_, m, c in _allocated(pods["gcu-1"])] == [(100, 100), (100, 100)]
    assert [(m, c) for *_, m, c in _allocated(pods["drs-1"]) + _allocated(pods["drs-2"])] == [(20480, 50), (6144, 17)]
    biren = [_allocated(pods[n]) for n in ("biren-1", "biren-2")]
    assert all(m == 0 and c == 0 for pod in biren for _, _, m, c in pod)  # Biren cards go by slot alone
    assert all(len({u for _, u, *_ in pod}) == 2 for pod in biren)  # one slot on each card
    ilu1, ilu2 = (_allocated(pods[n]) for n in ("ilu-1", "ilu-2"))
    assert [c for *_, c in ilu1 + ilu2] == [20, 100, 100]
    assert not {u for _, u, *_ in ilu1} & {u for _, u, *_ in ilu2}
    assert pods["ilu-2"]["annotations"]["hami.io/MR-V100-devices-to-allocate"].count(",MR-V100,16384,100:") == 2


def test_a_refused_pod_names_the_vendors_devices(result: dict[str, Any]) -> None:
    reasons = next(p for p in result["pods"] if p["name"] == "dcu-huge")["reasons"]
    assert reasons["dcu-01"] == "2/2 CardInsufficientMemory"
    assert reasons["mix-01"] == "1/1 CardInsufficientMemory"  # its NVIDIA card is not counted
    for node in ("nv-01", "mlu-01", "npu-01", "amd-01", "ilu-01", "va-01", "mt-01", "gcu-01", "drs-01"):
        assert reasons[node] == "NodeInsufficientDevice", node
    # biren-3: both Biren cards have every slot taken
    assert next(p for p in result["pods"] if p["name"] == "biren-3")["reasons"]["biren-01"] == (
        "2/2 CardTimeSlicingExhausted"
    )
    # kl-3: three XPUs is no group of the board's topology
    assert next(p for p in result["pods"] if p["name"] == "kl-3")["reasons"]["xpu-01"] == "1/8 NumaNotFit"
    assert result["summary"]["pending_reasons"] == {
        "CardInsufficientMemory": 1, "CardTimeSlicingExhausted": 1, "NodeInsufficientDevice": 4, "NumaNotFit": 2,
    }  # fmt: skip


def test_per_vendor_figures_and_the_json_only_gains_fields(result: dict[str, Any]) -> None:
    summary = result["summary"]
    added = {"by_vendor", "preempted", "preemption", "gangs", "evicted", "controllers", "evictions", "defrag"}
    assert set(summary) == OLD_SUMMARY_KEYS | added
    assert set(summary["gpu"]) == GPU_KEYS
    by_vendor = summary["by_vendor"]
    assert list(by_vendor) == VENDOR_ORDER
    for figures in by_vendor.values():
        assert set(figures) == GPU_KEYS | {"fragmentation"}
        assert set(figures["fragmentation"]) == set(summary["fragmentation"])
    assert {k: v["devices"] for k, v in by_vendor.items()} == {
        "NVIDIA": 3, "AMD": 2, "Ascend910B3": 3, "Biren": 2, "DCU": 3, "MLU": 2, "MR-V100": 3, "Mthreads": 3,
        "Vastai": 2, "GCU": 2, "Enflame": 1, "AWSNeuron": 4, "kunlun": 8, "XPU": 8,
    }  # fmt: skip
    for key in ("devices", "devices_used", "memory_mib", "memory_allocated_mib", "cores", "cores_allocated"):
        assert summary["gpu"][key] == sum(v[key] for v in by_vendor.values()), key
    assert by_vendor["MLU"]["memory_allocated_mib"] == 27 * 256
    assert by_vendor["Ascend910B3"]["memory_allocated_mib"] == 16384 + 32768 + 65536
    assert by_vendor["DCU"]["memory_allocated_mib"] == 4000 + 12000 + 2000
    assert by_vendor["MR-V100"]["memory_allocated_mib"] == 8 * 256 + 2 * 16384
    assert (by_vendor["Biren"]["devices_used"], by_vendor["Biren"]["memory_allocated_mib"]) == (2, 0)
    assert (by_vendor["Vastai"]["devices_used"], by_vendor["Vastai"]["memory_allocated_mib"]) == (2, 0)
    assert by_vendor["Mthreads"]["memory_allocated_mib"] == 8 * 512 + 2 * 49152
    assert (by_vendor["kunlun"]["devices_used"], by_vendor["kunlun"]["memory_allocated_mib"]) == (3, 3 * 98304)
    assert (by_vendor["XPU"]["devices_used"], by_vendor["XPU"]["memory_allocated_mib"]) == (3, 24576 + 2 * 98304)
    for pod in result["pods"]:
        assert list(pod) == [
            "namespace",
            "name",
            "node",
            "annotations",
            "reasons",
            "priority",
            "pod_group",
            "preempted_by",
            "evicted",
            "owner",
            "replaces",
            "replaced_by",
        ]
    assert result["replacements"] == []


def test_neuron_cores_and_device_runs(result: dict[str, Any]) -> None:
    pods = {p["name"]: p for p in result["pods"]}
    given = {n: [(u, c) for _, u, _, c in _allocated(pods[n])] for n in ("neuron-1", "neuron-2", "neuron-3")}
    dev = [f"neuron-01-AWSNeuron-{i}" for i in range(4)]
    # core masks: one core of the last device (equal devices are walked from the last, as HAMi does), the other
    # core of the same device; whole devices in a contiguous run
    assert given == {"neuron-1": [(dev[3], 1)], "neuron-2": [(dev[0], 3), (dev[1], 3)], "neuron-3": [(dev[3], 2)]}
    # (the AWS annotations, AWS_NEURON_IDS …, are not hami.io/ keys: simulate's JSON leaves them out)
    # four cores are two whole devices in a row: only device 2 is free, so no run
    assert pods["neuron-4"]["node"] is None and pods["neuron-4"]["reasons"]["neuron-01"] == "1/4 NumaNotFit"
    figures = result["summary"]["by_vendor"]["AWSNeuron"]
    assert (figures["devices_used"], figures["cores"], figures["cores_allocated"]) == (3, 12, 9)  # core masks


def _without_times(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pods with the wall-clock stamps (the only thing two runs may differ in) left out."""
    times = ("hami.io/bind-time", "hami.io/vgpu-time")
    return [{**p, "annotations": {k: v for k, v in p["annotations"].items() if k not in times}} for p in pods]


def test_the_same_input_gives_the_same_placements(result: dict[str, Any], files: tuple[Path, Path]) -> None:
    again = _run(files)
    assert _without_times(again["pods"]) == _without_times(result["pods"])
    assert again["summary"]["by_vendor"] == result["summary"]["by_vendor"]
    assert again["summary"]["gpu"] == result["summary"]["gpu"]


def test_the_text_report_shows_one_line_per_vendor(files: tuple[Path, Path]) -> None:
    cluster, workload = files
    code, out, err = run_cli(
        "simulate", "--cluster", str(cluster), "--workload", str(workload),
        "--device-config-file", str(EXAMPLE_DEVICE_CONFIG), "--enable-ascend", "--enable-iluvatar",
    )  # fmt: skip
    assert code == 0, err
    lines = [line.split() for line in out.splitlines() if line.startswith("  ") and "devices in use" in line]
    assert [line[0] for line in lines] == VENDOR_ORDER
    mlu = next(line for line in out.splitlines() if line.strip().startswith("MLU "))
    assert "memory 6912/49152 MiB" in mlu


def test_kunlunxin_board_topology_and_vxpu_sizes(result: dict[str, Any]) -> None:
    pods = {p["name"]: p for p in result["pods"]}
    ids = {n: [u for _, u, *_ in _allocated(pods[n])] for n in ("kl-1", "kl-2")}  # HAMi's own XPU ids
    # (kl-1's pair listed in the order the core met them: equal XPUs from the last)
    assert ids == {"kl-1": ["xpu-01-kunlun-1", "xpu-01-kunlun-0"], "kl-2": ["xpu-01-kunlun-2"]}
    assert [(m, c) for *_, m, c in _allocated(pods["kl-1"])] == [(98304, 100), (98304, 100)]  # taken whole
    vx1, vx2 = (_allocated(pods[n]) for n in ("vx-1", "vx-2"))
    assert [(m, c) for *_, m, c in vx1 + vx2] == [(24576, 25), (98304, 100), (98304, 100)]
    assert not {u for _, u, *_ in vx1} & {u for _, u, *_ in vx2}  # a whole XPU is not shared with a quarter
    to_allocate = pods["vx-1"]["annotations"]["hami.io/xpu-devices-to-allocate"]
    assert to_allocate == pods["vx-1"]["annotations"]["hami.io/xpu-devices-allocated"]
    assert "hami.io/kunlun-devices-to-allocate" not in pods["kl-1"]["annotations"]  # HAMi writes none


# MetaX sGPU app classes: (name, limits, annotations) in scheduling order on one node of two cards
APP_CLASS_PODS: list[tuple[str, dict[str, str], dict[str, str]]] = [
    ("plain", {"metax-tech.com/sgpu": "1", "metax-tech.com/vcore": "30", "metax-tech.com/vmemory": "4"}, {}),
    ("off-1", {"metax-tech.com/sgpu": "1", "metax-tech.com/vcore": "30", "metax-tech.com/vmemory": "4"},
     {"metax-tech.com/sgpu-app-class": "offline"}),
    ("on-1", {"metax-tech.com/sgpu": "1", "metax-tech.com/vcore": "60", "metax-tech.com/vmemory": "4"},
     {"metax-tech.com/sgpu-app-class": "online"}),
    ("off-2", {"metax-tech.com/sgpu": "1", "metax-tech.com/vcore": "10", "metax-tech.com/vmemory": "4"},
     {"metax-tech.com/sgpu-app-class": "offline"}),
    ("plain-burst", {"metax-tech.com/sgpu": "1", "metax-tech.com/vcore": "10", "metax-tech.com/vmemory": "4"},
     {"metax-tech.com/sgpu-qos-policy": "burst-share"}),
    ("plain-2", {"metax-tech.com/sgpu": "1", "metax-tech.com/vcore": "10", "metax-tech.com/vmemory": "4"}, {}),
    ("on-two", {"metax-tech.com/sgpu": "2"}, {"metax-tech.com/sgpu-app-class": "online"}),
]  # fmt: skip


def test_metax_sgpu_app_classes_share_cards_by_the_rule(tmp_path: Path) -> None:
    cluster, workload = tmp_path / "cluster.yaml", tmp_path / "workload.yaml"
    pool = [{"vendor": "Metax-SGPU", "count": 2, "memory": 32768, "split": 8}]
    cluster.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "NodePool", "metadata": {"name": "sg"},
                                       "spec": {"devices": pool}}), encoding="utf-8")  # fmt: skip
    workload.write_text(yaml.safe_dump_all(
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", "annotations": annos},
         "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": limits}}]}}
        for name, limits, annos in APP_CLASS_PODS
    ), encoding="utf-8")  # fmt: skip
    out = run_cli_json("simulate", "--cluster", str(cluster), "--workload", str(workload))
    pods = {p["name"]: p for p in out["pods"]}

    def card(name: str) -> tuple[str, int, int]:
        uuid, _, mem, cores = pods[name]["annotations"]["hami.io/metax-sgpu-devices-allocated"].rstrip(":;").split(",")
        return uuid, int(mem), int(cores)

    plain, off1, on1, plain2 = card("plain"), card("off-1"), card("on-1"), card("plain-2")
    # the offline pod stays off the card of the unclassed one; the online pod joins the offline one, with 0 cores
    assert off1[0] != plain[0] and on1[0] == off1[0] and on1[1:] == (4096, 0)
    # the second unclassed (best-effort) pod joins the first; the burst-share one may not, nor the card of classes
    assert plain2[0] == plain[0]
    assert pods["plain-burst"]["node"] is None
    assert pods["plain-burst"]["reasons"] == {"sg-01": "1/2 CardAppClassMismatch, 1/2 CardQosPolicyMismatch"}
    # an offline pod stays off both: one runs an online pod, the other an unclassed one
    assert pods["off-2"]["node"] is None and pods["off-2"]["reasons"] == {"sg-01": "2/2 CardAppClassMismatch"}
    # an app-class pod asks for one card (HAMi's webhook refuses two)
    assert pods["on-two"]["node"] is None and "must ask for exactly one" in pods["on-two"]["reasons"]["*"]
