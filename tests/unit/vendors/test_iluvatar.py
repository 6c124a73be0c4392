"""Iluvatar vendors: HAMi's ``pkg/device/iluvatar`` tests restated (``device_test.go`` and
``device_cordon_test.go``; the index holds no copy at v2.10.0 (4707fb02): read at the nearest stored versions,
device_test.go 0d7459d5 and device_cordon_test.go ad358d3a, device.go 66b146b6), plus our own strictness cases.
Every HAMi case names its test in a comment."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.unit.vendors.kit import NOW, Fit, reason, uuids
from vgpu_scheduler.shared.domain.model import (
    MEM_PCT_UNSET,
    NVIDIA,
    ContainerDevice,
    ContainerRequest,
    DeviceInfo,
    DeviceUsage,
    NvidiaConfig,
    PodConstraints,
)
from vgpu_scheduler.shared.domain.plan import Decision
from vgpu_scheduler.shared.errors import ConfigError, DecodeError
from vgpu_scheduler.shared.vendors import iluvatar
from vgpu_scheduler.shared.vendors.base import NodeLockKind
from vgpu_scheduler.shared.vendors.catalog import BUILDERS, enabled_vendors
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

CHIP = "MR-V100"
V = iluvatar.build(None)[0]
VENDORS = Vendors((NvidiaVendor(), *iluvatar.build(None)))
fit = Fit(VENDORS)
COUNT, MEM, CORE = "iluvatar.ai/MR-V100-vgpu", "iluvatar.ai/MR-V100.vMem", "iluvatar.ai/MR-V100.vCore"
REGISTER = "hami.io/node-MR-V100-register"
HANDSHAKE = "hami.io/node-handshake-MR-V100"


def ctr(limits: dict[str, Any] | None = None, requests: dict[str, Any] | None = None, name: str = "") -> dict[str, Any]:
    c: dict[str, Any] = {"resources": {"limits": limits or {}, "requests": requests or {}}}
    if name:
        c["name"] = name
    return c


def card(
    uuid: str, *, index: int = 0, count: int = 100, mem: int = 128, core: int = 100, health: bool = True
) -> DeviceInfo:
    return DeviceInfo(uuid, index, count, mem, core, CHIP, 0, "hami-core", health, vendor=CHIP)


def req(nums: int = 1, mem: int = 0, pct: int = MEM_PCT_UNSET, cores: int = 0, kind: str = CHIP) -> ContainerRequest:
    return ContainerRequest(nums=nums, mem_mib=mem, mem_pct=pct, cores_pct=cores, type=kind)


# ---- identity, config -------------------------------------------------------------------------------------------


def test_keys_and_names_per_chip() -> None:
    assert iluvatar.SECTION == "iluvatars" and iluvatar.SECTION in BUILDERS
    assert iluvatar.ENABLE_FLAG == "enable-iluvatar"
    assert [v.name for v in iluvatar.build(None)] == ["MR-V100", "MR-V50", "BI-V150", "BI-V100"]
    assert (V.name, V.register_key, V.handshake_key) == (CHIP, REGISTER, HANDSHAKE)
    assert (V.to_allocate_key, V.allocated_key) == (
        "hami.io/MR-V100-devices-to-allocate",
        "hami.io/MR-V100-devices-allocated",
    )
    assert (V.use_uuid_key, V.no_use_uuid_key) == ("hami.io/use-MR-V100-uuid", "hami.io/no-use-MR-V100-uuid")
    assert V.node_lock is NodeLockKind.HAMI
    r = V.resources
    assert (r.count, r.memory, r.cores, r.memory_unit_mib) == (COUNT, MEM, CORE, 256)
    # every chip of a config is its own vendor, next to the others
    chips = ("MR-V100", "MR-V50", "BI-V150", "BI-V100")
    names = enabled_vendors(NvidiaConfig(), {"iluvatars": None}, {"enable-iluvatar"}).names
    assert tuple(n for n in names if n in chips) == chips
    # opt-in, as in HAMi: a section alone enables nothing
    assert not set(chips) & set(enabled_vendors(NvidiaConfig(), {"iluvatars": None}).names)


def test_config_entries_and_defaults() -> None:
    (v,) = iluvatar.build([{"commonWord": "BI-V150", "chipName": "BI-V150", "resourceCountName": "x.io/gpu"}])
    assert (v.name, v.resources.count, v.resources.memory) == ("BI-V150", "x.io/gpu", "iluvatar.ai/BI-V150.vMem")
    assert iluvatar.build([]) == ()


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"commonWord": "x"}, "iluvatars: expected a list of chips, got dict"),
        ([{"chipName": "x"}], "iluvatars[0].commonWord: missing"),
        ([{"commonWord": "a,b"}], "iluvatars[0].commonWord: 'a,b' may not contain"),
        ([{"commonWord": "A"}, {"commonWord": "A"}], "iluvatars[1].commonWord: 'A' is listed twice"),
        ([{"commonWord": "A", "resourceCountName": " "}], "iluvatars[0].resourceCountName: must not be empty"),
        ([{"commonWord": "A", "resourceMemoryName": 3}], "iluvatars[0].resourceMemoryName: expected a string"),
        ([{"commonWord": "A", "memoryFactor": 2}], "iluvatars[0].memoryFactor: unknown key"),
        (["A"], "iluvatars[0]: expected a mapping, got str"),
    ],
)
def test_config_errors_name_the_key(section: object, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        iluvatar.build(section)


# ---- GenerateResourceRequests (HAMi's Test_GenerateResourceRequests) ----------------------------------------------


def test_request_hami_cases() -> None:
    # "all resources set to limits and requests": Memreq 1000 × 256, cores 100 (HAMi's MemPercentagereq 0 means
    # "no percentage" as our MEM_PCT_UNSET does: memory in MiB wins either way)
    both = {COUNT: "1", MEM: "1000", CORE: "100"}
    assert V.container_request(ctr(both, both), "c") == ContainerRequest(1, 256000, MEM_PCT_UNSET, 100, CHIP)
    # "all resources don't set to limits and requests": no request
    assert V.container_request(ctr(), "c").empty
    # "resourcemem don't set to limits and requests": the whole card (100 %), cores 0
    one = {COUNT: "1"}
    assert V.container_request(ctr(one, one), "c") == ContainerRequest(1, 0, 100, 0, CHIP)


def test_request_memory_overflowing_int32_is_refused() -> None:
    # HAMi's "memory overflowing int32 is rejected, not truncated to zero": 16Gi units × 256 MiB; HAMi drops the
    # request (the pod is then not its), ours refuses the pod at admission naming the resource (docs/differences.md)
    with pytest.raises(DecodeError, match=re.escape(f"{MEM} is in units of 256 MiB")):
        V.container_request(ctr({COUNT: "1", MEM: "16Gi"}), "c")


def test_request_count_from_requests_and_cores_above_100() -> None:
    assert V.container_request(ctr(requests={COUNT: "2"}), "c").nums == 2
    # cores above 100 are accepted (HAMi's webhook writes 100 per card) and capped by Fit's normalisation
    got = V.container_request(ctr({COUNT: "2", CORE: "200"}), "c")
    assert got.cores_pct == 200
    assert V.rules.normalize(got).cores_pct == 100


@pytest.mark.parametrize(
    ("limits", "fragment"),
    [
        ({COUNT: "0.5"}, f"{COUNT} counts whole GPUs"),
        ({COUNT: -1}, "cannot be negative"),
        ({COUNT: 1, CORE: "1.5"}, f"{CORE} must be a whole number"),
        ({MEM: 4}, f"{MEM} needs {COUNT}"),
        ({COUNT: 0, MEM: 4}, f"{COUNT} is 0 but {MEM}"),
    ],
)
def test_request_refusals(limits: dict[str, Any], fragment: str) -> None:
    with pytest.raises(DecodeError, match=re.escape(fragment)) as info:
        V.container_request(ctr(limits, name="train"), "spec.containers[0]")
    assert 'container "train"' in str(info.value)


# ---- MutateAdmission (HAMi's Test_MutateAdmission) -----------------------------------------------------------------


def test_mutate_two_cards_sets_cores_per_card() -> None:
    # HAMi's "IluvatarResourceCount and IluvatarResourceCores set to limits": true; the core limit becomes 200
    c = ctr({COUNT: "2", CORE: "1"})
    assert V.mutate_container(c, "c") is True
    assert c["resources"]["limits"][CORE] == "200"
    assert "env" not in c  # no container name: no env variable


def test_mutate_env_and_single_card() -> None:
    c = ctr({COUNT: "1", CORE: "30"}, name="train")
    assert V.mutate_container(c, "c") is True
    assert c["resources"]["limits"][CORE] == "30"
    assert c["env"] == [{"name": "SOL_CONTINER_NAME", "value": "train"}]
    assert V.mutate_container(c, "c") is True
    assert len(c["env"]) == 1  # already there: not added twice
    # the count only in the requests: not ours (HAMi reads the limits)
    assert V.mutate_container(ctr(requests={COUNT: "1"}, name="x"), "c") is False
    with pytest.raises(DecodeError):
        V.mutate_container(ctr({COUNT: "x"}), "c")


# ---- checkType / CheckUUID (HAMi's Test_checkType) ----------------------------------------------------------------


def test_check_type() -> None:
    # "the same type": found; "the different type": not
    assert V.rules.type_ok(card("d"), req(kind=CHIP), PodConstraints())
    assert not V.rules.type_ok(card("d"), req(kind="test123"), PodConstraints())


# ---- Fit (HAMi's Test_Fit, TestFit_MutexRejectsUsedDevice, TestFit_DeviceCordon) ----------------------------------

TWO = [card("dev-0"), card("dev-1", index=1)]


def test_fit_success() -> None:
    # Test_Fit "fit success": one of two idle cards; HAMi walks the cards from the last (dev-1), and so do we
    # (docs/differences.md, difference 8)
    got = fit(TWO, req(1, 64, cores=50))
    assert isinstance(got, Decision)
    assert got.devices == ((ContainerDevice("dev-1", 64, 50, CHIP),),)


@pytest.mark.parametrize(
    ("asked", "usage", "annotations", "expected"),
    [
        # Test_Fit "fit fail: memory not enough"
        (req(1, 512, cores=50), {}, {}, "1/1 CardInsufficientMemory"),
        # Test_Fit "fit fail: core not enough" (100 cores used; HAMi's memory check comes first and fails too)
        (req(1, 64, cores=50), {"dev-0": DeviceUsage(1, 0, 100)}, {}, "1/1 CardInsufficientCore"),
        # Test_Fit "mutex policy rejects used device" and TestFit_MutexRejectsUsedDevice
        (
            req(1, 64, cores=50),
            {"dev-0": DeviceUsage(1)},
            {"hami.io/gpu-scheduler-policy": "mutex"},
            "1/1 ExclusiveDeviceAllocateConflict",
        ),
        # the uuid lists
        (req(1, 64, cores=50), {}, {"hami.io/no-use-MR-V100-uuid": "dev-0"}, "1/1 CardUuidMismatch"),
        (req(1, 64, cores=50), {"dev-0": DeviceUsage(100)}, {}, "1/1 CardTimeSlicingExhausted"),
        (req(1, 64, cores=100), {"dev-0": DeviceUsage(1)}, {}, "1/1 ExclusiveDeviceAllocateConflict"),
        (req(1, 64, cores=0), {"dev-0": DeviceUsage(1, 0, 100)}, {}, "1/1 CardComputeUnitsExhausted"),
    ],
)
def test_fit_refusals(
    asked: ContainerRequest, usage: dict[str, DeviceUsage], annotations: dict[str, str], expected: str
) -> None:
    assert reason(fit([card("dev-0")], asked, usage=usage, annotations=annotations)) == expected


def test_fit_type_mismatch() -> None:
    # Test_Fit "fit fail: type mismatch": a request of another chip takes no MR-V100 card
    got = fit([card("dev-0")], req(1, 512, cores=50, kind="MR-V50"))
    assert reason(got) == "NodeInsufficientDevice"


def test_fit_whole_cards_for_two() -> None:
    # the webhook's 200 cores for two cards: each card taken whole, so a card with a task is refused
    asked = V.container_request(ctr({COUNT: "2", CORE: "200"}), "c")
    got = fit(TWO, asked)
    assert isinstance(got, Decision)
    # in the order HAMi's Fit walks them: from the last
    assert got.devices == ((ContainerDevice("dev-1", 128, 100, CHIP), ContainerDevice("dev-0", 128, 100, CHIP)),)
    got = fit(TWO, asked, usage={"dev-1": DeviceUsage(1)})
    assert reason(got) == "1/2 AllocatedCardsInsufficientRequest, 1/2 ExclusiveDeviceAllocateConflict"


def test_fit_cordon() -> None:
    # TestFit_DeviceCordon: "cordoned device is skipped, healthy sibling still fits"
    assert uuids(fit(TWO, req(1, 64, cores=50), cordoned=frozenset({"dev-1"}))) == ["dev-0"]
    # "all devices cordoned fails with CardCordoned reason"
    assert reason(fit(TWO, req(1, 64, cores=50), cordoned=frozenset({"dev-0", "dev-1"}))) == "2/2 CardCordoned"
    # "running pods on a cordoned device are unaffected"
    got = fit(TWO, req(1, 64, cores=50), usage={"dev-1": DeviceUsage(1, 64, 50)}, cordoned=frozenset({"dev-1"}))
    assert uuids(got) == ["dev-0"]
    # "no annotation or no node info means nothing cordoned" (dev-1, the last, as HAMi)
    node_view = NodeView(
        "n1", "1", {REGISTER: "dev-0,100,128,100,MR-V100,0,true:", "hami.io/device-cordon": "  "}, {COUNT: "100"}
    )
    observed = V.observe(node_view, NOW)
    assert isinstance(observed, Registered) and observed.inventory.cordoned == frozenset()


# ---- GetNodeDevices and the handshake (HAMi's TestGetNodeDevices) -------------------------------------------------


def node(annotations: dict[str, str], allocatable: dict[str, Any] | None = None) -> NodeView:
    return NodeView("n1", "1", annotations, allocatable if allocatable is not None else {COUNT: "10"})


def test_register_exist_device() -> None:
    # "exist device"
    got = V.observe(node({REGISTER: "GPU-bad51c5a-ed4c-591d-91bf-c04a12e19eae,10,8192,100,MR-V100,0,true:"}), NOW)
    assert isinstance(got, Registered)
    (d,) = got.inventory.devices
    assert (d.index, d.id, d.count, d.devcore, d.devmem_mib, d.type, d.numa, d.health, d.vendor) == (
        0,
        "GPU-bad51c5a-ed4c-591d-91bf-c04a12e19eae",
        10,
        100,
        8192,
        "MR-V100",
        0,
        True,
        CHIP,
    )
    assert got.handshake == "Requesting_2025-01-07 12:00:00"


def test_register_no_annotation_no_device_bad_value() -> None:
    # "no annotation": not registered
    assert V.observe(node({}), NOW) == NotRegistered(Unregistered.ABSENT)
    # "no device" ("[]": HAMi's DecodeNodeDevices fails on it) and "failed to unmarshal node devices" (""): the
    # node is not registered for the chip; ours says why (an invalid value is reported once as a warning Event)
    for value in ("[]", ""):
        got = V.observe(node({REGISTER: value}), NOW)
        assert isinstance(got, Invalid)
        assert (got.failure, got.source) == (DecodeFailure.REGISTER, REGISTER)
    assert V.observe(node({REGISTER: ":"}), NOW) == NotRegistered(Unregistered.NO_DEVICES, legacy=True)
    got = V.observe(node({REGISTER: "a,1,1,1,MR-V100,0,true:"}, {COUNT: "lots"}), NOW)
    assert isinstance(got, Invalid) and got.failure is DecodeFailure.ALLOCATABLE


def test_handshake() -> None:
    reg = {REGISTER: "a,1,1,1,MR-V100,0,true:"}
    expired = {**reg, HANDSHAKE: "Requesting_2025-01-07 00:00:00"}
    assert V.observe(node(expired, {}), NOW) == NotRegistered(Unregistered.HANDSHAKE_TIMEOUT, legacy=True)
    got = V.observe(node(expired), NOW)
    assert isinstance(got, Registered) and got.handshake is None
    got = V.observe(node({**reg, HANDSHAKE: "Reported 2025-01-07 11:59:59.5 +0800 CST"}, {}), NOW)
    assert isinstance(got, Registered) and got.reporter and got.handshake == "Requesting_2025-01-07 12:00:00"


def test_node_registration_roundtrip() -> None:
    devices = (card("dev-0", count=4), card("dev-1", index=1, count=4))
    annotations, capacity, labels = V.node_registration(devices)
    assert annotations == {
        REGISTER: "dev-0,4,128,100,MR-V100,0,true,0,hami-core:dev-1,4,128,100,MR-V100,0,true,1,hami-core:"
    }
    assert (capacity, labels) == ({COUNT: "8"}, {})
    got = V.observe(node(annotations, capacity), NOW)
    assert isinstance(got, Registered) and got.inventory.devices == devices


# ---- PatchAnnotations (HAMi's TestPatchAnnotations), LockNode ------------------------------------------------------


def test_patch_annotations() -> None:
    # "With devices": both keys hold "k8s-gpu-iluvatar-0,MR-V100,0,0:;"
    devices = ((ContainerDevice("k8s-gpu-iluvatar-0", 0, 0, CHIP),),)
    assert device_list_annotations(devices, VENDORS) == {
        "hami.io/MR-V100-devices-to-allocate": "k8s-gpu-iluvatar-0,MR-V100,0,0:;",
        "hami.io/MR-V100-devices-allocated": "k8s-gpu-iluvatar-0,MR-V100,0,0:;",
    }
    assert V.decode_devices("k8s-gpu-iluvatar-0,MR-V100,0,0:;") == (*devices, ())
    # "No devices": nothing of Iluvatar's (an NVIDIA-only pod gets NVIDIA's keys alone)
    nv = ((ContainerDevice("GPU-0", 10, 0, NVIDIA),),)
    assert not any("MR-V100" in k for k in device_list_annotations(nv, VENDORS))


def test_lock_only_for_pods_with_cards() -> None:
    # TestDevices_LockNode / TestDevices_ReleaseNodeLock "no containers" and "non-zero resource requests" (empty
    # requests): no lock, no error. Ours: a pod without an Iluvatar request is not this vendor's at all
    assert not V.manages(ctr())
    assert V.container_request(ctr(requests={}), "c").empty
    assert V.manages(ctr(requests={MEM: "1"}))
