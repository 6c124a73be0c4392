"""Huawei Ascend (shared/vendors/ascend/): HAMi's ``pkg/device/ascend`` tests restated, plus our own edge cases.

HAMi's cases come from ``device_test.go``, ``vnpu_test.go`` and ``device_910c_pairing_test.go``; each test names the
Go test it restates. Fit cases drive the real scheduling core (``plan``) with the vendor's rules.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import pytest

from tests.builders import pod
from vgpu_scheduler.shared.codec.resources import ResourceRequestError
from vgpu_scheduler.shared.domain.model import (
    EMPTY_REQUEST,
    MEM_PCT_UNSET,
    ContainerDevice,
    ContainerRequest,
    DeviceInfo,
    DeviceUsage,
    NodeInventory,
    PodConstraints,
    Reason,
)
from vgpu_scheduler.shared.domain.plan import Decision, Failure, plan
from vgpu_scheduler.shared.domain.scoring import Policies
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.domain.vendor import RuleSet
from vgpu_scheduler.shared.errors import ConfigError, DecodeError
from vgpu_scheduler.shared.vendors import ascend
from vgpu_scheduler.shared.vendors.ascend import AscendVendor, ChipConfig, Template, build
from vgpu_scheduler.shared.vendors.base import NodeLockKind
from vgpu_scheduler.shared.vendors.registration import (
    DecodeFailure,
    Invalid,
    NodeView,
    NotRegistered,
    Registered,
    Unregistered,
)
from vgpu_scheduler.shared.vendors.registry import Vendors

VENDORS = {v.name: v for v in build(None)}
A910A = VENDORS["Ascend910A"]
A910C = VENDORS["Ascend910C"]
A310P = VENDORS["Ascend310P"]
NOW = datetime(2025, 6, 1, 12, 0, 0)

# The 910A entry of HAMi's tests (device_test.go), identical to the chart's default.
TEMPLATES_910A = (
    Template("vir02", 2184, 2),
    Template("vir04", 4369, 4),
    Template("vir08", 8738, 8),
    Template("vir16", 17476, 16),
)


def chip910a(**kw: Any) -> AscendVendor:
    fields: dict[str, Any] = {
        "common_word": "Ascend910A",
        "chip_name": "910A",
        "resource_name": "huawei.com/Ascend910A",
        "resource_memory_name": "huawei.com/Ascend910A-memory",
        "resource_core_name": "huawei.com/Ascend910A-core",
        "memory_allocatable": 32768,
        "memory_capacity": 32768,
        "ai_core": 30,
        "templates": TEMPLATES_910A,
    }
    fields.update(kw)
    return AscendVendor(ChipConfig(**fields))


def ctr(
    limits: Mapping[str, Any] | None = None, requests: Mapping[str, Any] | None = None, **kw: Any
) -> dict[str, Any]:
    res: dict[str, Any] = {}
    if limits is not None:
        res["limits"] = dict(limits)
    if requests is not None:
        res["requests"] = dict(requests)
    return {"name": "main", "resources": res, **kw}


# ------------------------------------------------------------------------------------------------------------
# The device-config section (Test_InitDevices, TestVNPUModeConfig, TestVNPUModeRejectsInvalidConfig)
# ------------------------------------------------------------------------------------------------------------


def test_default_section_is_the_charts_chip_list() -> None:
    assert ascend.SECTION == "vnpus"
    assert [v.name for v in build(None)] == [
        "Ascend910A",
        "Ascend910B2",
        "Ascend910B3",
        "Ascend910B4-1",
        "Ascend910B4",
        "Ascend310P",
        "Ascend910C",
    ]
    assert [v.name for v in build({})] == list(VENDORS)
    b2 = VENDORS["Ascend910B2"].chip
    assert (b2.memory_allocatable, b2.memory_capacity, b2.ai_core, b2.ai_cpu) == (65536, 65536, 24, 6)
    assert [t.name for t in b2.templates] == ["vir03_1c_8g", "vir06_1c_16g", "vir12_3c_32g"]
    assert (A310P.chip.memory_allocatable, A310P.chip.memory_capacity) == (21527, 24576)


def test_keys_are_built_from_the_common_word() -> None:
    # Test_InitDevices
    v = A910A
    assert v.register_key == "hami.io/node-register-Ascend910A"
    assert v.use_uuid_key == "hami.io/use-Ascend910A-uuid"
    assert v.no_use_uuid_key == "hami.io/no-use-Ascend910A-uuid"
    assert v.handshake_key == "hami.io/node-handshake-Ascend910A"
    assert v.to_allocate_key == "hami.io/Ascend910A-devices-to-allocate"
    assert v.allocated_key == "hami.io/Ascend910A-devices-allocated"
    assert v.runtime_key == "huawei.com/Ascend910A"
    assert v.node_lock is NodeLockKind.HAMI
    r = v.resources
    assert (r.count, r.memory, r.cores) == (
        "huawei.com/Ascend910A",
        "huawei.com/Ascend910A-memory",
        "huawei.com/Ascend910A-core",
    )


def test_templates_are_sorted_by_memory() -> None:
    (v,) = build(
        [
            {
                "commonWord": "AscendX",
                "memoryAllocatable": 100,
                "templates": [{"name": "big", "memory": 80}, {"name": "small", "memory": 10}],
            }
        ]
    )
    assert [t.name for t in v.chip.templates] == ["small", "big"]
    assert v.chip.resource_name == "huawei.com/AscendX"
    assert v.chip.resource_memory_name == "huawei.com/AscendX-memory"
    assert v.chip.memory_capacity == 100


def test_mapping_shape_with_global_keys() -> None:
    vendors = build(
        {
            "hamiVnpuMode": "template",
            "hamiVnpuCore": True,
            "overwriteEnv": True,
            "runtimeClassName": "ascend",
            "configs": [{"commonWord": "Ascend910B3", "memoryAllocatable": 65536, "overwriteEnv": False}],
        }
    )
    assert [(v.chip.overwrite_env, v.chip.runtime_class_name) for v in vendors] == [(False, "ascend")]
    assert build({"configs": []}) == ()
    assert all(v.chip.overwrite_env for v in build({"overwriteEnv": True}))


@pytest.mark.parametrize("mode", ["", "template", None])
def test_template_mode_is_accepted(mode: str | None) -> None:
    # TestVNPUModeConfig: default, empty, template, "template overrides legacy"
    assert len(build({"hamiVnpuMode": mode})) == len(VENDORS)
    assert len(build({"hamiVnpuMode": "template", "hamiVnpuCore": True})) == len(VENDORS)
    assert len(build({"hamiVnpuCore": False})) == len(VENDORS)


@pytest.mark.parametrize(
    ("section", "message"),
    [
        # HAMi accepts this mode (TestVNPUModeConfig "ENPU", "case and whitespace"); we do not implement eNPU
        ({"hamiVnpuMode": " ENPU "}, "vnpus.hamiVnpuMode: 'enpu' is not supported"),
        # TestVNPUModeRejectsInvalidConfig
        ({"hamiVnpuMode": "enup"}, "vnpus.hamiVnpuMode: must be template"),
        ({"hamiVnpuMode": False}, "vnpus.hamiVnpuMode: expected a string, got False"),
        ({"hamiVnpuMode": ["enpu"]}, "vnpus.hamiVnpuMode: expected a string"),
        ({"enpu": True}, "vnpus.enpu: unknown key"),
        ({"hamiVnpuMdoe": "enpu"}, "vnpus.hamiVnpuMdoe: unknown key"),
        # our own checks
        ({"configs": {}}, "vnpus.configs: expected a list of chip entries, got dict"),
        ([{"commonWord": "Ascend910A"}], "vnpus[0].memoryAllocatable: expected the MiB of a whole NPU"),
        ([{"commonWord": "", "memoryAllocatable": 1}], "vnpus[0].commonWord: expected a name"),
        ([{"commonWord": "a b", "memoryAllocatable": 1}], "vnpus[0].commonWord: expected a name"),
        (
            [{"commonWord": "A", "memoryAllocatable": "3"}],
            "vnpus[0].memoryAllocatable: expected a whole number, got '3'",
        ),
        ([{"commonWord": "A", "memoryAllocatable": 8, "memoryCapacity": 4}], "vnpus[0].memoryCapacity: 4 is less"),
        ([{"commonWord": "A", "memoryAllocatable": 8, "topologyPairs": []}], "vnpus[0].topologyPairs: unknown key"),
        ([{"commonWord": "A", "memoryAllocatable": 8, "superPod": "yes"}], "vnpus[0].superPod: expected true or false"),
        (
            [{"commonWord": "A", "memoryAllocatable": 8, "templates": [{"name": "t", "memory": 9}]}],
            "vnpus[0].templates: 't' has 9 MiB, more than memoryCapacity 8",
        ),
        (
            [{"commonWord": "A", "memoryAllocatable": 8, "templates": [{"memory": 4}]}],
            "vnpus[0].templates[0].name: a template needs a name",
        ),
        (
            [{"commonWord": "A", "memoryAllocatable": 8, "templates": [{"name": "t", "memory": 0}]}],
            "vnpus[0].templates[0].memory: must be at least 1, got 0",
        ),
        (
            # HAMi's own Fit test config lists Ascend910B4 twice (910B4 and 910B4-1)
            [
                {"commonWord": "Ascend910B4", "memoryAllocatable": 1},
                {"commonWord": "Ascend910B4", "memoryAllocatable": 2},
            ],
            "vnpus[1].commonWord: 'Ascend910B4' is already configured by vnpus[0]",
        ),
        (3, "vnpus: expected a mapping, got int"),
    ],
)
def test_bad_sections_name_the_key(section: object, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        build(section)
    assert message in str(e.value)


# ------------------------------------------------------------------------------------------------------------
# Requests (Test_GenerateResourceRequests, Test_GenerateResourceRequestsFactor, trimMemory)
# ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mib", "want"),
    [
        (0, (2184, "vir02")),
        (2184, (2184, "vir02")),
        (2185, (4369, "vir04")),
        (8738, (8738, "vir08")),
        (17477, (32768, "")),
        (20000, (32768, "")),
        (32768, (32768, "")),
        (32769, (0, "")),
        (40000, (0, "")),
    ],
)
def test_trim_memory_rounds_up_to_a_template_then_the_whole_card(mib: int, want: tuple[int, str]) -> None:
    assert A910A.chip.trim_memory(mib) == want


def test_trim_memory_of_the_310p_whole_card_is_memory_allocatable() -> None:
    assert A310P.chip.trim_memory(12289) == (21527, "")
    assert A310P.chip.trim_memory(24576) == (21527, "")
    assert A310P.chip.trim_memory(24577) == (0, "")


def test_request_without_resources_is_empty() -> None:
    assert chip910a().container_request(ctr({}, {}), "c") == EMPTY_REQUEST


def test_request_with_template_memory() -> None:
    # Test_GenerateResourceRequests "resourcename and resourcememoryname set" (with 1 NPU; see the next test)
    got = chip910a().container_request(ctr({"huawei.com/Ascend910A": "1", "huawei.com/Ascend910A-memory": "8000"}), "c")
    assert got == ContainerRequest(nums=1, mem_mib=8738, mem_pct=MEM_PCT_UNSET, cores_pct=0, type="Ascend910A")


def test_vnpu_slice_on_several_npus_is_refused() -> None:
    # HAMi's GenerateResourceRequests gives {2, 8738}, but its MutateAdmission denies the pod ("vNPU nor supported
    # for multiple devices"): refused here at every layer
    with pytest.raises(ResourceRequestError) as e:
        chip910a().container_request(ctr({"huawei.com/Ascend910A": 2, "huawei.com/Ascend910A-memory": 8738}), "c")
    assert "a vNPU slice (8738 MiB) is a single-device request" in str(e.value)


def test_whole_cards_on_several_npus() -> None:
    # Test_GenerateResourceRequests "resourcememoryname don't set": 100 % of each card
    v = chip910a()
    got = v.container_request(ctr({"huawei.com/Ascend910A": "2"}, {"huawei.com/Ascend910A": "2"}), "c")
    assert got == ContainerRequest(nums=2, mem_mib=0, mem_pct=100, cores_pct=0, type="Ascend910A")
    # what the webhook writes for them (memoryAllocatable) is accepted too
    got = v.container_request(ctr({"huawei.com/Ascend910A": 2, "huawei.com/Ascend910A-memory": 32768}), "c")
    assert (got.nums, got.mem_mib) == (2, 32768)


def test_requests_are_read_when_limits_lack_the_resource() -> None:
    got = chip910a().container_request(ctr({}, {"huawei.com/Ascend910A": 1, "huawei.com/Ascend910A-memory": 4000}), "c")
    assert (got.nums, got.mem_mib) == (1, 4369)


@pytest.mark.parametrize(("factor", "want"), [(10, 2184), (100, 17476), (0, 2184)])
def test_memory_factor_scales_before_the_template(factor: int, want: int) -> None:
    # Test_GenerateResourceRequestsFactor: memory 128 × factor
    v = chip910a(memory_factor=factor)
    got = v.container_request(ctr({"huawei.com/Ascend910A": "1", "huawei.com/Ascend910A-memory": "128"}), "c")
    assert got == ContainerRequest(nums=1, mem_mib=want, mem_pct=MEM_PCT_UNSET, cores_pct=0, type="Ascend910A")


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        # Test_MutateAdmission "resourcememoryname is invalid" (40000 > memoryCapacity 32768)
        (
            {"huawei.com/Ascend910A": "1", "huawei.com/Ascend910A-memory": "40000"},
            "huawei.com/Ascend910A-memory: 40000 MiB is more than one Ascend910A holds (memoryCapacity 32768 MiB)",
        ),
        (
            {"huawei.com/Ascend910A": "1", "huawei.com/Ascend910A-memory": "16Gi"},
            'huawei.com/Ascend910A-memory is in MiB: "16Gi" would be 17179869184; did you mean 16384?',
        ),
        (
            {"huawei.com/Ascend910A": "1.5"},
            'huawei.com/Ascend910A must be a whole number: "1.5" is 1.5; did you mean 2?',
        ),
        ({"huawei.com/Ascend910A": "-1"}, 'huawei.com/Ascend910A cannot be negative: got "-1"'),
        ({"huawei.com/Ascend910A": "two"}, 'huawei.com/Ascend910A: "two" is not a number'),
        ({"huawei.com/Ascend910A": "1Ki"}, "huawei.com/Ascend910A counts NPUs and takes no unit"),
        (
            {"huawei.com/Ascend910A-memory": "4000"},
            "huawei.com/Ascend910A-memory needs huawei.com/Ascend910A, the number of NPUs",
        ),
        ({"huawei.com/Ascend910A": "0", "huawei.com/Ascend910A-memory": "4000"}, "huawei.com/Ascend910A is 0 but"),
        ({"huawei.com/Ascend910A": "1", "huawei.com/Ascend910A-memory": "0"}, "huawei.com/Ascend910A-memory is 0"),
        # a soft-split request (it names the core resource) reads memory as written: within memoryCapacity
        (
            {"huawei.com/Ascend910A": "1", "huawei.com/Ascend910A-memory": "40000", "huawei.com/Ascend910A-core": "10"},
            "huawei.com/Ascend910A-memory: 40000 MiB is more than one Ascend910A holds",
        ),
        (
            {"huawei.com/Ascend910A": "2", "huawei.com/Ascend910A-memory": "8000", "huawei.com/Ascend910A-core": "10"},
            "a soft-split slice (8000 MiB) is a single-device request, but 2 NPUs are asked for",
        ),
    ],
)
def test_bad_requests_are_refused_with_the_reason(limits: Mapping[str, Any], message: str) -> None:
    with pytest.raises(ResourceRequestError) as e:
        chip910a().container_request(ctr(limits), "spec.containers[0]")
    assert message in str(e.value)
    assert str(e.value).startswith('container "main": ')


def test_every_problem_of_a_container_is_listed() -> None:
    with pytest.raises(ResourceRequestError) as e:
        chip910a().container_request(ctr({"huawei.com/Ascend910A": "x", "huawei.com/Ascend910A-memory": "-3"}), "c")
    assert len(e.value.problems) == 2


def test_core_zero_is_the_hard_split() -> None:
    # Test_MutateAdmission_HardSplitCoreRejected "hard split with core=0 is allowed"
    got = chip910a().container_request(
        ctr({"huawei.com/Ascend910A": 1, "huawei.com/Ascend910A-memory": 8738, "huawei.com/Ascend910A-core": 0}), "c"
    )
    assert (got.mem_mib, got.cores_pct) == (8738, 0)


def test_core_alone_needs_a_count() -> None:
    with pytest.raises(ResourceRequestError, match=r"needs huawei\.com/Ascend910A"):
        chip910a().container_request(ctr({"huawei.com/Ascend910A-core": 0}), "c")


def test_910c_counts_come_in_modules() -> None:
    assert A910C.container_request(ctr({"huawei.com/Ascend910C": 1}), "c").nums == 2
    assert A910C.container_request(ctr({"huawei.com/Ascend910C": 4}), "c").nums == 4
    with pytest.raises(ResourceRequestError, match="ask for 1 \\(one module\\) or an even number, not 3"):
        A910C.container_request(ctr({"huawei.com/Ascend910C": 3}), "c")


def test_manages_names_any_of_the_chip_resources() -> None:
    assert A910A.manages(ctr({"huawei.com/Ascend910A-memory": 1}))
    assert A910A.manages(ctr(None, {"huawei.com/Ascend910A": 1}))
    assert not A910A.manages(ctr({"huawei.com/Ascend910B3": 1}))
    assert not A910A.manages({"name": "x"})


# ------------------------------------------------------------------------------------------------------------
# MutateAdmission (Test_MutateAdmission, Test_MutateAdmission910C)
# ------------------------------------------------------------------------------------------------------------


def test_mutate_leaves_a_container_without_npus_alone() -> None:
    c = ctr({})
    assert chip910a().mutate_container(c, "c") is False
    assert "env" not in c


def test_mutate_with_overwrite_env_hides_npus_from_other_containers() -> None:
    v = chip910a(overwrite_env=True)
    c = ctr({"cpu": "1"})
    assert v.mutate_container(c, "c") is False
    assert c["env"] == [{"name": "ASCEND_VISIBLE_DEVICES", "value": ""}]
    assert v.mutate_container(c, "c") is False
    assert len(c["env"]) == 1


def test_mutate_writes_the_template_memory() -> None:
    # Test_MutateAdmission "not within the template scope, but smaller than MemoryCapacity": 20000 → whole card
    c = ctr(
        {"huawei.com/Ascend910A": "1", "huawei.com/Ascend910A-memory": "20000"},
        {"huawei.com/Ascend910A-memory": "20000"},
    )
    assert chip910a().mutate_container(c, "c") is True
    assert c["resources"]["limits"]["huawei.com/Ascend910A-memory"] == "32768"
    assert c["resources"]["requests"]["huawei.com/Ascend910A-memory"] == "32768"
    c = ctr({"huawei.com/Ascend910A": "1", "huawei.com/Ascend910A-memory": "3000"})
    assert chip910a().mutate_container(c, "c") is True
    assert c["resources"]["limits"]["huawei.com/Ascend910A-memory"] == "4369"


def test_mutate_writes_memory_allocatable_for_whole_cards() -> None:
    c = ctr({"huawei.com/Ascend910A": "2"})
    assert chip910a().mutate_container(c, "c") is True
    assert c["resources"]["limits"]["huawei.com/Ascend910A-memory"] == "32768"
    assert c["resources"]["requests"]["huawei.com/Ascend910A-memory"] == "32768"


def test_mutate_denies_a_vnpu_slice_on_several_npus() -> None:
    # Test_MutateAdmission "resourcename and resourcememoryname set to resources limits" (2 × 8738): HAMi returns
    # true with the error "vNPU nor supported for multiple devices", i.e. the webhook denies
    with pytest.raises(ResourceRequestError):
        chip910a().mutate_container(ctr({"huawei.com/Ascend910A": "2", "huawei.com/Ascend910A-memory": "8738"}), "c")
    with pytest.raises(ResourceRequestError):
        chip910a().mutate_container(ctr({"huawei.com/Ascend910A": "2", "huawei.com/Ascend910A-memory": "40000"}), "c")


def test_mutate_leaves_memory_alone_with_a_memory_factor() -> None:
    c = ctr({"huawei.com/Ascend910A": "1", "huawei.com/Ascend910A-memory": "128"})
    assert chip910a(memory_factor=10).mutate_container(c, "c") is True
    assert c["resources"]["limits"]["huawei.com/Ascend910A-memory"] == "128"


@pytest.mark.parametrize(("count", "want"), [("1", "2"), ("4", "4")])
def test_mutate_910c_rounds_one_npu_up_to_a_module(count: str, want: str) -> None:
    c = ctr({"huawei.com/Ascend910C": count}, {"huawei.com/Ascend910C": count})
    assert A910C.mutate_container(c, "c") is True
    assert c["resources"]["limits"]["huawei.com/Ascend910C"] == want
    assert c["resources"]["requests"]["huawei.com/Ascend910C"] == want


def test_mutate_910c_denies_an_odd_count() -> None:
    c = ctr({"huawei.com/Ascend910C": "3"}, {"huawei.com/Ascend910C": "3"})
    with pytest.raises(ResourceRequestError, match="Ascend910C"):
        A910C.mutate_container(c, "c")
    assert c["resources"]["limits"]["huawei.com/Ascend910C"] == "3"


# ------------------------------------------------------------------------------------------------------------
# Selectors
# ------------------------------------------------------------------------------------------------------------


def test_uuid_selectors() -> None:
    sel = A910A.selectors({"hami.io/use-Ascend910A-uuid": "a, b", "hami.io/no-use-Ascend910A-uuid": "c"})
    assert (sel.use_uuids, sel.nouse_uuids) == (frozenset({"a", "b"}), frozenset({"c"}))
    assert A910A.selectors({"hami.io/use-Ascend910B3-uuid": "a"}).use_uuids == frozenset()
    assert A910A.selectors({"hami.io/use-Ascend910A-uuid": "  "}).use_uuids == frozenset()
    with pytest.raises(DecodeError, match=r"hami\.io/use-Ascend910A-uuid"):
        A910A.selectors({"hami.io/use-Ascend910A-uuid": ","})


# ------------------------------------------------------------------------------------------------------------
# Registration and liveness (Test_GetNodeDevices, Test_CheckHealth)
# ------------------------------------------------------------------------------------------------------------


def view(annotations: Mapping[str, str], allocatable: Mapping[str, Any] | None = None) -> NodeView:
    return NodeView(name="node-01", resource_version="1", annotations=dict(annotations), allocatable=allocatable or {})


REG = '[{"ID":"GPU-0","Count":4,"Devmem":8738,"Devcore":8,"Type":"huawei.com/Ascend910","Numa":0,"Health":true}]'


def test_registration_is_decoded_case_insensitively() -> None:
    # Test_GetNodeDevices "exist device"
    obs = A910A.observe(view({A910A.register_key: REG}, {"huawei.com/Ascend910A": "4"}), NOW)
    assert isinstance(obs, Registered)
    assert obs.inventory.vendor == "Ascend910A"
    assert obs.inventory.devices == (
        DeviceInfo(
            id="GPU-0",
            index=0,
            count=4,
            devmem_mib=8738,
            devcore=8,
            type="huawei.com/Ascend910",
            numa=0,
            mode="",
            health=True,
            vendor="Ascend910A",
        ),
    )
    assert obs.legacy is True


def test_registration_without_devices_or_annotation() -> None:
    # Test_GetNodeDevices "no device" and "no annotation"
    obs = A910A.observe(view({A910A.register_key: "[]"}), NOW)
    assert isinstance(obs, NotRegistered) and obs.reason is Unregistered.NO_DEVICES
    obs = A910A.observe(view({}), NOW)
    assert isinstance(obs, NotRegistered) and obs.reason is Unregistered.ABSENT
    # another chip's registration does not register this one
    obs = A910A.observe(view({"hami.io/node-register-Ascend910B3": REG}), NOW)
    assert isinstance(obs, NotRegistered) and obs.reason is Unregistered.ABSENT


@pytest.mark.parametrize(
    "value",
    [
        "",  # Test_GetNodeDevices "failed to unmarshal node devices"
        "GPU-0,4,8738,8,Ascend,0,true:",
        '[{"id":"a"},{"id":"a"}]',
        '[{"id":""}]',
        '[{"id":"a","count":"4"}]',
        '[{"id":"a","custominfo":{"NetworkID":"x"}}]',
        '[{"id":"a","custominfo":{"NetworkID":1.5}}]',
        '[{"id":"a","custominfo":[]}]',
    ],
)
def test_bad_registration_is_invalid(value: str) -> None:
    obs = A910A.observe(view({A910A.register_key: value}, {"huawei.com/Ascend910A": "4"}), NOW)
    assert isinstance(obs, Invalid)
    assert (obs.failure, obs.source, obs.value) == (DecodeFailure.REGISTER, A910A.register_key, value)


def test_bad_allocatable_is_invalid() -> None:
    obs = A910A.observe(view({A910A.register_key: REG}, {"huawei.com/Ascend910A": "lots"}), NOW)
    assert isinstance(obs, Invalid) and obs.failure is DecodeFailure.ALLOCATABLE
    assert obs.source == "status.allocatable[huawei.com/Ascend910A]"


@pytest.mark.parametrize(
    ("handshake", "allocatable", "live", "writes"),
    [
        # Test_CheckHealth: "Requesting state" → healthy, nothing to write
        ("Requesting_2128-12-02 00:00:00", "0", True, False),
        # "Unknown state" → healthy, write a fresh Requesting_
        ("Unknown", "0", True, True),
        # "Deleted state": HAMi keeps it as healthy without writing; we answer it with a fresh Requesting_
        ("Deleted", "0", True, True),
        # "Requesting state expired" → not healthy …
        ("Requesting_2024-01-02 00:00:00", "0", False, False),
        # … unless the count resource is still allocatable (our liveness fallback)
        ("Requesting_2024-01-02 00:00:00", "8", True, False),
        # the Ascend plugin's answer, and no value at all
        ("Reported_2025.06.01 11:59:59", "0", True, True),
        (None, "0", True, True),
    ],
)
def test_liveness_follows_the_handshake(handshake: str | None, allocatable: str, live: bool, writes: bool) -> None:
    annotations = {A910A.register_key: REG}
    if handshake is not None:
        annotations[A910A.handshake_key] = handshake
    obs = A910A.observe(view(annotations, {"huawei.com/Ascend910A": allocatable}), NOW)
    if not live:
        assert isinstance(obs, NotRegistered) and obs.reason is Unregistered.HANDSHAKE_TIMEOUT
        return
    assert isinstance(obs, Registered)
    assert obs.handshake == ("Requesting_2025-06-01 12:00:00" if writes else None)


def test_reported_marks_the_plugin_as_a_reporter() -> None:
    annotations = {A910A.register_key: REG, A910A.handshake_key: "Reported_2025.06.01 11:59:59"}
    obs = A910A.observe(view(annotations), NOW)
    assert isinstance(obs, Registered) and obs.reporter


def test_network_ids_and_cordon_reach_the_inventory() -> None:
    value = json.dumps(
        [
            {"id": "a", "count": 1, "custominfo": {"NetworkID": 0}},
            {"id": "b", "index": 1, "count": 1, "custominfo": {"NetworkID": 1.0, "other": "x"}},
            {"id": "c", "index": 2, "count": 1, "custominfo": {"NetworkID": 1}},
        ]
    )
    annotations = {A910A.register_key: value, "hami.io/device-cordon": "c, zz"}
    obs = A910A.observe(view(annotations, {"huawei.com/Ascend910A": "3"}), NOW)
    assert isinstance(obs, Registered)
    inv = obs.inventory
    assert inv.cordoned == frozenset({"c"})
    assert ascend.network_groups(inv, "Ascend910A") == {
        "a": frozenset({"a"}),
        "b": frozenset({"b", "c"}),
        "c": frozenset({"b", "c"}),
    }


def test_network_groups_need_every_npu_to_report_one() -> None:
    value = json.dumps([{"id": "a", "custominfo": {"NetworkID": 0}}, {"id": "b"}])
    obs = A910A.observe(view({A910A.register_key: value}, {"huawei.com/Ascend910A": "2"}), NOW)
    assert isinstance(obs, Registered)
    assert ascend.network_groups(obs.inventory, "Ascend910A") is None


def test_registration_annotations_round_trip() -> None:
    devices = [npu("a", 0, vendor="Ascend910B3"), npu("b", 1, vendor="Ascend910B3", health=False)]
    v = VENDORS["Ascend910B3"]
    annotations = ascend.registration_annotations(devices, network_ids={"a": 3}, reported_at=NOW)
    assert annotations[v.handshake_key] == "Reported_2025.06.01 12:00:00"
    assert json.loads(annotations[v.register_key]) == [
        {"id": "a", "count": 10, "devmem": 65536, "devcore": 20, "type": "Ascend910B3", "health": True,
         "devicevendor": "Ascend910B3", "custominfo": {"NetworkID": 3}},
        {"id": "b", "index": 1, "count": 10, "devmem": 65536, "devcore": 20, "type": "Ascend910B3",
         "devicevendor": "Ascend910B3"},
    ]  # fmt: skip
    capacity = ascend.node_capacity(devices)
    assert capacity == {"huawei.com/Ascend910B3": "20"} == v.node_capacity(devices)
    obs = v.observe(view(annotations, capacity), NOW)
    assert isinstance(obs, Registered)
    assert obs.inventory.devices == tuple(devices)
    assert obs.inventory.pair_scores == {"a": {"a": 1}}
    # the vendor's own method sets the common word on devices registered under another vendor
    mine = v.registration_annotations([npu("a", 0)])
    assert json.loads(mine[v.register_key])[0]["devicevendor"] == "Ascend910B3"


# ------------------------------------------------------------------------------------------------------------
# Pod annotations (Test_PatchAnnotations)
# ------------------------------------------------------------------------------------------------------------


def test_pod_annotations_of_an_allocation() -> None:
    # Test_PatchAnnotations "exist device" (v2.10 writes the entry's memory and cores too, HAMi #2035)
    v = chip910a(memory_capacity=32768)
    devices = ((ContainerDevice("device-0", 8738, 1, "Ascend"),),)
    assert v.pod_annotations(devices) == {
        "hami.io/Ascend910A-devices-to-allocate": "device-0,Ascend,8738,1:;",
        "hami.io/Ascend910A-devices-allocated": "device-0,Ascend,8738,1:;",
        "huawei.com/Ascend910A": '[{"UUID":"device-0","temp":"vir08","memory":8738,"core":1}]',
    }
    # Test_PatchAnnotations "no device"
    assert v.pod_annotations(()) == {}
    assert v.pod_annotations(((), ())) == {}


def test_runtime_info_omits_the_template_of_a_whole_card() -> None:
    devices = ((), (ContainerDevice("a", 32768, 0, "Ascend910A"), ContainerDevice("b", 2000, 0, "Ascend910A")))
    assert A910A.runtime_info(devices) == '[{"UUID":"a","memory":32768},{"UUID":"b","temp":"vir02","memory":2000}]'
    assert A910A.runtime_info(((),)) == "null"


def test_device_list_round_trips() -> None:
    devices = ((), (ContainerDevice("a", 8738, 0, "Ascend910A"), ContainerDevice("b", 8738, 0, "Ascend910A")))
    text = A910A.encode_devices(devices)
    assert text == ";a,Ascend910A,8738,0:b,Ascend910A,8738,0:;"
    assert A910A.decode_devices(text)[:2] == devices
    with pytest.raises(DecodeError, match=r"hami\.io/Ascend910A-devices-allocated"):
        A910A.decode_devices("a,Ascend910A,x,0:;")


# ------------------------------------------------------------------------------------------------------------
# Fit (TestDevices_Fit, TestDevices_Fit_910C, device_910c_pairing_test.go, Test_checkType)
# ------------------------------------------------------------------------------------------------------------


def npu(
    uuid: str,
    index: int = 0,
    *,
    vendor: str = "Ascend910A",
    count: int = 10,
    mem: int = 65536,
    core: int = 20,
    health: bool = True,
) -> DeviceInfo:
    return DeviceInfo(
        id=uuid,
        index=index,
        count=count,
        devmem_mib=mem,
        devcore=core,
        type=vendor,
        numa=0,
        mode="",
        health=health,
        vendor=vendor,
    )


def node(
    devices: Iterable[DeviceInfo],
    usage: Mapping[str, DeviceUsage] | None = None,
    networks: Mapping[str, int] | None = None,
) -> NodeSnapshot:
    devs = tuple(devices)
    members: dict[int, list[str]] = {}
    for uuid, net in (networks or {}).items():
        members.setdefault(net, []).append(uuid)
    scores = {u: dict.fromkeys(ids, 1) for ids in members.values() for u in ids}
    return NodeSnapshot(NodeInventory("node1", devs[0].vendor, devs, pair_scores=scores), dict(usage or {}))


def fit(
    vendor: AscendVendor,
    snapshot: NodeSnapshot,
    request: ContainerRequest,
    annotations: Mapping[str, str] | None = None,
) -> Decision | Failure:
    constraints = PodConstraints(vendor_selectors={vendor.name: vendor.selectors(annotations or {})})
    return plan(pod(request), constraints, [snapshot], policies=Policies(), rules=RuleSet({vendor.name: vendor.rules}))


def chosen(result: Decision | Failure) -> list[str]:
    assert isinstance(result, Decision), result
    return [d.uuid for d in result.devices[0]]


def failed(result: Decision | Failure) -> str:
    assert isinstance(result, Failure), result
    return result.reasons["node1"]


# HAMi's DeviceUsage of the Fit cases: Count 100, Totalcore 100 and the given memory / usage
def card(uuid: str, vendor: str, index: int = 0, *, mem: int = 128) -> DeviceInfo:
    return npu(uuid, index, vendor=vendor, count=100, mem=mem, core=100)


def used(n: int = 0, mem: int = 0, cores: int = 0) -> DeviceUsage:
    return DeviceUsage(used=n, used_mem_mib=mem, used_cores=cores)


HAMI_FIT_CHIPS = ["Ascend910A", "Ascend910B2", "Ascend910B3", "Ascend910B4", "Ascend310P"]


def want(vendor: str, nums: int = 1, mem: int = 0, pct: int = MEM_PCT_UNSET, cores: int = 0) -> ContainerRequest:
    return ContainerRequest(nums=nums, mem_mib=mem, mem_pct=pct, cores_pct=cores, type=vendor)


@pytest.mark.parametrize("cw", HAMI_FIT_CHIPS)
def test_fit_success(cw: str) -> None:
    # TestDevices_Fit "fit success"
    v = VENDORS[cw]
    result = fit(v, node([card("dev-0", cw), card("dev-1", cw, 1)]), want(cw, 1, 64, cores=50))
    # dev-1: equal cards are walked from the last, as HAMi does (difference 8)
    assert chosen(result) == ["dev-1"]
    assert isinstance(result, Decision)
    assert result.devices[0][0] == ContainerDevice("dev-1", 64, 50, cw)


@pytest.mark.parametrize("cw", HAMI_FIT_CHIPS)
@pytest.mark.parametrize(
    ("device", "usage", "request_", "reason"),
    [
        ("mem128", used(), (1, 512, 50), "1/1 CardInsufficientMemory"),
        ("mem1024", used(0, 0, 100), (1, 512, 50), "1/1 CardInsufficientCore"),
        ("mem1280", used(100), (1, 512, 50), "1/1 CardTimeSlicingExhausted"),
        ("mem1280", used(20), (1, 512, 100), "1/1 ExclusiveDeviceAllocateConflict"),
        ("mem1280", used(20, 0, 100), (1, 512, 0), "1/1 CardComputeUnitsExhausted"),
    ],
    ids=["memory", "core", "card-overused", "card-exclusively", "compute-units-exhausted"],
)
# TestDevices_Fit "fit fail: memory not enough", "fit fail: core not enough", "fit fail: card overused",
# "fit fail:  card exclusively", "fit fail:  CardComputeUnitsExhausted"
def test_fit_failures(cw: str, device: str, usage: DeviceUsage, request_: tuple[int, int, int], reason: str) -> None:
    nums, mem, cores = request_
    snapshot = node([card("dev-0", cw, mem=int(device[3:]))], {"dev-0": usage})
    assert failed(fit(VENDORS[cw], snapshot, want(cw, nums, mem, cores=cores))) == reason


@pytest.mark.parametrize("cw", ["Ascend910B2", "Ascend910B3", "Ascend910B4"])
def test_out_of_ai_cores_from_a_pod(cw: str) -> None:
    # TestDevices_Fit "fit fail:  CardComputeUnitsExhausted" asked by a pod: its Coresreq (0) names the core
    # resource, so the memory is the soft split's, as written (512 MiB), and the card's AI cores are all taken
    v = VENDORS[cw]
    snapshot = node([card("dev-0", cw, mem=1280)], {"dev-0": used(20, 0, 100)})
    asked = {f"huawei.com/{cw}": 1, f"huawei.com/{cw}-memory": 512, f"huawei.com/{cw}-core": 0}
    assert failed(fit(v, snapshot, v.container_request(ctr(asked), "c"))) == "1/1 CardComputeUnitsExhausted"
    # without the core resource, HAMi's GenerateResourceRequests rounds 512 MiB up to the smallest vNPU template
    # (8192 MiB or more), which a 1280 MiB card cannot hold, and so do we
    del asked[f"huawei.com/{cw}-core"]
    assert failed(fit(v, snapshot, v.container_request(ctr(asked), "c"))) == "1/1 CardInsufficientMemory"


@pytest.mark.parametrize("cw", HAMI_FIT_CHIPS)
def test_fit_uuid_selectors(cw: str) -> None:
    # TestDevices_Fit "fit fail: user assign use uuid mismatch", "fit fail: user assign no use uuid match"
    v = VENDORS[cw]
    one = node([card("dev-1", cw, mem=1280)])
    use = {f"hami.io/use-{cw}-uuid": "dev-0"}
    assert failed(fit(v, one, want(cw, 1, 512, cores=50), use)) == "1/1 CardUuidMismatch"
    nouse = {f"hami.io/no-use-{cw}-uuid": "dev-0"}
    zero = node([card("dev-0", cw, mem=1280)])
    assert failed(fit(v, zero, want(cw, 1, 512, cores=50), nouse)) == "1/1 CardUuidMismatch"
    # another chip's selector does not apply
    other = {"hami.io/use-AscendOther-uuid": "dev-0"}
    assert chosen(fit(v, one, want(cw, 1, 512, cores=50), other)) == ["dev-1"]


@pytest.mark.parametrize("cw", HAMI_FIT_CHIPS)
def test_fit_clamps_cores_above_100(cw: str) -> None:
    # TestDevices_Fit "fit fail: core limit out of range" as of v2.10.0, whose Fit clamps to 100 (the stored
    # development-branch test refuses it: test_ascend_hami_core.py test_core_over_100_is_scheduled_as_100_…)
    result = fit(VENDORS[cw], node([card("dev-0", cw, mem=1280)]), want(cw, 1, 512, cores=120))
    assert isinstance(result, Decision)
    assert result.devices[0][0].used_cores == 100


@pytest.mark.parametrize("cw", HAMI_FIT_CHIPS)
def test_fit_memory_percentage(cw: str) -> None:
    # TestDevices_Fit "fit success:  memory percentage"
    snapshot = node([card("dev-0", cw, mem=1280)], {"dev-0": used(20, 0, 10)})
    result = fit(VENDORS[cw], snapshot, want(cw, 1, 0, pct=10, cores=20))
    assert isinstance(result, Decision)
    assert result.devices[0][0] == ContainerDevice("dev-0", 128, 20, cw)


@pytest.mark.parametrize("cw", HAMI_FIT_CHIPS)
def test_fit_too_few_cards(cw: str) -> None:
    # TestDevices_Fit "AllocatedCardsInsufficientRequest" asks 2 of 1 card; our core says NodeInsufficientDevice
    # for that before looking at the cards, so the case is restated with a second card that cannot serve
    v = VENDORS[cw]
    assert failed(fit(v, node([card("dev-0", cw, mem=1280)]), want(cw, 2, 512, cores=20))) == "NodeInsufficientDevice"
    snapshot = node([card("dev-0", cw, mem=1280), card("dev-1", cw, 1, mem=128)], {"dev-0": used(20, 0, 10)})
    assert failed(fit(v, snapshot, want(cw, 2, 512, cores=20))) == (
        "1/2 AllocatedCardsInsufficientRequest, 1/2 CardInsufficientMemory"
    )


def test_whole_card_takes_all_of_its_memory() -> None:
    v = VENDORS["Ascend910B3"]
    snapshot = node([npu("a", 0, vendor=v.name), npu("b", 1, vendor=v.name)], {"a": used(1, 16384)})
    req = v.container_request(ctr({"huawei.com/Ascend910B3": 1}), "c")
    result = fit(v, snapshot, req)
    assert isinstance(result, Decision)
    assert result.devices[0] == (ContainerDevice("b", 65536, 0, v.name),)


def test_template_slices_share_a_card_by_memory() -> None:
    v = VENDORS["Ascend910B3"]
    snapshot = node([npu("a", 0, vendor=v.name)], {"a": used(2, 49152)})
    req = v.container_request(ctr({"huawei.com/Ascend910B3": 1, "huawei.com/Ascend910B3-memory": 10000}), "c")
    assert req.mem_mib == 16384
    result = fit(v, snapshot, req)
    assert isinstance(result, Decision) and result.devices[0] == (ContainerDevice("a", 16384, 0, v.name),)
    req = v.container_request(ctr({"huawei.com/Ascend910B3": 1, "huawei.com/Ascend910B3-memory": 16385}), "c")
    assert failed(fit(v, snapshot, req)) == "1/1 CardInsufficientMemory"


def test_check_type() -> None:
    # Test_checkType: only the chip's own common word
    rules = chip910a().rules
    dev = npu("a")
    assert rules.type_ok(dev, want("Ascend910A"), PodConstraints())
    assert not rules.type_ok(dev, want("Ascend910B"), PodConstraints())
    assert rules.candidate(dev, want("Ascend910A"))
    assert not rules.candidate(npu("b", vendor="Ascend910B3"), want("Ascend910A"))


def test_another_chips_cards_are_not_candidates() -> None:
    snapshot = node([npu("a", vendor="Ascend910B3")])
    assert failed(fit(A910A, snapshot, want("Ascend910A", 1, 2184))) == "NodeInsufficientDevice"


NETWORKS = {"dev-0": 0, "dev-1": 1, "dev-2": 1}


@pytest.mark.parametrize("cw", ["Ascend910A", "Ascend910B2", "Ascend910B3", "Ascend910B4"])
def test_fit_schedules_by_network_id(cw: str) -> None:
    # TestDevices_Fit "fit success. schedule by NetworkID": the two NPUs of network 1
    cards = [card("dev-0", cw, 0), card("dev-1", cw, 1), card("dev-2", cw, 2)]
    result = fit(VENDORS[cw], node(cards, networks=NETWORKS), want(cw, 2, 64, cores=50))
    assert sorted(chosen(result)) == ["dev-1", "dev-2"]


def test_310p_ignores_network_ids() -> None:
    cw = "Ascend310P"
    cards = [card("dev-0", cw, 0), card("dev-1", cw, 1), card("dev-2", cw, 2)]
    assert chosen(fit(A310P, node(cards, networks=NETWORKS), want(cw, 2, 64, cores=50))) == ["dev-2", "dev-1"]
    assert not A310P.rules.selects_sets


def test_network_choice_needs_every_npu_to_report_a_network() -> None:
    cw = "Ascend910B3"
    cards = [card("dev-0", cw, 0), card("dev-1", cw, 1), card("dev-2", cw, 2)]
    partial = {"dev-1": 1, "dev-2": 1}
    assert chosen(fit(VENDORS[cw], node(cards, networks=partial), want(cw, 2, 64))) == ["dev-2", "dev-1"]


def test_network_choice_spills_over_to_the_next_largest_network() -> None:
    # the largest network (2: d3 d4 d5) first, then the next (1: d1 d2) in order of preference (d2, the later)
    cw = "Ascend910B3"
    cards = [card(f"d{i}", cw, i) for i in range(6)]
    nets = {"d0": 0, "d1": 1, "d2": 1, "d3": 2, "d4": 2, "d5": 2}
    assert sorted(chosen(fit(VENDORS[cw], node(cards, networks=nets), want(cw, 4, 64)))) == ["d2", "d3", "d4", "d5"]
    # one NPU: the most preferred candidate, whatever its network (of equal cards, the last)
    assert chosen(fit(VENDORS[cw], node(cards, networks=nets), want(cw, 1, 64))) == ["d5"]


def test_network_choice_skips_busy_npus() -> None:
    cw = "Ascend910B3"
    cards = [card(f"d{i}", cw, i) for i in range(4)]
    nets = {"d0": 0, "d1": 0, "d2": 0, "d3": 1}
    result = fit(VENDORS[cw], node(cards, {"d0": used(100)}, networks=nets), want(cw, 2, 64))
    assert sorted(chosen(result)) == ["d1", "d2"]


C = "Ascend910C"


def c_cards(*indices: int) -> list[DeviceInfo]:
    return [npu(f"dev-{i}", i, vendor=C, count=1, mem=32000) for i in indices]


def test_910c_takes_a_full_module() -> None:
    # TestDevices_Fit_910C: dev-0 and dev-1 form module 0; dev-2 is alone on module 1
    cards = [card("dev-0", C, 0), card("dev-1", C, 1), card("dev-2", C, 2)]
    nets = {"dev-0": 0, "dev-1": 0, "dev-2": 0}
    assert sorted(chosen(fit(A910C, node(cards, networks=nets), want(C, 2, 128, cores=100)))) == ["dev-0", "dev-1"]


@pytest.mark.parametrize("with_network", [True, False])
@pytest.mark.parametrize(
    ("indices", "nums", "fits"),
    [
        ((0, 1, 2, 4, 6), 4, False),  # TestAscend910C_FitPartialAllocationBug
        ((0, 2), 2, False),  # TestAscend910C_FitExactCountBypassBug, ..._WithoutNetworkID_ValidatesPairing
        ((0, 1), 2, True),  # TestAscend910C_FitFullPairSucceeds
        ((0, 2, 4, 6), 4, False),  # TestComputeBestCombination910C_NoFullPairsReturnsEmpty
        ((0, 1, 2, 3, 5), 4, True),
    ],
)
def test_910c_pairing(indices: tuple[int, ...], nums: int, fits: bool, with_network: bool) -> None:
    cards = c_cards(*indices)
    nets = {d.id: 0 for d in cards} if with_network else {}
    result = fit(A910C, node(cards, networks=nets), want(C, nums))
    if not fits:
        assert failed(result) == f"{len(indices)}/{len(indices)} AllocatedCardsInsufficientRequest"
        return
    picked = chosen(result)
    assert len(picked) == nums
    modules = [int(u.split("-")[1]) // 2 for u in picked]
    assert all(modules.count(m) == 2 for m in modules)


def test_910c_module_choice_directly() -> None:
    cands = c_cards(0, 2, 4, 6)
    inv = NodeInventory("n", C, tuple(cands))
    assert A910C.rules.select(cands, 4, inv) is None
    cands = c_cards(3, 2, 0, 1)
    assert [d.id for d in A910C.rules.select(cands, 2, inv) or ()] == ["dev-3", "dev-2"]
    assert A910C.rules.select(cands, 3, inv) is None
    assert [d.id for d in A910C.rules.select(cands, 1, inv) or ()] == ["dev-3"]
    assert A910C.rules.select(cands, 6, inv) is None


def test_910_rules_choose_sets_and_score_nothing() -> None:
    assert all(VENDORS[cw].rules.selects_sets for cw in VENDORS if cw.startswith("Ascend910"))
    inv = NodeInventory("n", C, tuple(c_cards(0, 1)))
    assert A910C.rules.score_node(inv) == 0.0
    assert RuleSet({C: A910C.rules}).score_node(inv) == 0.0


def test_normalize_only_clamps_cores() -> None:
    rules = A910A.rules
    assert rules.normalize(want("Ascend910A", 1, 64, cores=120)) == want("Ascend910A", 1, 64, cores=100)
    same = want("Ascend910A", 1, 64, cores=10)
    assert rules.normalize(same) is same


def test_unhealthy_npus_are_skipped() -> None:
    cw = "Ascend910B3"
    cards = [npu("a", 0, vendor=cw, health=False), npu("b", 1, vendor=cw)]
    assert chosen(fit(VENDORS[cw], node(cards), want(cw, 1, 16384))) == ["b"]
    reasons = fit(VENDORS[cw], node(cards[:1]), want(cw, 1, 16384))
    assert isinstance(reasons, Failure)
    assert reasons.rejections["node1"].counts == {Reason.CARD_NOT_HEALTH: 1}


def test_the_chips_are_vendors_of_the_registry() -> None:
    vendors = Vendors(build(None))
    assert vendors.names == tuple(VENDORS)
    assert vendors.rules.get("Ascend910B3") == VENDORS["Ascend910B3"].rules
    c = ctr({"huawei.com/Ascend910B3": 1})
    assert [v.name for v in vendors.managing(c)] == ["Ascend910B3"]
