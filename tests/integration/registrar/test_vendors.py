"""The registrar with several vendors: one inventory per node holding every registered vendor's devices, each
vendor registered, unregistered and reported on its own (a small fake vendor next to NVIDIA)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from tests.fakevendor_node import FAKE_COUNT, FAKE_HANDSHAKE, FAKE_REGISTER, FakeVendor, fake_register
from tests.integration.registrar.helpers import REGISTER, FakeClock, Running, json_register, running_registrar
from tests.waiting import eventually
from vgpu_scheduler.services.registrar.sync import INVALID_EVENT_REASON
from vgpu_scheduler.shared.codec.handshake import format_requesting
from vgpu_scheduler.shared.emulator import Emulator
from vgpu_scheduler.shared.k8s import KubeClient
from vgpu_scheduler.shared.store import Store
from vgpu_scheduler.shared.vendors.nvidia import NvidiaVendor

VENDORS = (NvidiaVendor(), FakeVendor())


def node(name: str, *, gpus: str = "4", fakes: str = "2", **annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "annotations": annotations},
        "status": {"allocatable": {"nvidia.com/gpu": gpus, FAKE_COUNT: fakes, "cpu": "8"}},
    }


def mixed(name: str, **kw: Any) -> dict[str, Any]:
    annotations = {REGISTER: json_register("GPU-1", "GPU-2"), FAKE_REGISTER: fake_register("FK-1")}
    return node(name, **kw, **annotations)


async def devices(store: Store, name: str) -> list[tuple[str, str]] | None:
    inv = await store.inventory.get(name)
    return None if inv is None else [(d.vendor, d.id) for d in inv.devices]


async def has_devices(store: Store, name: str, expected: list[tuple[str, str]] | None) -> bool:
    return await devices(store, name) == expected


def warnings(emulator: Emulator, name: str) -> list[str]:
    return [
        str(e["message"])
        for e in emulator.list("events")
        if e["involvedObject"]["name"] == name and e["reason"] == INVALID_EVENT_REASON
    ]


def gauge(r: Running, vendor: str) -> float:
    return r.metric("vgpu_registrar_nodes_registered", vendor=vendor)


async def test_a_mixed_node_has_one_inventory_with_both_vendors(
    emulator: Emulator, kube: KubeClient, store: Store
) -> None:
    emulator.put(mixed("mix"))
    emulator.put(node("gpu", **{REGISTER: json_register("GPU-9")}))
    emulator.put(node("fake", **{FAKE_REGISTER: fake_register("FK-9")}))
    async with running_registrar(store, kube, vendors=VENDORS) as r:
        inv = await store.inventory.get("mix")
        assert inv is not None
        assert inv.vendor == "NVIDIA,FAKE"
        assert [(d.vendor, d.id) for d in inv.devices] == [("NVIDIA", "GPU-1"), ("NVIDIA", "GPU-2"), ("FAKE", "FK-1")]
        gpu, fake = await store.inventory.get("gpu"), await store.inventory.get("fake")
        assert gpu is not None and gpu.vendor == "NVIDIA"
        assert fake is not None and fake.vendor == "FAKE" and [d.vendor for d in fake.devices] == ["FAKE"]
        assert gauge(r, "NVIDIA") == 2
        assert gauge(r, "FAKE") == 2


async def test_one_vendor_dying_keeps_the_others_devices(emulator: Emulator, kube: KubeClient, store: Store) -> None:
    emulator.put(mixed("mix"))
    async with running_registrar(store, kube, vendors=VENDORS) as r:
        gen = (await store.inventory.generations(["mix"]))["mix"]
        emulator.patch("nodes", None, "mix", {"status": {"allocatable": {FAKE_COUNT: "0"}}})
        only_gpus = [("NVIDIA", "GPU-1"), ("NVIDIA", "GPU-2")]
        await eventually(lambda: has_devices(store, "mix", only_gpus), what="the fake devices unregistered")
        inv = await store.inventory.get("mix")
        assert inv is not None and inv.vendor == "NVIDIA"
        assert (await store.inventory.generations(["mix"]))["mix"] > gen
        assert r.metric("vgpu_registrar_unregistered_total", vendor="FAKE", reason="no_allocatable") == 1
        assert r.metric("vgpu_registrar_unregistered_total", vendor="NVIDIA", reason="no_allocatable") == 0
        assert (gauge(r, "NVIDIA"), gauge(r, "FAKE")) == (1, 0)

        # the NVIDIA plugin goes too: nothing is left, the inventory goes
        emulator.patch("nodes", None, "mix", {"status": {"allocatable": {"nvidia.com/gpu": "0"}}})
        await eventually(lambda: has_devices(store, "mix", None), what="inventory removed")
        assert r.metric("vgpu_registrar_unregistered_total", vendor="NVIDIA", reason="no_allocatable") == 1
        assert (gauge(r, "NVIDIA"), gauge(r, "FAKE")) == (0, 0)

        # the fake plugin comes back alone
        emulator.patch("nodes", None, "mix", {"status": {"allocatable": {FAKE_COUNT: "2"}}})
        await eventually(lambda: has_devices(store, "mix", [("FAKE", "FK-1")]), what="fake back alone")
        assert (gauge(r, "NVIDIA"), gauge(r, "FAKE")) == (0, 1)


async def test_a_malformed_vendor_is_reported_and_the_other_stays(
    emulator: Emulator, kube: KubeClient, store: Store
) -> None:
    emulator.put(mixed("mix"))
    async with running_registrar(store, kube, vendors=VENDORS) as r:
        emulator.patch("nodes", None, "mix", {"metadata": {"annotations": {FAKE_REGISTER: "[{broken"}}})
        only_gpus = [("NVIDIA", "GPU-1"), ("NVIDIA", "GPU-2")]
        await eventually(lambda: has_devices(store, "mix", only_gpus), what="the fake devices dropped")
        await emulator.wait_for(lambda: len(warnings(emulator, "mix")) == 1)
        (message,) = warnings(emulator, "mix")
        assert FAKE_REGISTER in message and "the node's FAKE devices are not registered" in message
        assert r.metric("vgpu_registrar_decode_errors_total", vendor="FAKE", reason="register") == 1
        assert r.metric("vgpu_registrar_decode_errors_total", vendor="NVIDIA", reason="register") == 0
        assert r.metric("vgpu_registrar_unregistered_total", vendor="FAKE", reason="no_allocatable") == 0

        # the same bad value on another NVIDIA change is not reported again; a fix registers the vendor again
        emulator.patch("nodes", None, "mix", {"metadata": {"annotations": {REGISTER: json_register("GPU-1")}}})
        await eventually(lambda: has_devices(store, "mix", [("NVIDIA", "GPU-1")]), what="one GPU")
        assert r.metric("vgpu_registrar_decode_errors_total", vendor="FAKE", reason="register") == 1
        emulator.patch("nodes", None, "mix", {"metadata": {"annotations": {FAKE_REGISTER: fake_register("FK-1")}}})
        both = [("NVIDIA", "GPU-1"), ("FAKE", "FK-1")]
        await eventually(lambda: has_devices(store, "mix", both), what="fake fixed")


async def test_device_id_collision_leaves_the_later_vendor_out(
    emulator: Emulator, kube: KubeClient, store: Store
) -> None:
    annotations = {REGISTER: json_register("GPU-1", "SAME"), FAKE_REGISTER: fake_register("FK-1", "SAME")}
    emulator.put(node("clash", **annotations))
    async with running_registrar(store, kube, vendors=VENDORS) as r:
        assert await devices(store, "clash") == [("NVIDIA", "GPU-1"), ("NVIDIA", "SAME")]
        await emulator.wait_for(lambda: len(warnings(emulator, "clash")) == 1)
        (message,) = warnings(emulator, "clash")
        assert message == (
            "device ID(s) SAME registered by both NVIDIA and FAKE; "
            "the node's FAKE devices are not registered until this is fixed"
        )
        assert r.metric("vgpu_registrar_decode_errors_total", vendor="FAKE", reason="uuid_collision") == 1
        assert (gauge(r, "NVIDIA"), gauge(r, "FAKE")) == (1, 0)

        fixed = {FAKE_REGISTER: fake_register("FK-1", "FK-2")}
        emulator.patch("nodes", None, "clash", {"metadata": {"annotations": fixed}})
        expected = [("NVIDIA", "GPU-1"), ("NVIDIA", "SAME"), ("FAKE", "FK-1"), ("FAKE", "FK-2")]
        await eventually(lambda: has_devices(store, "clash", expected), what="collision resolved")
        # the pass writes the inventory before it counts the node, so the gauge is awaited, not read at once
        await eventually(lambda: (gauge(r, "NVIDIA"), gauge(r, "FAKE")) == (1, 1), what="both vendors counted")


def _annotation(emulator: Emulator, name: str, key: str) -> str | None:
    obj = emulator.get("nodes", None, name)
    assert obj is not None
    value = obj["metadata"].get("annotations", {}).get(key)
    return value if isinstance(value, str) else None


async def test_each_vendor_handshakes_on_its_own_key(emulator: Emulator, kube: KubeClient, store: Store) -> None:
    clock = FakeClock()
    t0 = datetime.fromtimestamp(clock.now)
    colon = "GPU-c1,10,16384,100,NVIDIA-Tesla T4,0,true:"  # a ≤ v2.7 NVIDIA plugin speaks the handshake too
    emulator.put(node("old", fakes="0", **{REGISTER: colon, FAKE_REGISTER: fake_register("FK-1")}))
    vendors = (NvidiaVendor(), FakeVendor(handshake=True))
    async with running_registrar(store, kube, vendors=vendors, clock=clock) as r:
        await emulator.wait_for(lambda: _annotation(emulator, "old", FAKE_HANDSHAKE) == format_requesting(t0))
        assert _annotation(emulator, "old", "hami.io/node-handshake") == format_requesting(t0)
        assert await devices(store, "old") == [("NVIDIA", "GPU-c1"), ("FAKE", "FK-1")]
        assert r.metric("vgpu_registrar_handshake_writes_total", vendor="FAKE", result="written") == 1
        assert r.metric("vgpu_registrar_handshake_writes_total", vendor="NVIDIA", result="written") == 1

        # past the timeout with allocatable 0, the fake vendor is dropped; NVIDIA (allocatable 4) stays
        clock.advance(61)
        before = r.metric("vgpu_registrar_full_passes_total", trigger="periodic")
        r.service.request_resync()
        await eventually(lambda: r.metric("vgpu_registrar_full_passes_total", trigger="periodic") > before, what="pass")
        assert await devices(store, "old") == [("NVIDIA", "GPU-c1")]
        assert r.metric("vgpu_registrar_unregistered_total", vendor="FAKE", reason="handshake_timeout") == 1
