"""The registrar against the emulator and a real redis-server: nodes in, inventories out."""

from __future__ import annotations

from datetime import datetime

from tests.integration.registrar.helpers import (
    CORDON,
    HANDSHAKE,
    REGISTER,
    SCORE,
    FakeClock,
    Running,
    json_register,
    make_node,
    running_registrar,
)
from tests.waiting import eventually
from vgpu_scheduler.services.registrar.sync import INVALID_EVENT_REASON
from vgpu_scheduler.shared.codec.handshake import HandshakeKind, format_requesting, parse_handshake
from vgpu_scheduler.shared.domain.model import NodeInventory
from vgpu_scheduler.shared.emulator import Emulator
from vgpu_scheduler.shared.k8s import KubeClient
from vgpu_scheduler.shared.store import Store, SyncMarker

COLON_9 = (
    "GPU-c9a,10,16384,100,NVIDIA-Tesla T4,0,true,0,hami-core:GPU-c9b,10,16384,100,NVIDIA-Tesla T4,1,true,1,hami-core:"
)
COLON_7 = "GPU-c7a,10,16384,100,NVIDIA-Tesla T4,0,true:"


async def inv(store: Store, node: str) -> NodeInventory | None:
    return await store.inventory.get(node)


async def has(store: Store, node: str) -> bool:
    return await store.inventory.get(node) is not None


async def lacks(store: Store, node: str) -> bool:
    return await store.inventory.get(node) is None


def events_on(emulator: Emulator, node: str) -> list[dict[str, object]]:
    return [e for e in emulator.list("events") if e["involvedObject"]["name"] == node]


async def test_node_add_change_dead_and_delete(emulator: Emulator, kube: KubeClient, store: Store) -> None:
    emulator.put(make_node("n1", annotations={REGISTER: json_register("GPU-1", "GPU-2")}))
    async with running_registrar(store, kube) as r:
        got = await inv(store, "n1")
        assert got is not None
        assert [d.id for d in got.devices] == ["GPU-1", "GPU-2"]
        assert (await store.meta.status()).is_synced(SyncMarker.INVENTORY)
        gen = (await store.inventory.generations(["n1"]))["n1"]
        assert r.metric("vgpu_registrar_leader") == 1
        assert r.metric("vgpu_registrar_nodes_registered", vendor="NVIDIA") == 1

        # a change that does not touch the inventory writes nothing
        puts_before = r.metric("vgpu_registrar_inventory_writes_total", op="put", result="changed")
        emulator.patch("nodes", None, "n1", {"metadata": {"labels": {"zone": "a"}}})
        emulator.put(make_node("probe"))  # processed after the label change: a barrier
        await eventually(lambda: r.service.sync is not None and "probe" in r.service.sync.known, what="probe seen")
        assert (await store.inventory.generations(["n1"]))["n1"] == gen
        assert r.metric("vgpu_registrar_inventory_writes_total", op="put", result="changed") == puts_before

        # the annotation changes: a new inventory, a new generation
        emulator.patch("nodes", None, "n1", {"metadata": {"annotations": {REGISTER: json_register("GPU-1")}}})
        await eventually(lambda: _device_ids(store, "n1", ["GPU-1"]), what="one device left")
        assert (await store.inventory.generations(["n1"]))["n1"] > gen

        # the device plugin goes away: allocatable 0 removes the node
        emulator.patch("nodes", None, "n1", {"status": {"allocatable": {"nvidia.com/gpu": "0"}}})
        await eventually(lambda: lacks(store, "n1"), what="n1 removed (allocatable 0)")
        assert r.metric("vgpu_registrar_unregistered_total", vendor="NVIDIA", reason="no_allocatable") == 1

        emulator.patch("nodes", None, "n1", {"status": {"allocatable": {"nvidia.com/gpu": "4"}}})
        await eventually(lambda: has(store, "n1"), what="n1 back")

        # annotation removed, then node deleted
        emulator.patch("nodes", None, "n1", {"metadata": {"annotations": {REGISTER: None}}})
        await eventually(lambda: lacks(store, "n1"), what="n1 removed (no annotation)")
        emulator.patch("nodes", None, "n1", {"metadata": {"annotations": {REGISTER: json_register("GPU-1")}}})
        await eventually(lambda: has(store, "n1"), what="n1 back again")
        emulator.delete("nodes", None, "n1")
        await eventually(lambda: lacks(store, "n1"), what="n1 removed (deleted)")
        assert await store.inventory.list_nodes() == []


