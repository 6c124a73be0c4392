"""A mixed-vendor cluster on the real control plane: NVIDIA, Hygon DCU, Cambricon MLU, AMD and Huawei Ascend nodes
(some carrying two vendors), each registered as its vendor's device plugin registers it, the vendors configured by
their sections of the device config the services read (Ascend enabled by ``--enable-ascend``), and kube-scheduler's
``managedResources`` extended with their resource names as the chart does. Pods of every vendor, and pods asking
two vendors in one container, are created without a schedulerName (the webhook sends them to vgpu-scheduler); the
device-plugin emulator settles them as each vendor's plugin does (HAMi's lock, Cambricon's
``cambricon.com/dsmlu.lock``); the audit checks every vendor's keys, capacities and locks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.controlplane.audit import AuditReport, neuron_core_overlaps
from tests.controlplane.control import ApiServer, Cleanup
from tests.controlplane.harness import Settings, VendorPart, vendor_pod
from tests.controlplane.scenario import Outcome, Scenario, run_scenario
from vgpu_scheduler.shared.domain.model import NvidiaConfig
from vgpu_scheduler.shared.vendors.catalog import enabled_vendors

pytestmark = pytest.mark.timeout(300)


def _chip(common_word: str, chip: str, memory: int, capacity: int, templates: Sequence[tuple[str, int]]) -> Any:
    return {
        "chipName": chip,
        "commonWord": common_word,
        "resourceName": f"huawei.com/{common_word}",
        "resourceMemoryName": f"huawei.com/{common_word}-memory",
        "resourceCoreName": f"huawei.com/{common_word}-core",
        "memoryAllocatable": memory,
        "memoryCapacity": capacity,
        "memoryFactor": 1,
        "aiCore": 20,
        "aiCPU": 7,
        "templates": [{"name": n, "memory": m, "aiCore": 1, "aiCPU": 1} for n, m in templates],
    }


VENDOR_SECTIONS: Mapping[str, Any] = {
    # HAMi's chart values (v2.10.0), written out in full: the chart lists only names it is given in
    # managedResources
    "cambricon": {
        "resourceCountName": "cambricon.com/vmlu",
        "resourceMemoryName": "cambricon.com/mlu.smlu.vmemory",
        "resourceCoreName": "cambricon.com/mlu.smlu.vcore",
    },
    "hygon": {
        "resourceCountName": "hygon.com/dcunum",
        "resourceMemoryName": "hygon.com/dcumem",
        "resourceCoreName": "hygon.com/dcucores",
        "memoryFactor": 1,
    },
    "amd": {
        "resourceCountName": "amd.com/gpu",
        "resourceCoreName": "amd.com/gpucores",
        "resourceMemoryName": "amd.com/gpumem",
    },
    "biren": {"resourceCountName": "birentech.com/gpu"},
    "vastai": {"resourceCountName": "vastaitech.com/va"},
    "mthreads": {
        "resourceCountName": "mthreads.com/vgpu",
        "resourceMemoryName": "mthreads.com/sgpu-memory",
        "resourceCoreName": "mthreads.com/sgpu-core",
    },
    "metax": {"resourceCountName": "metax-tech.com/gpu"},
    "enflame": {
        "resourceNameGCU": "enflame.com/gcu",
        "resourceNameDRSGCU": "enflame.com/drs-gcu",
        "resourceNameGCUMemory": "enflame.com/gcu-memory",
        "resourceNameGCUCore": "enflame.com/gcu-core",
    },
    "iluvatars": [
        {
            "chipName": "MR-V100",
            "commonWord": "MR-V100",
            "resourceCountName": "iluvatar.ai/MR-V100-vgpu",
            "resourceMemoryName": "iluvatar.ai/MR-V100.vMem",
            "resourceCoreName": "iluvatar.ai/MR-V100.vCore",
        }
    ],
    "awsneuron": {"resourceCountName": "aws.amazon.com/neuron", "resourceCoreName": "aws.amazon.com/neuroncore"},
    "kunlun": {
        "resourceCountName": "kunlunxin.com/xpu",
        "resourceVCountName": "kunlunxin.com/vxpu",
        "resourceVMemoryName": "kunlunxin.com/vxpu-memory",
    },
    "vnpus": {
        "configs": [
            _chip("Ascend910B3", "910B3", 65536, 65536, [("vir05_1c_16g", 16384), ("vir10_3c_32g", 32768)]),
            _chip("Ascend310P", "310P3", 21527, 24576, [("vir01", 3072), ("vir02", 6144), ("vir04", 12288)]),
        ]
    },
}

NVIDIA = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2000", "nvidia.com/gpucores": "10"}
DCU = {"hygon.com/dcunum": "1", "hygon.com/dcumem": "2000", "hygon.com/dcucores": "20"}
MLU = {"cambricon.com/vmlu": "1", "cambricon.com/mlu.smlu.vmemory": "8", "cambricon.com/mlu.smlu.vcore": "20"}
AMD = {"amd.com/gpu": "1", "amd.com/gpumem": "2000", "amd.com/gpucores": "20"}
NPU_SLICE = {"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-memory": "10000"}  # → vir05_1c_16g
NPU_WHOLE = {"huawei.com/Ascend910B3": "1"}
# the hami-core soft split: 30 % of an NPU's AI cores and 10000 MiB as written, on a hami-vnpu-core node only
NPU_SOFT = {
    "huawei.com/Ascend910B3": "1",
    "huawei.com/Ascend910B3-memory": "10000",
    "huawei.com/Ascend910B3-core": "30",
}
HAMI_CORE = {"huawei.com/vnpu-mode": "hami-core"}
BIREN = {"birentech.com/gpu": "1"}
VASTAI = {"vastaitech.com/va": "1"}
MTHREADS = {"mthreads.com/vgpu": "1", "mthreads.com/sgpu-memory": "4", "mthreads.com/sgpu-core": "2"}
ILU = {"iluvatar.ai/MR-V100-vgpu": "1", "iluvatar.ai/MR-V100.vMem": "8", "iluvatar.ai/MR-V100.vCore": "20"}
METAX = {"metax-tech.com/gpu": "1"}
GCU = {"enflame.com/gcu": "1"}
DRS = {"enflame.com/drs-gcu": "3"}  # the 3g.20gb profile
DRS_SPEC = {"enflame.com/gcu-memory": "6", "enflame.com/gcu-core": "10"}  # the smallest holding both: 1g.6gb
SGPU = {"metax-tech.com/sgpu": "1", "metax-tech.com/vcore": "50", "metax-tech.com/vmemory": "8"}  # 8 GiB
SGPU_WHOLE = {"metax-tech.com/sgpu": "1"}  # 100 cores: a card of its own
SGPU_SMALL = {"metax-tech.com/sgpu": "1", "metax-tech.com/vcore": "30", "metax-tech.com/vmemory": "4"}
OFFLINE = {"metax-tech.com/sgpu-app-class": "offline"}  # shares only cards of classed pods, none of online ones
ONLINE = {"metax-tech.com/sgpu-app-class": "online"}  # shares only cards of classed pods; no cores, no QoS
NO_NODE = {"huawei.com/Ascend310P": "1"}  # enabled, but no node has one
NEURON_CORE = {"aws.amazon.com/neuroncore": "1"}
NEURON_DEVICES = {"aws.amazon.com/neuron": "2"}
XPU2 = {"kunlunxin.com/xpu": "2"}  # two whole Kunlunxin XPUs of one wing
XPU1 = {"kunlunxin.com/xpu": "1"}
VXPU = {"kunlunxin.com/vxpu": "1", "kunlunxin.com/vxpu-memory": "20000"}  # → a quarter XPU, 24576 MiB


def small_fleet() -> list[list[VendorPart]]:
    """Seven nodes: NVIDIA+DCU, DCU+MLU, MLU+Biren+Enflame GCU, AMD+Iluvatar MR-V100+AWS Neuron (an Inferentia2 of
    8 devices, 2 cores each)+Kunlunxin XPU and vXPU, Ascend 910B3+Moore Threads, NVIDIA+AMD+Vastai+Enflame
    DRS+MetaX sGPU, and Ascend 910B3 in the hami-core soft split (``hami-vnpu-core: "true"``)."""
    return [
        [VendorPart("NVIDIA"), VendorPart("DCU")],
        [VendorPart("DCU"), VendorPart("MLU", mem_mib=16384)],
        [
            VendorPart("MLU", mem_mib=16384),
            VendorPart("Biren", devices=2, mem_mib=32768, slots=2),
            VendorPart("Metax-GPU", devices=3, mem_mib=65536, slots=1),
            VendorPart("GCU", devices=2, mem_mib=100, slots=1),
        ],
        [
            VendorPart("AMD"),
            VendorPart("MR-V100", devices=2, mem_mib=16384),
            VendorPart("AWSNeuron", devices=8, cores=2, type="inf2.24xlarge"),
            VendorPart("kunlun", devices=8, mem_mib=98304, slots=100),  # from node capacity, as HAMi registers
            VendorPart("XPU", devices=8, mem_mib=98304, slots=4),
        ],
        [
            VendorPart("Ascend910B3", devices=4, mem_mib=65536, slots=4, cores=20),
            VendorPart("Mthreads", devices=2, mem_mib=16384, slots=100, cores=16),
        ],
        [
            VendorPart("NVIDIA"),
            VendorPart("AMD"),
            VendorPart("Vastai", devices=2, mem_mib=16384, slots=4),
            VendorPart("Enflame", devices=1, mem_mib=40960, slots=6),  # menu 1g.6gb, 3g.20gb, 6g.40gb
            VendorPart("Metax-SGPU", devices=4, mem_mib=32768, slots=4),
        ],
        [VendorPart("Ascend910B3", devices=2, mem_mib=65536, slots=4, cores=20, mode="hami-core")],
    ]


def small_pods() -> list[dict[str, Any]]:
    pods = [vendor_pod(f"nv{i}", [NVIDIA]) for i in range(3)]
    pods += [vendor_pod(f"dcu{i}", [DCU]) for i in range(3)]
    pods += [vendor_pod(f"mlu{i}", [MLU]) for i in range(3)]
    pods += [vendor_pod(f"amd{i}", [AMD]) for i in range(3)]
    pods += [vendor_pod(f"npu{i}", [NPU_SLICE]) for i in range(3)]
    pods += [vendor_pod("npu-whole", [NPU_WHOLE])]
    pods += [vendor_pod(f"ilu{i}", [ILU]) for i in range(2)]
    pods += [vendor_pod(f"biren{i}", [BIREN]) for i in range(2)]
    pods += [vendor_pod(f"va{i}", [VASTAI]) for i in range(2)]
    pods += [vendor_pod("mt0", [MTHREADS]), vendor_pod("mt-two", [MTHREADS, MTHREADS])]
    pods += [vendor_pod("metax0", [METAX]), vendor_pod("metax-two", [METAX, METAX])]  # whole GPUs, one a container
    pods += [vendor_pod("gcu0", [GCU]), vendor_pod("drs0", [DRS]), vendor_pod("drs-two", [DRS_SPEC, DRS_SPEC])]
    pods += [vendor_pod("sgpu0", [SGPU]), vendor_pod("sgpu-whole", [SGPU_WHOLE])]  # MetaX sGPUs
    pods += [vendor_pod("sgpu-offline", [SGPU_SMALL], annotations=OFFLINE)]  # sGPU app classes
    pods += [vendor_pod("sgpu-online", [SGPU_SMALL], annotations=ONLINE)]
    pods += [vendor_pod(f"nv-dcu{i}", [{**NVIDIA, **DCU}]) for i in range(2)]  # two vendors, one container
    pods += [vendor_pod("nv-amd", [{**NVIDIA, **AMD}]), vendor_pod("dcu-mlu", [DCU, MLU])]
    pods += [vendor_pod("no-node", [NO_NODE])]
    pods += [vendor_pod(f"neuron-core{i}", [NEURON_CORE]) for i in range(2)]  # the two cores of one device
    pods += [vendor_pod("neuron-two", [NEURON_DEVICES])]  # two whole devices in a row
    # hami-core pods fit only the soft-split node; the webhook refuses an AI-core percent without the mode
    pods += [vendor_pod(f"npu-soft{i}", [NPU_SOFT], annotations=HAMI_CORE) for i in range(3)]
    pods += [vendor_pod("npu-core-no-mode", [NPU_SOFT])]
    pods += [vendor_pod("kl0", [XPU2]), vendor_pod("kl-two", [XPU1, XPU1])]
    pods += [vendor_pod(f"vx{i}", [VXPU]) for i in range(2)]
    return pods


def _pod(outcome: Outcome, name: str) -> dict[str, Any]:
    return next(p for p in outcome.pods if p["metadata"]["name"] == name)


def _report(outcome: Outcome) -> None:
    r = outcome.report
    print(
        f"\n{r.summary()}; by vendor {dict(sorted(r.by_vendor.items()))}; created to last bind "
        f"{outcome.elapsed_s:.1f}s, bind p50 {outcome.percentile(50):.2f}s, {outcome.scheduler_errors} scheduler "
        f"errors, rejected {outcome.rejected}; notes {r.notes}"
    )
    for line in [*r.correctness, *r.liveness]:
        print("  ", line)


async def test_mixed_vendor_cluster(
    kube_apiserver: ApiServer, kube_cleanup: Cleanup, redis_url: str, tmp_path: Path
) -> None:
    pods = small_pods()
    scenario = Scenario(
        "vendors",
        pods,
        Settings(replicas=1, device_sections=VENDOR_SECTIONS, enable_flags=("enable-ascend", "enable-iluvatar")),
        fleet=small_fleet(),
        deadline_s=60,
        stall_s=8,
    )
    outcome = await run_scenario(kube_apiserver, kube_cleanup, redis_url, tmp_path, scenario)
    _report(outcome)
    (refused,) = outcome.rejected
    assert refused.startswith("npu-core-no-mode: 403 "), refused
    assert "huawei.com/Ascend910B3-core asks for 30 AI-core percent" in refused, refused
    assert "add the pod annotation huawei.com/vnpu-mode: hami-core" in refused, refused
    outcome.report.check()
    assert outcome.report.bound == len(pods) - 2
    assert outcome.report.unschedulable == 1, outcome.report.notes
    assert outcome.report.by_vendor == {
        "NVIDIA": 6,
        "DCU": 6,
        "MLU": 4,
        "AMD": 4,
        "Ascend910B3": 7,
        "MR-V100": 2,
        "Biren": 2,
        "Vastai": 2,
        "Mthreads": 2,
        "Metax-GPU": 2,
        "GCU": 1,
        "Enflame": 2,
        "AWSNeuron": 3,
        "kunlun": 2,
        "XPU": 2,
        "Metax-SGPU": 4,
    }
    # the webhook sent every pod to vgpu-scheduler
    assert {p["spec"]["schedulerName"] for p in outcome.pods} == {"vgpu-scheduler"}
    # the pod asking for a vendor no node has stays Pending, with the scheduler's reason on the pod
    stuck = _pod(outcome, "no-node")
    assert not stuck["spec"].get("nodeName")
    (cond,) = [c for c in stuck["status"].get("conditions") or [] if c["type"] == "PodScheduled"]
    assert (cond["status"], cond["reason"]) == ("False", "Unschedulable"), cond
    assert "0/7 nodes are available" in cond["message"], cond
    # two vendors, one container: both vendors' keys on one node that has both
    both = _pod(outcome, "nv-dcu0")["metadata"]["annotations"]
    assert both["hami.io/vgpu-devices-allocated"].startswith("NVIDIA-")
    assert both["hami.io/dcu-devices-allocated"].startswith("DCU-")
    npu = _pod(outcome, "npu0")["metadata"]["annotations"]["hami.io/Ascend910B3-devices-allocated"]
    assert ",Ascend910B3,16384,0:" in npu, npu  # rounded up to the vir05_1c_16g template
    for i in range(3):  # the hami-core pods: on the soft-split node (the seventh), memory as written, the cores
        soft = _pod(outcome, f"npu-soft{i}")
        assert soft["spec"]["nodeName"].endswith("-n0006"), soft["spec"]
        annos = soft["metadata"]["annotations"]
        assert ",Ascend910B3,10000,30:" in annos["hami.io/Ascend910B3-devices-allocated"], annos
        (entry,) = json.loads(annos["huawei.com/Ascend910B3"])
        assert entry["memory"] == 10000 and entry["core"] == 30 and "temp" not in entry, entry
    mlu = _pod(outcome, "mlu0")["metadata"]["annotations"]["hami.io/cambricon-mlu-devices-allocated"]
    assert ",MLU,2048,20:" in mlu, mlu  # 8 units of 256 MiB
    ilu = _pod(outcome, "ilu0")
    assert ",MR-V100,2048,20:" in ilu["metadata"]["annotations"]["hami.io/MR-V100-devices-allocated"], ilu
    assert {"name": "SOL_CONTINER_NAME", "value": "c0"} in ilu["spec"]["containers"][0]["env"], ilu
    birens = _pod(outcome, "biren0")["metadata"]["annotations"]["hami.io/Biren-devices-allocated"]
    assert birens.endswith(",Biren,0,0:;"), birens  # a slot, no memory, no cores
    mt = _pod(outcome, "mt-two")["metadata"]["annotations"]
    first, second, _ = mt["hami.io/mthreads-vgpu-devices-allocated"].split(";")
    assert first == second and first.endswith(",Mthreads,2048,2:"), mt  # one GPU for every container of a pod
    assert mt["mthreads.com/predicate-node"] == _pod(outcome, "mt-two")["spec"]["nodeName"]
    mx = _pod(outcome, "metax-two")["metadata"]["annotations"]
    first, second, _ = mx["hami.io/metax-gpu-devices-allocated"].split(";")
    assert first != second and first.endswith(",Metax-GPU,65536,100:"), mx  # a whole GPU for each container
    sg = _pod(outcome, "sgpu0")["metadata"]["annotations"]
    card = sg["hami.io/metax-sgpu-devices-allocated"].split(",")[0]
    assert sg["hami.io/metax-sgpu-devices-allocated"] == f"{card},Metax-SGPU,8192,50:;", sg
    assert sg["metax-tech.com/sgpu-qos-policy"] == "best-effort", sg  # written by the webhook
    assert json.loads(sg["metax-tech.com/gpu-devices-allocated"]) == [[{"uuid": card, "compute": 50, "vRam": 8192}]]
    assert sg["metax-tech.com/predicate-time"].endswith("000000000"), sg
    whole = _pod(outcome, "sgpu-whole")["metadata"]["annotations"]["hami.io/metax-sgpu-devices-allocated"]
    assert whole.endswith(",Metax-SGPU,32768,100:;") and not whole.startswith(card + ","), whole  # the other card
    # app classes: neither classed pod shares the card of an unclassed one; the online pod takes no cores and gets
    # no QoS policy, the offline one gets best-effort from the webhook
    off = _pod(outcome, "sgpu-offline")["metadata"]["annotations"]
    on = _pod(outcome, "sgpu-online")["metadata"]["annotations"]
    off_card, _, off_mem, off_cores = off["hami.io/metax-sgpu-devices-allocated"].rstrip(":;").split(",")
    on_card, _, on_mem, on_cores = on["hami.io/metax-sgpu-devices-allocated"].rstrip(":;").split(",")
    assert (off_mem, off_cores, off["metax-tech.com/sgpu-qos-policy"]) == ("4096", "30", "best-effort"), off
    assert (on_mem, on_cores) == ("4096", "0") and "metax-tech.com/sgpu-qos-policy" not in on, on
    assert json.loads(on["metax-tech.com/gpu-devices-allocated"]) == [[{"uuid": on_card, "vRam": 4096}]], on
    assert not {off_card, on_card} & {card, whole.split(",")[0]}, (off_card, on_card, card, whole)
    gcu = _pod(outcome, "gcu0")["metadata"]["annotations"]
    assert gcu["hami.io/enflame-gcu-devices-allocated"].endswith(",GCU,100,100:;"), gcu  # a whole card
    drs = _pod(outcome, "drs0")["metadata"]["annotations"]
    assert drs["hami.io/enflame-vgpu-devices-allocated"].endswith(",Enflame,20480,50:;"), drs
    assert (drs["enflame.com/gcu-assigned"], drs["enflame.com/gcu-request-size"]) == ("false", "3"), drs
    assert json.loads(drs["assigned-containers"]) == {
        "c0": {"allocated": False, "request": 3, "profileID": "1", "profileName": "3g.20gb"}
    }
    two = json.loads(_pod(outcome, "drs-two")["metadata"]["annotations"]["assigned-containers"])
    assert {c: (v["request"], v["profileName"]) for c, v in two.items()} == {"c0": (1, "1g.6gb"), "c1": (1, "1g.6gb")}
    # AWS Neuron: one core each of one device (masks 1 and 2, core indexes 0 and 1 in some order), two whole
    # devices in a row by index, and the AWS annotations its device plugin reads; no node lock
    cores = [_pod(outcome, f"neuron-core{i}") for i in range(2)]
    node = cores[0]["spec"]["nodeName"]
    entries = [p["metadata"]["annotations"]["hami.io/aws-neuron-devices-allocated"] for p in cores]
    assert sorted(e.split(",")[-1] for e in entries) == ["1:;", "2:;"], entries
    assert len({e.split(",")[0] for e in entries}) == 1, entries  # the same device
    annos = [p["metadata"]["annotations"] for p in cores]
    index = int(entries[0].split(",")[0].rsplit("-", 1)[1])
    assert sorted(a["AWS_NEURON_IDS"] for a in annos) == [str(2 * index), str(2 * index + 1)], annos
    for a in annos:
        assert a["NEURON_RESOURCE_TYPE"] == "aws.amazon.com/neuroncore" and a["NEURON_ALLOCATED"] == "false"
        assert a["aws.amazon.com/predicate-node"] == node and int(a["NEURON_ALLOC_TIME"]) > 0
    two_dev = _pod(outcome, "neuron-two")["metadata"]["annotations"]
    run = [
        int(d.split(",")[0].rsplit("-", 1)[1]) for d in two_dev["hami.io/aws-neuron-devices-allocated"].split(":")[:-1]
    ]
    assert len(run) == 2 and run[1] == run[0] + 1 and index not in run, two_dev
    assert two_dev["AWS_NEURON_IDS"] == f"{run[0]},{run[1]}" and "NEURON_RESOURCE_TYPE" not in two_dev

    # Kunlunxin: whole XPUs from node capacity with HAMi's ids and BAIDU_COM_DEVICE_IDX, vXPUs rounded up
    kl = _pod(outcome, "kl0")["metadata"]["annotations"]
    assert kl["hami.io/kunlun-allocated"].count(",kunlun,98304,100:") == 2, kl  # two XPUs, taken whole
    assert "-kunlun-" in kl["hami.io/kunlun-allocated"] and "hami.io/kunlun-devices-to-allocate" not in kl
    pair = [int(i) for i in kl["BAIDU_COM_DEVICE_IDX"].split(",")]
    assert len(pair) == 2 and len({i // 4 for i in pair}) == 1, pair  # both of one wing of the board
    singles = [int(i) for i in _pod(outcome, "kl-two")["metadata"]["annotations"]["BAIDU_COM_DEVICE_IDX"].split(";")]
    assert len(singles) == 2 and len({*pair, *singles}) == 4, singles  # one XPU per container, none shared
    limits = _pod(outcome, "vx0")["spec"]["containers"][0]["resources"]["limits"]
    assert limits["kunlunxin.com/vxpu-memory"] == "24576", limits  # the webhook wrote the rounded size
    vx = _pod(outcome, "vx0")["metadata"]["annotations"]
    assert vx["hami.io/xpu-devices-allocated"].endswith(",XPU,24576,25:;"), vx
    assert "hami.io/xpu-devices-to-allocate" in vx  # written by the bind, emptied by the plugin at Allocate


def large_fleet(groups: int) -> list[list[VendorPart]]:
    """``groups`` × the small fleet's six node kinds, two replicas' worth of nodes."""
    return [parts for _ in range(groups) for parts in small_fleet()]


def large_pods(rounds: int) -> list[dict[str, Any]]:
    """``rounds`` × the small scenario's pods that can be placed, under distinct names."""
    out = []
    for r in range(rounds):
        for pod in small_pods():
            name = pod["metadata"]["name"]
            if name in ("no-node", "npu-core-no-mode") or name.startswith(("npu-soft", "sgpu-o")):
                continue  # the hami-core and app-class pods: the small scenario places them; spread here fills their
                # nodes (spread leaves no sGPU card idle or classed for them)
            if r >= 4 and name.startswith("kl"):
                continue  # 4 rounds of whole XPUs: 16 of the fleet's 40, so a board's topology always has a pair
            if r >= 5 and name.startswith(("metax", "drs")):
                continue  # 5 rounds fill the MetaX GPUs (3 a round, 15) and the DRS cards (32 of 40 GiB, one a group)
            pod["metadata"]["name"] = f"r{r:02d}-{pod['metadata']['name']}"
            out.append(pod)
    return out


