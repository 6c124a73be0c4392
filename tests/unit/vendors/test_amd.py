"""AMD vendor: HAMi's ``pkg/device/amd`` tests restated (MutateAdmission, request generation, type check,
register decode, liveness, Fit's memory and compute-unit arithmetic with its reasons, cordon, annotations) plus
our own strictness cases.

The index holds no copy of ``device_test.go`` at v2.10.0 itself; the stored version read is the one whose
``TestDevices_Fit`` has "retains the registered product type in the allocation" right after "core percentage
maps per device" and no ``cuPerWGP``, memory-percentage or NUMA cases (those came after v2.10.0)."""

from __future__ import annotations

import dataclasses
import re
from datetime import datetime
from typing import Any

import pytest

from vgpu_scheduler.shared.codec.envelope import decode_allocation, encode_allocation
from vgpu_scheduler.shared.domain.model import (
    MEM_PCT_UNSET,
    NVIDIA,
    Allocation,
    ContainerDevice,
    ContainerRequest,
    DeviceCharge,
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
from vgpu_scheduler.shared.vendors import amd
from vgpu_scheduler.shared.vendors.base import NodeLockKind
from vgpu_scheduler.shared.vendors.registration import (
    DecodeFailure,
    Invalid,
    NodeView,
    NotRegistered,
    Registered,
    Unregistered,
)

V = amd.build(None)[0]
NOW = datetime(2025, 1, 7, 12, 0, 0)
RULES = RuleSet({NVIDIA: NVIDIA_RULES, amd.NAME: amd.AMD_RULES})
TEST_NAMES = {"resourceMemoryName": "amd.com/gpu-mem", "resourceCoreName": "amd.com/gpu-core-pct"}
T = amd.build(TEST_NAMES)[0]
"""The resource names HAMi's tests configure."""


def ctr(
    limits: dict[str, Any] | None = None, requests: dict[str, Any] | None = None, name: str = "c"
) -> dict[str, Any]:
    return {"name": name, "resources": {"limits": limits or {}, "requests": requests or {}}}


def gpu(
    uuid: str,
    *,
    index: int = 0,
    count: int = 2,
    mem: int = 1000,
    core: int = 100,
    type: str = "AMD",
    health: bool = True,
) -> DeviceInfo:
    return DeviceInfo(uuid, index, count, mem, core, type, 0, "", health, vendor=amd.NAME)


def req(nums: int = 1, mem: int = 0, cores: int = 100) -> ContainerRequest:
    return ContainerRequest(nums=nums, mem_mib=mem, mem_pct=MEM_PCT_UNSET, cores_pct=cores, type=amd.NAME)


def fit(
    devices: list[DeviceInfo],
    asked: ContainerRequest,
    *,
    usage: dict[str, DeviceUsage] | None = None,
    annotations: dict[str, str] | None = None,
    cordoned: frozenset[str] = frozenset(),
) -> Decision | Failure:
    inv = NodeInventory(node="n1", vendor=amd.NAME, devices=tuple(devices), cordoned=cordoned)
    constraints = PodConstraints(vendor_selectors={amd.NAME: V.selectors(annotations or {})})
    pod = PodRequest(containers=(asked,), init_count=0)
    return plan(pod, constraints, [NodeSnapshot(inv, usage or {})], policies=Policies(), rules=RULES)


def reason(result: Decision | Failure) -> str:
    assert isinstance(result, Failure), result
    return result.reasons["n1"]


def entries(result: Decision | Failure) -> list[tuple[str, int, int]]:
    assert isinstance(result, Decision), result
    return [(d.uuid, d.used_mem_mib, d.used_cores) for d in result.devices[0]]


# ---- identity, config -------------------------------------------------------------------------------------------


def test_keys_and_names() -> None:
    assert amd.SECTION == "amd"
    assert (V.name, V.register_key, V.handshake_key) == ("AMD", "hami.io/node-amd-register", None)
    assert (V.to_allocate_key, V.allocated_key) == ("hami.io/amd-devices-to-allocate", "hami.io/amd-devices-allocated")
    assert V.node_lock is NodeLockKind.HAMI
    r = V.resources
    assert (r.count, r.memory, r.cores, r.memory_unit_mib) == ("amd.com/gpu", "amd.com/gpumem", "amd.com/gpucores", 1)
    assert amd.build({}) == amd.build(None)


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"resourceCoreName": 3}, "amd.resourceCoreName: expected a string, got 3"),
        ({"resourceCountName": ""}, "amd.resourceCountName: must not be empty"),
        ({"memoryFactor": 2}, "amd.memoryFactor: unknown key"),
        ("amd.com/gpu", "amd: expected a mapping, got str"),
    ],
)
def test_config_errors_name_the_key(section: object, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        amd.build(section)


# ---- MutateAdmission --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("container", "ours"),
    [
        (ctr({"amd.com/gpu": 2}), True),
        (ctr({"amd.com/gpu-mem": 1024}), True),
        (ctr({"amd.com/gpu-core-pct": 50}), True),
        (ctr(requests={"amd.com/gpu": 1}), False),  # requests only: not in the limits
        (ctr({"amd.com/gpu": 1, "amd.com/gpu-mem": 1024}), True),
        (ctr(), False),
    ],
)
def test_mutate(container: dict[str, Any], ours: bool) -> None:
    before = repr(container)
    assert T.mutate_container(container, "c") is ours
    assert repr(container) == before  # no edit


