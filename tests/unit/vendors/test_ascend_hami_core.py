"""Huawei Ascend's ``hami-core`` soft split: the hami-core cases of HAMi's ``pkg/device/ascend`` tests restated,
plus our own edge cases. Each test names the Go test (and case) it restates.

The index holds no copy of ``pkg/device/ascend`` at v2.10.0 (4707fb02). ``device_test.go`` was read at the stored
version whose ``TestDevices_Fit`` has the hami-core ``ModeNotFit`` cases (HAMi #2029 and #2035, both before
v2.10.0); that copy is of the development branch after v2.10.0 (it also tests the ``hami.io/overwrite-env``
annotations of #2966), so where its cases test a later rule (AI-core percent above 100 refused) the test says so
and follows v2.10.0. ``vnpu_test.go``'s ``TestVNPUModeConfig`` is of the same branch (``hamiVnpuMode``, eNPU):
its mode cases are restated because later charts write that key. ``device.go`` was read at the nearest stored
version with the ``huawei.com/vnpu-mode`` annotation; the node annotation ``hami-vnpu-core`` is what HAMi's
Ascend device plugin writes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pytest

from tests.builders import pod
from tests.unit.protocol.test_webhook import pod as webhook_pod
from tests.unit.vendors.test_ascend import NOW, chip910a, ctr, view
from vgpu_scheduler.shared.codec.resources import ResourceRequestError
from vgpu_scheduler.shared.domain.model import (
    MEM_PCT_UNSET,
    ContainerDevice,
    ContainerRequest,
    DeviceInfo,
    DeviceUsage,
    NodeInventory,
    NvidiaConfig,
    PodConstraints,
)
from vgpu_scheduler.shared.domain.plan import Decision, Failure, plan
from vgpu_scheduler.shared.domain.scoring import Policies
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.domain.vendor import RuleSet
from vgpu_scheduler.shared.errors import ConfigError, DecodeError
from vgpu_scheduler.shared.protocol.webhook import AdmissionOutcome, apply_patch, mutate_pod
from vgpu_scheduler.shared.vendors.ascend import AscendVendor, ChipConfig, Template, build
from vgpu_scheduler.shared.vendors.pods import allocation_annotations
from vgpu_scheduler.shared.vendors.registration import Registered
from vgpu_scheduler.shared.vendors.registry import Vendors

HAMI_CORE = {"huawei.com/vnpu-mode": "hami-core"}
SOFT_NODE = {"hami-vnpu-core": "true"}

# The 910B3 entry of Test_MutateAdmission_VNPUCoreMode / Test_GenerateResourceRequests_VNPUCoreMode
B3 = AscendVendor(
    ChipConfig(
        common_word="Ascend910B3",
        chip_name="910B3",
        resource_name="huawei.com/Ascend910B3",
        resource_memory_name="huawei.com/Ascend910B3-memory",
        resource_core_name="huawei.com/Ascend910B3-core",
        memory_allocatable=32768,
        memory_capacity=32768,
        templates=(Template("vir08", 8738, 8), Template("vir16", 17476, 16)),
    )
)
B3_NO_TEMPLATES = AscendVendor(
    ChipConfig(
        common_word="Ascend910B3",
        chip_name="910B3",
        resource_name="huawei.com/Ascend910B3",
        resource_memory_name="huawei.com/Ascend910B3-memory",
        resource_core_name="huawei.com/Ascend910B3-core",
        memory_allocatable=32768,
        memory_capacity=32768,
    )
)


def b3(count: Any = 1, memory: Any = None, core: Any = None) -> dict[str, Any]:
    limits: dict[str, Any] = {"huawei.com/Ascend910B3": count}
    if memory is not None:
        limits["huawei.com/Ascend910B3-memory"] = memory
    if core is not None:
        limits["huawei.com/Ascend910B3-core"] = core
    return ctr(limits, dict(limits))


# ------------------------------------------------------------------------------------------------------------
# Config (vnpu_test.go TestVNPUModeConfig)
# ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("section", "hami_core"),
    [
        ({}, False),  # "default"
        ({"hamiVnpuMode": ""}, False),  # "empty"
        ({"hamiVnpuMode": "template"}, False),  # "template"
        ({"hamiVnpuMode": "hami-core"}, True),  # "core"
        ({"hamiVnpuMode": "hamiCore"}, True),  # "core alias"
        ({"hamiVnpuCore": True}, True),  # "legacy true" (HAMi v2.10's chart writes this key)
        ({"hamiVnpuCore": False}, False),  # "legacy false"
        ({"hamiVnpuMode": "", "hamiVnpuCore": True}, True),  # "empty with legacy"
        ({"hamiVnpuMode": "template", "hamiVnpuCore": True}, False),  # "template overrides legacy"
        ({"hamiVnpuMode": " Hami-Core "}, True),  # "case and whitespace" (its case is eNPU's, refused below)
        ({"hamiVnpuMode": None, "hamiVnpuCore": True}, True),  # "null with legacy"
        ({"hamiVnpuMode": "hamiCore", "hamiVnpuCore": False}, True),  # "core overrides legacy false"
    ],
)
def test_the_section_sets_every_chips_default_node_mode(section: dict[str, Any], hami_core: bool) -> None:
    vendors = build(section)
    assert vendors
    assert {v.chip.hami_core for v in vendors} == {hami_core}
    configured = build({**section, "configs": [{"commonWord": "Ascend910B3", "memoryAllocatable": 65536}]})
    assert [v.chip.hami_core for v in configured] == [hami_core]


@pytest.mark.parametrize(
    "section",
    [
        {"hamiVnpuMode": "enpu"},  # TestVNPUModeConfig "ENPU"
        {"hamiVnpuMode": " ENPU "},  # "case and whitespace"
        {"hamiVnpuMode": "enpu", "hamiVnpuCore": True},  # "ENPU overrides legacy"
    ],
)
def test_enpu_is_still_refused(section: dict[str, Any]) -> None:
    # HAMi (after v2.10.0) accepts eNPU; this scheduler does not implement it
    with pytest.raises(ConfigError, match="'enpu' is not supported"):
        build(section)


def test_an_invalid_mode_is_refused_whatever_the_legacy_key() -> None:
    # TestVNPUModeRejectsInvalidConfig "invalid mode with legacy"
    with pytest.raises(ConfigError, match=r"vnpus\.hamiVnpuMode: must be template"):
        build({"hamiVnpuMode": "invalid", "hamiVnpuCore": True})


# ------------------------------------------------------------------------------------------------------------
# Requests (Test_GenerateResourceRequests_VNPUCoreMode, Test_GenerateResourceRequests_CoresValidation)
# ------------------------------------------------------------------------------------------------------------


def test_a_core_request_reads_memory_as_written() -> None:
    # Test_GenerateResourceRequests_VNPUCoreMode "parse custom vNPU core and memory resources"
    got = B3.container_request(b3(1, 15360, 10), "c")
    assert got == ContainerRequest(nums=1, mem_mib=15360, mem_pct=MEM_PCT_UNSET, cores_pct=10, type="Ascend910B3")
    # without the core resource the same memory is rounded up to a template (vir16)
    assert B3.container_request(b3(1, 15360), "c").mem_mib == 17476


def test_a_core_request_without_memory_takes_whole_npus() -> None:
    got = B3.container_request(b3(2, core=30), "c")
    assert got == ContainerRequest(nums=2, mem_mib=0, mem_pct=100, cores_pct=30, type="Ascend910B3")


@pytest.mark.parametrize(
    ("core", "accepted"),
    [
        (0, True),  # "cores 0 accepted"
        (50, True),  # "cores 50 accepted"
        (100, True),  # "cores 100 accepted"
        (-1, False),  # "negative cores -1 rejected"
        ("50m", False),  # "fractional cores 50m rejected"
        ("99.1", False),  # "fractional cores 99.1 rejected"
    ],
)
def test_core_percent_is_validated(core: Any, accepted: bool) -> None:
    # Test_GenerateResourceRequests_CoresValidation (HAMi returns an empty request; we refuse with the reason)
    container = ctr({"huawei.com/Ascend910A": 1, "huawei.com/Ascend910A-core": core})
    if accepted:
        got = chip910a().container_request(container, "c")
        assert (got.nums, got.cores_pct) == (1, core)
    else:
        with pytest.raises(ResourceRequestError, match=r"huawei\.com/Ascend910A-core"):
            chip910a().container_request(container, "c")


@pytest.mark.parametrize("core", [101, 150, 200])
def test_core_over_100_is_scheduled_as_100_with_a_warning(core: int) -> None:
    # Test_GenerateResourceRequests_CoresValidation "cores 101/150/200 rejected", TestFit_CoresValidation and
    # TestDevices_Fit "fit fail: core limit out of range": the stored tests are of HAMi's development branch,
    # which refuses them; v2.10.0's Fit clamps them to 100 (test_ascend.py test_fit_clamps_cores_above_100),
    # and we accept them so with a warning (docs/differences.md, difference 23)
    v = chip910a()
    container = ctr({"huawei.com/Ascend910A": 1, "huawei.com/Ascend910A-core": core})
    assert v.container_request(container, "c").cores_pct == core
    assert v.rules.normalize(v.container_request(container, "c")).cores_pct == 100
    (warning,) = v.admission_warnings(container, "containers[0]")
    assert "huawei.com/Ascend910A-core" in warning and "100" in warning, warning


# ------------------------------------------------------------------------------------------------------------
# Webhook (Test_MutateAdmission_VNPUCoreMode, Test_MutateAdmission_HardSplitCoreRejected)
# ------------------------------------------------------------------------------------------------------------


def admit(vendor: AscendVendor, container: dict[str, Any], annotations: Mapping[str, str] | None = None) -> Any:
    p = webhook_pod(container)
    if annotations is not None:
        p["metadata"]["annotations"] = dict(annotations)
    out: AdmissionOutcome = mutate_pod(
        p,
        cfg=NvidiaConfig(),
        scheduler_name="hami-scheduler",
        force_overwrite_default_scheduler=True,
        vendors=Vendors((vendor,)),
    )
    if not out.allowed:
        return out.message
    return apply_patch(p, out.patch_ops)["spec"]["containers"][0]


def test_hami_core_pod_keeps_raw_memory_without_post_start() -> None:
    # Test_MutateAdmission_VNPUCoreMode "vNPU-mode hami-core: keep raw memory without postStart"
    got = admit(B3_NO_TEMPLATES, b3(1, 15360, 20), HAMI_CORE)
    assert got["resources"]["limits"]["huawei.com/Ascend910B3-memory"] == "15360"
    assert got["resources"]["limits"]["huawei.com/Ascend910B3-core"] == 20
    assert "lifecycle" not in got


def test_pod_without_the_mode_gets_its_memory_trimmed() -> None:
    # Test_MutateAdmission_VNPUCoreMode "no vnpu-mode annotation: no postStart, memory trimmed"
    got = admit(B3_NO_TEMPLATES, b3(1, 15360), {})
    assert got["resources"]["limits"]["huawei.com/Ascend910B3-memory"] == "32768"  # no template: the whole NPU
    assert "huawei.com/Ascend910B3-core" not in got["resources"]["limits"]
    assert "lifecycle" not in got


@pytest.mark.parametrize(
    ("core", "hami_core", "refused"),
    [
        ("10", False, True),  # "hard split with core is rejected"
        ("25", False, True),  # "hard split with core over physical is rejected"
        ("0", False, False),  # "hard split with core=0 is allowed"
        (None, False, False),  # "hard split without core is allowed"
        ("10", True, False),  # "hami-core soft split with core is allowed"
    ],
)
def test_core_request_needs_the_hami_core_pod(core: str | None, hami_core: bool, refused: bool) -> None:
    # Test_MutateAdmission_HardSplitCoreRejected
    got = admit(B3, b3(1, 8738, core), HAMI_CORE if hami_core else None)
    if refused:
        assert isinstance(got, str)
        assert f"huawei.com/Ascend910B3-core asks for {core} AI-core percent" in got
        assert "add the pod annotation huawei.com/vnpu-mode: hami-core" in got
    else:
        assert isinstance(got, dict), got


def test_an_unknown_vnpu_mode_is_refused() -> None:
    got = admit(B3, b3(1, 8738), {"huawei.com/vnpu-mode": "hamicore"})
    assert isinstance(got, str)
    assert "huawei.com/vnpu-mode" in got
    with pytest.raises(DecodeError, match="expected hami-core"):
        B3.selectors({"huawei.com/vnpu-mode": "soft"})
    assert B3.selectors({"huawei.com/vnpu-mode": "template"}).mode == ""


def test_several_npus_with_a_soft_slice_are_refused() -> None:
    # HAMi's webhook: "vNPU nor supported for multiple devices" holds for hami-core memory too
    got = admit(B3, b3(2, 15360, 20), HAMI_CORE)
    assert isinstance(got, str)
    assert "a soft-split slice (15360 MiB) is a single-device request, but 2 NPUs are asked for" in got


# ------------------------------------------------------------------------------------------------------------
# Node (the hami-vnpu-core annotation HAMi's Ascend device plugin writes)
# ------------------------------------------------------------------------------------------------------------

REG_B3 = json.dumps(
    [
        {"id": "a", "count": 10, "devmem": 32768, "devcore": 20, "type": "Ascend910B3", "health": True},
        {"id": "b", "index": 1, "count": 10, "devmem": 32768, "devcore": 20, "type": "Ascend910B3", "health": True},
    ]
)


def observed(vendor: AscendVendor, node_annotations: Mapping[str, str]) -> tuple[DeviceInfo, ...]:
    obs = vendor.observe(view({vendor.register_key: REG_B3, **node_annotations}, {"huawei.com/Ascend910B3": "20"}), NOW)
    assert isinstance(obs, Registered)
    return obs.inventory.devices


@pytest.mark.parametrize(
    ("global_core", "annotation", "soft"),
    [
        (False, None, False),  # no annotation: the vnpus section's default
        (True, None, True),
        (False, "true", True),  # the node annotation overrides the default
        (True, "false", False),
        (True, "yes", False),  # only "true" is the soft split, as HAMi reads it
    ],
)
def test_the_node_annotation_decides_the_node_mode(global_core: bool, annotation: str | None, soft: bool) -> None:
    vendor = AscendVendor(B3.chip if not global_core else _with_core(B3.chip))
    devices = observed(vendor, {} if annotation is None else {"hami-vnpu-core": annotation})
    if soft:  # a soft-split NPU is 100 % of its AI cores, shared by percent
        assert {(d.mode, d.devcore) for d in devices} == {("hami-core", 100)}
    else:
        assert {(d.mode, d.devcore) for d in devices} == {("", 20)}


def _with_core(chip: ChipConfig) -> ChipConfig:
    return replace(chip, hami_core=True)


# ------------------------------------------------------------------------------------------------------------
# Fit (TestDevices_Fit: the hami-core cases)
# ------------------------------------------------------------------------------------------------------------

FIT_CHIPS = ["Ascend910A", "Ascend910B2", "Ascend910B3", "Ascend910B4", "Ascend310P"]
VENDORS = {v.name: v for v in build(None)}


def one_card(cw: str, soft: bool) -> NodeSnapshot:
    # HAMi's DeviceUsage of these cases: Count 100, Totalmem 32768, Totalcore 100
    dev = DeviceInfo(
        id="dev-0",
        index=0,
        count=100,
        devmem_mib=32768,
        devcore=100,
        type=cw,
        numa=0,
        mode="hami-core" if soft else "",
        health=True,
        vendor=cw,
    )
    return NodeSnapshot(NodeInventory("node1", cw, (dev,)), {})


def fit(cw: str, snapshot: NodeSnapshot, req: ContainerRequest, annotations: Mapping[str, str]) -> Decision | Failure:
    v = VENDORS[cw]
    constraints = PodConstraints(vendor_selectors={cw: v.selectors(annotations)})
    return plan(pod(req), constraints, [snapshot], policies=Policies(), rules=RuleSet({cw: v.rules}))


def req(cw: str, mem: int = 0, pct: int = MEM_PCT_UNSET, cores: int = 0) -> ContainerRequest:
    return ContainerRequest(nums=1, mem_mib=mem, mem_pct=pct, cores_pct=cores, type=cw)


@pytest.mark.parametrize("cw", FIT_CHIPS)
@pytest.mark.parametrize(
    ("name", "mem", "pct", "cores"),
    [
        ("fit fail: hami-core pod on legacy node (ModeNotFit)", 15360, MEM_PCT_UNSET, 20),
        ("fit fail: whole-card hami-core pod on legacy node (ModeNotFit)", 32768, MEM_PCT_UNSET, 0),
        ("fit fail: memory-less hami-core pod on legacy node (ModeNotFit)", 0, 100, 0),
    ],
)
def test_hami_core_pod_on_a_template_node_is_mode_not_fit(cw: str, name: str, mem: int, pct: int, cores: int) -> None:
    # TestDevices_Fit (the memory-less case's MemPercentagereq 101 is HAMi's "unset"; ours asks 100 %)
    got = fit(cw, one_card(cw, soft=False), req(cw, mem, pct, cores), HAMI_CORE)
    assert isinstance(got, Failure), name
    assert got.reasons["node1"] == "1/1 ModeNotFit"


@pytest.mark.parametrize("cw", FIT_CHIPS)
@pytest.mark.parametrize(
    ("name", "mem", "annotations"),
    [
        ("fit ok: annotation-less pod on hami-core node follows node", 8738, {}),
        ("fit success: whole-card hami-core pod on hami-core node", 32768, HAMI_CORE),
        ("fit success: whole-card legacy pod on hami-core node", 32768, {}),
    ],
)
def test_pods_fit_a_hami_core_node(cw: str, name: str, mem: int, annotations: Mapping[str, str]) -> None:
    # TestDevices_Fit
    got = fit(cw, one_card(cw, soft=True), req(cw, mem), annotations)
    assert isinstance(got, Decision), (name, got)
    assert [d.uuid for d in got.devices[0]] == ["dev-0"]


def test_mode_not_fit_counts_once_out_of_the_chips_npus() -> None:
    # HAMi's GenReason(reason{ModeNotFit: 1}, len(devices)): one count out of every NPU of the chip
    cw = "Ascend910B3"
    devs = tuple(
        DeviceInfo(f"d{i}", i, 10, 65536, 20, cw, 0, "", True, vendor=cw)  # a template node
        for i in range(4)
    )
    got = fit(cw, NodeSnapshot(NodeInventory("node1", cw, devs), {}), req(cw, 16384, cores=10), HAMI_CORE)
    assert isinstance(got, Failure)
    assert got.reasons["node1"] == "1/4 ModeNotFit"


def test_soft_split_npus_are_shared_by_core_percent() -> None:
    cw = "Ascend910B3"
    soft = one_card(cw, soft=True)
    busy = NodeSnapshot(soft.inventory, {"dev-0": DeviceUsage(used=2, used_mem_mib=16384, used_cores=70)})
    assert isinstance(fit(cw, busy, req(cw, 8192, cores=30), HAMI_CORE), Decision)
    too_much = fit(cw, busy, req(cw, 8192, cores=40), HAMI_CORE)
    assert isinstance(too_much, Failure)
    assert too_much.reasons["node1"] == "1/1 CardInsufficientCore"


# ------------------------------------------------------------------------------------------------------------
# Pod annotations (Test_PatchAnnotations_VNPUCoreMode, Test_PatchAnnotations_ZeroCore)
# ------------------------------------------------------------------------------------------------------------


def test_hami_core_runtime_list_has_memory_and_core_but_no_template() -> None:
    # Test_PatchAnnotations_VNPUCoreMode "vNPU-mode patch: check json contains cores and memory instead of template"
    v = AscendVendor(
        ChipConfig(
            common_word="Ascend910B3",
            chip_name="",
            resource_name="huawei.com/Ascend910B3",
            resource_memory_name="huawei.com/Ascend910B3-memory",
            resource_core_name="huawei.com/Ascend910B3-core",
            memory_allocatable=65536,
            memory_capacity=65536,
            templates=(Template("vir05_1c_16g", 16384, 5, 1),),
        )
    )
    devices = ((ContainerDevice("ascend-uuid-1", 8192, 5, "Ascend910B3"),),)
    pod_obj = {"metadata": {"annotations": dict(HAMI_CORE)}}
    got = v.bind_pod_annotations(pod_obj, None, devices, 0)
    assert got == {"huawei.com/Ascend910B3": '[{"UUID":"ascend-uuid-1","memory":8192,"core":5}]'}
    # the same devices of a template pod keep the template
    assert v.bind_pod_annotations({"metadata": {}}, None, devices, 0) == {}
    assert v.runtime_info(devices) == '[{"UUID":"ascend-uuid-1","temp":"vir05_1c_16g","memory":8192,"core":5}]'
    # and /bind writes the hami-core list over the template one
    annos = allocation_annotations("node1", devices, (), 1700000000, Vendors((v,)), pod=pod_obj)
    assert annos["huawei.com/Ascend910B3"] == '[{"UUID":"ascend-uuid-1","memory":8192,"core":5}]'
    assert annos["predicate-time"] == "1700000000"


def test_zero_core_leaves_core_out() -> None:
    # Test_PatchAnnotations_ZeroCore
    v = chip910a(memory_capacity=32768)
    got = v.runtime_info(((ContainerDevice("device-zero-core", 8738, 0, "Ascend910A"),),))
    assert got == '[{"UUID":"device-zero-core","temp":"vir08","memory":8738}]'


# ------------------------------------------------------------------------------------------------------------
# 910C outside a super-pod (Test_MutateAdmission910C_VNPUSplit): the module rule is the super-pod's (HAMi #2005)
# ------------------------------------------------------------------------------------------------------------

C_SPLIT = AscendVendor(
    ChipConfig(
        common_word="Ascend910C",
        chip_name="Ascend910",
        resource_name="huawei.com/Ascend910C",
        resource_memory_name="huawei.com/Ascend910C-memory",
        resource_core_name="huawei.com/Ascend910C-core",
        memory_allocatable=65536,
        memory_capacity=65536,
        templates=(Template("vir05_1c_16g", 16384, 5, 1), Template("vir10_3c_32g", 32768, 10, 3)),
    )
)


def test_910c_split_keeps_one_npu_with_a_slice() -> None:
    # Test_MutateAdmission910C_VNPUSplit "request 1 + vNPU memory slice is not rounded up"
    got = admit(
        C_SPLIT,
        ctr({"huawei.com/Ascend910C": "1", "huawei.com/Ascend910C-memory": "16384"}, {"huawei.com/Ascend910C": "1"}),
    )
    assert got["resources"]["limits"]["huawei.com/Ascend910C"] == "1"
    assert got["resources"]["limits"]["huawei.com/Ascend910C-memory"] == "16384"  # vir05_1c_16g


def test_910c_split_refuses_an_odd_count_fit_could_never_place() -> None:
    # Test_MutateAdmission910C_VNPUSplit "odd NPU count is allowed when the card is split": HAMi v2.10 admits it,
    # but its Fit takes several 910C NPUs as whole modules only (device_910c_pairing_test.go, without superPod),
    # so the pod could never be placed (fixed after v2.10.0, TestAscend910C_FitSplitModeOddRequestSchedulable);
    # here it is refused at admission with the reason
    got = admit(C_SPLIT, ctr({"huawei.com/Ascend910C": "3"}, {"huawei.com/Ascend910C": "3"}))
    assert isinstance(got, str)
    assert "ask for 1 or an even number, not 3" in got
    # Fit takes whole modules with or without superPod (TestAscend910C_FitExactCountBypassBug's node)
    devs = tuple(DeviceInfo(f"dev-{i}", i, 1, 32000, 0, "Ascend910C", 0, "", True, vendor="Ascend910C") for i in (0, 2))
    r = ContainerRequest(nums=2, mem_mib=0, mem_pct=100, cores_pct=0, type="Ascend910C")
    got_fit = plan(
        pod(r), PodConstraints(), [NodeSnapshot(NodeInventory("node1", "Ascend910C", devs), {})],
        policies=Policies(), rules=RuleSet({"Ascend910C": C_SPLIT.rules}),
    )  # fmt: skip
    assert isinstance(got_fit, Failure), got_fit