@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_mixed_vendor_cluster_two_replicas_spread(
    kube_apiserver: ApiServer, kube_cleanup: Cleanup, redis_url: str, tmp_path: Path
) -> None:
    """30 mixed-vendor nodes, 2 extender replicas with the spread policy, 200 pods of every vendor (binds run
    concurrently across nodes, several MLU pods contend for Cambricon's time lock on a node)."""
    pods = large_pods(10)
    scenario = Scenario(
        "vendors-large",
        pods,
        Settings(
            replicas=2,
            node_policy="spread",
            device_sections=VENDOR_SECTIONS,
            enable_flags=("enable-ascend", "enable-iluvatar"),
        ),
        fleet=large_fleet(5),
        deadline_s=300,
        stall_s=30,
    )
    outcome = await run_scenario(kube_apiserver, kube_cleanup, redis_url, tmp_path, scenario)
    _report(outcome)
    assert not outcome.rejected, outcome.rejected
    outcome.report.check()
    # spread puts slices on every device first, so some pods asking for whole devices late in the run find none free
    # (whole NPUs, two MetaX GPUs on one node, a whole MetaX sGPU card): the audit's exhaustive check confirmed that no
    # node can take each of them (no liveness finding); every other pod is bound
    assert outcome.report.bound + outcome.report.unschedulable == len(pods)
    whole = ("npu-whole: unschedulable", "metax-two: unschedulable", "sgpu-whole: unschedulable")
    assert all(any(w in n for w in whole) for n in outcome.report.notes), outcome.report.notes
    assert outcome.report.bound >= len(pods) - 10


