"""Hygon DCU vendor: HAMi's ``pkg/device/hygon`` tests restated (request generation, type/UUID checks, register
decode, handshake, Fit cases with their reasons, cordon, annotations) plus our own strictness cases."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

import pytest

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
from vgpu_scheduler.shared.domain.plan import Decision, Failure, plan
from vgpu_scheduler.shared.domain.scoring import Policies
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.domain.vendor import NVIDIA_RULES, RuleSet
from vgpu_scheduler.shared.errors import ConfigError, DecodeError
from vgpu_scheduler.shared.vendors import hygon
from vgpu_scheduler.shared.vendors.base import NodeLockKind
from vgpu_scheduler.shared.vendors.registration import (
    DecodeFailure,
    Invalid,
    NodeView,
    NotRegistered,
    Registered,
    Unregistered,
)

V = hygon.build(None)[0]
NOW = datetime(2025, 1, 7, 12, 0, 0)
RULES = RuleSet({NVIDIA: NVIDIA_RULES, hygon.NAME: hygon.DCU_RULES})


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


def fit(
    devices: list[DeviceInfo],
    request: ContainerRequest,
    *,
    usage: dict[str, DeviceUsage] | None = None,
    annotations: dict[str, str] | None = None,
    cordoned: frozenset[str] = frozenset(),
) -> Decision | Failure:
    inv = NodeInventory(node="n1", vendor=hygon.NAME, devices=tuple(devices), cordoned=cordoned)
    sel = V.selectors(annotations or {})
    constraints = PodConstraints(vendor_selectors={hygon.NAME: sel})
    pod = PodRequest(containers=(request,), init_count=0)
    return plan(pod, constraints, [NodeSnapshot(inv, usage or {})], policies=Policies(), rules=RULES)


def req(nums: int = 1, mem: int = 0, pct: int = MEM_PCT_UNSET, cores: int = 0) -> ContainerRequest:
    return ContainerRequest(nums=nums, mem_mib=mem, mem_pct=pct, cores_pct=cores, type=hygon.NAME)


def reason(result: Decision | Failure) -> str:
    assert isinstance(result, Failure), result
    return result.reasons["n1"]


def uuids(result: Decision | Failure) -> list[str]:
    assert isinstance(result, Decision), result
    return [d.uuid for d in result.devices[0]]


# ---- identity, config -------------------------------------------------------------------------------------------


def test_keys_and_names() -> None:
    assert hygon.SECTION == "hygon"
    assert (V.name, V.register_key, V.handshake_key) == (
        "DCU",
        "hami.io/node-dcu-register",
        "hami.io/node-handshake-dcu",
    )
    assert (V.to_allocate_key, V.allocated_key) == ("hami.io/dcu-devices-to-allocate", "hami.io/dcu-devices-allocated")
    assert V.node_lock is NodeLockKind.HAMI
    r = V.resources
    assert (r.count, r.memory, r.cores, r.memory_unit_mib) == (
        "hygon.com/dcunum",
        "hygon.com/dcumem",
        "hygon.com/dcucores",
        1,
    )
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


# ---- GenerateResourceRequests -----------------------------------------------------------------------------------


def test_request_hami_cases() -> None:
    # HAMi: nothing set → no request
    assert V.container_request(ctr(), "c").empty
    # count, memory and cores in limits and requests
    both = {"hygon.com/dcunum": "1", "hygon.com/dcucores": "1", "hygon.com/dcumem": "1024"}
    assert V.container_request(ctr(both, both), "c") == ContainerRequest(1, 1024, MEM_PCT_UNSET, 1, "DCU")
    # count in limits, memory and cores only in the requests: read from the requests
    got = V.container_request(ctr({"hygon.com/dcunum": "1"}, both), "c")
    assert got == ContainerRequest(1, 1024, MEM_PCT_UNSET, 1, "DCU")
    # no memory anywhere: the whole card (100 %)
    got = V.container_request(ctr({"hygon.com/dcunum": "1"}, {"hygon.com/dcucores": "1"}), "c")
    assert got == ContainerRequest(1, 0, 100, 1, "DCU")


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
    with pytest.raises(DecodeError, match=re.escape(fragment)) as info:
        V.container_request(ctr(limits, name="train"), "spec.containers[0]")
    assert 'container "train"' in str(info.value)


def test_request_lists_every_problem_and_zero_count_is_empty() -> None:
    with pytest.raises(DecodeError) as info:
        V.container_request(ctr({"hygon.com/dcunum": "1.5", "hygon.com/dcucores": -200}), "c")
    assert str(info.value).count('container "c"') == 2
    assert V.container_request(ctr({"hygon.com/dcunum": 0, "hygon.com/dcucores": 30}), "c").empty


def test_manages_and_mutate() -> None:
    assert V.manages(ctr(requests={"hygon.com/dcumem": 1}))
    assert not V.manages(ctr({"nvidia.com/gpu": 1}))
    # HAMi's MutateAdmission: the count in the limits, nothing else
    c = ctr({"hygon.com/dcunum": "1"})
    assert V.mutate_container(c, "c") is True
    assert c == ctr({"hygon.com/dcunum": "1"})
    assert V.mutate_container(ctr(requests={"hygon.com/dcunum": "1"}), "c") is False


# ---- CheckType / CheckUUID --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotations", "card", "ok"),
    [
        ({"hygon.com/use-dcutype": "dcu"}, "dcu", True),
        ({"hygon.com/use-dcutype": "dcu"}, "test", False),
        ({}, "dcu", True),
        ({"hygon.com/use-dcutype": "dcu,test"}, "dcu", True),
        ({"hygon.com/nouse-dcutype": "dcu"}, "dcu", False),
        ({"hygon.com/nouse-dcutype": "test,dcu"}, "test", False),
        ({"hygon.com/nouse-dcutype": "dcu"}, "test", True),
        ({"hygon.com/use-dcutype": " Z100 , "}, "Hygon Z100L", True),
        ({"hygon.com/nouse-dcutype": ""}, "dcu", True),
    ],
)
def test_check_type(annotations: dict[str, str], card: str, ok: bool) -> None:
    dev = DeviceInfo("d", 0, 1, 1, 100, card, 0, "hami-core", True, vendor="DCU")
    constraints = PodConstraints(vendor_selectors={"DCU": V.selectors(annotations)})
    assert hygon.DCU_RULES.type_ok(dev, req(), constraints) is ok
    # a request of another vendor never matches (HAMi: the request type must be DCU)
    assert hygon.DCU_RULES.type_ok(dev, ContainerRequest(1, type="NVIDIA"), PodConstraints()) is False


def test_uuid_lists_both_apply_and_a_use_list_of_commas_is_refused() -> None:
    sel = V.selectors({"hygon.com/use-gpuuuid": "a, b", "hygon.com/nouse-gpuuuid": "b"})
    constraints = PodConstraints(vendor_selectors={"DCU": sel})
    assert hygon.DCU_RULES.uuid_ok(dcu("a"), constraints)
    assert not hygon.DCU_RULES.uuid_ok(dcu("b"), constraints)  # HAMi's CheckUUID applies both lists
    assert not hygon.DCU_RULES.uuid_ok(dcu("c"), constraints)
    with pytest.raises(DecodeError, match=re.escape("hygon.com/use-gpuuuid")):
        V.selectors({"hygon.com/use-gpuuuid": " , "})


# ---- Fit (HAMi's TestDevices_Fit, through the core) -------------------------------------------------------------

TWO = [dcu("dev-0"), dcu("dev-1", index=1)]


def test_fit_success_takes_one_card() -> None:
    got = fit(TWO, req(1, 64, cores=50))
    assert isinstance(got, Decision)
    assert got.devices == ((ContainerDevice("dev-0", 64, 50, "DCU"),),)  # lowest index wins ties (HAMi: dev-1)


@pytest.mark.parametrize(
    ("devices", "asked", "usage", "annotations", "expected"),
    [
        ([dcu("dev-0")], req(1, 512, cores=50), {}, {}, "1/1 CardInsufficientMemory"),
        (
            [dcu("dev-0", mem=1024)],
            req(1, 512, cores=50),
            {"dev-0": DeviceUsage(0, 0, 100)},
            {},
            "1/1 CardInsufficientCore",
        ),
        (
            [dcu("dev-0", mem=1280)],
            req(1, 512, cores=50),
            {},
            {"hygon.com/nouse-gpuuuid": "dev-0"},
            "1/1 CardUuidMismatch",
        ),
        (
            [dcu("dev-0", mem=1280)],
            req(1, 512, cores=50),
            {"dev-0": DeviceUsage(100)},
            {},
            "1/1 CardTimeSlicingExhausted",
        ),
        (
            [dcu("dev-0", mem=1280)],
            req(1, 512, cores=100),
            {"dev-0": DeviceUsage(20)},
            {},
            "1/1 ExclusiveDeviceAllocateConflict",
        ),
        (
            [dcu("dev-0", mem=1280)],
            req(1, 512, cores=0),
            {"dev-0": DeviceUsage(20, 0, 100)},
            {},
            "1/1 CardComputeUnitsExhausted",
        ),
        ([dcu("dev-0", health=False)], req(1, 64, cores=50), {}, {}, "1/1 CardNotHealth"),
        ([dcu("dev-0")], req(1, 64, cores=50), {}, {"hygon.com/use-dcutype": "K100"}, "1/1 CardTypeMismatch"),
    ],
)
def test_fit_refusals(
    devices: list[DeviceInfo],
    asked: ContainerRequest,
    usage: dict[str, DeviceUsage],
    annotations: dict[str, str],
    expected: str,
) -> None:
    assert reason(fit(devices, asked, usage=usage, annotations=annotations)) == expected


def test_fit_use_uuid_mismatch_and_insufficient_request() -> None:
    # HAMi: 2 DCUs asked, one card whose UUID is not the one asked → "1/1 CardUuidMismatch"; ours stops earlier:
    # one card cannot serve a request for two
    one = [dcu("dev-1", mem=1280)]
    assert (
        reason(fit(one, req(1, 512, cores=50), annotations={"hygon.com/use-gpuuuid": "dev-0"}))
        == "1/1 CardUuidMismatch"
    )
    assert reason(fit(one, req(2, 512, cores=50))) == "NodeInsufficientDevice"
    # two cards, one exhausted: the other is taken but the request is short → AllocatedCardsInsufficientRequest
    two = [dcu("dev-0", mem=1280), dcu("dev-1", index=1, mem=1280)]
    got = fit(two, req(2, 512, cores=20), usage={"dev-0": DeviceUsage(100)})
    assert reason(got) == "1/2 AllocatedCardsInsufficientRequest, 1/2 CardTimeSlicingExhausted"


def test_fit_memory_percentage() -> None:
    got = fit([dcu("dev-0", mem=1280)], req(1, 0, 10, cores=20), usage={"dev-0": DeviceUsage(20, 0, 10)})
    assert isinstance(got, Decision)
    assert got.devices[0][0].used_mem_mib == 128
    # a parsed request with no memory takes the whole card
    whole = V.container_request(ctr({"hygon.com/dcunum": 1, "hygon.com/dcucores": 10}), "c")
    got = fit([dcu("dev-0", mem=1280)], whole)
    assert isinstance(got, Decision) and got.devices[0][0].used_mem_mib == 1280


def test_fit_cordon() -> None:
    # HAMi's TestFit_DeviceCordon: a cordoned card is skipped; all cordoned → CardCordoned
    assert uuids(fit(TWO, req(1, 64, cores=50), cordoned=frozenset({"dev-0"}))) == ["dev-1"]
    assert reason(fit(TWO, req(1, 64, cores=50), cordoned=frozenset({"dev-0", "dev-1"}))) == "2/2 CardCordoned"
    # a card already in use stays in use, the new pod goes elsewhere
    got = fit(TWO, req(1, 64, cores=50), usage={"dev-1": DeviceUsage(1, 64, 50)}, cordoned=frozenset({"dev-1"}))
    assert uuids(got) == ["dev-0"]


def test_fit_ignores_other_vendors_devices() -> None:
    nvidia = DeviceInfo("GPU-0", 0, 10, 8000, 100, "NVIDIA-A100", 0, "hami-core", True)
    assert reason(fit([nvidia], req(1, 64, cores=50))) == "NodeInsufficientDevice"


# ---- registration and the handshake -----------------------------------------------------------------------------


def node(annotations: dict[str, str], allocatable: dict[str, Any] | None = None) -> NodeView:
    return NodeView("n1", "1", annotations, allocatable if allocatable is not None else {"hygon.com/dcunum": "1"})


def test_register_decodes_colon_format() -> None:
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
        ({}, NotRegistered(Unregistered.ABSENT)),
        ({hygon.REGISTER_KEY: ":"}, NotRegistered(Unregistered.NO_DEVICES, legacy=True)),
    ],
)
def test_register_absent_or_empty(annotations: dict[str, str], expected: NotRegistered) -> None:
    assert V.observe(node(annotations), NOW) == expected


@pytest.mark.parametrize(
    "value",
    ["", "test-0,1,1024,100,DCU:", '[{"id":"a","count":1,"health":true}]', "a,x,1,1,DCU,0,true:"],
)
def test_register_invalid(value: str) -> None:
    got = V.observe(node({hygon.REGISTER_KEY: value}), NOW)
    assert isinstance(got, Invalid)
    assert (got.failure, got.source, got.value) == (DecodeFailure.REGISTER, hygon.REGISTER_KEY, value)
    assert got.error.what.startswith(hygon.REGISTER_KEY)


def test_allocatable_not_a_quantity_is_invalid() -> None:
    got = V.observe(node({hygon.REGISTER_KEY: "a,1,1,1,DCU,0,true:"}, {"hygon.com/dcunum": "lots"}), NOW)
    assert isinstance(got, Invalid) and got.failure is DecodeFailure.ALLOCATABLE


def test_handshake() -> None:
    reg = {hygon.REGISTER_KEY: "a,1,1,1,DCU,0,true:"}
    expired = {**reg, hygon.HANDSHAKE_KEY: "Requesting_2025-01-07 00:00:00"}
    # HAMi's "Requesting state expired" with no allocatable: unhealthy
    assert V.observe(node(expired, {}), NOW) == NotRegistered(Unregistered.HANDSHAKE_TIMEOUT, legacy=True)
    # expired but the plugin still advertises DCUs: healthy, nothing written
    got = V.observe(node(expired), NOW)
    assert isinstance(got, Registered) and got.handshake is None
    # fresh Requesting_: healthy, nothing written
    fresh = {**reg, hygon.HANDSHAKE_KEY: "Requesting_2025-01-07 11:59:30"}
    got = V.observe(node(fresh, {}), NOW)
    assert isinstance(got, Registered) and got.handshake is None
    # anything else ("Unknown", "Deleted", a Reported answer): write a fresh Requesting_
    for value in ("Unknown", "Deleted", "Reported 2025-01-07 11:59:59.5 +0800 CST"):
        got = V.observe(node({**reg, hygon.HANDSHAKE_KEY: value}, {}), NOW)
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


# ---- pod annotations --------------------------------------------------------------------------------------------


def test_pod_device_list() -> None:
    # HAMi's PatchAnnotations: "test1,DCU,2048,1:;"
    devices = ((ContainerDevice("test1", 2048, 1, "DCU"),),)
    assert V.encode_devices(devices) == "test1,DCU,2048,1:;"
    assert V.decode_devices("test1,DCU,2048,1:;") == (*devices, ())
    with pytest.raises(DecodeError, match=re.escape(hygon.ALLOCATED_KEY)):
        V.decode_devices("test1,DCU,x,1:;")
