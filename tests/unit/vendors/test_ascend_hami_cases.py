"""Huawei Ascend: the remaining cases of HAMi's ``pkg/device/ascend`` tests restated (``device_test.go``,
``device_cordon_test.go``, ``device_910c_pairing_test.go``); the others are in ``test_ascend.py`` and
``test_ascend_hami_core.py``. Each test names the Go test and case it restates.

The index holds no copy of ``pkg/device/ascend`` at v2.10.0 (4707fb02): ``device_test.go`` was read at the stored
version with the hami-core ``ModeNotFit`` cases (a development-branch copy, see ``test_ascend_hami_core.py``),
``device_cordon_test.go`` at ad358d3a (its only stored version), ``device_910c_pairing_test.go`` at 5292c57d. Where
our answer differs on purpose the test says so (docs/vendors/ascend.md lists the differences).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import pytest

from tests.builders import pod
from tests.unit.vendors.test_ascend import chip910a, ctr, view
from tests.unit.vendors.test_ascend_hami_core import admit
from vgpu_scheduler.shared.codec.resources import ResourceRequestError
from vgpu_scheduler.shared.domain.model import (
    EMPTY_REQUEST,
    MEM_PCT_UNSET,
    ContainerDevice,
    ContainerRequest,
    DeviceInfo,
    DeviceUsage,
    NodeInventory,
)
from vgpu_scheduler.shared.domain.plan import Decision, Failure, apply_decision, plan
from vgpu_scheduler.shared.domain.scoring import Policies
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.domain.vendor import RuleSet
from vgpu_scheduler.shared.vendors.ascend import AscendVendor, ChipConfig, Template, build
from vgpu_scheduler.shared.vendors.pods import decode_vendor_constraints
from vgpu_scheduler.shared.vendors.registration import Registered
from vgpu_scheduler.shared.vendors.registry import Vendors

VENDORS = {v.name: v for v in build(None)}
FIT_CHIPS = ["Ascend910A", "Ascend910B2", "Ascend910B3", "Ascend910B4", "Ascend310P"]
NOW = datetime(2025, 6, 1, 12)


def dev(uuid: str, cw: str, index: int = 0, *, mem: int = 1280, health: bool = True, count: int = 100) -> DeviceInfo:
    """HAMi's DeviceUsage of the Fit cases: Count 100, Totalcore 100."""
    return DeviceInfo(uuid, index, count, mem, 100, cw, 0, "", health, vendor=cw)


def fit(
    vendor: AscendVendor,
    devices: tuple[DeviceInfo, ...],
    req: ContainerRequest,
    annotations: Mapping[str, str] | None = None,
    usage: Mapping[str, DeviceUsage] | None = None,
    cordoned: frozenset[str] = frozenset(),
) -> Decision | Failure:
    constraints = decode_vendor_constraints(annotations or {}, Vendors((vendor,)))
    snapshot = NodeSnapshot(NodeInventory("node1", vendor.name, devices, cordoned=cordoned), dict(usage or {}))
    return plan(pod(req), constraints, [snapshot], policies=Policies(), rules=RuleSet({vendor.name: vendor.rules}))


def want(cw: str, nums: int = 1, mem: int = 512, cores: int = 50) -> ContainerRequest:
    return ContainerRequest(nums=nums, mem_mib=mem, mem_pct=MEM_PCT_UNSET, cores_pct=cores, type=cw)


# ------------------------------------------------------------------------------------------------------------
# Test_InitDevices, Test_MutateAdmission*
# ------------------------------------------------------------------------------------------------------------


def test_every_chip_knows_every_chips_count_resource() -> None:
    # Test_InitDevices "multi-chip shares allAscendResourceNames"
    section = {
        "configs": [
            {"commonWord": "Ascend910A", "memoryAllocatable": 32768},
            {"commonWord": "Ascend910B4", "memoryAllocatable": 32768},
        ]
    }
    names = ("huawei.com/Ascend910A", "huawei.com/Ascend910B4")
    assert [v.chip.ascend_resource_names for v in build(section)] == [names, names]
    # Test_InitDevices "test with valid configuration": the keys built from the common word
    a = build(section)[0]
    assert (a.register_key, a.use_uuid_key, a.no_use_uuid_key, a.handshake_key) == (
        "hami.io/node-register-Ascend910A",
        "hami.io/use-Ascend910A-uuid",
        "hami.io/no-use-Ascend910A-uuid",
        "hami.io/node-handshake-Ascend910A",
    )
    assert (a.to_allocate_key, a.allocated_key) == (
        "hami.io/Ascend910A-devices-to-allocate",
        "hami.io/Ascend910A-devices-allocated",
    )