async def test_a_lock_only_update_is_not_observed_again_and_a_read_change_is(
    emulator: Emulator, kube: KubeClient, store: Store
) -> None:
    emulator.put(make_node("n1", annotations={REGISTER: json_register("GPU-1", "GPU-2")}))
    async with running_registrar(store, kube) as r:
        await eventually(lambda: has(store, "n1"), what="n1 registered")
        assert r.metric("vgpu_registrar_node_updates_unchanged_total") == 0

        async def barrier(name: str) -> None:  # a node created after the updates: seen once they were handled
            emulator.put(make_node(name))
            await eventually(lambda: r.service.sync is not None and name in r.service.sync.known, what=f"{name} seen")

        # every bind sets and clears the node lock: nothing a vendor reads changes
        lock = "hami.io/mutex.lock"
        emulator.patch("nodes", None, "n1", {"metadata": {"annotations": {lock: "2026-11-27T09:00:00Z,ns,p1"}}})
        emulator.patch("nodes", None, "n1", {"metadata": {"annotations": {lock: None}}})
        await barrier("probe-1")
        assert r.metric("vgpu_registrar_node_updates_unchanged_total") == 2

        # a change a vendor reads (the register annotation, allocatable) is observed again and written
        emulator.patch("nodes", None, "n1", {"metadata": {"annotations": {REGISTER: json_register("GPU-1")}}})
        await eventually(lambda: _device_ids(store, "n1", ["GPU-1"]), what="one device left")
        emulator.patch("nodes", None, "n1", {"status": {"allocatable": {"nvidia.com/gpu": "0"}}})
        await eventually(lambda: lacks(store, "n1"), what="n1 removed (allocatable 0)")
        await barrier("probe-2")
        assert r.metric("vgpu_registrar_node_updates_unchanged_total") == 2


async def _device_ids(store: Store, node: str, ids: list[str]) -> bool:
    got = await store.inventory.get(node)
    return got is not None and [d.id for d in got.devices] == ids


async def test_every_format_topology_and_cordon(emulator: Emulator, kube: KubeClient, store: Store) -> None:
    score = '[{"uuid":"GPU-j1","score":{"GPU-j2":1260}},{"uuid":"GPU-j2","score":{"GPU-j1":1260}}]'
    emulator.put(
        make_node(
            "json",
            annotations={REGISTER: json_register("GPU-j1", "GPU-j2"), SCORE: score, CORDON: " GPU-j2 ,GPU-x"},
        )
    )
    emulator.put(make_node("colon9", annotations={REGISTER: COLON_9}))
    emulator.put(make_node("colon7", annotations={REGISTER: COLON_7}))
    emulator.put(make_node("empty", annotations={REGISTER: "[]"}))
    emulator.put(make_node("cpu-only"))
    async with running_registrar(store, kube):
        assert await store.inventory.list_nodes() == ["colon7", "colon9", "json"]
        j = await inv(store, "json")
        assert j is not None
        assert j.pair_scores == {"GPU-j1": {"GPU-j2": 1260}, "GPU-j2": {"GPU-j1": 1260}}
        assert j.cordoned == frozenset({"GPU-j2"})
        c9 = await inv(store, "colon9")
        assert c9 is not None and [(d.id, d.index, d.numa) for d in c9.devices] == [
            ("GPU-c9a", 0, 0),
            ("GPU-c9b", 1, 1),
        ]
        c7 = await inv(store, "colon7")
        assert c7 is not None and [(d.id, d.index, d.mode) for d in c7.devices] == [("GPU-c7a", 0, "hami-core")]

        # cordon changes are inventory changes
        emulator.patch("nodes", None, "json", {"metadata": {"annotations": {CORDON: ""}}})
        await eventually(lambda: _cordoned(store, "json", frozenset()), what="uncordoned")


async def _cordoned(store: Store, node: str, expected: frozenset[str]) -> bool:
    got = await store.inventory.get(node)
    return got is not None and got.cordoned == expected