@pytest.mark.parametrize("cores", [0, 101])
def test_core_percentage_outside_1_to_100_is_refused(cores: int) -> None:
    # HAMi's MutateAdmission: "must be an integer percentage between 1 and 100"
    with pytest.raises(DecodeError, match=re.escape("amd.com/gpu-core-pct")):
        T.container_request(ctr({"amd.com/gpu": 1, "amd.com/gpu-core-pct": cores}), "c")


# ---- GenerateResourceRequests -----------------------------------------------------------------------------------


def test_request_count_and_memory_from_limits() -> None:
    limits = {"amd.com/gpu": 2, "amd.com/gpu-mem": 4096, "amd.com/gpu-core-pct": 33}
    requests = {"amd.com/gpu": 2, "amd.com/gpu-mem": 4096, "amd.com/gpu-core-pct": 99}
    assert T.container_request(ctr(limits, requests), "c") == ContainerRequest(2, 4096, MEM_PCT_UNSET, 33, "AMD")


def test_request_defaults() -> None:
    # an omitted core limit is 100 %; no memory is the whole card
    assert T.container_request(ctr({"amd.com/gpu": 1, "amd.com/gpu-mem": 4096}), "c").cores_pct == 100
    assert T.container_request(ctr({"amd.com/gpu": 1}), "c") == ContainerRequest(1, 0, 100, 100, "AMD")
    # cores from the requests when the limits omit them
    got = T.container_request(ctr({"amd.com/gpu": 1}, {"amd.com/gpu-core-pct": 42}), "c")
    assert got.cores_pct == 42
    for cores in (1, 50, 100):
        assert T.container_request(ctr({"amd.com/gpu": 1, "amd.com/gpu-core-pct": cores}), "c").cores_pct == cores


def test_request_zero_count_is_device_less() -> None:
    assert T.container_request(ctr({"amd.com/gpu": 0}), "c").empty
    assert T.container_request(ctr(), "c").empty


@pytest.mark.parametrize(
    ("limits", "fragment"),
    [
        ({"amd.com/gpu": 2**31}, "amd.com/gpu: 2147483648 is too large"),
        ({"amd.com/gpu": 1, "amd.com/gpu-mem": -1}, "amd.com/gpu-mem cannot be negative"),
        ({"amd.com/gpu": 1, "amd.com/gpu-mem": 2**31}, "amd.com/gpu-mem is in MiB"),
        ({"amd.com/gpu": 1, "amd.com/gpu-core-pct": "50m"}, "amd.com/gpu-core-pct must be a whole number"),
        ({"amd.com/gpu": 1, "amd.com/gpu-core-pct": "99.1"}, "amd.com/gpu-core-pct must be a whole number"),
        ({"amd.com/gpu": 1, "amd.com/gpu-core-pct": -1}, "cannot be negative"),
        ({"amd.com/gpu-mem": 4096, "amd.com/gpu-core-pct": 33}, "amd.com/gpu-mem needs amd.com/gpu"),
        ({"amd.com/gpu": 0, "amd.com/gpu-mem": 4096}, "amd.com/gpu is 0 but amd.com/gpu-mem"),
    ],
)
def test_request_refusals(limits: dict[str, Any], fragment: str) -> None:
    with pytest.raises(DecodeError, match=re.escape(fragment)):
        T.container_request(ctr(limits), "c")