def test_a_container_without_limits_is_not_ours() -> None:
    # Test_MutateAdmission "no set to resources limits"
    c = ctr({})
    assert chip910a().mutate_container(c, "c") is False


@pytest.mark.parametrize(
    ("limits", "memory"),
    [
        ({"huawei.com/Ascend910A": "1", "huawei.com/Ascend910A-memory": "8738"}, "8738"),  # "memory limit set"
        ({"huawei.com/Ascend910A": "1"}, "32768"),  # "count only, no memory limit": whole-card MemoryAllocatable
    ],
)
def test_limits_only_container_gets_the_memory_request(limits: dict[str, str], memory: str) -> None:
    # Test_MutateAdmission_NilRequests
    c: dict[str, Any] = {"name": "main", "resources": {"limits": dict(limits)}}
    assert chip910a().mutate_container(c, "c") is True
    assert c["resources"]["requests"]["huawei.com/Ascend910A-memory"] == memory


def test_an_empty_memory_resource_name_is_never_written() -> None:
    # Test_MutateAdmission_EmptyResourceMemoryName
    v = chip910a(resource_memory_name="", memory_allocatable=0, memory_capacity=0)
    c = ctr({"huawei.com/Ascend910A": "1"})
    assert v.mutate_container(c, "c") is True
    assert "" not in c["resources"]["limits"] and "" not in c["resources"].get("requests", {})


SIBLINGS = ("huawei.com/Ascend910A", "huawei.com/Ascend910B4")


def chip(resource: str) -> AscendVendor:
    return chip910a(
        resource_name=resource,
        resource_memory_name=f"{resource}-memory",
        overwrite_env=True,
        templates=(Template("vir08", 8738, 8),),
        ascend_resource_names=SIBLINGS,
    )


def test_a_sibling_chips_container_keeps_its_devices_visible() -> None:
    # Test_MutateAdmission_OverwriteEnvDoesNotOverrideAscendContainer
    c = ctr({"huawei.com/Ascend910B4": "1", "huawei.com/Ascend910B4-memory": "8192"})
    assert chip("huawei.com/Ascend910A").mutate_container(c, "c") is False
    assert "env" not in c
    # the "requests-only ascend container is not injected" case of Test_MutateAdmission_OverwriteEnvOptOut
    c = ctr(requests={"huawei.com/Ascend910B4": "1"})
    assert chip("huawei.com/Ascend910A").mutate_container(c, "c") is False
    assert "env" not in c


def test_a_non_ascend_container_gets_one_empty_value_after_every_chip() -> None:
    # Test_MutateAdmission_OverwriteEnvInjectsEmptyForNonAscendContainer
    c = ctr({}, env=[{"name": "ASCEND_VISIBLE_DEVICES", "value": "2"}])
    for resource in SIBLINGS:
        assert chip(resource).mutate_container(c, "c") is False
    assert c["env"] == [
        {"name": "ASCEND_VISIBLE_DEVICES", "value": "2"},
        {"name": "ASCEND_VISIBLE_DEVICES", "value": ""},
    ]


def test_the_last_same_name_entry_decides() -> None:
    # Test_MutateAdmission_OverwriteEnvLastWinsInjectsAfterRealValue
    c = ctr({}, env=[{"name": "ASCEND_VISIBLE_DEVICES", "value": ""}, {"name": "ASCEND_VISIBLE_DEVICES", "value": "2"}])
    assert chip("huawei.com/Ascend910A").mutate_container(c, "c") is False
    assert c["env"][-1] == {"name": "ASCEND_VISIBLE_DEVICES", "value": ""}
    assert len(c["env"]) == 3


