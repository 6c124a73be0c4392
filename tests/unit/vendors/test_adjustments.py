"""Requests HAMi accepts and silently adjusts are accepted, adjusted the same way, and reported as admission
warnings (``response.warnings``, which kubectl prints); requests HAMi silently mis-schedules stay refused.

HAMi v2.10.0's ``Fit`` of NVIDIA, Hygon, Cambricon (and the other families built on the same skeleton) caps a core
percentage above 100: ``if k.Coresreq > 100 { klog.ErrorS(...); k.Coresreq = 100 }`` (their device_test.go cases
"fit success: but core limit can't exceed 100"). AMD's ``MutateAdmission`` refuses a core limit outside 1..100, so
AMD keeps refusing.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from vgpu_scheduler.shared.codec.resources import ResourceRequestError, container_request
from vgpu_scheduler.shared.domain.model import NvidiaConfig
from vgpu_scheduler.shared.protocol.admission import AdmissionVersion, response_dict
from vgpu_scheduler.shared.protocol.webhook import mutate_pod, quota_demand
from vgpu_scheduler.shared.vendors.catalog import all_vendors
from vgpu_scheduler.shared.vendors.registry import Vendors

CFG = NvidiaConfig()
SCHED = "vgpu-scheduler"
VENDORS = all_vendors()


def _ctr(limits: dict[str, Any], name: str = "main") -> dict[str, Any]:
    return {"name": name, "image": "x", "resources": {"limits": limits}}


def _pod(*containers: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "default"}, "spec": {"containers": list(containers)}}


def _admit(pod: dict[str, Any], vendors: Vendors | None = VENDORS) -> Any:
    return mutate_pod(pod, cfg=CFG, scheduler_name=SCHED, force_overwrite_default_scheduler=True, vendors=vendors)


def test_nvidia_cores_above_100_are_read_as_100() -> None:
    # HAMi nvidia device_test.go TestDevices_Fit "fit success: but core limit can't exceed 100": Coresreq 120 fits
    # a 100-core card and the allocation records 100
    req = container_request(_ctr({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "120"}), CFG)
    assert (req.nums, req.cores_pct) == (1, 100)
    # the API server's own spelling of a large value is read the same way
    assert container_request(_ctr({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "1k"}), CFG).cores_pct == 100


@pytest.mark.parametrize("vendors", [VENDORS, None], ids=["every-vendor", "nvidia-only"])
def test_nvidia_gpucores_120_is_admitted_with_a_warning(vendors: Vendors | None) -> None:
    outcome = _admit(_pod(_ctr({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "120"})), vendors)
    assert outcome.allowed
    assert list(outcome.warnings) == [
        'container "main": nvidia.com/gpucores: "120" is more than 100 (a whole GPU); scheduled as 100, as HAMi does'
    ]
    review = response_dict(outcome, uid="u1", api_version=AdmissionVersion.V1)["response"]
    assert review["warnings"] == list(outcome.warnings)
    assert json.loads(json.dumps(review))["allowed"] is True


def test_a_request_adjusted_nowhere_has_no_warning_key() -> None:
    outcome = _admit(_pod(_ctr({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "100"})))
    assert outcome.allowed and list(outcome.warnings) == []
    assert "warnings" not in response_dict(outcome, uid="u", api_version=AdmissionVersion.V1)["response"]


@pytest.mark.parametrize(
    ("limits", "device", "name"),
    [
        ({"hygon.com/dcunum": "1", "hygon.com/dcucores": "150"}, "DCU", "hygon.com/dcucores"),
        ({"cambricon.com/vmlu": "1", "cambricon.com/mlu.smlu.vcore": "120"}, "MLU", "cambricon.com/mlu.smlu.vcore"),
    ],
    ids=["hygon", "cambricon"],
)
def test_other_families_capping_cores_warn_too(limits: dict[str, str], device: str, name: str) -> None:
    # HAMi hygon/cambricon device_test.go TestDevices_Fit "fit success: but core limit can't exceed 100"
    pod = _pod(_ctr(limits, "train"))
    outcome = _admit(pod)
    assert outcome.allowed, outcome.message
    shown = limits[name]
    assert list(outcome.warnings) == [
        f'container "train": {name}: "{shown}" is more than 100 (a whole {device}); scheduled as 100, as HAMi does'
    ]
    vendor = VENDORS.get(device)
    assert vendor is not None
    assert vendor.container_request(pod["spec"]["containers"][0], "spec.containers[0]").cores_pct == 100


def test_amd_keeps_refusing_cores_above_100_as_hami_does() -> None:
    # HAMi amd device.go MutateAdmission: "amd.com/gpucores must be an integer percentage between 1 and 100"
    outcome = _admit(_pod(_ctr({"amd.com/gpu": "1", "amd.com/gpucores": "120"})))
    assert not outcome.allowed and "amd.com/gpucores" in outcome.message


def test_the_quota_counts_the_adjusted_cores() -> None:
    demand = quota_demand(_pod(_ctr({"nvidia.com/gpu": "2", "nvidia.com/gpucores": "300"})), CFG)
    assert demand.cores_pct == 200


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        ({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "20Gi"}, "did you mean 20480?"),  # HAMi reads 20Gi as MiB
        ({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "-5"}, "cannot be negative"),
        ({"nvidia.com/gpu": "-1"}, "cannot be negative"),
        ({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "3000000000"}, "too large"),
        ({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "150"}, "more than 100"),
    ],
    ids=["gpumem-20Gi", "cores-negative", "count-negative", "cores-beyond-int32", "memory-percentage-over-100"],
)
def test_what_hami_mis_schedules_is_still_refused(limits: dict[str, str], expected: str) -> None:
    outcome = _admit(_pod(_ctr(limits)))
    assert not outcome.allowed and expected in outcome.message
    with pytest.raises(ResourceRequestError, match=expected):
        container_request(_ctr(limits), CFG)


def test_warnings_name_each_container_once() -> None:
    pod = _pod(
        _ctr({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "101"}, "a"),
        _ctr({"hygon.com/dcunum": "1", "hygon.com/dcucores": "200"}, "b"),
    )
    pod["spec"]["initContainers"] = [_ctr({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "110"}, "init")]
    warnings = list(_admit(pod).warnings)
    assert [w.split(":")[0] for w in warnings] == ['init container "init"', 'container "a"', 'container "b"']


@pytest.mark.parametrize("vendor_name", ["NVIDIA", "DCU", "MLU"])
def test_fit_success_but_core_limit_cant_exceed_100(vendor_name: str) -> None:
    # HAMi nvidia / hygon / cambricon device_test.go TestDevices_Fit "fit success: but core limit can't exceed 100":
    # a 100-count, 1280 MiB, 100-core device; Nums 1, Memreq 512, Coresreq 120 fits with 100 cores recorded
    from vgpu_scheduler.shared.domain.model import (
        MEM_PCT_UNSET,
        ContainerRequest,
        DeviceInfo,
        NodeInventory,
        PodConstraints,
        PodRequest,
    )
    from vgpu_scheduler.shared.domain.plan import Decision, plan
    from vgpu_scheduler.shared.domain.scoring import Policies
    from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot

    dev = DeviceInfo("dev-0", 0, 100, 1280, 100, vendor_name, 0, "hami-core", True, vendor=vendor_name)
    inv = NodeInventory(node="n1", vendor=vendor_name, devices=(dev,))
    request = ContainerRequest(nums=1, mem_mib=512, mem_pct=MEM_PCT_UNSET, cores_pct=120, type=vendor_name)
    got = plan(
        PodRequest(containers=(request,), init_count=0),
        PodConstraints(),
        [NodeSnapshot(inv, {})],
        policies=Policies(),
        rules=VENDORS.rules,
    )
    assert isinstance(got, Decision), got
    [[entry]] = got.devices
    assert (entry.uuid, entry.used_mem_mib, entry.used_cores) == ("dev-0", 512, 100)
