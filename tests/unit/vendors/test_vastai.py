"""Vastai vendor: HAMi's ``pkg/device/vastai`` tests restated (``device_test.go`` with die mode and
``TestComputeBestCombination``, ``device_cordon_test.go``; the index holds no copy at v2.10.0 (4707fb02): read at
the nearest stored versions, device_test.go 11e160b8, device_cordon_test.go ad358d3a, device.go with die mode as
found by its ``computeBestCombination``), plus our own cases. Every HAMi case names its test in a comment."""

from __future__ import annotations

import json
import random
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
    NodeInventory,
    NodePolicy,
    PodConstraints,
    PodRequest,
)
from vgpu_scheduler.shared.domain.plan import Decision, Failure, plan, plan_ranked, rank_key
from vgpu_scheduler.shared.domain.scoring import Policies
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.errors import ConfigError, DecodeError
from vgpu_scheduler.shared.vendors import vastai
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

V = vastai.build(None)[0]
VENDORS = Vendors((NvidiaVendor(), V))
fit = Fit(VENDORS)
COUNT = "vastaitech.com/va"


def dev(uuid: str, *, index: int = 0, count: int = 1, mem: int = 0, card: str | None = None) -> DeviceInfo:
    mode = f"die:{card}" if card is not None else ""
    return DeviceInfo(uuid, index, count, mem, 100, "Vastai", 0, mode, True, vendor="Vastai")


def req(nums: int = 1, kind: str = "Vastai") -> ContainerRequest:
    return ContainerRequest(nums=nums, mem_mib=0, mem_pct=100, cores_pct=0, type=kind)


def test_config_section() -> None:
    # the section, enable flag, names, keys and lock: test_contract.py
    with pytest.raises(ConfigError, match=re.escape("vastai.resourceCoreName: unknown key")):
        vastai.build({"resourceCoreName": "x"})


# ---- Test_MutateAdmission, Test_GenerateResourceRequests, Test_checkType, Test_PatchAnnotations -------------------


def test_mutate_and_requests() -> None:
    # Test_MutateAdmission "set to resource limits": true, no edit
    c = ctr({COUNT: "1"})
    assert V.mutate_container(c, "c") is True and c == ctr({COUNT: "1"})
    assert V.mutate_container(ctr(requests={COUNT: "1"}), "c") is False
    # Test_GenerateResourceRequests: nothing set → none; limits+requests, limits only, requests only → 1, 100 %
    assert V.container_request(ctr(), "c").empty
    want = ContainerRequest(1, 0, 100, 0, "Vastai")
    for c in (ctr({COUNT: "1"}, {COUNT: "1"}), ctr({COUNT: "1"}), ctr(requests={COUNT: "1"})):
        assert V.container_request(c, "c") == want
    with pytest.raises(DecodeError, match=re.escape(f"{COUNT} counts whole GPUs")):
        V.container_request(ctr({COUNT: "1.5"}), "c")


def test_check_type_and_patch_annotations() -> None:
    # Test_checkType "the same type" / "the different type"
    assert V.rules.type_ok(dev("d"), req(), PodConstraints())
    assert not V.rules.type_ok(dev("d"), req(kind="test"), PodConstraints())
    # Test_PatchAnnotations "exist device": "test1,Vastai,2048,1:;" under both keys; "no device": nothing
    devices = ((ContainerDevice("test1", 2048, 1, "Vastai"),),)
    assert device_list_annotations(devices, VENDORS) == {
        "hami.io/Vastai-devices-to-allocate": "test1,Vastai,2048,1:;",
        "hami.io/Vastai-devices-allocated": "test1,Vastai,2048,1:;",
    }
    nv = ((ContainerDevice("GPU-0", 10, 0, NVIDIA),),)
    assert not any("Vastai" in k for k in device_list_annotations(nv, VENDORS))


# ---- Test_GetNodeDevices, Test_CheckHealth ---------------------------------------------------------------------


def node(annotations: dict[str, str], allocatable: dict[str, Any] | None = None) -> NodeView:
    return NodeView("n1", "1", annotations, allocatable if allocatable is not None else {COUNT: "1"})


