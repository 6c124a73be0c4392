"""Nearest-miss sentences for other vendors' devices: the vendor's own rules and words."""

from __future__ import annotations

from vgpu_scheduler.shared.domain.diagnosis import device_noun, nearest_miss
from vgpu_scheduler.shared.domain.model import NO_CONSTRAINTS, ContainerRequest, DeviceInfo, NodeInventory, PodRequest
from vgpu_scheduler.shared.domain.plan import Failure, plan
from vgpu_scheduler.shared.domain.scoring import Policies
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.domain.vendor import NVIDIA_RULES, BasicRules, RuleSet

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
    assert [device_noun(v) for v in ("NVIDIA", "AMD", "DCU", "MLU", "Ascend910B3", "XPU")] == [
        "GPU",
        "GPU",
        "DCU",
        "MLU",
        "NPU",
        "device",
    ]
