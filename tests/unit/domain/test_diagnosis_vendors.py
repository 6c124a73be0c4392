"""Nearest-miss sentences for other vendors' devices: the vendor's own rules and words."""

from __future__ import annotations

from vgpu_scheduler.shared.domain.diagnosis import device_noun, nearest_miss
from vgpu_scheduler.shared.domain.model import (
    NO_CONSTRAINTS,
    ContainerRequest,
    DeviceInfo,
    DeviceUsage,
    NodeInventory,
    PodRequest,
)
from vgpu_scheduler.shared.domain.plan import Failure, plan
from vgpu_scheduler.shared.domain.scoring import Policies
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.domain.vendor import NVIDIA_RULES, BasicRules, RuleSet
from vgpu_scheduler.shared.vendors import kunlun

RULES = RuleSet({"NVIDIA": NVIDIA_RULES, "DCU": BasicRules("DCU")})


def dcu(uuid: str, mem: int) -> DeviceInfo:
    return DeviceInfo(uuid, 0, 4, mem, 100, "DCU-Z100", 0, "hami-core", True, vendor="DCU")


def test_memory_shortfall_on_a_dcu_is_told_in_dcus() -> None:
    snap = NodeSnapshot(NodeInventory("n", "DCU", (dcu("DCU-0", 16384),)), {})
    pod = PodRequest((ContainerRequest(1, mem_mib=20000, type="DCU"),), 0)
    failure = plan(pod, NO_CONSTRAINTS, [snap], policies=Policies(), rules=RULES)
    assert isinstance(failure, Failure)
    miss = nearest_miss(pod, NO_CONSTRAINTS, snap, failure.rejections["n"], policies=Policies(), rules=RULES)
    assert miss.reason == "CardInsufficientMemory"
    assert "one DCU" in miss.text and "GPU" not in miss.text


def test_a_container_asking_two_vendors_is_explained_by_the_entry_that_failed() -> None:
    nvidia = DeviceInfo("GPU-0", 0, 10, 24000, 100, "NVIDIA-A10", 0, "hami-core", True)
    snap = NodeSnapshot(NodeInventory("n", "NVIDIA,DCU", (nvidia, dcu("DCU-0", 16384))), {})
    pod = PodRequest(
        (ContainerRequest(1, mem_mib=1000), ContainerRequest(2, mem_mib=1000, type="DCU")), 0, owners=(0, 0)
    )
    failure = plan(pod, NO_CONSTRAINTS, [snap], policies=Policies(), rules=RULES)
    assert isinstance(failure, Failure)
    rejection = failure.rejections["n"]
    assert (rejection.container_index, rejection.entry_index, rejection.text) == (0, 1, "NodeInsufficientDevice")
    miss = nearest_miss(pod, NO_CONSTRAINTS, snap, rejection, policies=Policies(), rules=RULES)
    assert miss.text == "needs 2 DCUs in one container; n has 1"


def test_device_nouns() -> None:
    assert [device_noun(v) for v in ("NVIDIA", "AMD", "DCU", "MLU", "Ascend910B3", "Biren")] == [
        "GPU",
        "GPU",
        "DCU",
        "MLU",
        "NPU",
        "device",
    ]


def test_a_kunlunxin_board_without_a_topology_group_is_told_in_xpus() -> None:
    x, v = kunlun.build(None)
    rules = RuleSet({"NVIDIA": NVIDIA_RULES, "kunlun": x.rules, "XPU": v.rules})
    assert (device_noun("kunlun"), device_noun("XPU")) == ("XPU", "XPU")
    devices = tuple(
        DeviceInfo(f"n-kunlun-{i}", i, 100, 98304, 100, "kunlun", 0, "", True, vendor="kunlun") for i in range(8)
    )
    busy = {f"n-kunlun-{i}": DeviceUsage(1, 98304, 100) for i in (2, 3, 5, 7)}  # free: 0, 1, 4, 6
    snap = NodeSnapshot(NodeInventory("n", "kunlun", devices), busy)
    pod = PodRequest((ContainerRequest(4, mem_pct=100, type="kunlun"),), 0)
    failure = plan(pod, NO_CONSTRAINTS, [snap], policies=Policies(), rules=rules)
    assert isinstance(failure, Failure) and failure.reasons["n"] == "1/8 NumaNotFit"
    miss = nearest_miss(pod, NO_CONSTRAINTS, snap, failure.rejections["n"], policies=Policies(), rules=rules)
    assert miss.reason == "NumaNotFit"
    assert miss.text == (
        "needs 4 XPUs that the board's topology groups (1, 2, 4 or 8 of its XPUs); 4 XPUs of n can take this "
        "container, in no such group"
    )