def test_request_count_or_memory_only_in_requests_is_refused() -> None:
    # HAMi reads them from the limits only and would silently ignore them
    with pytest.raises(DecodeError, match=re.escape("amd.com/gpu is read from the limits only")):
        T.container_request(ctr(requests={"amd.com/gpu": 1}), "c")
    with pytest.raises(DecodeError, match=re.escape("amd.com/gpu-mem is read from the limits only")):
        T.container_request(ctr({"amd.com/gpu": 1}, {"amd.com/gpu-mem": 10}), "c")


def test_manages() -> None:
    assert V.manages(ctr(requests={"amd.com/gpucores": 1}))
    assert not V.manages(ctr({"hygon.com/dcunum": 1}))


# ---- CheckType / CheckUUID --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotations", "card", "ok"),
    [
        ({}, "MI300X", True),
        ({"amd.com/use-gputype": "MI300"}, "MI300X", True),
        ({"amd.com/use-gputype": "MI250"}, "MI300X", False),
        ({"amd.com/nouse-gputype": "MI300"}, "MI300X", False),
        ({"amd.com/nouse-gputype": "MI250"}, "MI300X", True),
        ({"amd.com/nouse-gputype": ""}, "MI300X", True),
        ({"amd.com/use-gputype": ""}, "MI300X", True),
        ({"amd.com/nouse-gputype": "   "}, "MI300X", True),
        ({"amd.com/use-gputype": "   "}, "MI300X", True),
        ({"amd.com/nouse-gputype": "MI250,"}, "MI300X", True),
        ({"amd.com/nouse-gputype": ",MI250"}, "MI300X", True),
        ({"amd.com/nouse-gputype": " MI250 , "}, "MI250X", False),
        ({"amd.com/nouse-gputype": ", "}, "MI300X", True),
        ({"amd.com/use-gputype": "MI300,"}, "MI250X", False),
        ({"amd.com/use-gputype": "mi300"}, "AMD-MI300X", True),
    ],
)
def test_check_type(annotations: dict[str, str], card: str, ok: bool) -> None:
    dev = gpu("d", type=card)
    constraints = PodConstraints(vendor_selectors={"AMD": V.selectors(annotations)})
    assert amd.AMD_RULES.type_ok(dev, req(), constraints) is ok
    assert amd.AMD_RULES.type_ok(dev, ContainerRequest(1, type="other"), constraints) is False


def test_use_type_of_only_commas_is_refused() -> None:
    # HAMi: "use with only commas rejects card" (every card); a DecodeError here
    with pytest.raises(DecodeError, match=re.escape("amd.com/use-gputype")):
        V.selectors({"amd.com/use-gputype": ", "})


# ---- Fit (HAMi's TestDevices_Fit, through the core) -------------------------------------------------------------


def test_two_whole_cards() -> None:
    devices = [gpu("dev-0"), gpu("dev-1", index=1, count=12)]
    # memory 0 takes the whole card; no core percentage with the whole memory takes every unit; the card with
    # more free slots comes first (spread), as in HAMi's expected order
    assert entries(fit(devices, req(2, 0, 0))) == [("dev-1", 1000, 100), ("dev-0", 1000, 100)]
    parsed = V.container_request(ctr({"amd.com/gpu": 2}), "c")
    assert entries(fit(devices, parsed)) == [("dev-1", 1000, 100), ("dev-0", 1000, 100)]


def test_core_percentage_maps_per_device() -> None:
    assert entries(fit([gpu("dev-1", core=100)], req(1, 500, 50))) == [("dev-1", 500, 50)]
    assert entries(fit([gpu("dev-0", core=10)], req(1, 500, 50))) == [("dev-0", 500, 5)]
    # CDNA: 5 % of 64 units is 3; a positive percentage is at least one unit
    assert entries(fit([gpu("dev-0", core=64)], req(1, 100, 5))) == [("dev-0", 100, 3)]
    assert entries(fit([gpu("dev-0", core=64)], req(1, 100, 1))) == [("dev-0", 100, 1)]
    # partial memory without a core percentage takes no unit
    assert entries(fit([gpu("dev-0")], req(1, 100, 0))) == [("dev-0", 100, 0)]