def test_get_node_devices() -> None:
    # "no annotation"
    assert V.observe(node({}), NOW) == NotRegistered(Unregistered.ABSENT)
    # "exist vastai device": core total 100, index 0, mode ""
    value = '[{"id":"7-0","count":1,"devmem":32768,"type":"Vastai","health":true,"devicepairscore":{}}]'
    got = V.observe(node({vastai.REGISTER_KEY: value}), NOW)
    assert isinstance(got, Registered)
    assert got.inventory.devices == (DeviceInfo("7-0", 0, 1, 32768, 100, "Vastai", 0, "", True, vendor="Vastai"),)
    # "no vasta device" (":") and "node annotations not decode successfully" (""): not registered (invalid here)
    for bad in (":", ""):
        got = V.observe(node({vastai.REGISTER_KEY: bad}), NOW)
        assert isinstance(got, Invalid) and (got.failure, got.source) == (DecodeFailure.REGISTER, vastai.REGISTER_KEY)


def test_die_mode_registration() -> None:
    items = [
        {"id": f"d-{i}", "index": i, "count": 1, "devmem": 8192, "type": "Vastai", "health": True,
         "custominfo": {"DeviceStrategy": "die", "AIC": str(i // 2)}}
        for i in range(4)
    ]  # fmt: skip
    got = V.observe(node({vastai.REGISTER_KEY: json.dumps(items)}, {COUNT: "4"}), NOW)
    assert isinstance(got, Registered)
    assert [(d.id, d.mode) for d in got.inventory.devices] == [("d-0", "die:0"), ("d-1", "die:0"), ("d-2", "die:1"),
                                                               ("d-3", "die:1")]  # fmt: skip
    # what the simulated plugin writes decodes to the same dies
    annotations, capacity, _ = V.node_registration(got.inventory.devices)
    again = V.observe(node(annotations, capacity), NOW)
    assert isinstance(again, Registered) and again.inventory.devices == got.inventory.devices
    assert json.loads(annotations[vastai.REGISTER_KEY])[0]["custominfo"] == {"DeviceStrategy": "die", "AIC": "0"}
    # a die without its card cannot be grouped: invalid
    items[1]["custominfo"] = {"DeviceStrategy": "die"}
    bad = V.observe(node({vastai.REGISTER_KEY: json.dumps(items)}), NOW)
    assert isinstance(bad, Invalid) and "custominfo.AIC" in bad.error.what


def test_check_health() -> None:
    reg = {vastai.REGISTER_KEY: '[{"id":"a","count":1,"devmem":1,"type":"Vastai","health":true}]'}
    # "Requesting state expired": unhealthy (no allocatable); "Unknown state": healthy, a fresh Requesting_ written
    expired = {**reg, "hami.io/node-handshake-va": "Requesting_2025-01-07 00:00:00"}
    assert V.observe(node(expired, {}), NOW) == NotRegistered(Unregistered.HANDSHAKE_TIMEOUT, legacy=True)
    got = V.observe(node({**reg, "hami.io/node-handshake-va": "Unknown"}, {}), NOW)
    assert isinstance(got, Registered) and got.handshake == "Requesting_2025-01-07 12:00:00"


# ---- TestDevices_Fit, TestFit_DeviceCordon, TestDevices_AddResourceUsage ----------------------------------------


def test_fit_success() -> None:
    # "fit success": HAMi walks from the last device (dev-1), and so do we (difference 8)
    got = fit([dev("dev-0"), dev("dev-1", index=1)], req())
    assert isinstance(got, Decision) and got.devices == ((ContainerDevice("dev-1", 0, 0, "Vastai"),),)
    # TestDevices_AddResourceUsage: one more slot, no memory, no cores
    got = fit([dev("dev-0", count=2, mem=8192)], req(), usage={"dev-0": DeviceUsage(1)})
    assert isinstance(got, Decision) and got.devices == ((ContainerDevice("dev-0", 0, 0, "Vastai"),),)


@pytest.mark.parametrize(
    "case",
    [
        # "fit fail: user assign use uuid mismatch" / "no use uuid match"
        Refusal([dev("dev-1")], req(), {}, {"vastaitech.com/use-gpuuuid": "dev-0"}, "1/1 CardUuidMismatch"),
        Refusal([dev("dev-0")], req(), {}, {"vastaitech.com/nouse-gpuuuid": "dev-0"}, "1/1 CardUuidMismatch"),
        # "fit fail: card overused"
        Refusal([dev("dev-0")], req(), {"dev-0": DeviceUsage(1)}, {}, "1/1 CardTimeSlicingExhausted"),
        # "mutex policy rejects used device"
        Refusal([dev("dev-0", count=2)], req(), {"dev-0": DeviceUsage(1)}, {"hami.io/gpu-scheduler-policy": "mutex"},
                "1/1 ExclusiveDeviceAllocateConflict"),
        # "fit fail: type mismatch": another family's request is never shown Vastai devices
        Refusal([dev("dev-0")], req(kind="OtherType"), {}, {}, "NodeInsufficientDevice"),
        # "fit fail:  AllocatedCardsInsufficientRequest": 2 of 1 device; the core knows first
        Refusal([dev("dev-0")], req(2), {}, {}, "NodeInsufficientDevice"),
    ],
)  # fmt: skip
def test_fit_refusals(case: Refusal) -> None:
    assert fit.refusal(case) == case.expected


def test_fit_mutex_die_mode() -> None:
    dies = [dev("dev-0", count=2, card="1"), dev("dev-1", index=1, card="1"), dev("dev-2", index=2, card="2")]
    mutex = {"hami.io/gpu-scheduler-policy": "mutex"}
    # "mutex die mode rejects idle die on occupied card, picks die on free card"
    assert uuids(fit(dies, req(), usage={"dev-0": DeviceUsage(1)}, annotations=mutex)) == ["dev-2"]
    # "mutex die mode rejects all idle dies on an occupied card"
    got = fit(dies[:2], req(), usage={"dev-0": DeviceUsage(1)}, annotations=mutex)
    assert reason(got) == "2/2 ExclusiveDeviceAllocateConflict"
    # without mutex the busy card's dies are fine
    assert isinstance(fit(dies[:2], req(), usage={"dev-0": DeviceUsage(1)}), Decision)


def test_fit_die_mode_takes_dies_from_the_fullest_card() -> None:
    # die mode, several dies: from as few cards as possible (HAMi's computeBestCombination through Fit)
    dies = [dev("a-0", card="A"), dev("b-0", index=1, card="B"), dev("b-1", index=2, card="B"),
            dev("b-2", index=3, card="B")]  # fmt: skip
    # (candidates in HAMi's walk order, from the last: the first best combination is b-2, b-1)
    assert uuids(fit(dies, req(2))) == ["b-2", "b-1"]
    assert sorted(uuids(fit(dies, req(4)))) == ["a-0", "b-0", "b-1", "b-2"]
    # one die asked: the first candidate (HAMi: the first its backward walk finds)
    assert uuids(fit(dies, req(1))) == ["b-2"]
    # a used die is not a candidate: card B keeps two free dies, still the fullest
    assert uuids(fit(dies, req(2), usage={"b-0": DeviceUsage(1)})) == ["b-2", "b-1"]
    # not enough free dies
    got = fit(dies, req(4), usage={"a-0": DeviceUsage(1)})
    assert reason(got) == "1/4 CardTimeSlicingExhausted, 3/4 AllocatedCardsInsufficientRequest"


@pytest.mark.parametrize(
    ("nums", "cards", "expected"),
    [
        # TestComputeBestCombination "single AIC group, sufficient to meet demand"
        (2, ["1", "1", "1"], ["dev1", "dev2"]),
        # "multiple AIC groups, select by count after sorting"
        (3, ["1", "1", "1", "2", "2", "3"], ["dev1", "dev2", "dev3"]),
        # "multiple AIC groups, need to take across groups"
        (4, ["1", "1", "1", "2", "2", "3"], ["dev1", "dev2", "dev3", "dev4"]),
        # "request number exceeds available devices": all three
        (5, ["1", "1", "2"], ["dev1", "dev2", "dev3"]),
    ],
)
def test_compute_best_combination(nums: int, cards: list[str], expected: list[str]) -> None:
    dies = [dev(f"dev{i + 1}", index=i + 1, card=c) for i, c in enumerate(cards)]
    assert [d.id for d in vastai.best_combination(dies, nums)] == expected


def test_fit_cordon() -> None:
    two = [dev("dev-0"), dev("dev-1", index=1)]
    # "cordoned device is skipped, healthy sibling still fits"; "all devices cordoned …"; "running pods on a
    # cordoned device are unaffected"; "no annotation …" (dev-1, the last, as HAMi)
    assert uuids(fit(two, req(), cordoned=frozenset({"dev-1"}))) == ["dev-0"]
    assert reason(fit(two, req(), cordoned=frozenset({"dev-0", "dev-1"}))) == "2/2 CardCordoned"
    assert uuids(fit(two, req(), usage={"dev-1": DeviceUsage(1)}, cordoned=frozenset({"dev-1"}))) == ["dev-0"]
    assert uuids(fit(two, req())) == ["dev-1"]


def test_lock_only_for_pods_with_devices() -> None:
    # TestDevices_LockNode / ReleaseNodeLock: only pods asking for Vastai devices are this vendor's
    assert not V.manages(ctr())
    assert V.manages(ctr(requests={COUNT: "1"})) and V.node_lock is NodeLockKind.HAMI


# ---- ScoreNode (die mode): HAMi's device_test.go has no case for it; ours, from device.go's ScoreNode ----------------


def _picked(*uuids_: str) -> tuple[ContainerDevice, ...]:
    return tuple(ContainerDevice(u, 0, 0, "Vastai") for u in uuids_)


def test_die_score() -> None:
    inv = NodeInventory(
        node="n1",
        vendor="Vastai",
        devices=(dev("d0", card="A"), dev("d1", index=1, card="A"), dev("d2", index=2, card="B"), dev("x", index=3)),
    )
    assert vastai.die_score(inv, (_picked("d0", "d1"),)) == 1.0  # both dies on card A
    assert vastai.die_score(inv, (_picked("d0", "d2"),)) == 0.5  # one die on each card
    assert vastai.die_score(inv, (_picked("d0", "d1", "d2"),)) == 2 / 3
    assert vastai.die_score(inv, (_picked("d0"), (), _picked("d1", "d2"))) == 1.5  # summed over containers
    assert vastai.die_score(inv, (_picked("d0", "x"),)) == 0.0  # a device that is no die: HAMi scores 0
    assert vastai.die_score(inv, ((),)) == 0.0


def _die_node(name: str, cards: list[str]) -> NodeSnapshot:
    devices = tuple(dev(f"{name}-{i}", index=i, card=c) for i, c in enumerate(cards))
    return NodeSnapshot(NodeInventory(node=name, vendor="Vastai", devices=devices), {})


@pytest.mark.parametrize("policy", [NodePolicy.BINPACK, NodePolicy.SPREAD])
def test_nodes_where_the_dies_share_a_card_rank_first(policy: NodePolicy) -> None:
    # two idle nodes with the same usage score: node-a has two cards of one die, node-b one card of two dies.
    # By name node-a comes first; with the die score (0.5 against 1.0) node-b wins under either node policy
    nodes = [_die_node("node-a", ["A", "B"]), _die_node("node-b", ["C", "C"])]
    assert nodes[0].summary.score == nodes[1].summary.score
    pod = PodRequest(containers=(req(2),), init_count=0)
    policies = Policies(node=policy)
    for exhaustive in (False, True):
        got = plan(pod, PodConstraints(), nodes, policies=policies, rules=VENDORS.rules, exhaustive=exhaustive)
        assert isinstance(got, Decision) and got.node == "node-b" and got.passed_over == 0, got
    ranked = sorted(nodes, key=rank_key(policy))
    got_ranked = plan_ranked(pod, PodConstraints(), ranked, policies=policies, rules=VENDORS.rules)
    assert got_ranked is not None and got_ranked.node == "node-b"
    # one die: every node scores 1.0, so the usual order decides (node-a by name)
    one = PodRequest(containers=(req(1),), init_count=0)
    got = plan(one, PodConstraints(), nodes, policies=policies, rules=VENDORS.rules)
    assert isinstance(got, Decision) and got.node == "node-a"
    # a node that does not fit still gets its reason
    full = {f"node-b-{i}": DeviceUsage(1) for i in range(2)}
    busy = [nodes[0], NodeSnapshot(nodes[1].inventory, full)]
    got = plan(pod, PodConstraints(), busy, policies=policies, rules=VENDORS.rules)
    assert isinstance(got, Decision) and got.node == "node-a"
    none = plan(PodRequest(containers=(req(3),), init_count=0), PodConstraints(), busy, policies=policies,
                rules=VENDORS.rules)  # fmt: skip
    assert isinstance(none, Failure) and set(none.reasons) == {"node-a", "node-b"}


def test_the_die_score_is_added_to_the_usage_score() -> None:
    # HAMi adds the die score (at most 1 per container) to the node's usage score. Vastai devices take no memory
    # and no cores, so only another vendor's usage moves that score: a mixed node whose NVIDIA GPU is busy keeps
    # binpack's preference over an idle node whose dies would share a card
    nv = DeviceInfo("GPU-0", 0, 10, 16384, 100, "NVIDIA-T4", 0, "hami-core", True)
    a = _die_node("node-a", ["A", "B"])
    mixed = NodeSnapshot(
        NodeInventory(node="node-a", vendor="NVIDIA,Vastai", devices=(nv, *a.inventory.devices)),
        {"GPU-0": DeviceUsage(1, 12000, 80)},
    )
    b = _die_node("node-b", ["C", "C"])
    assert mixed.summary.score > b.summary.score + 1
    pod = PodRequest(containers=(req(2),), init_count=0)
    got = plan(pod, PodConstraints(), [mixed, b], policies=Policies(node=NodePolicy.BINPACK), rules=VENDORS.rules)
    assert isinstance(got, Decision) and got.node == "node-a" and uuids(got) == ["node-a-1", "node-a-0"]


@pytest.mark.parametrize("policy", [NodePolicy.BINPACK, NodePolicy.SPREAD])
def test_the_scored_walk_stops_early_and_still_takes_the_best_node(policy: NodePolicy) -> None:
    # random die-mode nodes (mixed with a busy NVIDIA GPU on some, so base scores differ): the plan, which stops
    # once no node can reach the best total, takes the node a full evaluation of every node ranks first
    rnd = random.Random(11)
    for _ in range(40):
        nodes: list[NodeSnapshot] = []
        for k in range(rnd.randint(1, 8)):
            name = f"n{rnd.randint(0, 99):02d}-{k}"
            cards = [rnd.choice("ABC") for _ in range(rnd.randint(1, 5))]
            dies = tuple(dev(f"{name}-{i}", index=i, card=f"{name}-{c}") for i, c in enumerate(cards))
            usage = {d.id: DeviceUsage(1) for d in dies if rnd.random() < 0.3}
            extra: tuple[DeviceInfo, ...] = ()
            if rnd.random() < 0.5:
                extra = (DeviceInfo(f"GPU-{name}", 0, 10, 16384, 100, "NVIDIA-T4", 0, "hami-core", True),)
                usage[f"GPU-{name}"] = DeviceUsage(1, rnd.choice([1000, 8000, 16000]), rnd.choice([10, 50, 100]))
            inv = NodeInventory(node=name, vendor="Vastai", devices=(*extra, *dies))
            nodes.append(NodeSnapshot(inv, usage))
        pod = PodRequest(containers=(req(rnd.randint(1, 3)),), init_count=0)
        policies = Policies(node=policy)
        got = plan(pod, PodConstraints(), nodes, policies=policies, rules=VENDORS.rules)
        totals = []
        for snap in nodes:
            alone = plan(pod, PodConstraints(), [snap], policies=policies, rules=VENDORS.rules)
            if isinstance(alone, Decision):
                term = vastai.die_score(snap.inventory, alone.devices)
                total = snap.summary.score + (term if policy is NodePolicy.BINPACK else -term)
                totals.append(((-total if policy is NodePolicy.BINPACK else total), snap.name))
        if not totals:
            assert isinstance(got, Failure) and set(got.reasons) == {s.name for s in nodes}
            continue
        assert isinstance(got, Decision), got
        assert got.node == min(totals)[1], (totals, got.node)


def test_plain_vastai_nodes_bound_the_score_at_0() -> None:
    # without dies every node's term is 0, so the bound is 0 and the walk stops after the first node that fits
    plain = NodeSnapshot(NodeInventory(node="n1", vendor="Vastai", devices=(dev("a"), dev("b", index=1))), {})
    dies = _die_node("n2", ["A", "A"])
    pod = (req(2), req(1))
    rules = vastai.VASTAI_RULES
    assert isinstance(rules, vastai.VastaiRules)
    assert rules.pod_score_bound(plain, pod, NodePolicy.BINPACK, PodConstraints()) == 0
    assert rules.pod_score_bound(dies, pod, NodePolicy.BINPACK, PodConstraints()) == 2
    assert vastai.die_score(plain.inventory, ((ContainerDevice("a", 0, 0, "Vastai"),),)) == 0
