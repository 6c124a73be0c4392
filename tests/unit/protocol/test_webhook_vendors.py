"""The webhook with other vendors enabled: they send the pod to our scheduler, edit their containers, validate
their requests; NVIDIA's mutation is byte-identical."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakevendor import FakeVendor
from tests.unit.protocol.test_webhook import ctr, pod
from vgpu_scheduler.shared.domain.model import NvidiaConfig
from vgpu_scheduler.shared.protocol.webhook import MSG_OTHER_SCHEDULER, AdmissionOutcome, apply_patch, mutate_pod
from vgpu_scheduler.shared.vendors.nvidia import NvidiaVendor
from vgpu_scheduler.shared.vendors.registry import Vendors

CFG = NvidiaConfig(overwrite_env=True, gpu_core_policy="force", runtime_class_name="nvidia")
SCHED = "hami-scheduler"
VENDORS = Vendors((NvidiaVendor(CFG), FakeVendor("DCU"), FakeVendor("MLU")))


def _mutate(p: dict[str, Any], vendors: Vendors | None = VENDORS, **kw: Any) -> AdmissionOutcome:
    return mutate_pod(p, cfg=CFG, scheduler_name=SCHED, force_overwrite_default_scheduler=True, vendors=vendors, **kw)


def _after(p: dict[str, Any], outcome: AdmissionOutcome) -> dict[str, Any]:
    assert outcome.allowed, outcome.message
    got: dict[str, Any] = apply_patch(p, outcome.patch_ops)
    return got


@pytest.mark.parametrize(
    "p",
    [
        pod(ctr("a", {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}), ctr("b")),
        pod(ctr("a", {"nvidia.com/gpucores": 20}), init=(ctr("i", {"nvidia.com/priority": 1}),)),
        pod(ctr("a", {"cpu": "1"})),
        pod(ctr("a", {"nvidia.com/gpu": 1}), scheduler="other"),
    ],
)
def test_nvidia_mutation_is_byte_identical_with_vendors_enabled(p: dict[str, Any]) -> None:
    assert _mutate(p) == _mutate(p, vendors=None)


def test_a_vendor_container_sends_the_pod_to_our_scheduler_and_is_edited() -> None:
    p = pod(ctr("a", {"dcu.com/num": 1}), ctr("b"))
    got = _after(p, _mutate(p))
    assert got["spec"]["schedulerName"] == SCHED
    a, b = got["spec"]["containers"]
    assert {"name": "DCU_VISIBLE", "value": "1"} in a["env"]
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"} in a["env"]  # NVIDIA's edit of a non-GPU container
    assert "DCU_VISIBLE" not in str(b.get("env"))
    assert "runtimeClassName" not in got["spec"]  # NVIDIA's runtime class only for NVIDIA containers


def test_without_the_vendor_enabled_the_pod_is_not_ours() -> None:
    p = pod(ctr("a", {"dcu.com/num": 1}))
    got = _after(p, _mutate(p, vendors=None))
    assert got["spec"]["schedulerName"] == "default-scheduler"


def test_an_init_container_of_another_vendor_counts_too() -> None:
    p = pod(ctr("a"), init=(ctr("i", {"mlu.com/num": 1}),))
    got = _after(p, _mutate(p))
    assert got["spec"]["schedulerName"] == SCHED
    assert {"name": "MLU_VISIBLE", "value": "1"} in got["spec"]["initContainers"][0]["env"]


def test_a_container_asking_two_vendors_gets_both_edits() -> None:
    p = pod(ctr("a", {"nvidia.com/gpu": 1, "dcu.com/num": 1}))
    got = _after(p, _mutate(p))
    env = got["spec"]["containers"][0]["env"]
    assert {"name": "DCU_VISIBLE", "value": "1"} in env
    assert {"name": "GPU_CORE_UTILIZATION_POLICY", "value": "force"} in env
    assert got["spec"]["runtimeClassName"] == "nvidia"


def test_bad_values_of_every_vendor_are_denied_together() -> None:
    p = pod(ctr("a", {"dcu.com/num": "-1"}), ctr("b", {"nvidia.com/gpumem": "20Gi", "mlu.com/mem": "x"}))
    outcome = _mutate(p)
    assert not outcome.allowed
    assert "dcu.com/num" in outcome.message
    assert "nvidia.com/gpumem" in outcome.message
    assert "mlu.com/mem" in outcome.message


def test_a_privileged_container_in_a_vendor_pod_is_denied() -> None:
    p = pod(ctr("a", {"dcu.com/num": 1}), ctr("root", securityContext={"privileged": True}))
    outcome = _mutate(p)
    assert not outcome.allowed
    assert outcome.message == "container root is privileged"


def test_another_schedulers_vendor_pod_is_left_alone() -> None:
    p = pod(ctr("a", {"dcu.com/num": 1}), scheduler="volcano")
    outcome = _mutate(p)
    assert outcome.allowed and outcome.message == MSG_OTHER_SCHEDULER and not outcome.patch_ops


def test_a_vendor_pod_with_a_node_assigned_is_denied() -> None:
    p = pod(ctr("a", {"mlu.com/num": 1}), nodeName="n1")
    outcome = _mutate(p)
    assert not outcome.allowed and outcome.message == "pod has node assigned"