@pytest.mark.parametrize(
    ("device", "asked", "usage", "annotations", "expected"),
    [
        (gpu("dev-0"), req(1, 500, 10), DeviceUsage(0, 900, 0), {}, "1/1 CardInsufficientMemory"),
        (gpu("dev-0", core=10), req(1, 100, 100), DeviceUsage(0, 0, 9), {}, "1/1 CardInsufficientCore"),
        (gpu("dev-1"), req(1, 100, 10), DeviceUsage(), {"amd.com/use-gpu-uuid": "dev-0"}, "1/1 CardUuidMismatch"),
        (gpu("dev-0"), req(1, 100, 10), DeviceUsage(), {"amd.com/nouse-gpu-uuid": "dev-0"}, "1/1 CardUuidMismatch"),
        (gpu("dev-0"), req(1, 100, 10), DeviceUsage(2), {}, "1/1 CardTimeSlicingExhausted"),
        (gpu("dev-0", health=False), req(1, 100, 10), DeviceUsage(), {}, "1/1 CardNotHealth"),
        (
            gpu("dev-0", type="MI250X"),
            req(1, 100, 10),
            DeviceUsage(),
            {"amd.com/use-gputype": "MI300"},
            "1/1 CardTypeMismatch",
        ),
        (gpu("dev-0", core=0), req(1, 100, 10), DeviceUsage(), {}, "1/1 CardInsufficientCore"),
        (gpu("dev-0", core=0), req(1, 5000, 10), DeviceUsage(), {}, "1/1 CardInsufficientMemory"),
    ],
)
def test_fit_refusals(
    device: DeviceInfo, asked: ContainerRequest, usage: DeviceUsage, annotations: dict[str, str], expected: str
) -> None:
    assert reason(fit([device], asked, usage={device.id: usage}, annotations=annotations)) == expected


def test_whole_card_needs_an_idle_card() -> None:
    # a whole-card request (memory and units) does not fit next to a partial one
    assert reason(fit([gpu("dev-0")], req(1), usage={"dev-0": DeviceUsage(1, 100, 10)})) == "1/1 CardInsufficientMemory"


def test_fit_cordon() -> None:
    devices = [gpu("dev-0"), gpu("dev-1", index=1)]
    assert entries(fit(devices, req(1, 64, 50), cordoned=frozenset({"dev-0"}))) == [("dev-1", 64, 50)]
    assert reason(fit(devices, req(1, 64, 50), cordoned=frozenset({"dev-0", "dev-1"}))) == "2/2 CardCordoned"


def test_fit_retains_the_registered_product_type_in_the_allocation() -> None:
    # HAMi TestDevices_Fit "retains the registered product type in the allocation": the device entry's type is the
    # card's registered type; the entry stays keyed by the common word (HAMi: tmpDevs[k.Type])
    got = fit([gpu("dev-0", count=2, mem=1000, type="AMD_Instinct_MI300X_VF")], req(1, 100, 10))
    assert isinstance(got, Decision)
    [[entry]] = got.devices
    assert (entry.type, entry.shown_type) == ("AMD", "AMD_Instinct_MI300X_VF")
    written = V.encode_devices(got.devices)
    assert written == "dev-0,AMD_Instinct_MI300X_VF,100,10:;"
    assert V.decode_devices(written) == (*got.devices, ())  # what the informer reads back is what was planned
    # a registration without a product type: HAMi falls back to the common word
    plain = fit([gpu("dev-0", type="AMD")], req(1, 100, 10))
    assert isinstance(plain, Decision) and V.encode_devices(plain.devices) == "dev-0,AMD,100,10:;"


def test_the_written_type_survives_the_reservation_record() -> None:
    # /filter's reservation is read back by whichever replica binds: the product type travels with it
    entry = ContainerDevice("dev-0", 100, 10, amd.NAME, shown_type="AMD_Instinct_MI300X_VF")
    alloc = Allocation("uid", "ns", "p", "n1", ((entry,),), (DeviceCharge("dev-0", 1, 100, 10, False),))
    assert decode_allocation(encode_allocation(alloc)) == alloc
    plain = dataclasses.replace(alloc, devices=((dataclasses.replace(entry, shown_type=""),),))
    assert b"shown_type" not in encode_allocation(plain)  # records without it keep their bytes


