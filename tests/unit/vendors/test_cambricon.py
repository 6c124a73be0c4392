"""Cambricon MLU: every case of HAMi's ``pkg/device/cambricon`` tests restated, plus our own edge cases of the
strict request parser, the capacity registration and the dsmlu node lock.

The index holds no copy of these files at v2.10.0 (4707fb02); read at the nearest stored versions:
``device_test.go`` 66868d45 (the ``Fit(devices, request, pod, nodeInfo, allocated)`` signature of the cordon era)
and ``device_cordon_test.go`` ad358d3a. Each HAMi case is named in a comment (``Go test name "subtest"``); where
our answer differs the comment says so and docs/differences.md lists it.

| Go file | cases | restated | pass as HAMi expects | differences (listed) |
|---|---|---|---|---|
| device_test.go | 32 | 32 | 25 | 7 |
| device_cordon_test.go | 4 | 4 | 4 | 0 |

The differences: a request of another family is never shown an MLU
("fit fail: type mismatch"); a node with fewer cards than asked answers ``NodeInsufficientDevice`` (the two
UUID cases and "AllocatedCardsInsufficientRequest", all asking 2 of 1); the bind takes over a lock value that
is not a time (``Test_setNodeLock`` "node is locked", ``Test_LockNode`` "invalid lock time format"); the bind
writes the assigned flag under both spellings and takes the profile's card index from the card's id
(``Test_PatchAnnotations`` "exist device")."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from vgpu_scheduler.services.extender.vendorlock import DSMLU_LOCK, TimedLockState
from vgpu_scheduler.shared.codec.resources import ResourceRequestError
from vgpu_scheduler.shared.domain.model import (
    ContainerDevice,
    ContainerRequest,
    DeviceInfo,
    DeviceUsage,
    GpuPolicy,
    GpuPolicyToken,
    NodeInventory,
    PodConstraints,
    PodRequest,
    Reason,
    Selectors,
)
from vgpu_scheduler.shared.domain.plan import Decision, Failure, apply_decision, plan
from vgpu_scheduler.shared.domain.scoring import Policies
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.domain.vendor import RuleSet
from vgpu_scheduler.shared.errors import ConfigError, DecodeError
from vgpu_scheduler.shared.vendors import cambricon as cam
from vgpu_scheduler.shared.vendors.base import NodeLockKind, Vendor
from vgpu_scheduler.shared.vendors.nvidia import NvidiaVendor
from vgpu_scheduler.shared.vendors.pods import device_list_annotations
from vgpu_scheduler.shared.vendors.registration import (
    DecodeFailure,
    Invalid,
    NodeView,
    NotRegistered,
    Observation,
    Registered,
    Unregistered,
)
from vgpu_scheduler.shared.vendors.registry import Vendors

V = cam.DEFAULT_VENDOR
HAMI_TEST = cam.CambriconVendor(count_name="cambricon.com/mlu")
"""The names HAMi's unit tests configure (count ``cambricon.com/mlu``)."""
NOW = datetime(2025, 1, 23, 10, 0, 0, tzinfo=timezone(timedelta(hours=8)))


def ctr(limits: Mapping[str, Any] | None = None, requests: Mapping[str, Any] | None = None) -> dict[str, Any]:
    res: dict[str, Any] = {}
    if limits is not None:
        res["limits"] = dict(limits)
    if requests is not None:
        res["requests"] = dict(requests)
    return {"name": "c", "resources": res}


def problems(vendor: cam.CambriconVendor, container: Mapping[str, Any]) -> str:
    with pytest.raises(ResourceRequestError) as e:
        vendor.container_request(container, "spec.containers[0]")
    return str(e.value)


# ------------------------------------------------------------------------------------------------------------
# Keys, names, protocol
# ------------------------------------------------------------------------------------------------------------


def test_vendor_keys_and_names_are_hamis() -> None:
    v: Vendor = V
    assert v.name == "MLU"
    assert v.to_allocate_key == "hami.io/cambricon-mlu-devices-to-allocate"
    assert v.allocated_key == "hami.io/cambricon-mlu-devices-allocated"
    assert v.register_key is None
    assert v.handshake_key is None
    assert v.node_lock is NodeLockKind.CAMBRICON
    assert NodeLockKind.CAMBRICON.value == "cambricon.com/dsmlu.lock"
    r = v.resources
    assert (r.count, r.memory, r.cores) == (
        "cambricon.com/vmlu",
        "cambricon.com/mlu.smlu.vmemory",
        "cambricon.com/mlu.smlu.vcore",
    )
    assert r.memory_unit_mib == 256
    assert r.memory_percentage is None
    assert v.rules.name == "MLU"


# ------------------------------------------------------------------------------------------------------------
# Device config
# ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("section", [None, {}])
def test_build_defaults(section: object) -> None:
    # Test_ParseConfig "test" (HAMi registers its flags and asserts nothing): we have no Cambricon flags; the
    # defaults are what an empty section gives
    assert cam.SECTION == "cambricon"
    (v,) = cam.build(section)
    assert v == cam.CambriconVendor()
    assert v.resources.count == "cambricon.com/vmlu"


def test_build_reads_the_three_names_and_ignores_other_keys() -> None:
    (v,) = cam.build(
        {
            "resourceCountName": "cambricon.com/mlu",
            "resourceMemoryName": "x.com/mem",
            "resourceCoreName": "x.com/core",
            "deviceSplitCount": 10,  # seen in operators' configs: HAMi ignores it
        }
    )
    assert v.resources.count == "cambricon.com/mlu"
    assert v.resources.memory == "x.com/mem"
    assert v.resources.cores == "x.com/core"


