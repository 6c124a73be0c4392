"""Hygon DCU vendor: every case of HAMi's ``pkg/device/hygon`` tests restated, plus our own strictness cases.

The index holds no copy of these files at v2.10.0 (4707fb02); read at the nearest stored versions:
``device_test.go`` 46bd7a88 (the ``Fit(devices, request, pod, nodeInfo, allocated)`` signature of the cordon era,
still DCU, before the HCU rename) and ``device_cordon_test.go`` ad358d3a. Each HAMi case is named in a comment
(``Go test name "subtest"``); where our answer differs the comment says so and docs/differences.md lists it.

| Go file | cases | restated | pass as HAMi expects | differences (listed) |
|---|---|---|---|---|
| device_test.go | 42 | 42 | 37 | 5 |
| device_cordon_test.go | 4 | 4 | 4 | 0 |

The differences: a request of another family is never shown a DCU
("fit fail: type mismatch"); a node with fewer cards than asked answers ``NodeInsufficientDevice`` ("user assign
use uuid mismatch", "user assign no use uuid match", "AllocatedCardsInsufficientRequest", all asking 2 of 1);
a ``Deleted`` handshake is answered with a fresh ``Requesting_`` (``Test_CheckHealth`` "Deleted state")."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.unit.vendors.kit import NOW, Fit, Refusal, hami_share_refusals, reason, uuids
from vgpu_scheduler.shared.domain.model import (
    MEM_PCT_UNSET,
    NVIDIA,
    ContainerDevice,
    ContainerRequest,
    DeviceInfo,
    DeviceUsage,
    NodeInventory,
    PodConstraints,
    PodRequest,
)
from vgpu_scheduler.shared.domain.plan import Decision, apply_decision, plan
from vgpu_scheduler.shared.domain.scoring import Policies
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.errors import ConfigError, DecodeError
from vgpu_scheduler.shared.vendors import hygon
from vgpu_scheduler.shared.vendors.base import NodeLockKind
from vgpu_scheduler.shared.vendors.nvidia import NvidiaVendor
from vgpu_scheduler.shared.vendors.pods import device_list_annotations
from vgpu_scheduler.shared.vendors.registration import (
    DecodeFailure,
    Invalid,
    NodeView,
    NotRegistered,
    Registered,
    Unregistered,
)
from vgpu_scheduler.shared.vendors.registry import Vendors

V = hygon.build(None)[0]
VENDORS = Vendors((NvidiaVendor(), V))
fit = Fit(VENDORS)


def ctr(
    limits: dict[str, Any] | None = None, requests: dict[str, Any] | None = None, name: str = "c"
) -> dict[str, Any]:
    return {"name": name, "resources": {"limits": limits or {}, "requests": requests or {}}}


def dcu(
    uuid: str, *, index: int = 0, count: int = 100, mem: int = 128, core: int = 100, health: bool = True, numa: int = 0
) -> DeviceInfo:
    return DeviceInfo(
        id=uuid,
        index=index,
        count=count,
        devmem_mib=mem,
        devcore=core,
        type="DCU",
        numa=numa,
        mode="hami-core",
        health=health,
        vendor=hygon.NAME,
    )


def req(nums: int = 1, mem: int = 0, pct: int = MEM_PCT_UNSET, cores: int = 0) -> ContainerRequest:
    return ContainerRequest(nums=nums, mem_mib=mem, mem_pct=pct, cores_pct=cores, type=hygon.NAME)


# ---- identity, config -------------------------------------------------------------------------------------------


def test_section_and_defaults() -> None:
    # the names and keys, UUID and type selectors (both UUID lists apply; a use list of commas is refused):
    # test_contract.py
    assert hygon.SECTION == "hygon" and V.resources.memory_unit_mib == 1
    assert hygon.build({}) == hygon.build(None)


def test_config_renames_and_memory_factor() -> None:
    (v,) = hygon.build({"resourceCountName": "hygon.com/x", "memoryFactor": 4, "resourceCoreName": ""})
    assert v.resources.count == "hygon.com/x"
    assert v.resources.cores is None
    assert v.resources.memory_unit_mib == 4
    assert hygon.build({"memoryFactor": 0})[0].config.memory_factor == 1  # HAMi scales only above 1


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"resourceMemoryName": 3}, "hygon.resourceMemoryName: expected a string, got 3"),
        ({"resourceCountName": " "}, "hygon.resourceCountName: must not be empty"),
        ({"memoryFactor": -1}, "hygon.memoryFactor: expected a whole number"),
        ({"memoryFactor": True}, "hygon.memoryFactor: expected a whole number"),
        ({"resourceCountname": "x"}, "hygon.resourceCountname: unknown key"),
        (["x"], "hygon: expected a mapping, got list"),
    ],
)
def test_config_errors_name_the_key(section: object, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        hygon.build(section)


# ---- Test_MutateAdmission, Test_GenerateResourceRequests ------------------------------------------------------


def test_mutate_admission() -> None:
    # Test_MutateAdmission "set to resource limits": the count in the limits → true (no edit)
    c = ctr({"hygon.com/dcunum": "1"})
    assert V.mutate_container(c, "c") is True
    assert c == ctr({"hygon.com/dcunum": "1"})
    # ours: the count only in the requests is not MutateAdmission's business (HAMi looks at the limits only)
    assert V.mutate_container(ctr(requests={"hygon.com/dcunum": "1"}), "c") is False
    assert V.manages(ctr(requests={"hygon.com/dcumem": 1}))
    assert not V.manages(ctr({"nvidia.com/gpu": 1}))


BOTH = {"hygon.com/dcunum": "1", "hygon.com/dcucores": "1", "hygon.com/dcumem": "1024"}


@pytest.mark.parametrize(
    ("container", "expected"),
    [
        # Test_GenerateResourceRequests "don't set to limits and request"
        pytest.param(ctr(), None, id="nothing set"),
        # "dcuResourceCount,dcuesourceMem and dcuResourceCores set to limits and request"
        pytest.param(ctr(BOTH, BOTH), ContainerRequest(1, 1024, MEM_PCT_UNSET, 1, "DCU"), id="all three"),
        # "dcuResourceMem,dcuResourceCores don't set limit and dcuResourceCount set to limits and request":
        # memory and cores read from the requests
        pytest.param(
            ctr({"hygon.com/dcunum": "1"}, BOTH), ContainerRequest(1, 1024, MEM_PCT_UNSET, 1, "DCU"), id="requests"
        ),
        # "dcuResourceMem don't set limit and request,dcuResourceCores don't set limit and dcuResourceCount set to
        # limits and request": no memory anywhere → 100 % of the card
        pytest.param(
            ctr({"hygon.com/dcunum": "1"}, {"hygon.com/dcunum": "1", "hygon.com/dcucores": "1"}),
            ContainerRequest(1, 0, 100, 1, "DCU"),
            id="no memory",
        ),
    ],
)
def test_generate_resource_requests(container: dict[str, Any], expected: ContainerRequest | None) -> None:
    got = V.container_request(container, "c")
    if expected is None:
        assert got.empty
    else:
        assert got == expected


def test_request_cores_default_to_100_and_memory_factor_scales() -> None:
    assert V.container_request(ctr({"hygon.com/dcunum": 2}), "c") == ContainerRequest(2, 0, 100, 100, "DCU")
    (v,) = hygon.build({"memoryFactor": 256})
    got = v.container_request(ctr({"hygon.com/dcunum": 1, "hygon.com/dcumem": 4}), "c")
    assert (got.mem_mib, got.mem_pct) == (1024, MEM_PCT_UNSET)


def test_request_count_from_requests_only() -> None:
    # HAMi reads the count from the requests when the limits lack it (its LockNode test relies on it)
    assert V.container_request(ctr(requests={"hygon.com/dcunum": "1"}), "c").nums == 1


@pytest.mark.parametrize(
    ("limits", "fragment"),
    [
        ({"hygon.com/dcunum": "0.5"}, "hygon.com/dcunum counts whole GPUs"),
        ({"hygon.com/dcunum": 1, "hygon.com/dcucores": "1Ki"}, "hygon.com/dcucores is a percentage"),
        ({"hygon.com/dcunum": 1, "hygon.com/dcumem": "20Gi"}, "did you mean 20480?"),
        ({"hygon.com/dcunum": -1}, "cannot be negative"),
        ({"hygon.com/dcumem": 1024}, "hygon.com/dcumem needs hygon.com/dcunum"),
        ({"hygon.com/dcunum": 0, "hygon.com/dcumem": 1024}, "hygon.com/dcunum is 0 but hygon.com/dcumem"),
    ],
)
def test_request_refusals(limits: dict[str, Any], fragment: str) -> None:
    # ours, stricter than HAMi (difference 21): HAMi drops such a request and the pod runs without a DCU
    with pytest.raises(DecodeError, match=re.escape(fragment)) as info:
        V.container_request(ctr(limits, name="train"), "spec.containers[0]")
    assert 'container "train"' in str(info.value)


def test_request_lists_every_problem_and_zero_count_is_empty() -> None:
    with pytest.raises(DecodeError) as info:
        V.container_request(ctr({"hygon.com/dcunum": "1.5", "hygon.com/dcucores": -200}), "c")
    assert str(info.value).count('container "c"') == 2
    assert V.container_request(ctr({"hygon.com/dcunum": 0, "hygon.com/dcucores": 30}), "c").empty


# ---- Test_checkDCUtype, Test_checkType ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotations", "card", "ok"),
    [
        # Test_checkDCUtype, its eight cases in order
        pytest.param({"hygon.com/use-dcutype": "dcu"}, "dcu", True, id="exist one dcu in use type"),
        pytest.param({"hygon.com/use-dcutype": "dcu"}, "test", False, id="the different of dcu in use type"),
        pytest.param({}, "dcu", True, id="no dcu in use annotation"),
        pytest.param({"hygon.com/use-dcutype": "dcu,test"}, "dcu", True, id="exist multi dcu in use type"),
        pytest.param({"hygon.com/nouse-dcutype": "dcu"}, "dcu", False, id="exist one dcu no use type"),
        pytest.param({}, "dcu", True, id="no dcu in use annotation (again)"),
        pytest.param({"hygon.com/nouse-dcutype": "test,dcu"}, "test", False, id="exist multi dcu no use type"),
        pytest.param({"hygon.com/nouse-dcutype": "dcu"}, "test", True, id="the different of dcu no use type"),
        # ours: tokens trimmed, matched as substrings; a blank list is no constraint
        pytest.param({"hygon.com/use-dcutype": " Z100 , "}, "Hygon Z100L", True, id="trimmed substring"),
        pytest.param({"hygon.com/nouse-dcutype": ""}, "dcu", True, id="blank nouse"),
    ],
)
def test_check_dcu_type(annotations: dict[str, str], card: str, ok: bool) -> None:
    dev = DeviceInfo("d", 0, 1, 1, 100, card, 0, "hami-core", True, vendor="DCU")
    constraints = PodConstraints(vendor_selectors={"DCU": V.selectors(annotations)})
    assert hygon.DCU_RULES.type_ok(dev, req(), constraints) is ok


def test_check_type() -> None:
    constraints = PodConstraints(vendor_selectors={"DCU": V.selectors({"hygon.com/use-dcutype": "DCU"})})
    card = dcu("d")
    # Test_checkType "the same type": a DCU request on a DCU card passes the use-dcutype selector
    assert hygon.DCU_RULES.type_ok(card, req(), constraints) is True
    # "the different type": a request of type "test" never matches
    assert hygon.DCU_RULES.type_ok(card, ContainerRequest(1, type="test"), constraints) is False
    assert hygon.DCU_RULES.type_ok(card, ContainerRequest(1, type="NVIDIA"), PodConstraints()) is False


# ---- TestDevices_Fit (through the core) ---------------------------------------------------------------------

TWO = [dcu("dev-0"), dcu("dev-1", index=1)]


def test_fit_success() -> None:
    # TestDevices_Fit "fit success": two idle cards, 64 MiB and 50 cores → one card. HAMi walks the cards from
    # the last and takes dev-1, and so do we (difference 8)
    got = fit(TWO, req(1, 64, cores=50))
    assert isinstance(got, Decision)
    assert got.devices == ((ContainerDevice("dev-1", 64, 50, "DCU"),),)


@pytest.mark.parametrize(
    "case",
    [
        *hami_share_refusals(dcu, req),
        pytest.param(Refusal([dcu("dev-0", mem=1280)], req(1, 512, cores=50),
                             annotations={"hygon.com/use-gpuuuid": "dev-1"}, expected="1/1 CardUuidMismatch"),
                     id="use uuid mismatch, one card asked"),
        pytest.param(Refusal([dcu("dev-0", mem=1280)], req(1, 512, cores=50),
                             annotations={"hygon.com/nouse-gpuuuid": "dev-0"}, expected="1/1 CardUuidMismatch"),
                     id="nouse uuid match, one card asked"),
    ],
)  # fmt: skip
def test_fit_refusals(case: Refusal) -> None:
    # TestDevices_Fit "fit fail: memory not enough" (128 MiB card, 512 asked), "fit fail: core not enough",
    # "fit fail: card overused" (100 of 100 slots), "fit fail:  card exclusively" (100 cores on a used card),
    # "fit fail:  CardComputeUnitsExhausted" (0 cores on a card whose cores are all taken); the two UUID cases
    # with one card asked (HAMi's ask two: see test_fit_more_cards_than_the_node_has); an unhealthy card and a
    # type selector, ours, are test_contract.py's for DCU
    assert fit.refusal(case) == case.expected


def test_fit_type_mismatch() -> None:
    # TestDevices_Fit "fit fail: type mismatch": a request of type "OtherType" on a DCU card. HAMi answers
    # "1/1 CardTypeMismatch"; ours never shows a request another family's cards: NodeInsufficientDevice
    asked = ContainerRequest(1, 512, MEM_PCT_UNSET, 50, "OtherType")
    assert reason(fit([dcu("dev-0")], asked)) == "NodeInsufficientDevice"


@pytest.mark.parametrize(
    ("usage", "annotations"),
    [
        # TestDevices_Fit "fit fail: user assign use uuid mismatch" (HAMi: "1/1 CardUuidMismatch")
        pytest.param({}, {"hygon.com/use-gpuuuid": "dev-0"}, id="use uuid mismatch"),
        # "fit fail: user assign no use uuid match" (HAMi: "1/1 CardUuidMismatch")
        pytest.param({}, {"hygon.com/nouse-gpuuuid": "dev-0"}, id="no use uuid match"),
        # "fit fail:  AllocatedCardsInsufficientRequest" (HAMi: "1/1 AllocatedCardsInsufficientRequest")
        pytest.param({"dev-0": DeviceUsage(20, 0, 10)}, {}, id="AllocatedCardsInsufficientRequest"),
    ],
)
def test_fit_more_cards_than_the_node_has(usage: dict[str, DeviceUsage], annotations: dict[str, str]) -> None:
    # HAMi's three cases ask for 2 DCUs on a node with one card and report what stopped each card; ours stops
    # before looking at the cards: one card cannot serve two (NodeInsufficientDevice, as for Biren and Vastai)
    card = dcu("dev-0" if annotations.get("hygon.com/use-gpuuuid") is None else "dev-1", mem=1280)
    asked = req(2, 512, cores=20 if usage else 50)
    assert reason(fit([card], asked, usage=usage, annotations=annotations)) == "NodeInsufficientDevice"


def test_fit_allocated_cards_insufficient_request_on_two_cards() -> None:
    # ours: the reason HAMi gives when some cards were taken but not enough, with the cards to see it
    two = [dcu("dev-0", mem=1280), dcu("dev-1", index=1, mem=1280)]
    got = fit(two, req(2, 512, cores=20), usage={"dev-0": DeviceUsage(100)})
    assert reason(got) == "1/2 AllocatedCardsInsufficientRequest, 1/2 CardTimeSlicingExhausted"


def test_fit_core_limit_cannot_exceed_100() -> None:
    # TestDevices_Fit "fit success: but core limit can't exceed 100": 120 cores fits dev-0, capped at 100
    got = fit([dcu("dev-0", mem=1280)], req(1, 512, cores=120))
    assert isinstance(got, Decision)
    assert got.devices == ((ContainerDevice("dev-0", 512, 100, "DCU"),),)
    # the parser reads 120 as 100 too, with an admission warning (difference 23)
    parsed = V.container_request(ctr({"hygon.com/dcunum": 1, "hygon.com/dcucores": 120}), "c")
    assert parsed.cores_pct == 100


def test_fit_memory_percentage() -> None:
    # TestDevices_Fit "fit success:  memory percentage": 10 % of a 1280 MiB card in use by 20 tasks → 128 MiB
    got = fit([dcu("dev-0", mem=1280)], req(1, 0, 10, cores=20), usage={"dev-0": DeviceUsage(20, 0, 10)})
    assert isinstance(got, Decision)
    assert got.devices == ((ContainerDevice("dev-0", 128, 20, "DCU"),),)
    # ours: a parsed request with no memory takes the whole card
    whole = V.container_request(ctr({"hygon.com/dcunum": 1, "hygon.com/dcucores": 10}), "c")
    got = fit([dcu("dev-0", mem=1280)], whole)
    assert isinstance(got, Decision) and got.devices[0][0].used_mem_mib == 1280


def test_add_resource_usage() -> None:
    # TestDevices_AddResourceUsage "test add resource usage": usage (0 tasks, 2000 MiB, 15 cores) plus an entry
    # of 1024 MiB and 50 cores → 1 task, 3024 MiB, 65 cores
    snap = NodeSnapshot(
        NodeInventory(node="n1", vendor=hygon.NAME, devices=(dcu("dev-0", mem=4096),)),
        {"dev-0": DeviceUsage(0, 2000, 15)},
    )
    got = plan(
        PodRequest((req(1, 1024, cores=50),), 0), PodConstraints(), [snap], policies=Policies(), rules=VENDORS.rules
    )
    assert isinstance(got, Decision)
    assert apply_decision(snap, got).device_usage("dev-0") == DeviceUsage(1, 3024, 65)


def test_fit_ignores_other_vendors_devices() -> None:
    nvidia = DeviceInfo("GPU-0", 0, 10, 8000, 100, "NVIDIA-A100", 0, "hami-core", True)
    assert reason(fit([nvidia], req(1, 64, cores=50))) == "NodeInsufficientDevice"


# ---- TestFit_DeviceCordon (device_cordon_test.go) -----------------------------------------------------------


def cordon_of(value: str) -> frozenset[str]:
    """What the registrar keeps of a ``hami.io/device-cordon`` value on a node with dev-0 and dev-1."""
    register = "dev-0,100,128,100,DCU,0,true,0,hami-core:dev-1,100,128,100,DCU,0,true,1,hami-core:"
    got = V.observe(node({hygon.REGISTER_KEY: register, "hami.io/device-cordon": value}), NOW)
    assert isinstance(got, Registered)
    return got.inventory.cordoned


def test_fit_device_cordon() -> None:
    asked = req(1, 64, cores=50)
    # "cordoned device is skipped, healthy sibling still fits" (annotation "dev-1, ")
    assert uuids(fit(TWO, asked, cordoned=cordon_of("dev-1, "))) == ["dev-0"]
    # "all devices cordoned fails with CardCordoned reason"
    assert reason(fit(TWO, asked, cordoned=cordon_of("dev-0,dev-1"))) == "2/2 CardCordoned"
    # "running pods on a cordoned device are unaffected": dev-1 keeps its usage, the new pod goes to dev-0
    used = {"dev-1": DeviceUsage(1, 64, 50)}
    got = fit(TWO, asked, usage=used, cordoned=cordon_of("dev-1"))
    assert uuids(got) == ["dev-0"] and used["dev-1"] == DeviceUsage(1, 64, 50)
    # "no annotation or no node info means nothing cordoned" (empty, "   "): dev-1, as HAMi
    for value in ("", "   "):
        assert cordon_of(value) == frozenset()
        assert uuids(fit(TWO, asked, cordoned=cordon_of(value))) == ["dev-1"]
    assert uuids(fit(TWO, asked)) == ["dev-1"]


# ---- Test_GetNodeDevices, Test_CheckHealth ------------------------------------------------------------------


def node(annotations: dict[str, str], allocatable: dict[str, Any] | None = None) -> NodeView:
    return NodeView("n1", "1", annotations, allocatable if allocatable is not None else {"hygon.com/dcunum": "1"})


def test_get_node_devices_exist_dcu_device() -> None:
    # Test_GetNodeDevices "exist dcu device": the 9-field colon format
    got = V.observe(node({hygon.REGISTER_KEY: "test-0,1,1024,100,DCU,0,true,0,test:"}), NOW)
    assert isinstance(got, Registered)
    (d,) = got.inventory.devices
    assert (d.id, d.count, d.devmem_mib, d.devcore, d.type, d.numa, d.health, d.index, d.mode, d.vendor) == (
        "test-0",
        1,
        1024,
        100,
        "DCU",
        0,
        True,
        0,
        "test",
        "DCU",
    )
    assert got.inventory.vendor == "DCU"
    assert got.legacy is True
    assert got.handshake is not None and got.handshake.startswith("Requesting_2025-01-07 12:00:00")


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        # Test_GetNodeDevices "no annotation"
        pytest.param({}, NotRegistered(Unregistered.ABSENT), id="no annotation"),
        # "no dcu device" (":")
        pytest.param({hygon.REGISTER_KEY: ":"}, NotRegistered(Unregistered.NO_DEVICES, legacy=True), id="no device"),
    ],
)
def test_register_absent_or_empty(annotations: dict[str, str], expected: NotRegistered) -> None:
    assert V.observe(node(annotations), NOW) == expected


@pytest.mark.parametrize(
    "value",
    [
        # Test_GetNodeDevices "node annotations not decode successfully" ("")
        pytest.param("", id="not decode successfully"),
        # "dcu device length less than 7"
        pytest.param("test-0,1,1024,100,DCU:", id="length less than 7"),
        # ours: JSON (HAMi's DecodeNodeDevices refuses it too) and a count that is not a number
        pytest.param('[{"id":"a","count":1,"health":true}]', id="json"),
        pytest.param("a,x,1,1,DCU,0,true:", id="bad count"),
    ],
)
def test_register_invalid(value: str) -> None:
    got = V.observe(node({hygon.REGISTER_KEY: value}), NOW)
    assert isinstance(got, Invalid)
    assert (got.failure, got.source, got.value) == (DecodeFailure.REGISTER, hygon.REGISTER_KEY, value)
    assert got.error.what.startswith(hygon.REGISTER_KEY)


def test_allocatable_not_a_quantity_is_invalid() -> None:
    got = V.observe(node({hygon.REGISTER_KEY: "a,1,1,1,DCU,0,true:"}, {"hygon.com/dcunum": "lots"}), NOW)
    assert isinstance(got, Invalid) and got.failure is DecodeFailure.ALLOCATABLE


REG = {hygon.REGISTER_KEY: "a,1,1,1,DCU,0,true:"}
HANDSHAKE_KEY = "hami.io/node-handshake-dcu"


def test_check_health_requesting_state_expired() -> None:
    # Test_CheckHealth "Requesting state expired" (Requesting_2025-01-07 00:00:00): unhealthy, no update. Ours:
    # unhealthy while nothing is allocatable, nothing written
    expired = {**REG, HANDSHAKE_KEY: "Requesting_2025-01-07 00:00:00"}
    assert V.observe(node(expired, {}), NOW) == NotRegistered(Unregistered.HANDSHAKE_TIMEOUT, legacy=True)
    # ours: expired but the plugin still advertises DCUs → healthy, nothing written
    got = V.observe(node(expired), NOW)
    assert isinstance(got, Registered) and got.handshake is None
    # ours: a fresh Requesting_ → healthy, nothing written
    got = V.observe(node({**REG, HANDSHAKE_KEY: "Requesting_2025-01-07 11:59:30"}, {}), NOW)
    assert isinstance(got, Registered) and got.handshake is None


def test_check_health_deleted_state() -> None:
    # Test_CheckHealth "Deleted state": HAMi healthy, no update. Ours healthy, and asks the plugin again with a
    # fresh Requesting_ (a Deleted marker left by an older scheduler would otherwise keep the node healthy
    # forever without a handshake)
    got = V.observe(node({**REG, HANDSHAKE_KEY: "Deleted"}, {}), NOW)
    assert isinstance(got, Registered)
    assert got.handshake == "Requesting_2025-01-07 12:00:00"


def test_check_health_unknown_state() -> None:
    # Test_CheckHealth "Unknown state": healthy, update (a fresh Requesting_); a plugin's Reported answer too
    for value in ("Unknown", "Reported 2025-01-07 11:59:59.5 +0800 CST"):
        got = V.observe(node({**REG, HANDSHAKE_KEY: value}, {}), NOW)
        assert isinstance(got, Registered)
        assert got.handshake == "Requesting_2025-01-07 12:00:00"
        assert got.reporter is value.startswith("Reported")


def test_cordon_keeps_known_uuids_only() -> None:
    a = {hygon.REGISTER_KEY: "a,1,1,1,DCU,0,true:b,1,1,1,DCU,0,true:", "hami.io/device-cordon": "b, zz"}
    got = V.observe(node(a), NOW)
    assert isinstance(got, Registered) and got.inventory.cordoned == frozenset({"b"})


def test_registration_roundtrip_and_capacity() -> None:
    devices = (dcu("dev-0", count=4), dcu("dev-1", index=1, count=4, numa=1))
    annotations = hygon.registration_annotations(devices)
    assert annotations == {
        hygon.REGISTER_KEY: "dev-0,4,128,100,DCU,0,true,0,hami-core:dev-1,4,128,100,DCU,1,true,1,hami-core:"
    }
    capacity = hygon.node_capacity(devices)
    assert capacity == {"hygon.com/dcunum": "8"}
    got = V.observe(node(annotations, capacity), NOW)
    assert isinstance(got, Registered) and got.inventory.devices == devices
    with pytest.raises(DecodeError, match=re.escape(hygon.REGISTER_KEY)):
        hygon.registration_annotations([dcu("a,b")])


# ---- Test_PatchAnnotations, TestDevices_LockNode, TestDevices_ReleaseNodeLock --------------------------------


def test_patch_annotations() -> None:
    # Test_PatchAnnotations "exist device": "test1,DCU,2048,1:;" under both keys
    devices = ((ContainerDevice("test1", 2048, 1, "DCU"),),)
    assert device_list_annotations(devices, VENDORS) == {
        "hami.io/dcu-devices-to-allocate": "test1,DCU,2048,1:;",
        "hami.io/dcu-devices-allocated": "test1,DCU,2048,1:;",
    }
    assert V.decode_devices("test1,DCU,2048,1:;") == (*devices, ())
    # "no device": no DCU key for a pod without DCUs
    nv = ((ContainerDevice("GPU-0", 10, 0, NVIDIA),),)
    assert not any("dcu" in k for k in device_list_annotations(nv, VENDORS))
    with pytest.raises(DecodeError, match=re.escape("hami.io/dcu-devices-allocated")):
        V.decode_devices("test1,DCU,x,1:;")


def test_lock_node_and_release() -> None:
    # TestDevices_LockNode / TestDevices_ReleaseNodeLock "Test with no containers": no DCU asked → not this
    # vendor's pod, no lock taken (and none released). "Test with non-zero resource requests" (the count in the
    # requests): the pod's DCUs are placed and its bind takes, and gives back, HAMi's hami.io/mutex.lock. The
    # three cases through /bind with this vendor: tests/integration/extender/test_bind_vendors.py (test_hygon_*)
    assert not V.manages(ctr())
    asked = ctr(requests={"hygon.com/dcunum": "1"})
    assert V.manages(asked) and V.container_request(asked, "c").nums == 1
    assert V.node_lock is NodeLockKind.HAMI