def test_a_value_from_entry_is_not_an_empty_value() -> None:
    # Test_MutateAdmission_OverwriteEnvIgnoresValueFromEntry
    source = {"configMapKeyRef": {"name": "cm", "key": "devices"}}
    c = ctr({}, env=[{"name": "ASCEND_VISIBLE_DEVICES", "valueFrom": source}])
    assert chip("huawei.com/Ascend910A").mutate_container(c, "c") is False
    assert c["env"][-1] == {"name": "ASCEND_VISIBLE_DEVICES", "value": ""}


C910 = AscendVendor(
    ChipConfig(
        common_word="Ascend910C",
        chip_name="Ascend910",
        resource_name="huawei.com/Ascend910C",
        resource_memory_name="huawei.com/Ascend910C-memory",
        resource_core_name="huawei.com/Ascend910C-core",
        memory_allocatable=65536,
        memory_capacity=65536,
        super_pod=True,
    )
)


@pytest.mark.parametrize(
    ("count", "result"),
    [
        ("1", "2"),  # "910C: request 1 → auto adjust to 2"
        ("3", "ask for 1 (one module) or an even number, not 3"),  # "910C: request 3 → reject (odd number)"
        ("4", "4"),  # "910C: request 4 → valid even number"
    ],
)
def test_910c_counts_in_the_webhook(count: str, result: str) -> None:
    # Test_MutateAdmission910C: limits and requests are both adjusted
    got = admit(C910, ctr({"huawei.com/Ascend910C": count}, {"huawei.com/Ascend910C": count}))
    if isinstance(got, str):
        assert result in got
    else:
        assert got["resources"]["limits"]["huawei.com/Ascend910C"] == result
        assert got["resources"]["requests"]["huawei.com/Ascend910C"] == result


# ------------------------------------------------------------------------------------------------------------
# Test_GenerateResourceRequests_OutOfRangeValues, Test_GenerateResourceRequests_MemoryFactorOverflow
# ------------------------------------------------------------------------------------------------------------

B3 = AscendVendor(
    ChipConfig(
        common_word="Ascend910B3",
        chip_name="",
        resource_name="huawei.com/Ascend910B3",
        resource_memory_name="huawei.com/Ascend910B3-memory",
        resource_core_name="huawei.com/Ascend910B3-core",
        memory_allocatable=65536,
        memory_capacity=65536,
    )
)


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        # "memory requested in bytes exceeds int32 range on soft-partitioning path"
        ({"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-core": "10", "huawei.com/Ascend910B3-memory": "16Gi"},
         "did you mean 16384?"),
        # "memory requested in bytes exceeds int32 range on trim path"
        ({"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-memory": "16Gi"}, "did you mean 16384?"),
        # "negative fractional memory request"
        ({"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-memory": "-1m"}, "cannot be negative"),
        # "negative whole memory request"
        ({"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-memory": "-100"}, "cannot be negative"),
        # "oversized device count exceeds int32 range"
        ({"huawei.com/Ascend910B3": "2200000000"}, "is too large (at most 2147483647)"),
        # "negative core request"
        ({"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-core": "-1"}, "cannot be negative"),
        # "oversized core request exceeds int32 range"
        ({"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-core": "2200000000"}, "is too large"),
    ],
)  # fmt: skip
def test_out_of_range_values_are_refused(limits: dict[str, str], message: str) -> None:
    # Test_GenerateResourceRequests_OutOfRangeValues: HAMi returns an empty request; we refuse with the reason
    with pytest.raises(ResourceRequestError) as e:
        B3.container_request(ctr(limits), "c")
    assert message in str(e.value)


@pytest.mark.parametrize("soft", [True, False], ids=["soft-partitioning path", "trim path"])
def test_memory_that_overflows_after_the_factor_is_refused(soft: bool) -> None:
    # Test_GenerateResourceRequests_MemoryFactorOverflow "scaled memory overflows int32 on …"
    v = chip910a(memory_factor=10)
    limits = {"huawei.com/Ascend910A": "1", "huawei.com/Ascend910A-memory": "300000000"}
    if soft:
        limits["huawei.com/Ascend910A-core"] = "10"
    with pytest.raises(ResourceRequestError, match="3000000000 MiB is more than one Ascend910A holds"):
        v.container_request(ctr(limits), "c")