def test_build_null_key_keeps_the_default() -> None:
    (v,) = cam.build({"resourceCountName": None})
    assert v.resources.count == "cambricon.com/vmlu"


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ([], "cambricon: expected a mapping, got list"),
        ({"resourceMemoryName": 3}, "cambricon.resourceMemoryName: expected a string, got 3"),
        ({"resourceCoreName": " "}, "cambricon.resourceCoreName: expected a resource name, got an empty string"),
        ({"resourceCoreName": "cambricon.com/vmlu"}, "must differ"),
    ],
)
def test_build_refuses_bad_sections(section: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        cam.build(section)


# ------------------------------------------------------------------------------------------------------------
# GenerateResourceRequests (HAMi Test_GenerateResourceRequests, names as HAMi's test configures them)
# ------------------------------------------------------------------------------------------------------------

MLU_RES = "cambricon.com/mlu"
MEM = "cambricon.com/mlu.smlu.vmemory"
CORE = "cambricon.com/mlu.smlu.vcore"


def test_no_resources_is_no_request() -> None:
    # Test_GenerateResourceRequests "don't set to limits and request"
    assert HAMI_TEST.container_request(ctr({}, {}), "c").empty
    assert HAMI_TEST.container_request({"name": "c"}, "c").empty


def test_count_memory_and_cores() -> None:
    # Test_GenerateResourceRequests "resourcecoresname,resourcecountname and resourcememoryname set to limits and
    # request": 1000 units of 256 MiB, 2 cores
    both = {MLU_RES: "1", MEM: "1000", CORE: "2"}
    got = HAMI_TEST.container_request(ctr(both, both), "c")
    assert got == ContainerRequest(nums=1, mem_mib=256000, mem_pct=0, cores_pct=2, type="MLU")


def test_cores_default_to_the_whole_card() -> None:
    # Test_GenerateResourceRequests "resourcememoryname don't set to limits and requests" (it is the cores that
    # are not set): cores 100
    both = {MLU_RES: "1", MEM: "1000"}
    got = HAMI_TEST.container_request(ctr(both, both), "c")
    assert got == ContainerRequest(nums=1, mem_mib=256000, mem_pct=0, cores_pct=100, type="MLU")


def test_memory_defaults_to_all_of_the_card() -> None:
    # Test_GenerateResourceRequests "resourcecoresname don't set to limits and requests" (it is the memory that
    # is not set): 100 % of the card
    both = {MLU_RES: "1", CORE: "2"}
    got = HAMI_TEST.container_request(ctr(both, both), "c")
    assert got == ContainerRequest(nums=1, mem_mib=0, mem_pct=100, cores_pct=2, type="MLU")


def test_requests_are_read_when_limits_lack_the_name() -> None:
    got = V.container_request(ctr({}, {"cambricon.com/vmlu": 2, MEM: 4}), "c")
    assert got == ContainerRequest(nums=2, mem_mib=1024, mem_pct=0, cores_pct=100, type="MLU")


def test_explicit_zero_memory_means_the_whole_card_and_zero_count_means_none() -> None:
    assert V.container_request(ctr({"cambricon.com/vmlu": "1", MEM: "0"}), "c").mem_pct == 100
    assert V.container_request(ctr({"cambricon.com/vmlu": "0", CORE: "50"}), "c").empty


def test_api_server_forms_are_read() -> None:
    got = V.container_request(ctr({"cambricon.com/vmlu": "1", MEM: "2k", CORE: "50"}), "c")
    assert (got.mem_mib, got.cores_pct) == (2000 * 256, 50)


def test_memory_in_bytes_suggests_units() -> None:
    text = problems(V, ctr({"cambricon.com/vmlu": "1", MEM: "4Gi"}))
    assert "spec.containers[0]: cambricon.com/mlu.smlu.vmemory is in units of 256 MiB" in text
    assert "did you mean 16?" in text


def test_memory_beyond_int32_after_scaling_is_refused() -> None:
    # HAMi: memnums > MaxInt32/256 rejects the container; 8388607 is the largest accepted value
    assert V.container_request(ctr({"cambricon.com/vmlu": "1", MEM: "8388607"}), "c").mem_mib == 8388607 * 256
    assert "at most 8388607" in problems(V, ctr({"cambricon.com/vmlu": "1", MEM: "8388608"}))


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        ({"cambricon.com/vmlu": "500m"}, "counts whole MLUs"),
        ({"cambricon.com/vmlu": "1Ki"}, "takes no unit"),
        ({"cambricon.com/vmlu": "-1"}, "cannot be negative"),
        ({"cambricon.com/vmlu": "3000000000"}, "too large"),
        ({"cambricon.com/vmlu": "x"}, '"x" is not a number'),
        ({"cambricon.com/vmlu": "1", CORE: "-5"}, "cannot be negative"),
        ({"cambricon.com/vmlu": "1", CORE: "50.5"}, "must be a whole number"),
        ({"cambricon.com/vmlu": "1", MEM: "2.5"}, "did you mean 3?"),
        ({MEM: "4", CORE: "50"}, "without cambricon.com/vmlu"),
        ({"cambricon.com/vmlu": "0", MEM: "4"}, "memory on 0 MLUs"),
    ],
)
def test_bad_values_are_refused_with_a_message(limits: Mapping[str, Any], expected: str) -> None:
    assert expected in problems(V, ctr(limits))


def test_every_problem_is_listed() -> None:
    with pytest.raises(ResourceRequestError) as e:
        V.container_request(ctr({"cambricon.com/vmlu": "x", MEM: "-1", CORE: "-200"}), "spec.containers[1]")
    assert len(e.value.problems) == 3
    assert all(p.startswith("spec.containers[1]: ") for p in e.value.problems)


