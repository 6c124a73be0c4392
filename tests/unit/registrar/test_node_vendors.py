"""Every vendor on one node (shared.vendors.catalog): observation, merged inventory, ID collisions."""

from __future__ import annotations

from datetime import datetime

from tests.fakevendor_node import FAKE_COUNT, FAKE_HANDSHAKE, FAKE_REGISTER, FakeVendor, fake_register
from vgpu_scheduler.shared.codec.handshake import format_requesting
from vgpu_scheduler.shared.domain.model import DeviceInfo, NodeInventory
from vgpu_scheduler.shared.vendors.catalog import (
    UuidCollision,
    enabled_vendors,
    inventory_vendor,
    merge_inventories,
    node_vendors,
    observe_node,
    with_handshake_timeout,
)
from vgpu_scheduler.shared.vendors.nvidia import NvidiaVendor
from vgpu_scheduler.shared.vendors.registration import Invalid, NodeView, NotRegistered, Registered, Unregistered
from vgpu_scheduler.shared.vendors.registry import Vendors

NOW = datetime(2025, 6, 13, 9, 7, 40)
NV_REGISTER = "hami.io/node-nvidia-register"


def dev(uuid: str, vendor: str, index: int = 0) -> DeviceInfo:
    return DeviceInfo(uuid, index, 10, 1024, 100, f"{vendor}-X", 0, "hami-core", True, vendor=vendor)


def part(vendor: str, *uuids: str, scores: dict[str, dict[str, int]] | None = None) -> NodeInventory:
    return NodeInventory(
        node="n1",
        vendor=vendor,
        devices=tuple(dev(u, vendor, i) for i, u in enumerate(uuids)),
        pair_scores=scores or {},
        cordoned=frozenset(uuids[:1]),
    )


def test_inventory_vendor_names() -> None:
    assert inventory_vendor(["NVIDIA"]) == "NVIDIA"
    assert inventory_vendor(["NVIDIA", "DCU"]) == "NVIDIA,DCU"
    assert inventory_vendor([]) == ""


def test_one_vendor_is_kept_as_it_is() -> None:
    nv = part("NVIDIA", "GPU-1", "GPU-2", scores={"GPU-1": {"GPU-2": 50}})
    merged = merge_inventories("n1", [nv])
    assert merged.inventory is nv
    assert merged.vendors == ("NVIDIA",)
    assert merged.collisions == ()


def test_nothing_registered_is_no_inventory() -> None:
    assert merge_inventories("n1", []).inventory is None


def test_vendors_merge_in_order_with_their_own_scores_and_cordons() -> None:
    nv = part("NVIDIA", "GPU-1", "GPU-2", scores={"GPU-1": {"GPU-2": 50}, "GPU-2": {"GPU-1": 50}})
    fake = part("FAKE", "FK-1", "FK-2", scores={"FK-1": {"FK-2": 7}})
    merged = merge_inventories("n1", [nv, fake])
    inv = merged.inventory
    assert inv is not None
    assert inv.vendor == "NVIDIA,FAKE"
    assert [d.id for d in inv.devices] == ["GPU-1", "GPU-2", "FK-1", "FK-2"]
    assert inv.pair_scores == {"GPU-1": {"GPU-2": 50}, "GPU-2": {"GPU-1": 50}, "FK-1": {"FK-2": 7}}
    assert inv.cordoned == {"GPU-1", "FK-1"}
    assert node_vendors(inv) == ("NVIDIA", "FAKE")
    assert merged.vendors == ("NVIDIA", "FAKE")


def test_a_later_vendor_with_a_colliding_id_is_left_out_whole() -> None:
    nv = part("NVIDIA", "GPU-1", "X")
    fake = part("FAKE", "FK-1", "X")
    other = part("OTHER", "O-1")
    merged = merge_inventories("n1", [nv, fake, other])
    assert merged.inventory is not None
    assert [d.id for d in merged.inventory.devices] == ["GPU-1", "X", "O-1"]
    assert merged.vendors == ("NVIDIA", "OTHER")
    assert merged.collisions == (UuidCollision("FAKE", "NVIDIA", ("X",)),)
    assert merged.collisions[0].message == (
        "device ID(s) X registered by both NVIDIA and FAKE; the node's FAKE devices are not registered until "
        "this is fixed"
    )


def test_observe_node_asks_every_vendor() -> None:
    node = NodeView(
        "n1",
        "3",
        {FAKE_REGISTER: fake_register("FK-1"), NV_REGISTER: "garbage"},
        {"nvidia.com/gpu": "4", FAKE_COUNT: "1"},
    )
    seen = observe_node([NvidiaVendor(), FakeVendor()], node, NOW)
    assert isinstance(seen.observations["NVIDIA"], Invalid)
    assert isinstance(seen.observations["FAKE"], Registered)
    assert seen.registered == ("FAKE",)
    assert seen.merged.inventory is not None and seen.merged.inventory.vendor == "FAKE"
    assert not seen.legacy


def test_observe_node_passes_reported_before_per_vendor_and_reports_legacy() -> None:
    asked: list[str] = []

    def reported(vendor: str) -> bool:
        asked.append(vendor)
        return vendor == "FAKE"

    node = NodeView("n1", "3", {FAKE_REGISTER: fake_register("FK-1")}, {FAKE_COUNT: "0"})
    seen = observe_node([NvidiaVendor(), FakeVendor(handshake=True)], node, NOW, reported)
    assert asked == ["NVIDIA", "FAKE"]
    assert seen.observations["NVIDIA"] == NotRegistered(Unregistered.ABSENT)
    fake = seen.observations["FAKE"]
    assert isinstance(fake, Registered) and fake.handshake == format_requesting(NOW)
    assert seen.legacy


def test_with_handshake_timeout_sets_it_where_a_vendor_has_one() -> None:
    vendors = with_handshake_timeout(Vendors((NvidiaVendor(), FakeVendor(handshake=True))), 5.0)
    nv, fake = vendors.all
    assert isinstance(nv, NvidiaVendor) and nv.handshake_timeout_s == 5.0
    assert isinstance(fake, FakeVendor) and fake.handshake_timeout_s == 5.0
    node = NodeView("n1", "3", {FAKE_REGISTER: fake_register("FK-1"), FAKE_HANDSHAKE: format_requesting(NOW)}, {})
    later = datetime(2025, 6, 13, 9, 7, 46)
    assert isinstance(fake.observe(node, later), NotRegistered)  # 6 s > 5 s: expired


def test_without_a_device_config_every_family_hami_initialises_by_default_is_enabled() -> None:
    default_on: tuple[str, ...] = ("NVIDIA", "DCU", "MLU", "AMD", "Biren", "Vastai", "Mthreads", "Metax-GPU")
    default_on += ("Metax-SGPU", "GCU", "Enflame", "AWSNeuron", "kunlun", "XPU")
    assert enabled_vendors(NvidiaVendor().config, {}).names == default_on
    assert enabled_vendors(NvidiaVendor().config).names == default_on