async def test_malformed_annotations_drop_only_their_node(emulator: Emulator, kube: KubeClient, store: Store) -> None:
    emulator.put(make_node("good", annotations={REGISTER: json_register("GPU-g")}))
    emulator.put(make_node("bad-register", annotations={REGISTER: "GPU-b,1,2:"}))
    emulator.put(make_node("bad-score", annotations={REGISTER: json_register("GPU-s"), SCORE: "[{"}))
    emulator.put(make_node("was-good", annotations={REGISTER: json_register("GPU-w")}))
    async with running_registrar(store, kube) as r:
        assert await store.inventory.list_nodes() == ["good", "was-good"]
        assert r.metric("vgpu_registrar_decode_errors_total", vendor="NVIDIA", reason="register") == 1
        assert r.metric("vgpu_registrar_decode_errors_total", vendor="NVIDIA", reason="topology_score") == 1
        await emulator.wait_for(lambda: len(emulator.list("events")) == 2)
        (ev,) = events_on(emulator, "bad-register")
        assert ev["type"] == "Warning"
        assert ev["reason"] == INVALID_EVENT_REASON
        assert REGISTER in str(ev["message"]) and "GPU-b,1,2" in str(ev["message"])
        (ev,) = events_on(emulator, "bad-score")
        assert SCORE in str(ev["message"])

        # a registered node that turns malformed is dropped; the others stay
        emulator.patch("nodes", None, "was-good", {"metadata": {"annotations": {REGISTER: "{oops"}}})
        await eventually(lambda: lacks(store, "was-good"), what="was-good dropped")
        assert await store.inventory.list_nodes() == ["good"]
        await emulator.wait_for(lambda: len(events_on(emulator, "was-good")) == 1)

        # the same bad value again (another change, a full pass): no second event, no second count
        emulator.patch("nodes", None, "bad-register", {"metadata": {"labels": {"touched": "yes"}}})
        r.service.request_resync()
        passes = r.metric("vgpu_registrar_full_passes_total", trigger="periodic")
        await eventually(
            lambda: r.metric("vgpu_registrar_full_passes_total", trigger="periodic") > passes, what="a full pass"
        )
        assert len(events_on(emulator, "bad-register")) == 1
        assert r.metric("vgpu_registrar_decode_errors_total", vendor="NVIDIA", reason="register") == 2  # + was-good

        # a different bad value is a new event; fixing it registers the node
        emulator.patch("nodes", None, "bad-register", {"metadata": {"annotations": {REGISTER: "still:bad"}}})
        await emulator.wait_for(lambda: len(events_on(emulator, "bad-register")) == 2)
        emulator.patch("nodes", None, "bad-register", {"metadata": {"annotations": {REGISTER: json_register("GPU-b")}}})
        await eventually(lambda: has(store, "bad-register"), what="fixed node registered")


async def test_node_label_selector(emulator: Emulator, kube: KubeClient, store: Store) -> None:
    emulator.put(make_node("in", labels={"gpu": "on"}, annotations={REGISTER: json_register("GPU-i")}))
    emulator.put(make_node("out", annotations={REGISTER: json_register("GPU-o")}))
    async with running_registrar(store, kube, selector=(("gpu", "on"),)):
        assert await store.inventory.list_nodes() == ["in"]
        emulator.patch("nodes", None, "in", {"metadata": {"labels": {"gpu": None}}})
        await eventually(lambda: lacks(store, "in"), what="node left the selection")
        emulator.patch("nodes", None, "out", {"metadata": {"labels": {"gpu": "on"}}})
        await eventually(lambda: has(store, "out"), what="node entered the selection")


def _handshake(emulator: Emulator, node: str) -> str | None:
    obj = emulator.get("nodes", None, node)
    assert obj is not None
    value = obj["metadata"].get("annotations", {}).get(HANDSHAKE)
    return value if isinstance(value, str) else None


async def test_handshake_with_old_device_plugins(emulator: Emulator, kube: KubeClient, store: Store) -> None:
    clock = FakeClock()
    t0 = datetime.fromtimestamp(clock.now)
    emulator.put(make_node("old", annotations={REGISTER: COLON_9}, gpus=0))
    emulator.put(make_node("new", annotations={REGISTER: json_register("GPU-n")}))
    async with running_registrar(store, kube, clock=clock) as r:
        # an old-format node gets Requesting_<local now> and counts as live while it waits for the answer
        await emulator.wait_for(lambda: _handshake(emulator, "old") == format_requesting(t0))
        assert await has(store, "old")
        assert _handshake(emulator, "new") is None  # v2.8+ plugins do not speak the handshake
        assert r.metric("vgpu_registrar_handshake_writes_total", vendor="NVIDIA", result="written") == 1

        # the plugin answers with Reported: the registrar requests again, at its current time
        clock.advance(45)
        reported = "Reported 2024-01-23 04:30:04.434037031 +0000 UTC m=+1104711.777756895"
        emulator.patch("nodes", None, "old", {"metadata": {"annotations": {HANDSHAKE: reported}}})
        t1 = datetime.fromtimestamp(clock.now)
        await emulator.wait_for(lambda: _handshake(emulator, "old") == format_requesting(t1))
        assert await has(store, "old")

        # still within 60 s of our request: live; past 60 s with allocatable 0: dropped
        clock.advance(59)
        await _full_pass(r)
        assert await has(store, "old")
        clock.advance(2)
        await _full_pass(r)
        assert await lacks(store, "old")
        assert r.metric("vgpu_registrar_unregistered_total", vendor="NVIDIA", reason="handshake_timeout") == 1
        value = _handshake(emulator, "old")
        assert value is not None and parse_handshake(value).kind is HandshakeKind.REQUESTING  # left as is: no flap

        # allocatable comes back: live again without any handshake answer
        emulator.patch("nodes", None, "old", {"status": {"allocatable": {"nvidia.com/gpu": "2"}}})
        await eventually(lambda: has(store, "old"), what="old back on allocatable")


async def _full_pass(r: Running) -> None:
    before = r.metric("vgpu_registrar_full_passes_total", trigger="periodic")
    r.service.request_resync()
    await eventually(lambda: r.metric("vgpu_registrar_full_passes_total", trigger="periodic") > before, what="pass")