def test_a_malformed_container_is_a_decode_error_naming_the_path() -> None:
    # a shape error, as for every vendor: the webhook answers 400, not "what to write instead"
    with pytest.raises(DecodeError, match=r"c\.resources\.limits.*expected an object"):
        V.container_request({"resources": {"limits": ["x"]}}, "c")


# ------------------------------------------------------------------------------------------------------------
# MutateAdmission, manages
# ------------------------------------------------------------------------------------------------------------


def test_mutate_is_true_for_the_count_in_limits_and_edits_nothing() -> None:
    # Test_MutateAdmission "set to resources limits" (count cambricon.com/mlu in the limits → true)
    c = ctr({MLU_RES: "1"})
    before = repr(c)
    assert HAMI_TEST.mutate_container(c, "spec.containers[0]") is True
    assert repr(c) == before
    assert HAMI_TEST.mutate_container(ctr({}, {MLU_RES: "1"}), "w") is False
    assert HAMI_TEST.mutate_container(ctr({MEM: "4"}), "w") is False


def test_manages_any_of_the_three_names_in_limits_or_requests() -> None:
    assert V.manages(ctr({MEM: "1"}))
    assert V.manages(ctr({}, {CORE: "1"}))
    assert not V.manages(ctr({"nvidia.com/gpu": "1"}))


# ------------------------------------------------------------------------------------------------------------
# Registration from capacity (HAMi Test_GetNodeDevices)
# ------------------------------------------------------------------------------------------------------------


def node(
    name: str = "test",
    capacity: Mapping[str, Any] | None = None,
    allocatable: Mapping[str, Any] | None = None,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
) -> Observation:
    return V.observe_node(name, annotations or {}, capacity or {}, allocatable or {}, labels or {})


def test_one_vcore_one_vmemory_is_one_card_of_25600_mib() -> None:
    # Test_GetNodeDevices "test with valid configuration": vcore 1, vmemory 1 → one card of 1 × 256 × 100 / 1 MiB
    got = node(capacity={CORE: 1, MEM: 1}, allocatable={"cambricon.com/vmlu": 1})
    assert isinstance(got, Registered)
    assert got.inventory.devices == (
        DeviceInfo(
            id="test-cambricon-mlu-0",
            index=0,
            count=100,
            devmem_mib=25600,
            devcore=100,
            type="MLU",
            numa=0,
            mode="",
            health=True,
            vendor="MLU",
        ),
    )
    assert got.inventory.vendor == "MLU"
    assert got.handshake is None