# ------------------------------------------------------------------------------------------------------------
# TestDevices_LockNode, TestDevices_ReleaseNodeLock, TestDevices_AddResourceUsage
# ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "containers", [[], [{"name": "c", "resources": {"requests": {}}}]], ids=["no containers", "empty requests"]
)
def test_a_pod_asking_nothing_takes_no_lock(containers: list[dict[str, Any]]) -> None:
    # TestDevices_LockNode / TestDevices_ReleaseNodeLock: no Ascend request, no lock (the bind locks a node only
    # for a pod given devices of a vendor with HAMi's lock, and a pod asking nothing gets none)
    v = VENDORS["Ascend310P"]
    assert all(v.container_request(c, "c") == EMPTY_REQUEST for c in containers)


def test_usage_adds_up() -> None:
    # TestDevices_AddResourceUsage "test add resource usage": Used 0 → 1, cores 15 + 50, memory 2000 + 1024
    v = chip910a()
    cw = v.name
    snapshot = NodeSnapshot(
        NodeInventory("node1", cw, (dev("dev-0", cw, mem=8000),)),
        {"dev-0": DeviceUsage(used=0, used_mem_mib=2000, used_cores=15)},
    )
    decision = plan(
        pod(want(cw, 1, 1024, 50)), decode_vendor_constraints({}, Vendors((v,))), [snapshot],
        policies=Policies(), rules=RuleSet({cw: v.rules}),
    )  # fmt: skip
    assert isinstance(decision, Decision)
    after = apply_decision(snapshot, decision).usages[0]
    assert (after.used, after.used_cores, after.used_mem_mib) == (1, 65, 3024)


# ------------------------------------------------------------------------------------------------------------
# TestDevices_Fit: the cases test_ascend.py does not restate
# ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cw", FIT_CHIPS)
def test_fit_type_mismatch(cw: str) -> None:
    # TestDevices_Fit "fit fail: type mismatch": a request of another type finds no device of its family here
    got = fit(VENDORS[cw], (dev("dev-0", cw, mem=128),), want("OtherType"))
    assert isinstance(got, Failure)
    assert got.reasons["node1"] == "NodeInsufficientDevice"  # HAMi: "1/1 CardTypeMismatch" (its Fit gets them)


@pytest.mark.parametrize("cw", FIT_CHIPS)
def test_fit_mutex_policy_rejects_a_used_device(cw: str) -> None:
    # TestDevices_Fit "mutex policy rejects used device"
    got = fit(
        VENDORS[cw], (dev("dev-0", cw, mem=128),), want(cw, 1, 64), {"hami.io/gpu-scheduler-policy": "mutex"},
        {"dev-0": DeviceUsage(used=1)},
    )  # fmt: skip
    assert isinstance(got, Failure)
    assert got.reasons["node1"] == "1/1 ExclusiveDeviceAllocateConflict"


@pytest.mark.parametrize("cw", FIT_CHIPS)
def test_fit_card_not_health(cw: str) -> None:
    # TestDevices_Fit "fit fail: CardNotHealth"
    got = fit(VENDORS[cw], (dev("dev-0", cw, health=False),), want(cw))
    assert isinstance(got, Failure)
    assert got.reasons["node1"] == "1/1 CardNotHealth"


@pytest.mark.parametrize("cw", FIT_CHIPS)
def test_fit_more_cards_than_the_node_has(cw: str) -> None:
    # TestDevices_Fit "fit fail: partial allocation AllocatedCardsInsufficientRequest for multiple cards": 3 of 2
    # cards; HAMi's Fit answers "2/2 AllocatedCardsInsufficientRequest", our core says so before the walk
    got = fit(VENDORS[cw], (dev("dev-0", cw), dev("dev-1", cw, 1)), want(cw, 3, 512, 20))
    assert isinstance(got, Failure)
    assert got.reasons["node1"] == "NodeInsufficientDevice"