# ---- registration and liveness ----------------------------------------------------------------------------------

REGISTER = '[{"id":"GPU-0","index":0,"count":1,"devmem":8192,"devcore":100,"type":"amd","numa":0,"health":true}]'


def node(annotations: dict[str, str], allocatable: dict[str, Any] | None = None) -> NodeView:
    return NodeView("node-1", "1", annotations, allocatable if allocatable is not None else {"amd.com/gpu": "1"})


def test_register_decodes_json() -> None:
    got = V.observe(node({amd.REGISTER_KEY: REGISTER}), NOW)
    assert isinstance(got, Registered)
    (d,) = got.inventory.devices
    assert (d.id, d.type, d.devmem_mib, d.devcore, d.health, d.vendor) == ("GPU-0", "amd", 8192, 100, True, "AMD")
    assert got.inventory.vendor == "AMD"
    assert (got.handshake, got.legacy) == (None, False)


def test_register_ignores_hami_only_keys() -> None:
    value = '[{"id":"a","count":1,"health":true,"devicevendor":"AMD","custominfo":{"cuPerWGP":2}}]'
    got = V.observe(node({amd.REGISTER_KEY: value}), NOW)
    assert isinstance(got, Registered) and got.inventory.devices[0].id == "a"


@pytest.mark.parametrize(
    ("annotations", "allocatable", "expected"),
    [
        ({}, None, NotRegistered(Unregistered.ABSENT)),
        ({amd.REGISTER_KEY: "[]"}, None, NotRegistered(Unregistered.NO_DEVICES)),
        ({amd.REGISTER_KEY: REGISTER}, {}, NotRegistered(Unregistered.NO_ALLOCATABLE)),
        ({amd.REGISTER_KEY: REGISTER}, {"amd.com/gpu": "0"}, NotRegistered(Unregistered.NO_ALLOCATABLE)),
    ],
)
def test_not_registered(
    annotations: dict[str, str], allocatable: dict[str, Any] | None, expected: NotRegistered
) -> None:
    assert V.observe(node(annotations, allocatable), NOW) == expected


@pytest.mark.parametrize("value", ["GPU-0,1,8192,100,AMD,0,true:", "[{", '[{"id":"a"},{"id":"a"}]'])
def test_register_invalid(value: str) -> None:
    got = V.observe(node({amd.REGISTER_KEY: value}), NOW)
    assert isinstance(got, Invalid)
    assert (got.failure, got.source) == (DecodeFailure.REGISTER, amd.REGISTER_KEY)
    assert got.error.what.startswith(amd.REGISTER_KEY)


def test_no_handshake_is_written() -> None:
    got = V.observe(node({amd.REGISTER_KEY: REGISTER, "hami.io/node-handshake-amd": "Requesting_x"}), NOW)
    assert isinstance(got, Registered) and got.handshake is None


def test_registration_roundtrip_and_capacity() -> None:
    devices = (gpu("GPU-0", count=4, mem=8192), gpu("GPU-1", index=1, count=4, mem=8192))
    annotations = amd.registration_annotations(devices)
    capacity = amd.node_capacity(devices)
    assert capacity == {"amd.com/gpu": "8"}
    got = V.observe(node({**annotations, "hami.io/device-cordon": "GPU-1"}, capacity), NOW)
    assert isinstance(got, Registered)
    assert got.inventory.devices == devices
    assert got.inventory.cordoned == frozenset({"GPU-1"})


# ---- pod annotations --------------------------------------------------------------------------------------------


def test_pod_device_list() -> None:
    devices = ((ContainerDevice("test1", 100, 3, "AMD"), ContainerDevice("test2", 200, 4, "AMD")),)
    assert V.encode_devices(devices) == "test1,AMD,100,3:test2,AMD,200,4:;"
    assert V.decode_devices("test1,AMD,100,3:test2,AMD,200,4:;") == (*devices, ())
    with pytest.raises(DecodeError, match=re.escape(amd.ALLOCATED_KEY)):
        V.decode_devices("test1,,100,3:;")
