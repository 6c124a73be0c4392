"""The webhook's quota pre-check for other vendors: each vendor's demand (its own requests, memory in MiB) against
its own limits and usage; NVIDIA's check is unchanged and one vendor's limit does not deny another's pod."""

from __future__ import annotations

from typing import Any

import pytest

from vgpu_scheduler.shared.domain.model import NvidiaConfig
from vgpu_scheduler.shared.domain.quota import QuotaLimits, QuotaState, QuotaUse, VendorLimits, quota_limits
from vgpu_scheduler.shared.protocol.webhook import QuotaDemand, mutate_pod, vendor_quota_demands
from vgpu_scheduler.shared.vendors.catalog import enabled_vendors

CFG = NvidiaConfig()
VENDORS = enabled_vendors(CFG, {"hygon": {}, "cambricon": {}})
OTHERS = tuple(v for v in VENDORS if v.name != "NVIDIA")


def pod(*containers: dict[str, str], init: tuple[dict[str, str], ...] = ()) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": f"c{i}", "resources": {"limits": dict(lim)}} for i, lim in enumerate(containers)]
    }
    if init:
        spec["initContainers"] = [{"name": f"i{i}", "resources": {"limits": dict(lim)}} for i, lim in enumerate(init)]
    return {"metadata": {"name": "p", "namespace": "ns"}, "spec": spec}


DCU_3000 = {"hygon.com/dcunum": "1", "hygon.com/dcumem": "3000", "hygon.com/dcucores": "20"}
MLU_4 = {"cambricon.com/vmlu": "1", "cambricon.com/mlu.smlu.vmemory": "4", "cambricon.com/mlu.smlu.vcore": "10"}


def decide(p: dict[str, Any], quota: QuotaState) -> str:
    out = mutate_pod(p, cfg=CFG, scheduler_name="vgpu-scheduler", force_overwrite_default_scheduler=True,
                     quota=quota, vendors=VENDORS)  # fmt: skip
    return "allowed" if out.allowed else out.message


def test_vendor_demands_collapse_init_and_app() -> None:
    p = pod(DCU_3000, DCU_3000, MLU_4, init=({**DCU_3000, "hygon.com/dcumem": "5000"},))
    assert vendor_quota_demands(p, OTHERS) == (
        ("DCU", QuotaDemand(mem_mib=6000, cores_pct=40)),
        ("MLU", QuotaDemand(mem_mib=1024, cores_pct=10)),  # 4 units × 256 MiB
    )
    assert vendor_quota_demands(pod({"nvidia.com/gpu": "1"}), OTHERS) == ()


@pytest.mark.parametrize(
    ("limits", "used", "expected"),
    [
        pytest.param(VendorLimits(mem_mib=8000), QuotaUse(5000, 0), "allowed", id="exactly-at-the-limit"),
        pytest.param(VendorLimits(mem_mib=8000), QuotaUse(5001, 0), "exceeding resource quota", id="memory-over"),
        pytest.param(VendorLimits(cores_pct=100), QuotaUse(0, 81), "exceeding resource quota", id="cores-over"),
        pytest.param(VendorLimits(mem_mib=0), QuotaUse(), "exceeding resource quota", id="explicit-zero"),
        pytest.param(VendorLimits(), QuotaUse(10**6, 10**6), "allowed", id="no-limit"),
    ],
)
def test_a_dcu_pod_against_the_dcu_quota(limits: VendorLimits, used: QuotaUse, expected: str) -> None:
    state = QuotaState(quota_limits(VendorLimits(), {"DCU": limits}), used_others=(("DCU", used),))
    assert decide(pod(DCU_3000), state) == expected


def test_one_vendors_limit_does_not_deny_another_vendors_pod() -> None:
    blocked = QuotaState(quota_limits(VendorLimits(0, 0), {"DCU": VendorLimits(0, 0)}))
    assert decide(pod(MLU_4), blocked) == "allowed"
    mlu_blocked = QuotaState(quota_limits(VendorLimits(), {"MLU": VendorLimits(mem_mib=1023)}))
    assert decide(pod(MLU_4), mlu_blocked) == "exceeding resource quota"
    assert decide(pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}), mlu_blocked) == "allowed"
    assert decide(pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}), QuotaState(QuotaLimits(999))) == (
        "exceeding resource quota"
    )