def _neuron_pod(name: str, entries: str, containers: int = 1, phase: str = "Running") -> dict[str, Any]:
    """A bound pod holding ``entries`` (the allocated list) on node n1, one-core containers."""
    return {
        "metadata": {
            "namespace": "default",
            "name": name,
            "uid": name,
            "annotations": {"hami.io/vgpu-node": "n1", "hami.io/aws-neuron-devices-allocated": entries},
        },
        "spec": {
            "nodeName": "n1",
            "containers": [
                {"name": f"c{i}", "resources": {"limits": {"aws.amazon.com/neuroncore": "1"}}}
                for i in range(containers)
            ],
        },
        "status": {"phase": phase},
    }


def test_the_audit_finds_a_neuron_core_held_twice() -> None:
    # no control plane: the audit's own check. Two pods on core 0 of one device sum to a mask of 2 of 3, which the
    # over-capacity check lets through; the core-overlap check does not
    vendors = enabled_vendors(NvidiaConfig())
    dev0, dev1 = "n1-AWSNeuron-0", "n1-AWSNeuron-1"

    def findings(*pods: Mapping[str, Any]) -> list[str]:
        report = AuditReport()
        neuron_core_overlaps(pods, vendors, report)
        return report.correctness

    one, two = _neuron_pod("a", f"{dev0},AWSNeuron,0,1:;"), _neuron_pod("b", f"{dev0},AWSNeuron,0,1:;")
    assert findings(one, two) == [f"n1/{dev0} (AWSNeuron): core mask 0b1 held by both default/a and default/b"]
    assert findings(one, _neuron_pod("b", f"{dev0},AWSNeuron,0,2:;")) == []  # the other core
    assert findings(one, _neuron_pod("b", f"{dev1},AWSNeuron,0,1:;")) == []  # another device
    assert findings(one, _neuron_pod("b", f"{dev0},AWSNeuron,0,1:;", phase="Succeeded")) == []  # ended
    whole = _neuron_pod("w", f"{dev0},AWSNeuron,0,3:;")
    assert len(findings(whole, _neuron_pod("b", f"{dev0},AWSNeuron,0,2:;"))) == 1
    # one pod's two app containers on one core
    doubled = _neuron_pod("d", f"{dev0},AWSNeuron,0,1:;{dev0},AWSNeuron,0,1:;", containers=2)
    assert findings(doubled) == [f"default/d: two containers hold the same core of n1/{dev0}"]
    assert findings(_neuron_pod("e", f"{dev0},AWSNeuron,0,1:;{dev0},AWSNeuron,0,2:;", containers=2)) == []