def test_cards_are_vcore_over_100_rounded_up() -> None:
    got = node("n", capacity={CORE: "250", MEM: "480"}, allocatable={"cambricon.com/vmlu": "300"})
    assert isinstance(got, Registered)
    devs = got.inventory.devices
    assert [d.id for d in devs] == ["n-cambricon-mlu-0", "n-cambricon-mlu-1", "n-cambricon-mlu-2"]
    assert [d.index for d in devs] == [0, 1, 2]
    assert {d.devmem_mib for d in devs} == {480 * 256 * 100 // 250}


def test_model_label_gives_the_type_when_it_names_an_mlu() -> None:
    cap = {CORE: "200", MEM: "192"}
    alloc = {"cambricon.com/vmlu": "2"}
    for label, kind in [(" MLU370-X8 ", "MLU370-X8"), ("mlu590", "mlu590"), ("Tesla", "MLU"), ("", "MLU")]:
        got = node(capacity=cap, allocatable=alloc, labels={"Model": label})
        assert isinstance(got, Registered)
        assert {d.type for d in got.inventory.devices} == {kind}


def test_no_vcore_capacity_is_absent_and_zero_is_no_devices() -> None:
    assert node(capacity={MEM: "4"}, allocatable={"cambricon.com/vmlu": "1"}) == NotRegistered(Unregistered.ABSENT)
    got = node(capacity={CORE: "0", MEM: "4"}, allocatable={"cambricon.com/vmlu": "1"})
    assert got == NotRegistered(Unregistered.NO_DEVICES)


def test_liveness_is_allocatable_count_when_advertised() -> None:
    got = node(capacity={CORE: "100", MEM: "64"}, allocatable={"cambricon.com/vmlu": "0"})
    assert got == NotRegistered(Unregistered.NO_ALLOCATABLE)
    # HAMi's GetNodeDevices builds the MLUs from the vcore and vmemory capacity alone (its CheckHealth always answers
    # healthy): a node that does not advertise cambricon.com/vmlu has its cards, as in HAMi
    got = node(capacity={CORE: "200", MEM: "128"})
    assert isinstance(got, Registered) and [d.devmem_mib for d in got.inventory.devices] == [16384, 16384]


def test_missing_memory_capacity_gives_cards_without_memory() -> None:
    got = node(capacity={CORE: "100"}, allocatable={"cambricon.com/vmlu": "1"})
    assert isinstance(got, Registered)
    assert got.inventory.devices[0].devmem_mib == 0


@pytest.mark.parametrize(
    ("capacity", "allocatable", "failure", "source"),
    [
        ({CORE: "150m", MEM: "4"}, {"cambricon.com/vmlu": "1"}, DecodeFailure.REGISTER, f"status.capacity[{CORE}]"),
        ({CORE: "-100", MEM: "4"}, {"cambricon.com/vmlu": "1"}, DecodeFailure.REGISTER, f"status.capacity[{CORE}]"),
        ({CORE: "100", MEM: "x"}, {"cambricon.com/vmlu": "1"}, DecodeFailure.REGISTER, f"status.capacity[{MEM}]"),
        ({CORE: "1", MEM: "100000"}, {"cambricon.com/vmlu": "1"}, DecodeFailure.REGISTER, f"status.capacity[{MEM}]"),
        (
            {CORE: "100", MEM: "4"},
            {"cambricon.com/vmlu": "one"},
            DecodeFailure.ALLOCATABLE,
            "status.allocatable[cambricon.com/vmlu]",
        ),
    ],
)
def test_malformed_quantities_are_invalid(
    capacity: Mapping[str, Any], allocatable: Mapping[str, Any], failure: DecodeFailure, source: str
) -> None:
    got = node(capacity=capacity, allocatable=allocatable)
    assert isinstance(got, Invalid)
    assert (got.failure, got.source) == (failure, source)
    assert isinstance(got.error, DecodeError)


def test_cordon_keeps_this_nodes_card_ids() -> None:
    got = node(
        "n",
        capacity={CORE: "200", MEM: "64"},
        allocatable={"cambricon.com/vmlu": "2"},
        annotations={"hami.io/device-cordon": "n-cambricon-mlu-1, ,other-cambricon-mlu-0"},
    )
    assert isinstance(got, Registered)
    assert got.inventory.cordoned == frozenset({"n-cambricon-mlu-1"})


def test_observe_reads_a_node_view() -> None:
    view = NodeView.of(
        {
            "metadata": {"name": "n", "resourceVersion": "1"},
            "status": {
                "capacity": {CORE: "100", MEM: "64", "cambricon.com/vmlu": "100"},
                "allocatable": {CORE: "100", MEM: "64", "cambricon.com/vmlu": "100"},
            },
        }
    )
    got = V.observe(view, datetime(2025, 1, 1))
    assert isinstance(got, Registered)
    assert [d.id for d in got.inventory.devices] == ["n-cambricon-mlu-0"]


def test_node_capacity_and_labels_round_trip() -> None:
    got = node("n", capacity={CORE: "300", MEM: "96"}, allocatable={"cambricon.com/vmlu": "3"}, labels={})
    assert isinstance(got, Registered)
    devs = got.inventory.devices
    cap = cam.node_capacity(devs)
    assert cap == {"cambricon.com/vmlu": "300", MEM: "96", CORE: "300"}
    assert cam.registration_annotations(devs) == {}
    assert cam.node_labels(devs) == {}
    again = V.observe_node("n", {}, cap, cap, cam.node_labels(devs))
    assert isinstance(again, Registered)
    assert again.inventory.devices == devs
    typed = tuple(DeviceInfo(**{**_fields(d), "type": "MLU370"}) for d in devs)
    assert cam.node_labels(typed) == {"Model": "MLU370"}


def _fields(d: DeviceInfo) -> dict[str, Any]:
    return {f: getattr(d, f) for f in DeviceInfo.__dataclass_fields__}


def test_node_capacity_refuses_what_capacity_cannot_say() -> None:
    a = cam.devices_from_capacity("n", 100, 4)
    with pytest.raises(ValueError, match="whole number"):
        cam.node_capacity(tuple(DeviceInfo(**{**_fields(d), "devmem_mib": 1000}) for d in a))
    b = cam.devices_from_capacity("n", 200, 8)
    mixed = (b[0], DeviceInfo(**{**_fields(b[1]), "devmem_mib": 512}))
    with pytest.raises(ValueError, match="share one memory size"):
        cam.node_capacity(mixed)


# ------------------------------------------------------------------------------------------------------------
# Selectors (HAMi Test_CheckUUID and CheckType)
# ------------------------------------------------------------------------------------------------------------


def test_selectors_keys() -> None:
    sel = V.selectors(
        {
            "cambricon.com/use-mlutype": "mlu370, ",
            "cambricon.com/nouse-mlutype": "x8",
            "cambricon.com/use-gpuuuid": "test123,111",
            "cambricon.com/nouse-gpuuuid": " a ",
            "nvidia.com/use-gputype": "A100",
        }
    )
    assert sel == Selectors(("MLU370",), ("X8",), frozenset({"test123", "111"}), frozenset({"a"}))
    assert V.selectors({}) == Selectors()
    assert V.selectors({"cambricon.com/use-gpuuuid": "  "}) == Selectors()


@pytest.mark.parametrize("key", ["cambricon.com/use-gpuuuid", "cambricon.com/use-mlutype"])
def test_a_use_list_without_tokens_is_a_decode_error(key: str) -> None:
    with pytest.raises(DecodeError, match=key):
        V.selectors({key: " , "})


def mlu(
    uuid: str = "dev-0", *, index: int = 0, mem: int = 128, used_type: str = "MLU", health: bool = True
) -> DeviceInfo:
    return DeviceInfo(
        id=uuid,
        index=index,
        count=100,
        devmem_mib=mem,
        devcore=100,
        type=used_type,
        numa=0,
        mode="",
        health=health,
        vendor="MLU",
    )


def constraints(annotations: Mapping[str, str] | None = None) -> PodConstraints:
    return PodConstraints(vendor_selectors={"MLU": V.selectors(annotations or {})})


@pytest.mark.parametrize(
    ("annotations", "device", "ok"),
    [
        ({}, "test123", True),
        ({"cambricon.com/use-gpuuuid": "test123,111"}, "test123", True),
        ({"cambricon.com/nouse-gpuuuid": "test123,111"}, "test123", False),
        ({"cambricon.com/nouse-gpuuuid": "test123,111"}, "test456", True),
        ({"cambricon.com/use-gpuuuid": "test123,111"}, "test456", False),
        # HAMi HEAD applies both lists: listed in use and in nouse is refused
        ({"cambricon.com/use-gpuuuid": "test123", "cambricon.com/nouse-gpuuuid": "test123"}, "test123", False),
    ],
)
def test_check_uuid(annotations: Mapping[str, str], device: str, ok: bool) -> None:
    assert cam.RULES.uuid_ok(mlu(device), constraints(annotations)) is ok


REQ = ContainerRequest(nums=1, mem_mib=64, mem_pct=0, cores_pct=50, type="MLU")


def test_check_type_same_and_different_type() -> None:
    # Test_checkType "the same type": an MLU request, no annotation, a card with no type → matches
    assert cam.RULES.type_ok(mlu(used_type=""), REQ, constraints())
    assert cam.RULES.type_ok(mlu(), REQ, constraints())
    # "the different type": a request of type "TEST" → no
    other = ContainerRequest(nums=1, mem_mib=64, mem_pct=0, cores_pct=50, type="TEST")
    assert not cam.RULES.type_ok(mlu(used_type=""), other, constraints())
    assert not cam.RULES.type_ok(mlu(), other, constraints())


@pytest.mark.parametrize(
    ("annotations", "kind", "ok"),
    [
        ({"cambricon.com/use-mlutype": "mlu370"}, "MLU370-X8", True),
        ({"cambricon.com/use-mlutype": "MLU590"}, "MLU370-X8", False),
        ({"cambricon.com/nouse-mlutype": "x8"}, "MLU370-X8", False),
        ({"cambricon.com/nouse-mlutype": "x4"}, "MLU370-X8", True),
        # a card of unknown model (no Model label) satisfies no type selector, not even a nouse one
        ({"cambricon.com/use-mlutype": "MLU"}, "MLU", False),
        ({"cambricon.com/nouse-mlutype": "MLU590"}, "mlu", False),
        ({"cambricon.com/nouse-mlutype": " "}, "MLU", True),
    ],
)
def test_check_type_with_selectors(annotations: Mapping[str, str], kind: str, ok: bool) -> None:
    assert cam.RULES.type_ok(mlu(used_type=kind), REQ, constraints(annotations)) is ok


# ------------------------------------------------------------------------------------------------------------
# Fit, through the real core (HAMi TestDevices_Fit and TestFit_DeviceCordon)
# ------------------------------------------------------------------------------------------------------------

RULESET = RuleSet({"MLU": cam.RULES})


def snapshot(
    devices: Iterable[DeviceInfo], usage: Mapping[str, DeviceUsage] | None = None, cordoned: Iterable[str] = ()
) -> NodeSnapshot:
    inv = NodeInventory(node="node1", vendor="MLU", devices=tuple(devices), cordoned=frozenset(cordoned))
    return NodeSnapshot(inv, dict(usage or {}))


def fit(
    request: ContainerRequest,
    node_snap: NodeSnapshot,
    annotations: Mapping[str, str] | None = None,
    policies: Policies | None = None,
) -> Decision | Failure:
    pod = PodRequest(containers=(request,), init_count=0)
    return plan(pod, constraints(annotations), [node_snap], policies=policies or Policies(), rules=RULESET)


def reason(result: Decision | Failure) -> str:
    assert isinstance(result, Failure)
    return result.reasons["node1"]


def chosen(result: Decision | Failure) -> list[str]:
    assert isinstance(result, Decision), result
    return [d.uuid for c in result.devices for d in c]


def mlu_req(nums: int = 1, mem: int = 512, pct: int = 0, cores: int = 50) -> ContainerRequest:
    return ContainerRequest(nums=nums, mem_mib=mem, mem_pct=pct, cores_pct=cores, type="MLU")


def test_fit_success() -> None:
    # TestDevices_Fit "fit success": HAMi walks the devices backwards and takes dev-1, and so do we (difference 8)
    got = fit(mlu_req(mem=64), snapshot([mlu("dev-0"), mlu("dev-1", index=1)]))
    assert chosen(got) == ["dev-1"]
    assert isinstance(got, Decision)
    assert got.devices == ((ContainerDevice("dev-1", 64, 50, "MLU"),),)


def test_fit_fail_memory_not_enough() -> None:
    # TestDevices_Fit "fit fail: memory not enough"
    assert reason(fit(mlu_req(mem=512), snapshot([mlu()]))) == "1/1 CardInsufficientMemory"


def test_fit_fail_core_not_enough() -> None:
    # TestDevices_Fit "fit fail: core not enough"
    node_snap = snapshot([mlu(mem=1024)], {"dev-0": DeviceUsage(used=0, used_cores=100)})
    assert reason(fit(mlu_req(), node_snap)) == "1/1 CardInsufficientCore"


@pytest.mark.parametrize(
    "annotations", [{"cambricon.com/use-gpuuuid": "dev-0"}, {"cambricon.com/nouse-gpuuuid": "dev-1"}]
)
def test_fit_fail_uuid(annotations: Mapping[str, str]) -> None:
    # TestDevices_Fit "fit fail: user assign use uuid mismatch" / "… no use uuid match" with one card asked (HAMi's
    # ask two of one: test_fit_uuid_cases_asking_two_of_one)
    assert reason(fit(mlu_req(), snapshot([mlu("dev-1", mem=1280)]), annotations)) == "1/1 CardUuidMismatch"


def test_fit_fail_card_overused() -> None:
    # TestDevices_Fit "fit fail: card overused"
    node_snap = snapshot([mlu(mem=1280)], {"dev-0": DeviceUsage(used=100)})
    assert reason(fit(mlu_req(), node_snap)) == "1/1 CardTimeSlicingExhausted"


def test_fit_success_but_core_limit_cant_exceed_100() -> None:
    # TestDevices_Fit "fit success: but core limit can't exceed 100": Coresreq 120 fits, capped at 100
    # (HAMi's master refuses it since, after v2.10.0; the parser caps it too, with an admission warning)
    got = fit(mlu_req(cores=120), snapshot([mlu(mem=1280)]))
    assert isinstance(got, Decision) and got.devices[0][0].used_cores == 100


def test_fit_fail_card_exclusively() -> None:
    # TestDevices_Fit "fit fail:  card exclusively"
    node_snap = snapshot([mlu(mem=1280)], {"dev-0": DeviceUsage(used=20)})
    assert reason(fit(mlu_req(cores=100), node_snap)) == "1/1 ExclusiveDeviceAllocateConflict"


def test_fit_fail_compute_units_exhausted() -> None:
    # TestDevices_Fit "fit fail:  CardComputeUnitsExhausted"
    node_snap = snapshot([mlu(mem=1280)], {"dev-0": DeviceUsage(used=20, used_cores=100)})
    assert reason(fit(mlu_req(cores=0), node_snap)) == "1/1 CardComputeUnitsExhausted"


def test_fit_fail_allocated_cards_insufficient() -> None:
    # ours: the reason HAMi's "fit fail:  AllocatedCardsInsufficientRequest" names, with two cards to see it
    node_snap = snapshot([mlu(mem=1280), mlu("dev-1", index=1, mem=1280)], {"dev-1": DeviceUsage(used=100)})
    got = reason(fit(mlu_req(nums=2, cores=20), node_snap))
    assert got == "1/2 AllocatedCardsInsufficientRequest, 1/2 CardTimeSlicingExhausted"


def test_fit_more_cards_than_the_node_has() -> None:
    # TestDevices_Fit "fit fail:  AllocatedCardsInsufficientRequest": 2 MLUs asked of one card (20 tasks, 10 cores
    # in use). HAMi: "1/1 AllocatedCardsInsufficientRequest"; ours stops before the cards: NodeInsufficientDevice
    node_snap = snapshot([mlu(mem=1280)], {"dev-0": DeviceUsage(used=20, used_cores=10)})
    assert reason(fit(mlu_req(nums=2, cores=20), node_snap)) == "NodeInsufficientDevice"
    assert reason(fit(mlu_req(nums=2), snapshot([mlu(mem=1280)]))) == "NodeInsufficientDevice"


@pytest.mark.parametrize(
    ("card", "annotations"),
    [
        # TestDevices_Fit "fit fail: user assign use uuid mismatch" (HAMi: "1/1 CardUuidMismatch")
        ("dev-1", {"cambricon.com/use-gpuuuid": "dev-0"}),
        # "fit fail: user assign no use uuid match" (HAMi: "1/1 CardUuidMismatch")
        ("dev-0", {"cambricon.com/nouse-gpuuuid": "dev-0"}),
    ],
)
def test_fit_uuid_cases_asking_two_of_one(card: str, annotations: Mapping[str, str]) -> None:
    # HAMi asks 2 MLUs of one card; ours: one card cannot serve two, NodeInsufficientDevice
    got = fit(mlu_req(nums=2), snapshot([mlu(card, mem=1280)]), annotations)
    assert reason(got) == "NodeInsufficientDevice"


def test_fit_type_mismatch() -> None:
    # TestDevices_Fit "fit fail: type mismatch": a request of type "OtherType". HAMi: "1/1 CardTypeMismatch"; ours
    # never shows a request another family's cards: NodeInsufficientDevice
    other = ContainerRequest(nums=1, mem_mib=512, mem_pct=0, cores_pct=50, type="OtherType")
    assert reason(fit(other, snapshot([mlu()]))) == "NodeInsufficientDevice"


def test_add_resource_usage() -> None:
    # TestDevices_AddResourceUsage "test add resource usage": (0 tasks, 2000 MiB, 15 cores) plus an entry of
    # 1024 MiB and 50 cores → 1 task, 3024 MiB, 65 cores
    node_snap = snapshot([mlu(mem=4096)], {"dev-0": DeviceUsage(0, 2000, 15)})
    got = fit(mlu_req(mem=1024, cores=50), node_snap)
    assert isinstance(got, Decision)
    assert apply_decision(node_snap, got).device_usage("dev-0") == DeviceUsage(1, 3024, 65)


def test_fit_memory_percentage() -> None:
    # TestDevices_Fit "fit success:  memory percentage": 10 % of 1280 MiB
    node_snap = snapshot([mlu(mem=1280)], {"dev-0": DeviceUsage(used=20, used_cores=10)})
    got = fit(mlu_req(mem=0, pct=10, cores=20), node_snap)
    assert isinstance(got, Decision)
    assert got.devices == ((ContainerDevice("dev-0", 128, 20, "MLU"),),)


def test_fit_whole_card_memory_by_default() -> None:
    req = V.container_request(ctr({"cambricon.com/vmlu": "1", CORE: "30"}), "c")
    got = fit(req, snapshot([mlu(mem=1280)]))
    assert isinstance(got, Decision)
    assert got.devices[0][0].used_mem_mib == 1280


def test_fit_mutex_policy_refuses_a_used_card() -> None:
    node_snap = snapshot([mlu(mem=1280)], {"dev-0": DeviceUsage(used=1, used_mem_mib=128, used_cores=10)})
    mutex = Policies(gpu=GpuPolicy((GpuPolicyToken.MUTEX,)))
    assert reason(fit(mlu_req(cores=10), node_snap, policies=mutex)) == "1/1 ExclusiveDeviceAllocateConflict"


def test_fit_unhealthy_card() -> None:
    assert reason(fit(mlu_req(mem=64), snapshot([mlu(health=False)]))) == "1/1 CardNotHealth"


def test_fit_type_selector_through_the_core() -> None:
    node_snap = snapshot([mlu(used_type="MLU370-X8", mem=1280)])
    assert chosen(fit(mlu_req(), node_snap, {"cambricon.com/use-mlutype": "MLU370"})) == ["dev-0"]
    assert reason(fit(mlu_req(), node_snap, {"cambricon.com/use-mlutype": "MLU590"})) == "1/1 CardTypeMismatch"


def two_cards() -> list[DeviceInfo]:
    return [mlu("dev-0"), mlu("dev-1", index=1)]


def cordon_of(value: str) -> frozenset[str]:
    """What the registrar keeps of a ``hami.io/device-cordon`` value on a two-card node named node1."""
    got = node(
        "node1",
        capacity={CORE: 200, MEM: 2},
        allocatable={"cambricon.com/vmlu": 200},
        annotations={"hami.io/device-cordon": value},
    )
    assert isinstance(got, Registered)
    return got.inventory.cordoned


def test_cordoned_card_is_skipped_healthy_sibling_still_fits() -> None:
    # TestFit_DeviceCordon "cordoned device is skipped, healthy sibling still fits" (the annotation "dev-1, ")
    assert cordon_of("node1-cambricon-mlu-1, ") == frozenset({"node1-cambricon-mlu-1"})
    assert chosen(fit(mlu_req(mem=64), snapshot(two_cards(), cordoned=["dev-0"]))) == ["dev-1"]
    assert chosen(fit(mlu_req(mem=64), snapshot(two_cards(), cordoned=["dev-1"]))) == ["dev-0"]


def test_all_cards_cordoned() -> None:
    # TestFit_DeviceCordon "all devices cordoned fails with CardCordoned reason"
    got = fit(mlu_req(mem=64), snapshot(two_cards(), cordoned=["dev-0", "dev-1"]))
    assert reason(got) == "2/2 " + Reason.CARD_CORDONED.value


def test_nothing_cordoned() -> None:
    # TestFit_DeviceCordon "no annotation or no node info means nothing cordoned" (no annotation, "", "   "):
    # dev-1, the last card, as HAMi (difference 8)
    for value in ("", "   "):
        assert cordon_of(value) == frozenset()
    assert chosen(fit(mlu_req(mem=64), snapshot(two_cards()))) == ["dev-1"]


def test_running_pods_on_a_cordoned_card_are_unaffected() -> None:
    # TestFit_DeviceCordon "running pods on a cordoned device are unaffected"
    usage = {"dev-1": DeviceUsage(used=1, used_mem_mib=64, used_cores=50)}
    node_snap = snapshot(two_cards(), usage, cordoned=["dev-1"])
    assert chosen(fit(mlu_req(mem=64), node_snap)) == ["dev-0"]
    assert node_snap.device_usage("dev-1").used == 1


def test_uuid_selector_reasons_are_per_node() -> None:
    # ids name their node, so a UUID selector makes equal-shaped nodes differ: b's card is the one asked for,
    # and it is too small
    def node_snap(name: str) -> NodeSnapshot:
        devices = cam.devices_from_capacity(name, 100, 1)  # one card of 25600 MiB
        return NodeSnapshot(NodeInventory(node=name, vendor="MLU", devices=devices))

    pod = PodRequest((mlu_req(mem=30000),), 0)
    sel = constraints({"cambricon.com/use-gpuuuid": "b-cambricon-mlu-0"})
    got = plan(pod, sel, [node_snap("a"), node_snap("b")], policies=Policies(), rules=RULESET)
    assert isinstance(got, Failure)
    assert got.reasons == {"a": "1/1 CardUuidMismatch", "b": "1/1 CardInsufficientMemory"}


def test_registry_takes_the_vendor() -> None:
    vendors = Vendors((V,))
    assert vendors.get("MLU") is V
    assert vendors.rules.get("MLU") is cam.RULES
    assert vendors.managing(ctr({"cambricon.com/vmlu": "1"})) == (V,)


def test_nvidia_request_sees_no_mlu() -> None:
    nvidia = ContainerRequest(nums=1, mem_mib=10)
    rules = RuleSet({"MLU": cam.RULES, **RuleSet().by_name})
    got = plan(PodRequest((nvidia,), 0), PodConstraints(), [snapshot([mlu()])], policies=Policies(), rules=rules)
    assert reason(got) == "NodeInsufficientDevice"


# ------------------------------------------------------------------------------------------------------------
# PatchAnnotations (HAMi Test_PatchAnnotations)
# ------------------------------------------------------------------------------------------------------------


def test_patch_annotations_exist_device() -> None:
    # Test_PatchAnnotations "exist device": HAMi's card "device-0" (Idx 0), 256000 MiB, 1 core → the device lists,
    # CAMBRICON_DSMLU_ASSIGNED "false", CAMBRICON_DSMLU_PROFILE "0_1_1000", four keys. Ours: the index is read from
    # the card's id (a registered card is always <node>-cambricon-mlu-<i>), so HAMi's "device-0" is refused; with
    # a real id the same values, plus the flag under the device plugin's spelling ASSIGHED (five keys)
    with pytest.raises(DecodeError, match="CAMBRICON_DSMLU_PROFILE"):
        cam.extra_annotations(((ContainerDevice("device-0", 256000, 1, "MLU"),),))
    devices = ((ContainerDevice("node-cambricon-mlu-0", 256000, 1, "MLU"),),)
    value = V.encode_devices(devices)
    assert value == "node-cambricon-mlu-0,MLU,256000,1:;"
    assert cam.extra_annotations(devices) == {
        "CAMBRICON_DSMLU_ASSIGNED": "false",
        "CAMBRICON_DSMLU_ASSIGHED": "false",  # the device plugin's spelling (HAMi's test of its own era)
        "CAMBRICON_DSMLU_PROFILE": "0_1_1000",
    }
    assert V.decode_devices(value) == (devices[0], ())


def test_bind_writes_the_patch_annotations_with_the_device_lists() -> None:
    # HAMi's PatchAnnotations writes all four keys at once: the bind's annotations go through the vendor hook
    devices = ((ContainerDevice("node-cambricon-mlu-0", 256000, 1, "MLU"),),)
    got = device_list_annotations(devices, Vendors((NvidiaVendor(), V)))
    assert got == {
        "CAMBRICON_DSMLU_ASSIGNED": "false",
        "CAMBRICON_DSMLU_ASSIGHED": "false",
        "CAMBRICON_DSMLU_PROFILE": "0_1_1000",
        "hami.io/cambricon-mlu-devices-to-allocate": "node-cambricon-mlu-0,MLU,256000,1:;",
        "hami.io/cambricon-mlu-devices-allocated": "node-cambricon-mlu-0,MLU,256000,1:;",
    }


def test_patch_annotations_no_device() -> None:
    # Test_PatchAnnotations "no device": nothing
    assert cam.extra_annotations(()) == {}
    assert cam.extra_annotations(((), ())) == {}


def test_profile_comes_from_the_first_container_holding_a_device() -> None:
    devices = (
        (),
        (ContainerDevice("n-cambricon-mlu-3", 1000, 30, "MLU"), ContainerDevice("n-cambricon-mlu-1", 512, 0, "MLU")),
        (ContainerDevice("n-cambricon-mlu-0", 256, 10, "MLU"),),
    )
    assert cam.extra_annotations(devices)["CAMBRICON_DSMLU_PROFILE"] == "3_30_3"
    assert (
        V.encode_devices(devices)
        == ";n-cambricon-mlu-3,MLU,1000,30:n-cambricon-mlu-1,MLU,512,0:;n-cambricon-mlu-0,MLU,256,10:;"
    )


def test_profile_of_a_foreign_device_id_is_a_decode_error() -> None:
    with pytest.raises(DecodeError, match="CAMBRICON_DSMLU_PROFILE"):
        cam.extra_annotations(((ContainerDevice("GPU-1", 1, 1, "MLU"),),))


def test_decode_devices_rejects_garbage() -> None:
    with pytest.raises(DecodeError, match=re.escape("hami.io/cambricon-mlu-devices-to-allocate")):
        V.decode_devices("a,MLU,x,1:;")


# ------------------------------------------------------------------------------------------------------------
# The dsmlu node lock (HAMi Test_LockNode, Test_setNodeLock, Test_ReleaseNodeLock); what /bind does with it:
# tests/integration/extender/test_bind_vendors.py
# ------------------------------------------------------------------------------------------------------------


def test_lock_annotation_is_an_rfc3339_time() -> None:
    assert cam.lock_annotation(NOW) == {"cambricon.com/dsmlu.lock": "2025-01-23T10:00:00+08:00"}
    assert cam.lock_annotation(NOW.astimezone(UTC)) == {"cambricon.com/dsmlu.lock": "2025-01-23T02:00:00Z"}


def test_lock_state_free_when_absent() -> None:
    # Test_setNodeLock "set node lock", Test_LockNode "node is not locked": no annotation → the lock is taken;
    # Test_ReleaseNodeLock "no annation" / "annation no lock value": nothing to remove, no error
    assert cam.lock_state({}, NOW) is cam.LockState.FREE
    assert cam.lock_state({"hami.io/mutex.lock": "x"}, NOW) is cam.LockState.FREE


def test_lock_held_within_two_minutes() -> None:
    # Test_LockNode "node is already locked within 2 minutes" (a minute ago): the bind fails
    one_minute_ago = cam.lock_annotation(NOW - timedelta(minutes=1))
    assert cam.lock_state(one_minute_ago, NOW) is cam.LockState.HELD
    exactly_two = cam.lock_annotation(NOW - timedelta(minutes=2))
    assert cam.lock_state(exactly_two, NOW) is cam.LockState.HELD  # HAMi: time.Since > 2 minutes
    assert cam.lock_state(cam.lock_annotation(NOW + timedelta(hours=1)), NOW) is cam.LockState.HELD


def test_lock_expired_after_two_minutes() -> None:
    # Test_LockNode "lock time expired (more than 2 minutes)" (an hour ago): taken over
    an_hour_ago = cam.lock_annotation(NOW - timedelta(hours=1))
    assert cam.lock_state(an_hour_ago, NOW) is cam.LockState.EXPIRED
    just_over = {"cambricon.com/dsmlu.lock": "2025-01-23T01:57:59Z"}
    assert cam.lock_state(just_over, NOW) is cam.LockState.EXPIRED


def test_invalid_lock_time_is_held() -> None:
    # Test_LockNode "invalid lock time format", Test_setNodeLock "node is locked" ("test123"): HAMi fails the bind
    # while the value stays. The vendor's decision reads it as held, as HAMi; the bind takes such a value over
    # (logged) instead of blocking the node until an admin removes it (difference 21)
    for value in ("invalid-format", "test123"):
        assert cam.lock_state({"cambricon.com/dsmlu.lock": value}, NOW) is cam.LockState.HELD
        assert DSMLU_LOCK.state(value, NOW) is TimedLockState.MALFORMED
    assert cam.lock_state({"cambricon.com/dsmlu.lock": "invalid-format"}, NOW) is cam.LockState.HELD
    with pytest.raises(DecodeError, match=re.escape("cambricon.com/dsmlu.lock")):
        cam.lock_time({"cambricon.com/dsmlu.lock": "invalid-format"})
    assert cam.lock_time({}) is None


def test_lock_time_parses_what_lock_annotation_writes() -> None:
    assert cam.lock_time(cam.lock_annotation(NOW)) == NOW
