"""Moore Threads vendor: HAMi's ``pkg/device/mthreads`` tests restated (``device_test.go``; the index holds no copy at
v2.10.0 (4707fb02): read at the nearest stored versions, device_test.go 46bd7a88, device.go 66868d45; the
``device_cordon_test.go`` of the family, ad358d3a, follows the common cordon rules), plus our own cases: the webhook's
pod edit, the one-GPU-per-pod rule through the core, and the extra pod annotations. Every HAMi case names its test
in a comment."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.unit.vendors.kit import NOW, Fit, Refusal, check_share_usage, ctr, hami_share_refusals, reason, uuids
from vgpu_scheduler.shared.domain.model import (
    MEM_PCT_UNSET,
    ContainerDevice,
    ContainerRequest,
    DeviceInfo,
    DeviceUsage,
    NvidiaConfig,
    PodConstraints,
)
from vgpu_scheduler.shared.domain.plan import Decision
from vgpu_scheduler.shared.errors import ConfigError, DecodeError
from vgpu_scheduler.shared.protocol.jsonpatch import apply_patch
from vgpu_scheduler.shared.protocol.webhook import mutate_pod
from vgpu_scheduler.shared.vendors import mthreads
from vgpu_scheduler.shared.vendors.nvidia import NvidiaVendor
from vgpu_scheduler.shared.vendors.pods import allocation_annotations
from vgpu_scheduler.shared.vendors.registration import (
    DecodeFailure,
    Invalid,
    NodeView,
    NotRegistered,
    Registered,
    Unregistered,
)
from vgpu_scheduler.shared.vendors.registry import Vendors

V = mthreads.build(None)[0]
VENDORS = Vendors((NvidiaVendor(), V))
fit = Fit(VENDORS)
COUNT, MEM, CORE = "mthreads.com/vgpu", "mthreads.com/sgpu-memory", "mthreads.com/sgpu-core"
MT = "Mthreads"


def gpu(uuid: str, *, index: int = 0, count: int = 100, mem: int = 128, core: int = 100) -> DeviceInfo:
    return DeviceInfo(uuid, index, count, mem, core, MT, 0, "", True, vendor=MT)


def req(nums: int = 1, mem: int = 0, pct: int = MEM_PCT_UNSET, cores: int = 0, kind: str = MT) -> ContainerRequest:
    return ContainerRequest(nums=nums, mem_mib=mem, mem_pct=pct, cores_pct=cores, type=kind)


def test_config_section() -> None:
    # the section, enable flag, names, keys and lock (HAMi's LockNode takes none for Moore Threads): test_contract.py
    assert V.resources.memory_unit_mib == 512
    with pytest.raises(ConfigError, match=re.escape("mthreads.resourceCoreName: must not be empty")):
        mthreads.build({"resourceCoreName": ""})


# ---- Test_MutateAdmission ----------------------------------------------------------------------------------------


def test_mutate_admission() -> None:
    # "set to resources limit": 2 GPUs → whole GPUs: 32 cores, 192 units, and the pod annotation
    c = ctr({COUNT: "2", MEM: "2", CORE: "1"})
    assert V.mutate_container(c, "c") is True
    assert (c["resources"]["limits"][CORE], c["resources"]["limits"][MEM]) == ("32", "192")
    # "don't set to count limit": not ours
    assert V.mutate_container(ctr({MEM: "2", CORE: "1"}), "c") is False
    # "don't set to memory limit": one GPU without memory → the whole GPU (16 cores, 96 units)
    c = ctr({COUNT: "1", CORE: "1"})
    assert V.mutate_container(c, "c") is True
    assert (c["resources"]["limits"][CORE], c["resources"]["limits"][MEM]) == ("16", "96")
    # "count less than one" (one GPU, 2 units): ours, unchanged
    c = ctr({COUNT: "1", MEM: "2", CORE: "1"})
    assert V.mutate_container(c, "c") is True and c == ctr({COUNT: "1", MEM: "2", CORE: "1"})
    # "memory no exist legalMemoryslices" (3 units): HAMi returns true with an error, which denies the pod; ours
    # refuses the request with the sizes to choose from
    with pytest.raises(DecodeError, match=re.escape(f"{MEM}: 3 is not an sGPU size of one GPU; use one of 2, 4")):
        V.container_request(ctr({COUNT: "1", MEM: "3", CORE: "1"}), "c")


def _pod(containers: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "d"},
        "spec": {"containers": containers},
    }


def test_the_webhook_edits_the_pod_as_hamis_does() -> None:
    pod = _pod([{**ctr({COUNT: "2"}), "image": "x"}])
    out = mutate_pod(pod, cfg=NvidiaConfig(), scheduler_name="vgpu", force_overwrite_default_scheduler=True,
                     vendors=VENDORS)  # fmt: skip
    assert out.allowed, out.message
    patched = apply_patch(pod, out.patch_ops)
    assert patched["metadata"]["annotations"] == {"mthreads.com/request-gpu-num": "2"}
    assert patched["spec"]["containers"][0]["resources"]["limits"] == {COUNT: "2", CORE: "32", MEM: "192"}
    assert patched["spec"]["schedulerName"] == "vgpu"
    # an illegal sGPU size is denied with the message
    bad = _pod([{**ctr({COUNT: "1", MEM: "3"}), "image": "x"}])
    out = mutate_pod(bad, cfg=NvidiaConfig(), scheduler_name="vgpu", force_overwrite_default_scheduler=True,
                     vendors=VENDORS)  # fmt: skip
    assert not out.allowed and "not an sGPU size" in out.message


# ---- Test_GenerateResourceRequests ------------------------------------------------------------------------------


def test_generate_resource_requests() -> None:
    # "all resources set to limit and request": Memreq 1000 × 512, cores 1
    both = {COUNT: "1", MEM: "64", CORE: "1"}  # 1000 units is no sGPU size of one GPU: HAMi's webhook refuses it
    assert V.container_request(ctr(both, both), "c") == ContainerRequest(1, 64 * 512, MEM_PCT_UNSET, 1, MT)
    # HAMi's own figure (1000 units) passes on more than one GPU, split between them
    assert V.container_request(ctr({COUNT: "2", MEM: "1000", CORE: "2"}), "c") == ContainerRequest(
        2, 1000 * 512 // 2, MEM_PCT_UNSET, 1, MT
    )
    # "all resources don't set to limit, count don't set to request": HAMi no request; ours refuses (no count)
    with pytest.raises(DecodeError, match=re.escape(f"{MEM} needs {COUNT}")):
        V.container_request(ctr(requests={MEM: "1000", CORE: "1"}), "c")
    # "all resources don't set to limit, cores and memory don't set to request": 1 GPU, 100 %, no cores
    assert V.container_request(ctr(requests={COUNT: "1"}), "c") == ContainerRequest(1, 0, 100, 0, MT)
    assert V.container_request(ctr(), "c").empty


# ---- Test_GetNodeDevices -----------------------------------------------------------------------------------------


def node(capacity: dict[str, Any], allocatable: dict[str, Any] | None = None, name: str = "test") -> NodeView:
    return NodeView(name, "1", {}, allocatable if allocatable is not None else capacity, capacity=capacity)


def test_get_node_devices() -> None:
    # "get node device": 1 unit of memory, 1 core → one GPU test-mthreads-0 of 8192 MiB and 16 cores, 100 slots
    got = V.observe(node({MEM: "1", CORE: "1"}), NOW)
    assert isinstance(got, Registered)
    assert got.inventory.devices == (DeviceInfo("test-mthreads-0", 0, 100, 8192, 16, MT, 0, "", True, vendor=MT),)
    # a node of 4 GPUs (64 cores, 4 × 96 units of 512 MiB)
    got = V.observe(node({MEM: "384", CORE: "64"}), NOW)
    assert isinstance(got, Registered)
    assert [(d.id, d.devmem_mib, d.devcore) for d in got.inventory.devices] == [
        (f"test-mthreads-{i}", 49152, 16) for i in range(4)
    ]
    assert V.observe(node({}), None) == NotRegistered(Unregistered.ABSENT)  # type: ignore[arg-type]
    assert V.observe(node({CORE: "0"}), None) == NotRegistered(Unregistered.NO_DEVICES)  # type: ignore[arg-type]
    gone = V.observe(node({MEM: "1", CORE: "16"}, {CORE: "0"}), NOW)
    assert gone == NotRegistered(Unregistered.NO_ALLOCATABLE)
    bad = V.observe(node({CORE: "1.5"}), NOW)
    assert isinstance(bad, Invalid) and bad.failure is DecodeFailure.REGISTER


def test_node_registration_roundtrip() -> None:
    devices = tuple(DeviceInfo(f"n-mthreads-{i}", i, 100, 49152, 16, MT, 0, "", True, vendor=MT) for i in range(2))
    annotations, capacity, labels = V.node_registration(devices)
    assert (annotations, labels) == ({}, {})
    assert capacity == {CORE: "32", MEM: "192", COUNT: "200"}
    got = V.observe(node(capacity, name="n"), NOW)
    assert isinstance(got, Registered) and got.inventory.devices == devices


# ---- Test_PatchAnnotations, Test_checkType ----------------------------------------------------------------------


def test_patch_annotations() -> None:
    # "exist device": the allocated list, mthreads.com/gpu-index "0", predicate-node the node, predicate-time now
    devices = ((ContainerDevice("n1-mthreads-0", 1000, 1, MT),),)
    got = allocation_annotations("n1", devices, (), 1_700_000_000, VENDORS)
    assert got["hami.io/mthreads-vgpu-devices-allocated"] == "n1-mthreads-0,Mthreads,1000,1:;"
    assert "hami.io/mthreads-vgpu-devices-to-allocate" not in got  # HAMi writes none for Moore Threads
    assert got["mthreads.com/gpu-index"] == "0"
    assert got["mthreads.com/predicate-node"] == "n1"
    assert got["mthreads.com/predicate-time"] == "1700000000000000000"
    two = ((), (ContainerDevice("n1-mthreads-2", 0, 0, MT), ContainerDevice("n1-mthreads-3", 0, 0, MT)))
    assert allocation_annotations("n1", two, (), 1, VENDORS)["mthreads.com/gpu-index"] == "2,3"


def test_check_type() -> None:
    # "the same type" / "the different type"
    assert V.rules.type_ok(gpu("d"), req(), PodConstraints())
    assert not V.rules.type_ok(gpu("d"), req(kind="test111"), PodConstraints())


# ---- Test_CustomFilterRule and its effect through Fit ----------------------------------------------------------


def test_custom_filter_rule() -> None:
    rules = mthreads.MTHREADS_RULES
    assert isinstance(rules, mthreads.MthreadsRules)
    # "allocate device": the pod's earlier container is on this GPU
    assert rules.pod_device_ok(gpu("test123"), [ContainerDevice("test123", 0, 0, MT)])
    # "don't allocate device": it is on another one
    assert not rules.pod_device_ok(gpu("test123"), [ContainerDevice("test456", 0, 0, MT)])
    # through the core: the second container follows the first onto its GPU, and cannot go elsewhere
    two = [gpu("dev-0"), gpu("dev-1", index=1)]
    got = fit(two, req(1, 32, cores=10), req(1, 32, cores=10))
    assert uuids(got, 0) == uuids(got, 1) == ["dev-1"]  # the first takes the last of two equal GPUs, as HAMi
    got = fit(two, req(1, 100, cores=10), req(1, 100, cores=10))  # no room left on dev-1 for the second
    assert reason(got) == "1/2 CardInsufficientMemory, 1/2 CardNotFoundCustomFilterRule"


# ---- TestDevices_Fit, TestDevices_AddResourceUsage ----------------------------------------------------------------


def test_fit_success() -> None:
    # "fit success": dev-1 (the last), as HAMi (difference 8)
    got = fit([gpu("dev-0"), gpu("dev-1", index=1)], req(1, 64, cores=50))
    assert isinstance(got, Decision) and got.devices == ((ContainerDevice("dev-1", 64, 50, MT),),)


@pytest.mark.parametrize(
    "case",
    [
        *hami_share_refusals(gpu, req),
        # "fit fail: type mismatch": another family's request is never shown Moore Threads GPUs
        Refusal([gpu("dev-0")], req(1, 512, cores=50, kind="OtherType"), {}, {}, "NodeInsufficientDevice"),
        # "fit fail: user assign use uuid mismatch" / "no use uuid match" (2 GPUs asked, 1 on the node: the core
        # knows first that one GPU cannot serve two)
        Refusal([gpu("dev-1", mem=1280)], req(2, 512, cores=50), {}, {"mthreads.ai/use-gpuuuid": "dev-0"},
                "NodeInsufficientDevice"),
        Refusal([gpu("dev-1", mem=1280)], req(1, 512, cores=50), {}, {"mthreads.ai/use-gpuuuid": "dev-0"},
                "1/1 CardUuidMismatch"),
        Refusal([gpu("dev-0", mem=1280)], req(1, 512, cores=50), {}, {"mthreads.ai/nouse-gpuuuid": "dev-0"},
                "1/1 CardUuidMismatch"),
        # "fit fail:  AllocatedCardsInsufficientRequest" (2 of 1 GPU): the core knows first
        Refusal([gpu("dev-0", mem=1280)], req(2, 512, cores=20), {"dev-0": DeviceUsage(20, 0, 10)}, {},
                "NodeInsufficientDevice"),
    ],
)  # fmt: skip
def test_fit_refusals(case: Refusal) -> None:
    assert fit.refusal(case) == case.expected


def test_fit_cores_above_100_and_memory_percentage() -> None:
    # "fit success: but core limit can't exceed 100": 120 read as 100
    got = fit([gpu("dev-0", mem=1280)], req(1, 512, cores=120))
    assert isinstance(got, Decision) and got.devices[0][0].used_cores == 100
    # "fit success:  memory percentage", TestDevices_AddResourceUsage
    check_share_usage(fit, gpu, req)


def test_fit_cordon() -> None:
    # TestFit_DeviceCordon (the family's cordon test): cordoned skipped, all cordoned → CardCordoned
    two = [gpu("dev-0"), gpu("dev-1", index=1)]
    assert uuids(fit(two, req(1, 64, cores=50), cordoned=frozenset({"dev-0"}))) == ["dev-1"]
    assert reason(fit(two, req(1, 64, cores=50), cordoned=frozenset({"dev-0", "dev-1"}))) == "2/2 CardCordoned"
