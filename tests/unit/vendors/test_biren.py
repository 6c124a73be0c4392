"""Biren vendor: HAMi's ``pkg/device/biren`` tests restated (``device_test.go`` and ``device_cordon_test.go``; the
index holds no copy at v2.10.0 (4707fb02): read at the nearest stored versions, device_test.go 06553b28,
device_cordon_test.go ad358d3a, device.go d768c579), plus our own strictness cases. Every HAMi case names its
test in a comment."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.unit.vendors.kit import NOW, Fit, Refusal, ctr, reason, uuids
from vgpu_scheduler.shared.domain.model import (
    NVIDIA,
    ContainerDevice,
    ContainerRequest,
    DeviceInfo,
    DeviceUsage,
    PodConstraints,
)
from vgpu_scheduler.shared.domain.plan import Decision
from vgpu_scheduler.shared.errors import ConfigError, DecodeError
from vgpu_scheduler.shared.vendors import biren
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

V = biren.build(None)[0]
VENDORS = Vendors((NvidiaVendor(), V))
fit = Fit(VENDORS)
COUNT = "birentech.com/gpu"


def card(uuid: str, *, index: int = 0, count: int = 1, mem: int = 0, health: bool = True) -> DeviceInfo:
    return DeviceInfo(uuid, index, count, mem, 100, "Biren", 0, "", health, vendor="Biren")


def req(nums: int = 1, kind: str = "Biren") -> ContainerRequest:
    return ContainerRequest(nums=nums, mem_mib=0, mem_pct=100, cores_pct=0, type=kind)


def test_config_section() -> None:
    # the section, enable flag, names, keys and lock: test_contract.py
    assert V.resources.all == frozenset({COUNT})
    (v,) = biren.build({"resourceCountName": "biren.com/gpu"})
    assert v.resources.count == "biren.com/gpu"


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"resourceCountName": " "}, "biren.resourceCountName: must not be empty"),
        ({"resourceMemoryName": "x"}, "biren.resourceMemoryName: unknown key"),
        (["x"], "biren: expected a mapping, got list"),
    ],
)
def test_config_errors_name_the_key(section: object, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        biren.build(section)


# ---- Test_MutateAdmission, Test_GenerateResourceRequests -----------------------------------------------------------


def test_mutate_admission() -> None:
    # "set to resource limits": true, nothing edited
    c = ctr({COUNT: "1"})
    assert V.mutate_container(c, "c") is True and c == ctr({COUNT: "1"})
    assert V.mutate_container(ctr(requests={COUNT: "1"}), "c") is False  # HAMi reads the limits only
    with pytest.raises(DecodeError, match=re.escape(f"{COUNT} counts whole GPUs")):
        V.mutate_container(ctr({COUNT: "0.5"}), "c")


def test_generate_resource_requests() -> None:
    # "don't set to limits and request": none
    assert V.container_request(ctr(), "c").empty
    # "set to limits and request", "only set to limits", "only set to request": 1 card, 100 %, no cores
    want = ContainerRequest(1, 0, 100, 0, "Biren")
    assert V.container_request(ctr({COUNT: "1"}, {COUNT: "1"}), "c") == want
    assert V.container_request(ctr({COUNT: "1"}), "c") == want
    assert V.container_request(ctr(requests={COUNT: "1"}), "c") == want
    # ours: a count of 0 is no request, a bad quantity is refused
    assert V.container_request(ctr({COUNT: 0}), "c").empty
    with pytest.raises(DecodeError, match="cannot be negative"):
        V.container_request(ctr({COUNT: -1}), "c")


# ---- Test_GetNodeDevices, Test_CheckHealth ---------------------------------------------------------------------


def node(annotations: dict[str, str], allocatable: dict[str, Any] | None = None) -> NodeView:
    return NodeView("n1", "1", annotations, allocatable if allocatable is not None else {COUNT: "1"})


def test_get_node_devices() -> None:
    # "no annotation"
    assert V.observe(node({}), NOW) == NotRegistered(Unregistered.ABSENT)
    # "exist biren device": core total 100 whatever the JSON says, index 0, mode ""
    value = '[{"id":"7-0","count":1,"devmem":32768,"type":"Biren","health":true,"devicepairscore":{}}]'
    got = V.observe(node({biren.REGISTER_KEY: value}), NOW)
    assert isinstance(got, Registered)
    assert got.inventory.devices == (DeviceInfo("7-0", 0, 1, 32768, 100, "Biren", 0, "", True, vendor="Biren"),)
    # "no biren device" (":") and "node annotations not decode successfully" (""): not registered; JSON only, so
    # ours reports both values as invalid (one warning Event each)
    for bad in (":", ""):
        got = V.observe(node({biren.REGISTER_KEY: bad}), NOW)
        assert isinstance(got, Invalid) and (got.failure, got.source) == (DecodeFailure.REGISTER, biren.REGISTER_KEY)
    assert V.observe(node({biren.REGISTER_KEY: "[]"}), NOW) == NotRegistered(Unregistered.NO_DEVICES, legacy=True)


def test_check_health() -> None:
    reg = {biren.REGISTER_KEY: '[{"id":"a","count":1,"devmem":1,"type":"Biren","health":true}]'}
    # "Requesting state expired" (no allocatable): unhealthy
    expired = {**reg, "hami.io/node-handshake-biren": "Requesting_2025-01-07 00:00:00"}
    assert V.observe(node(expired, {}), NOW) == NotRegistered(Unregistered.HANDSHAKE_TIMEOUT, legacy=True)
    # "Unknown state": healthy, and a fresh Requesting_ is written (HAMi's needUpdate)
    got = V.observe(node({**reg, "hami.io/node-handshake-biren": "Unknown"}, {}), NOW)
    assert isinstance(got, Registered) and got.handshake == "Requesting_2025-01-07 12:00:00"


def test_node_registration_roundtrip() -> None:
    devices = (card("b-0", count=2, mem=32768), card("b-1", index=1, count=2, mem=32768))
    annotations, capacity, labels = V.node_registration(devices)
    assert (capacity, labels) == ({COUNT: "4"}, {})
    got = V.observe(node(annotations, capacity), NOW)
    assert isinstance(got, Registered) and got.inventory.devices == devices


# ---- Test_checkType, Test_PatchAnnotations ------------------------------------------------------------------------


def test_check_type() -> None:
    # "the same type" / "the different type"
    assert V.rules.type_ok(card("d"), req(), PodConstraints())
    assert not V.rules.type_ok(card("d"), req(kind="test"), PodConstraints())


def test_patch_annotations() -> None:
    # "exist device": both keys hold "test1,Biren,2048,1:;"
    devices = ((ContainerDevice("test1", 2048, 1, "Biren"),),)
    assert device_list_annotations(devices, VENDORS) == {
        "hami.io/Biren-devices-to-allocate": "test1,Biren,2048,1:;",
        "hami.io/Biren-devices-allocated": "test1,Biren,2048,1:;",
    }
    # "no device": nothing of Biren's
    nv = ((ContainerDevice("GPU-0", 10, 0, NVIDIA),),)
    assert not any("Biren" in k for k in device_list_annotations(nv, VENDORS))


# ---- TestDevices_Fit, TestFit_DeviceCordon, TestDevices_AddResourceUsage ----------------------------------------


def test_fit_success_takes_a_slot_with_no_memory_or_cores() -> None:
    # "fit success": one of two idle cards: dev-1, HAMi's walk from the last (difference 8)
    got = fit([card("dev-0"), card("dev-1", index=1)], req())
    assert isinstance(got, Decision)
    assert got.devices == ((ContainerDevice("dev-1", 0, 0, "Biren"),),)
    # TestDevices_AddResourceUsage: a card's usage grows by one slot, no memory, no cores
    got = fit([card("dev-0", count=2, mem=32768)], req(), usage={"dev-0": DeviceUsage(1)})
    assert isinstance(got, Decision) and got.devices == ((ContainerDevice("dev-0", 0, 0, "Biren"),),)


@pytest.mark.parametrize(
    "case",
    [
        # "fit fail: user assign use uuid mismatch"
        Refusal([card("dev-1")], req(), {}, {"birentech.com/use-gpuuuid": "dev-0"}, "1/1 CardUuidMismatch"),
        # "fit fail: user assign no use uuid match"
        Refusal([card("dev-0")], req(), {}, {"birentech.com/nouse-gpuuuid": "dev-0"}, "1/1 CardUuidMismatch"),
        # "fit fail: card overused"
        Refusal([card("dev-0")], req(), {"dev-0": DeviceUsage(1)}, {}, "1/1 CardTimeSlicingExhausted"),
        # "mutex policy rejects used device"
        Refusal(
            [card("dev-0", count=2)],
            req(),
            {"dev-0": DeviceUsage(1)},
            {"hami.io/gpu-scheduler-policy": "mutex"},
            "1/1 ExclusiveDeviceAllocateConflict",
        ),
        # "fit fail: type mismatch": a request of another family takes no Biren card
        Refusal([card("dev-0")], req(kind="OtherType"), {}, {}, "NodeInsufficientDevice"),
        # "fit fail:  AllocatedCardsInsufficientRequest" (2 of 1 card) and "partial allocation … for multiple
        # cards" (3 of 2): HAMi takes what there is and says 1/1 (2/2) AllocatedCardsInsufficientRequest; the
        # core knows first that the node has too few cards
        Refusal([card("dev-0")], req(2), {}, {}, "NodeInsufficientDevice"),
        Refusal([card("dev-0", count=100, mem=1280), card("dev-1", index=1, count=100, mem=1280)], req(3), {}, {},
                "NodeInsufficientDevice"),
    ],
)  # fmt: skip
def test_fit_refusals(case: Refusal) -> None:
    assert fit.refusal(case) == case.expected


def test_fit_two_cards_one_exhausted() -> None:
    # the count the core cannot tell in advance: one card full, so two of two cannot be had
    two = [card("dev-0"), card("dev-1", index=1)]
    got = fit(two, req(2), usage={"dev-0": DeviceUsage(1)})
    assert reason(got) == "1/2 AllocatedCardsInsufficientRequest, 1/2 CardTimeSlicingExhausted"


def test_fit_cordon() -> None:
    two = [card("dev-0"), card("dev-1", index=1)]
    # "cordoned device is skipped, healthy sibling still fits"
    assert uuids(fit(two, req(), cordoned=frozenset({"dev-1"}))) == ["dev-0"]
    # "all devices cordoned fails with CardCordoned reason"
    assert reason(fit(two, req(), cordoned=frozenset({"dev-0", "dev-1"}))) == "2/2 CardCordoned"
    # "running pods on a cordoned device are unaffected"
    assert uuids(fit(two, req(), usage={"dev-1": DeviceUsage(1)}, cordoned=frozenset({"dev-1"}))) == ["dev-0"]
    # "no annotation or no node info means nothing cordoned": dev-1 (the last), as HAMi
    assert uuids(fit(two, req())) == ["dev-1"]


def test_lock_only_for_pods_with_cards() -> None:
    # TestDevices_LockNode / ReleaseNodeLock: a pod without Biren cards takes no lock (not this vendor's), one asking
    # for a card in its requests does (the shared hami.io/mutex.lock)
    assert not V.manages(ctr())
    assert V.manages(ctr(requests={COUNT: "1"})) and V.node_lock is NodeLockKind.HAMI
