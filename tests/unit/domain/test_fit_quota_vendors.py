"""Fit's quota check for every vendor: each vendor's devices are checked against its own limits (memory MiB,
cores %), NVIDIA's against NVIDIA's (×memoryFactor), and one vendor's limit never refuses another vendor's pod."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from vgpu_scheduler.shared.domain.model import (
    MEM_PCT_UNSET,
    NVIDIA,
    ContainerRequest,
    DeviceInfo,
    NodeInventory,
    PodConstraints,
    PodRequest,
)
from vgpu_scheduler.shared.domain.plan import Decision, Failure, plan
from vgpu_scheduler.shared.domain.quota import QuotaLimits, QuotaState, QuotaUse, VendorLimits, quota_limits
from vgpu_scheduler.shared.domain.scoring import Policies
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.domain.vendor import NVIDIA_RULES, RuleSet
from vgpu_scheduler.shared.vendors import amd, hygon
from vgpu_scheduler.shared.vendors import cambricon as cam
from vgpu_scheduler.shared.vendors.ascend import build as build_ascend


@dataclass(frozen=True)
class Family:
    """One vendor's device and request for the test (cores within the card)."""

    word: str
    device_type: str
    mem_mib: int
    cores: int


FAMILIES = [
    Family(hygon.NAME, "DCU", 4096, 30),
    Family(amd.NAME, "MI300X", 4096, 30),
    Family(cam.MLU, "MLU", 512, 50),
    Family("Ascend910B3", "Ascend910B3", 64, 50),
]
ASCEND = {v.name: v for v in build_ascend(None)}
RULES = RuleSet(
    {
        NVIDIA: NVIDIA_RULES,
        hygon.NAME: hygon.DCU_RULES,
        amd.NAME: amd.AMD_RULES,
        cam.MLU: cam.RULES,
        "Ascend910B3": ASCEND["Ascend910B3"].rules,
    }
)


def node(f: Family) -> NodeSnapshot:
    dev = DeviceInfo("dev-0", 0, 100, 65536, 100, f.device_type, 0, "", True, vendor=f.word)
    return NodeSnapshot(NodeInventory("n1", f.word, (dev,)), {})


def run(f: Family, quota: QuotaState | None, nums: int = 1) -> Decision | Failure:
    request = ContainerRequest(nums=nums, mem_mib=f.mem_mib, mem_pct=MEM_PCT_UNSET, cores_pct=f.cores, type=f.word)
    pod = PodRequest(containers=(request,), init_count=0)
    return plan(pod, PodConstraints(), [node(f)], policies=Policies(), quota=quota, rules=RULES)


def charged(f: Family) -> tuple[int, int]:
    """What the vendor's Fit charges for the request (Ascend rounds memory up to a template)."""
    got = run(f, None)
    assert isinstance(got, Decision), got
    ((dev,),) = got.devices
    assert dev.type == f.word
    return dev.used_mem_mib, dev.used_cores


def state(word: str, lim: VendorLimits, used: QuotaUse) -> QuotaState:
    return QuotaState(quota_limits(VendorLimits(), {word: lim}), used_others=((word, used),))


@pytest.mark.parametrize("f", FAMILIES, ids=lambda f: f.word)
def test_vendor_memory_limit_is_checked_per_device(f: Family) -> None:
    mem, _ = charged(f)
    used = QuotaUse(1000, 0)
    assert isinstance(run(f, state(f.word, VendorLimits(mem_mib=1000 + mem), used)), Decision)
    refused = run(f, state(f.word, VendorLimits(mem_mib=1000 + mem - 1), used))
    assert isinstance(refused, Failure)
    assert refused.reasons["n1"] == "1/1 ResourceQuotaNotFit"


@pytest.mark.parametrize("f", FAMILIES, ids=lambda f: f.word)
def test_vendor_cores_limit_and_explicit_zero(f: Family) -> None:
    _, cores = charged(f)
    used = QuotaUse(0, 10)
    assert isinstance(run(f, state(f.word, VendorLimits(cores_pct=10 + cores), used)), Decision)
    over = run(f, state(f.word, VendorLimits(cores_pct=9 + cores), used))
    assert isinstance(over, Failure) and over.reasons["n1"] == "1/1 ResourceQuotaNotFit"
    zero = run(f, state(f.word, VendorLimits(mem_mib=0), QuotaUse()))
    assert isinstance(zero, Failure) and zero.reasons["n1"] == "1/1 ResourceQuotaNotFit"


@pytest.mark.parametrize("f", FAMILIES, ids=lambda f: f.word)
def test_other_vendors_limits_do_not_apply(f: Family) -> None:
    other = hygon.NAME if f.word != hygon.NAME else amd.NAME
    blocked = QuotaState(
        quota_limits(VendorLimits(mem_mib=0, cores_pct=0), {other: VendorLimits(mem_mib=0, cores_pct=0)}),
        used_mem_mib=10**6,
    )
    assert isinstance(run(f, blocked), Decision)


def test_nvidia_pod_ignores_vendor_limits_and_keeps_its_factor() -> None:
    gpu = DeviceInfo("gpu-0", 0, 10, 16384, 100, "NVIDIA-A100", 0, "hami-core", True)
    snap = NodeSnapshot(NodeInventory("n1", NVIDIA, (gpu,)), {})
    pod = PodRequest(containers=(ContainerRequest(nums=1, mem_mib=2000, cores_pct=10),), init_count=0)
    dcu_blocked = QuotaState(quota_limits(VendorLimits(mem_mib=2000), {hygon.NAME: VendorLimits(mem_mib=0)}))
    assert isinstance(plan(pod, PodConstraints(), [snap], policies=Policies(), quota=dcu_blocked), Decision)
    tight = QuotaState(QuotaLimits(mem_mib=1999), used_others=((hygon.NAME, QuotaUse(0, 0)),))
    got = plan(pod, PodConstraints(), [snap], policies=Policies(), quota=tight)
    assert isinstance(got, Failure) and got.reasons["n1"] == "1/1 ResourceQuotaNotFit"


def test_for_vendor_views() -> None:
    s = QuotaState(
        quota_limits(VendorLimits(4, 5), {"DCU": VendorLimits(mem_mib=8000), "MLU": VendorLimits()}),
        1,
        2,
        (("DCU", QuotaUse(3, 4)),),
    )
    assert s.limits.others == (("DCU", VendorLimits(mem_mib=8000)),)  # a vendor without a limit is dropped
    assert s.for_vendor(NVIDIA) == QuotaState(QuotaLimits(4, 5), 1, 2)
    assert s.for_vendor("DCU") == QuotaState(QuotaLimits(mem_mib=8000), 3, 4)
    assert s.for_vendor("MLU") == QuotaState()
    assert not s.for_vendor("MLU").limited
    assert QuotaState(quota_limits(VendorLimits(), {"AMD": VendorLimits(cores_pct=0)})).limited