# ------------------------------------------------------------------------------------------------------------
# TestFit_DeviceCordon (device_cordon_test.go)
# ------------------------------------------------------------------------------------------------------------

B2 = VENDORS["Ascend910B2"]
REG_B2 = (
    '[{"id":"dev-0","count":100,"devmem":128,"devcore":100,"type":"Ascend910B2","health":true},'
    '{"id":"dev-1","index":1,"count":100,"devmem":128,"devcore":100,"type":"Ascend910B2","health":true}]'
)


def cordon_node(cordon: str | None) -> NodeInventory:
    annotations = {B2.register_key: REG_B2}
    if cordon is not None:
        annotations["hami.io/device-cordon"] = cordon
    obs = B2.observe(view(annotations, {"huawei.com/Ascend910B2": "200"}), NOW)
    assert isinstance(obs, Registered)
    return obs.inventory


def cordon_fit(inv: NodeInventory, usage: Mapping[str, DeviceUsage] | None = None) -> Decision | Failure:
    return fit(B2, inv.devices, want("Ascend910B2", 1, 64), usage=usage, cordoned=inv.cordoned)


def test_cordoned_device_is_skipped() -> None:
    # TestFit_DeviceCordon "cordoned device is skipped, healthy sibling still fits" (annotation "dev-1, ")
    got = cordon_fit(cordon_node("dev-1, "))
    assert isinstance(got, Decision)
    assert [d.uuid for d in got.devices[0]] == ["dev-0"]


def test_all_devices_cordoned() -> None:
    # TestFit_DeviceCordon "all devices cordoned fails with CardCordoned reason"
    got = cordon_fit(cordon_node("dev-0,dev-1"))
    assert isinstance(got, Failure)
    assert got.reasons["node1"] == "2/2 CardCordoned"


def test_running_pods_on_a_cordoned_device_stay() -> None:
    # TestFit_DeviceCordon "running pods on a cordoned device are unaffected"
    usage = {"dev-1": DeviceUsage(used=1, used_mem_mib=64, used_cores=50)}
    got = cordon_fit(cordon_node("dev-1"), usage)
    assert isinstance(got, Decision)
    assert [d.uuid for d in got.devices[0]] == ["dev-0"]
    assert usage["dev-1"] == DeviceUsage(used=1, used_mem_mib=64, used_cores=50)


@pytest.mark.parametrize("cordon", [None, "", "   "], ids=["no annotation", "annotation empty", "whitespace"])
def test_nothing_cordoned(cordon: str | None) -> None:
    # TestFit_DeviceCordon "no annotation or no node info means nothing cordoned": dev-1, the last of equal
    # devices, as HAMi (docs/differences.md, difference 8)
    inv = cordon_node(cordon)
    assert inv.cordoned == frozenset()
    got = cordon_fit(inv)
    assert isinstance(got, Decision)
    assert [d.uuid for d in got.devices[0]] == ["dev-1"]


# ------------------------------------------------------------------------------------------------------------
# device_910c_pairing_test.go: the case test_ascend.py does not restate
# ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("indices", "fits"), [((0, 2), False), ((0, 1), True)])
def test_910c_pairs_without_network_ids(indices: tuple[int, ...], fits: bool) -> None:
    # TestAscend910C_FitWithoutNetworkID_ValidatesPairing (a 910C without superPod, no NetworkID)
    v = AscendVendor(
        ChipConfig("Ascend910C", "", "huawei.com/Ascend910C", "", "", memory_allocatable=32000, memory_capacity=32000)
    )
    devices = tuple(
        DeviceInfo(f"dev-{i}", i, 1, 32000, 0, "Ascend910C", 0, "", True, vendor="Ascend910C") for i in indices
    )
    got = fit(v, devices, ContainerRequest(nums=2, mem_mib=0, mem_pct=100, cores_pct=0, type="Ascend910C"))
    assert isinstance(got, Decision) is fits, got
    if fits:
        assert isinstance(got, Decision)
        assert got.devices[0] == (  # in the order HAMi's Fit meets them: from the last
            ContainerDevice("dev-1", 32000, 0, "Ascend910C"),
            ContainerDevice("dev-0", 32000, 0, "Ascend910C"),
        )
