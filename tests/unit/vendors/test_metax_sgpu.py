"""MetaX sGPU vendor: HAMi's ``pkg/device/metax`` sGPU tests restated. The index holds no copy at v2.10.0
(4707fb02): ``sdevice_test.go`` was read at 0fb30836, ``sdevice.go`` at 12ca202d, ``protocol.go`` at 264ba8ab,
``qos.go`` at f278854e, ``qos_test.go`` at ccef1d27 and ``config.go`` at 5f611c76 (the nearest stored versions; our
``metax:`` section follows ``config.go``, which has no topology-aware key). Every HAMi case names its test in a
comment. HAMi's jittery-QoS cache lives in the scheduler's memory; here a card's policy comes from the tags of the
pods it holds (docs/vendors/metax.md), so ``TestAddJitteryQos``, ``TestJitteryQosCacheSync`` and ``TestGet`` are
restated as the rule they serve: which policy a card in use takes."""

from __future__ import annotations

import json
import random
import re
from dataclasses import replace
from typing import Any

import pytest

from tests.unit.vendors.kit import NOW, Fit, Refusal, check_share_usage, ctr, hami_share_refusals, reason, uuids
from vgpu_scheduler.services.informer.quotas import read_quota
from vgpu_scheduler.shared.codec.resources import ResourceRequestError
from vgpu_scheduler.shared.domain.accounting import collapse
from vgpu_scheduler.shared.domain.model import (
    MEM_PCT_UNSET,
    ContainerDevice,
    ContainerRequest,
    DeviceCharge,
    DeviceInfo,
    DeviceUsage,
    NodeInventory,
    NodePolicy,
    NvidiaConfig,
    PodRequest,
)
from vgpu_scheduler.shared.domain.plan import Decision, Failure, plan
from vgpu_scheduler.shared.domain.scoring import Policies
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.protocol.jsonpatch import apply_patch
from vgpu_scheduler.shared.protocol.webhook import mutate_pod
from vgpu_scheduler.shared.vendors import metax, metax_sgpu
from vgpu_scheduler.shared.vendors.metax_sgpu import (
    BEST_EFFORT,
    BURST_SHARE,
    FIXED_SHARE,
    QOS_POLICY_KEY,
    device_mode,
    prioritize_exclusive,
    qos_ok,
)
from vgpu_scheduler.shared.vendors.nvidia import NvidiaVendor
from vgpu_scheduler.shared.vendors.pods import allocation_annotations, decode_vendor_constraints
from vgpu_scheduler.shared.vendors.registration import (
    DecodeFailure,
    Invalid,
    NodeView,
    NotRegistered,
    Registered,
    Unregistered,
)
from vgpu_scheduler.shared.vendors.registry import Vendors

V = metax.build(None)[1]
assert isinstance(V, metax_sgpu.MetaxSgpuVendor)
VENDORS = Vendors((NvidiaVendor(), *metax.build(None)))
fit = Fit(VENDORS)
SG = "Metax-SGPU"
COUNT, VCORE, VMEM = "metax-tech.com/sgpu", "metax-tech.com/vcore", "metax-tech.com/vmemory"
APP = "metax-tech.com/sgpu-app-class"


def card(
    uuid: str, *, index: int = 0, count: int = 100, mem: int = 128, qos: str = "", link: int = 0, health: bool = True
) -> DeviceInfo:
    return DeviceInfo(uuid, index, count, mem, 100, SG, 0, device_mode(qos, link), health, vendor=SG)


def req(nums: int = 1, mem: int = 0, pct: int = MEM_PCT_UNSET, cores: int = 0, kind: str = SG) -> ContainerRequest:
    return ContainerRequest(nums=nums, mem_mib=mem, mem_pct=pct, cores_pct=cores, type=kind)


def _pod(containers: list[dict[str, Any]], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "namespace": "d"}
    if annotations is not None:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": containers}}


def admit(pod: dict[str, Any]) -> tuple[bool, str, dict[str, Any]]:
    out = mutate_pod(pod, cfg=NvidiaConfig(), scheduler_name="vgpu", force_overwrite_default_scheduler=True,
                     vendors=VENDORS)  # fmt: skip
    return out.allowed, out.message, apply_patch(pod, out.patch_ops) if out.allowed else pod


def test_keys_and_names() -> None:
    # the names, keys and lock (MetaxNodeLock = hami.io/mutex.lock): test_contract.py
    assert V.resources.all == frozenset({COUNT, VCORE, VMEM})
    # a namespace quota's limits.metax-tech.com/vmemory is in GiB, as HAMi's MemoryFactor (1024) reads it
    quota = {"spec": {"hard": {f"limits.{VMEM}": "16", f"limits.{VCORE}": "150"}}}
    limits = read_quota(quota, NvidiaConfig(), VENDORS).limits.of(SG)
    assert (limits.mem_mib, limits.cores_pct) == (16 * 1024, 150)
    _, renamed = metax.build(
        {"resourceVCountName": "x.io/s", "resourceVMemoryName": "x.io/m", "resourceVCoreName": "x.io/c"}
    )
    assert renamed.resources.all == frozenset({"x.io/s", "x.io/m", "x.io/c"})


# ---- TestMutateAdmission ---------------------------------------------------------------------------------------------


def test_mutate_admission_qos_policy() -> None:
    # "no sgpu resource": not ours, the pod untouched
    assert V.mutate_container(ctr(), "c") is False
    pod = _pod([{**ctr({"cpu": "1"}), "image": "x"}], {QOS_POLICY_KEY: BEST_EFFORT})
    allowed, _, patched = admit(pod)
    assert allowed and patched == pod
    # "no qos policy" and "pod annotation nil": best-effort written
    annos_cases: tuple[dict[str, str] | None, ...] = ({}, None)
    for annos in annos_cases:
        allowed, _, patched = admit(_pod([{**ctr({COUNT: "1"}), "image": "x"}], annos))
        assert allowed and patched["metadata"]["annotations"] == {QOS_POLICY_KEY: BEST_EFFORT}
        assert patched["spec"]["schedulerName"] == "vgpu"
    # "qos policy fit": kept as written
    allowed, _, patched = admit(_pod([{**ctr({COUNT: "1"}), "image": "x"}], {QOS_POLICY_KEY: BURST_SHARE}))
    assert allowed and patched["metadata"]["annotations"] == {QOS_POLICY_KEY: BURST_SHARE}
    # "qos policy error": HAMi's message
    allowed, message, _ = admit(_pod([{**ctr({COUNT: "1"}), "image": "x"}], {QOS_POLICY_KEY: "best-effortx"}))
    assert not allowed and message == (
        "metax-tech.com/sgpu-qos-policy: must be set one of [best-effort, fixed-share, burst-share] (at "
        '\'best-effortx\'); write "best-effort", "fixed-share" or "burst-share", or leave it out'
    )


def test_mutate_admission_app_class() -> None:
    # "app class task verify error": HAMi's message
    allowed, message, _ = admit(_pod([{**ctr({COUNT: "1"}), "image": "x"}], {APP: "oNLine"}))
    assert not allowed and "metax-tech.com/sgpu-app-class: must be set one of [online, offline]" in message
    # "app class task must allocate single device" (HAMi: "app-class pod must request single device")
    for app in ("online", "offline"):
        allowed, message, _ = admit(_pod([{**ctr({COUNT: "2"}), "image": "x"}], {APP: app}))
        assert not allowed and "must ask for exactly one; write 1" in message and "'2'" in message, message
    # "offline task with qos": an offline pod's policy is checked
    allowed, message, _ = admit(_pod([{**ctr({COUNT: "1"}), "image": "x"}], {APP: "offline", QOS_POLICY_KEY: "x"}))
    assert not allowed and "must be set one of [best-effort, fixed-share, burst-share]" in message
    # "online task with qos": an online pod's policy is not read, nor defaulted
    annos = {APP: "online", QOS_POLICY_KEY: "best-effortx"}
    allowed, _, patched = admit(_pod([{**ctr({COUNT: "1"}), "image": "x"}], annos))
    assert allowed and patched["metadata"]["annotations"] == annos and patched["spec"]["schedulerName"] == "vgpu"
    allowed, _, patched = admit(_pod([{**ctr({COUNT: "1"}), "image": "x"}], {APP: "online"}))
    assert allowed and patched["metadata"]["annotations"] == {APP: "online"}
    # an offline pod without a policy gets best-effort, as any pod that is not online
    allowed, _, patched = admit(_pod([{**ctr({COUNT: "1"}), "image": "x"}], {APP: "offline"}))
    assert allowed and patched["metadata"]["annotations"] == {APP: "offline", QOS_POLICY_KEY: BEST_EFFORT}


# ---- TestGenerateResourceRequests ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        ({COUNT: "1"}, ContainerRequest(1, 0, 100, 100, SG)),  # "one full sgpu test"
        ({COUNT: "2"}, ContainerRequest(2, 0, 100, 100, SG)),  # "two full sgpu test"
        ({COUNT: "1", VCORE: "30"}, ContainerRequest(1, 0, 100, 30, SG)),  # "one sgpu test set vcore"
        ({COUNT: "1", VMEM: "16"}, ContainerRequest(1, 16 * 1024, MEM_PCT_UNSET, 100, SG)),  # "... set vmemory"
        (
            {COUNT: "1", VCORE: "60", VMEM: "16"},
            ContainerRequest(1, 16 * 1024, MEM_PCT_UNSET, 60, SG),
        ),  # "vcore&vmemory"
        ({COUNT: "1", VCORE: "60", VMEM: "1024Mi"}, ContainerRequest(1, 1024, MEM_PCT_UNSET, 60, SG)),  # "mem unit Mi"
        ({COUNT: "1", VCORE: "60", VMEM: "16Gi"}, ContainerRequest(1, 16 * 1024, MEM_PCT_UNSET, 60, SG)),  # "unit Gi"
    ],
)
def test_generate_resource_requests(limits: dict[str, str], expected: ContainerRequest) -> None:
    assert V.container_request(ctr(limits), "c") == expected


def test_generate_resource_requests_limits_only_and_strict() -> None:
    # HAMi reads the limits only: a count in the requests alone is no request
    assert V.container_request(ctr(requests={COUNT: "1"}), "c").empty
    assert V.container_request(ctr({COUNT: "0"}), "c").empty
    # HAMi drops these requests without a word (the pod then runs with no card); ours names them
    for limits, needle in [
        ({COUNT: "-1"}, "not a whole number"),
        ({COUNT: "1.5"}, "not a whole number"),
        ({COUNT: "x"}, "is not a quantity"),
        ({COUNT: "1", VCORE: str(2**31)}, "out of range"),
        ({COUNT: "1", VMEM: "1k"}, "less than 1 MiB"),
        ({COUNT: "1", VMEM: "3000000"}, "out of range"),
    ]:
        with pytest.raises(ResourceRequestError, match=re.escape(needle)):
            V.container_request(ctr(limits), "c")
    # a vcore above 100 is read as 100, as HAMi's Fit caps it, and the webhook says so
    assert V.container_request(ctr({COUNT: "1", VCORE: "120"}), "c").cores_pct == 100
    out = mutate_pod(_pod([{**ctr({COUNT: "1", VCORE: "120"}), "image": "x"}]), cfg=NvidiaConfig(),
                     scheduler_name="vgpu", force_overwrite_default_scheduler=True, vendors=VENDORS)  # fmt: skip
    assert out.allowed and any('metax-tech.com/vcore: "120" is more than 100 (a whole card)' in w for w in out.warnings)
    # only the limits count: a vcore in the requests alone is no value, so no warning
    out = mutate_pod(_pod([{**ctr({COUNT: "1"}, {VCORE: "120"}), "image": "x"}]), cfg=NvidiaConfig(),
                     scheduler_name="vgpu", force_overwrite_default_scheduler=True, vendors=VENDORS)  # fmt: skip
    assert out.allowed and not out.warnings


# ---- TestGetMetaxSDevices (and GetNodeDevices / CheckHealth) --------------------------------------------------------

NORMAL = (
    '[{"uuid": "GPU-123", "model": "sgpu", "totalDevCount": 16, "totalCompute": 100, "bdf": "0000:44:00.0", '
    '"totalVRam" : 32768, "numa": 1, "healthy": true, "qosPolicy": "fixed-share"}]'
)


def node(annotations: dict[str, str]) -> NodeView:
    return NodeView("normal", "1", annotations, {}, capacity={})


def test_get_metax_sdevices() -> None:
    # "test normal node"
    got = V.observe(node({V.register_key or "": NORMAL}), NOW)
    assert isinstance(got, Registered)
    assert got.inventory.devices == (
        DeviceInfo("GPU-123", 0, 16, 32768, 100, SG, 1, "qos=fixed-share link=0", True, vendor=SG),
    )
    assert metax_sgpu.qos_of(got.inventory.devices[0]) == FIXED_SHARE
    # "test annotations nil": not registered
    assert V.observe(node({}), NOW) == NotRegistered(Unregistered.ABSENT)
    # "test Unmarshal fail": HAMi logs and registers nothing; ours reports it invalid (a warning Event)
    bad = V.observe(node({"metax-tech.com/node-gpu-devices": ""}), NOW)
    assert isinstance(bad, Invalid) and bad.failure is DecodeFailure.REGISTER
    # "test devices len 0": no card, not registered (HAMi's CheckHealth: unhealthy)
    assert V.observe(node({"metax-tech.com/node-gpu-devices": "[]"}), NOW) == NotRegistered(Unregistered.NO_DEVICES)


def test_register_value_errors_and_roundtrip() -> None:
    for value in ('[{"model": "x"}]', '[{"uuid": "a", "totalVRam": "1"}]', '[{"uuid": "a", "healthy": 1}]', "{}"):
        with pytest.raises(DecodeError):
            metax_sgpu.decode_devices_register(value)
    devices = (card("GPU-a", qos=BURST_SHARE, link=2), card("GPU-b", index=1, health=False))
    annotations, capacity, _ = V.node_registration(devices)
    assert capacity == {COUNT: "200"}
    got = V.observe(node(annotations), NOW)
    assert isinstance(got, Registered) and got.inventory.devices == devices


# ---- TestCheckDeviceQos ----------------------------------------------------------------------------------------------


def test_check_device_qos() -> None:
    # "check no use device": the core asks only about cards in use (see the fit below)
    idle = fit([card("GPU-123", qos=BURST_SHARE)], req(1, 64, cores=50), annotations={QOS_POLICY_KEY: BEST_EFFORT})
    assert uuids(idle) == ["GPU-123"]
    # "check request exclusive"
    assert qos_ok(BURST_SHARE, BEST_EFFORT, 100)
    # "check fail"
    assert not qos_ok(BURST_SHARE, BEST_EFFORT, 50)
    # "check pass"
    assert qos_ok(BEST_EFFORT, BEST_EFFORT, 50)
    # and through the Fit: a card in use of another policy is CardQosPolicyMismatch; a card with no policy is open
    used = {"GPU-123": DeviceUsage(2, 0, 20)}
    asked = {QOS_POLICY_KEY: BEST_EFFORT}
    burst = [card("GPU-123", qos=BURST_SHARE)]
    assert reason(fit(burst, req(1, 64, cores=50), usage=used, annotations=asked)) == "1/1 CardQosPolicyMismatch"
    assert uuids(fit([card("GPU-123", qos="")], req(1, 64, cores=50), usage=used, annotations=asked)) == ["GPU-123"]
    assert uuids(fit([card("GPU-123", qos=BEST_EFFORT)], req(1, 64, cores=50), usage=used, annotations=asked))


# ---- TestMetaxSDevices_Fit -------------------------------------------------------------------------------------------


def test_fit_success() -> None:
    # "fit success": dev-1 (the last), as HAMi (difference 8)
    got = fit([card("dev-0"), card("dev-1")], req(1, 64, cores=50))
    assert isinstance(got, Decision) and got.devices == ((ContainerDevice("dev-1", 64, 50, SG),),)


@pytest.mark.parametrize(
    "case",
    [
        *hami_share_refusals(card, req),
        # "fit fail: type mismatch": another family's request is never shown sGPUs
        Refusal([card("dev-0")], req(1, 512, cores=50, kind="OtherType"), {}, {}, "NodeInsufficientDevice"),
        # "fit fail: device unhealthy": HAMi's sGPU word, CardUnhealthy
        Refusal([card("dev-0", health=False)], req(1, 512, cores=50), {}, {}, "1/1 CardUnhealthy"),
        # "fit fail: user assign use uuid mismatch" (2 asked, 1 card): the core knows first
        Refusal([card("dev-1", mem=1280)], req(2, 512, cores=50), {}, {"metax-tech.com/use-gpuuuid": "dev-0"},
                "NodeInsufficientDevice"),
        Refusal([card("dev-1", mem=1280)], req(1, 512, cores=50), {}, {"metax-tech.com/use-gpuuuid": "dev-0"},
                "1/1 CardUuidMismatch"),
        # "fit fail: user assign no use uuid match"
        Refusal([card("dev-0", mem=1280)], req(1, 512, cores=50), {}, {"metax-tech.com/nouse-gpuuuid": "dev-0"},
                "1/1 CardUuidMismatch"),
        # "fit fail:  AllocatedCardsInsufficientRequest" (2 of 1 card): the core knows first
        Refusal([card("dev-0", mem=1280)], req(2, 512, cores=20), {"dev-0": DeviceUsage(20, 0, 10)}, {},
                "NodeInsufficientDevice"),
        # "mutex policy rejects used device"
        Refusal([card("dev-0")], req(1, 64, cores=50), {"dev-0": DeviceUsage(1)},
                {"hami.io/gpu-scheduler-policy": "mutex"}, "1/1 ExclusiveDeviceAllocateConflict"),
    ],
)  # fmt: skip
def test_fit_refusals(case: Refusal) -> None:
    assert fit.refusal(case) == case.expected


def test_fit_caps_cores_at_100() -> None:
    # "fit success: but core limit can't exceed 100": 120 is read as 100, the whole card
    got = fit([card("dev-0", mem=1280)], req(1, 512, cores=120))
    assert isinstance(got, Decision) and got.devices == ((ContainerDevice("dev-0", 512, 100, SG),),)


def test_fit_memory_percentage_and_usage() -> None:
    # "fit success:  memory percentage", TestMetaxSDevices_AddResourceUsage
    check_share_usage(fit, card, req)


# ---- TestPrioritizeExclusiveDevices ----------------------------------------------------------------------------------


def _cards(*spec: tuple[str, int]) -> list[DeviceInfo]:
    return [card(u, index=i, link=z) for i, (u, z) in enumerate(spec)]


@pytest.mark.parametrize(
    ("candidates", "nums", "expected"),
    [
        # "require one device": the smallest zone that holds it
        (_cards(("GPU-1", 1), ("GPU-2", 1), ("GPU-5", 2)), 1, ["GPU-5"]),
        # "require two device"
        (_cards(("GPU-1", 1), ("GPU-2", 1), ("GPU-5", 2), ("GPU-6", 2), ("GPU-7", 2)), 2, ["GPU-1", "GPU-2"]),
        # "require four device, best result"
        (_cards(("GPU-1", 1), ("GPU-2", 1), ("GPU-5", 2), ("GPU-6", 2), ("GPU-7", 2), ("GPU-8", 2)), 4,
         ["GPU-5", "GPU-6", "GPU-7", "GPU-8"]),
        # "require four device, general result": across zones, the smallest first
        (_cards(("GPU-1", 1), ("GPU-2", 1), ("GPU-5", 2), ("GPU-6", 2), ("GPU-7", 2)), 4,
         ["GPU-1", "GPU-2", "GPU-5", "GPU-6"]),
        # "no metalink, require two device"
        (_cards(("GPU-5", 0), ("GPU-6", 0), ("GPU-7", 0)), 2, ["GPU-5", "GPU-6"]),
        # "part metalink, require two device, best result"
        (_cards(("GPU-3", 0), ("GPU-4", 0), ("GPU-7", 1), ("GPU-8", 1)), 2, ["GPU-7", "GPU-8"]),
        # "part metalink, require four device, bad result": linked cards first, then unlinked
        (_cards(("GPU-3", 0), ("GPU-4", 0), ("GPU-6", 1), ("GPU-7", 1), ("GPU-8", 1)), 4,
         ["GPU-6", "GPU-7", "GPU-8", "GPU-3"]),
    ],
)  # fmt: skip
def test_prioritize_exclusive_devices(candidates: list[DeviceInfo], nums: int, expected: list[str]) -> None:
    assert [d.id for d in prioritize_exclusive(candidates, nums)] == expected


def test_fit_takes_whole_cards_from_one_metalink_zone() -> None:
    # Fit calls prioritizeExclusiveDevices for a 100-core request with more candidates than asked
    cards = _cards(("GPU-1", 1), ("GPU-2", 1), ("GPU-3", 1), ("GPU-5", 2), ("GPU-6", 2))
    for c in cards:
        assert c.count == 100
    got = fit(cards, req(2, 0, 100, cores=100))
    assert sorted(uuids(got)) == ["GPU-5", "GPU-6"]
    # a shared request (50 cores) keeps the plain preference order (equal cards from the last, as HAMi walks)
    assert uuids(fit(cards, req(2, 64, cores=50))) == ["GPU-6", "GPU-5"]


# ---- PatchAnnotations ------------------------------------------------------------------------------------------------


def test_patch_annotations() -> None:
    devices = ((ContainerDevice("GPU-a", 16384, 60, SG), ContainerDevice("GPU-b", 0, 0, SG)), ())
    got = allocation_annotations("n1", devices, (), 1_700_000_000, VENDORS)
    assert got["hami.io/metax-sgpu-devices-allocated"] == "GPU-a,Metax-SGPU,16384,60:GPU-b,Metax-SGPU,0,0:;;"
    assert got["hami.io/metax-sgpu-devices-to-allocate"] == got["hami.io/metax-sgpu-devices-allocated"]
    assert json.loads(got["metax-tech.com/gpu-devices-allocated"]) == [
        [{"uuid": "GPU-a", "compute": 60, "vRam": 16384}, {"uuid": "GPU-b"}],
        [],
    ]
    assert got["metax-tech.com/predicate-time"] == "1700000000000000000"


# ---- TestNeedScore, TestScoreExclusiveDevices (score.go, sdevice.go's ScoreNode) -------------------------------------


def _got(*cards: tuple[str, int]) -> tuple[tuple[ContainerDevice, ...], ...]:
    return tuple((ContainerDevice(u, 0, cores, SG),) for u, cores in cards)


def test_need_score() -> None:
    # "enable, allocate 100core", "disable, allocate 100core", "enable, allocate 99core",
    # "enable, container[0]: 99core, container[1]: 100core"
    assert metax_sgpu.topology_aware(_got(("a", 100)), True)
    assert not metax_sgpu.topology_aware(_got(("a", 100)), False)
    assert not metax_sgpu.topology_aware(_got(("a", 99)), True)
    assert metax_sgpu.topology_aware(_got(("a", 99), ("b", 100)), True)
    # the annotation as Go's ParseBool reads it
    for value, aware in [("true", True), ("1", True), ("T", True), ("false", False), ("yes", False)]:
        sel = metax_sgpu.qos_selectors({"metax-tech.com/sgpu-topology-aware": value})
        assert sel.topology_aware is aware


def _linked(spec: list[tuple[str, int, int]]) -> tuple[NodeInventory, dict[str, DeviceUsage]]:
    """(uuid, MetaLink zone, used) per card of the node before the pod."""
    devices = tuple(card(u, index=i, link=z) for i, (u, z, _) in enumerate(spec))
    return NodeInventory(node="n1", vendor=SG, devices=devices), {u: DeviceUsage(used) for u, _, used in spec if used}


ZONE1 = [("GPU-1", 1, 0), ("GPU-2", 1, 0), ("GPU-3", 1, 0), ("GPU-4", 1, 0)]


@pytest.mark.parametrize(
    ("previous", "taken", "expected"),
    [
        # "allocate one device, rest zero device"
        ([("GPU-1", 1, 1), ("GPU-2", 1, 1), ("GPU-3", 1, 1), ("GPU-4", 1, 0)], ["GPU-4"], 0),
        # "allocate one device, rest three device"
        (ZONE1, ["GPU-4"], -30),
        # "allocate two device, best result"
        (ZONE1, ["GPU-3", "GPU-4"], 60),
        # "allocate two device, bad result"
        ([("GPU-1", 1, 1), ("GPU-2", 1, 1), ("GPU-3", 1, 1), ("GPU-4", 1, 0), ("GPU-5", 2, 0), ("GPU-6", 2, 1),
          ("GPU-7", 2, 1), ("GPU-8", 2, 1)], ["GPU-4", "GPU-5"], 0),
        # "allocate four device, best result"
        ([*ZONE1, ("GPU-5", 2, 0)], ["GPU-1", "GPU-2", "GPU-3", "GPU-4"], 600),
        # "allocate four device, bad result"
        ([("GPU-2", 1, 0), ("GPU-3", 1, 0), ("GPU-4", 1, 0), ("GPU-5", 2, 0), ("GPU-6", 2, 0)],
         ["GPU-3", "GPU-4", "GPU-5", "GPU-6"], 180),
        # "allocate eight device"
        ([*ZONE1, ("GPU-5", 2, 0), ("GPU-6", 2, 0), ("GPU-7", 2, 0), ("GPU-8", 2, 0)],
         [f"GPU-{i}" for i in range(1, 9)], 1200),
    ],
)  # fmt: skip
def test_score_exclusive_devices(previous: list[tuple[str, int, int]], taken: list[str], expected: int) -> None:
    inventory, usage = _linked(previous)
    devices = (tuple(ContainerDevice(u, 0, 100, SG) for u in taken),)
    assert metax_sgpu.score_exclusive(devices, inventory, usage) == expected


def test_topology_score_ranks_the_nodes() -> None:
    # a topology-aware pod taking two whole cards: node-a gives two cards of a zone of four and breaks it
    # (10·10 − (60 − 10 − 10) = 60, × 10000); node-b gives the two cards of a zone of two (10·10 − 0 = 100). By
    # name (equal usage) node-a would come first; the score takes node-b. Without the annotation the name decides.
    a, _ = _linked([("a-1", 1, 0), ("a-2", 1, 0), ("a-3", 1, 0), ("a-4", 1, 0)])
    b, _ = _linked([("b-1", 1, 0), ("b-2", 1, 0), ("b-3", 0, 0), ("b-4", 0, 0)])
    nodes = [NodeSnapshot(replace(a, node="node-a"), {}), NodeSnapshot(replace(b, node="node-b"), {})]
    pod = PodRequest(containers=(req(2, 0, 100, cores=100),), init_count=0)
    aware = decode_vendor_constraints({"metax-tech.com/sgpu-topology-aware": "true"}, VENDORS)
    got = plan(pod, aware, nodes, policies=Policies(), rules=VENDORS.rules)
    assert isinstance(got, Decision) and got.node == "node-b" and sorted(uuids(got)) == ["b-1", "b-2"]
    plain = decode_vendor_constraints({}, VENDORS)
    got = plan(pod, plain, nodes, policies=Policies(), rules=VENDORS.rules)
    assert isinstance(got, Decision) and got.node == "node-a"


# ---- app classes: TestCheckAppClass, the Fit cases with PodInfos ---------------------------------------------------

ONLINE_TAG, OFFLINE_TAG = "app=online", "app=offline"


def held(used: int = 1, *tags: tuple[str, int], mem: int = 64, cores: int = 10) -> DeviceUsage:
    """A card's usage: ``used`` slots, holders tagged as given (online / offline / qos=…)."""
    return DeviceUsage(used, mem, cores, tags=tuple(sorted(tags)))


@pytest.mark.parametrize(
    ("req_class", "online", "offline", "expected"),
    [
        ("online", 0, 0, False),  # "online task unfit normal device" (a card in use by an unclassed pod)
        ("", 1, 0, False),  # "normal task unfit online device"
        ("", 0, 1, False),  # "normal task unfit offline device"
        ("", 0, 0, True),  # "normal task fit normal device"
        ("online", 1, 1, True),  # "online task fit online/offline device"
        ("offline", 1, 1, False),  # "offline task unfit online device"
        ("offline", 0, 2, True),
        ("online", 0, 1, True),
    ],
)
def test_check_app_class(req_class: str, online: int, offline: int, expected: bool) -> None:
    # TestCheckAppClass ("idle device fit" is the Fit below: the rule is asked only about cards in use)
    assert metax_sgpu.app_class_ok(req_class, online, offline) is expected


def test_fit_app_class() -> None:
    # TestCheckAppClass "idle device fit": an idle card takes any class
    assert uuids(fit([card("dev-0")], req(1, 64, cores=50), annotations={APP: "online"})) == ["dev-0"]
    # TestMetaxSDevices_Fit "fit fail: online task, app class unfit": a card in use by an unclassed pod (the app
    # class is checked before the memory, which would not fit either)
    plain = {"dev-0": held(1, ("qos=", 1))}
    assert reason(fit([card("dev-0")], req(1, 512, cores=50), usage=plain, annotations={APP: "online"})) == (
        "1/1 CardAppClassMismatch"
    )
    # "fit fail: normal task, app class unfit": a card running an online pod
    online = {"dev-0": held(1, (ONLINE_TAG, 1))}
    assert reason(fit([card("dev-0")], req(1, 512, cores=50), usage=online)) == "1/1 CardAppClassMismatch"
    # an offline pod stays off a card that runs an online one, joins one that runs offline ones
    offline = {"dev-0": held(1, (OFFLINE_TAG, 1), ("qos=best-effort", 1))}
    asked = {APP: "offline", QOS_POLICY_KEY: BEST_EFFORT}
    assert reason(fit([card("dev-0")], req(1, 32, cores=10), usage=online, annotations=asked)) == (
        "1/1 CardAppClassMismatch"
    )
    assert uuids(fit([card("dev-0")], req(1, 32, cores=10), usage=offline, annotations=asked)) == ["dev-0"]
    # ... and the QoS rule still holds among offline pods
    burst = {APP: "offline", QOS_POLICY_KEY: BURST_SHARE}
    assert reason(fit([card("dev-0")], req(1, 32, cores=10), usage=offline, annotations=burst)) == (
        "1/1 CardQosPolicyMismatch"
    )


def test_online_pod_skips_the_core_checks_and_takes_no_cores() -> None:
    # HAMi's Fit: an online pod is not held to the cores (coreReq 0 in its device entry, no core check, no whole-card
    # check): it joins a card whose cores an offline pod took whole, with any QoS policy
    full = {"dev-0": held(1, (OFFLINE_TAG, 1), ("qos=", 1), mem=32, cores=100)}
    got = fit([card("dev-0")], req(1, 64, cores=100), usage=full, annotations={APP: "online"})
    assert isinstance(got, Decision) and got.devices == ((ContainerDevice("dev-0", 64, 0, SG),),)
    (charge,) = got.charges
    assert charge.cores_unchecked and charge.tags == (ONLINE_TAG,)
    assert (charge.refuse_tags, charge.need_tags) == ((), (ONLINE_TAG, OFFLINE_TAG))
    # memory still counts
    assert reason(fit([card("dev-0")], req(1, 100, cores=0), usage=full, annotations={APP: "online"})) == (
        "1/1 CardInsufficientMemory"
    )
    # a pod that is not online is held to them
    assert reason(fit([card("dev-0")], req(1, 64, cores=0), usage=full, annotations={APP: "offline"})) == (
        "1/1 CardComputeUnitsExhausted"
    )


def test_charge_terms_carry_the_sharing_rule() -> None:
    # what the atomic reserve re-checks (tests/integration/store/test_metax_sharing.py races it on redis)
    got = fit([card("dev-0")], req(1, 64, cores=50), annotations={QOS_POLICY_KEY: FIXED_SHARE})
    assert isinstance(got, Decision)
    (charge,) = got.charges
    assert charge.tags == ("qos=fixed-share",) and not charge.cores_unchecked
    assert charge.refuse_tags == (ONLINE_TAG, OFFLINE_TAG, "qos=best-effort", "qos=burst-share")
    assert charge.need_tags == ()
    got = fit([card("dev-0")], req(1, 0, 100, cores=100), annotations={APP: "offline", QOS_POLICY_KEY: BURST_SHARE})
    assert isinstance(got, Decision)
    (charge,) = got.charges
    # a whole card leaves the card's policy free ("qos="): HAMi's addJitteryQos caches "" for it
    assert charge.tags == (OFFLINE_TAG, "qos=") and charge.exclusive
    assert (charge.refuse_tags, charge.need_tags) == ((ONLINE_TAG,), (OFFLINE_TAG,))


def test_the_informer_records_what_the_reservation_had() -> None:
    # the informer's record of a placed pod carries the tags and rule the reservation had, byte for byte, so
    # confirming it changes nothing
    for annos, whole, expected in [
        ({APP: "online", QOS_POLICY_KEY: "x"}, False, (ONLINE_TAG,)),
        ({APP: "offline", QOS_POLICY_KEY: BEST_EFFORT}, False, (OFFLINE_TAG, "qos=best-effort")),
        ({QOS_POLICY_KEY: BURST_SHARE}, True, ("qos=",)),
        ({}, False, ("qos=",)),
        ({APP: "bogus", QOS_POLICY_KEY: FIXED_SHARE}, False, ("qos=fixed-share",)),
    ]:
        charge = DeviceCharge("dev-0", 1, 64, 100 if whole else 50, exclusive=whole)
        recorded = metax_sgpu.MetaxSgpuVendor().recorded_charge(annos, charge)
        assert recorded.tags == expected, annos
        if annos.get(APP) != "bogus":  # the webhook and /filter refuse a bad class: no reservation to compare
            got = fit([card("dev-0")], req(1, 64, 100 if whole else MEM_PCT_UNSET, cores=100 if whole else 50),
                      annotations=annos if annos.get(QOS_POLICY_KEY) != "x" else {APP: "online"})  # fmt: skip
            assert isinstance(got, Decision)
            (reserved,) = got.charges
            assert metax_sgpu.MetaxSgpuVendor().recorded_charge(annos, replace(reserved, tags=(), refuse_tags=(),
                   need_tags=(), cores_unchecked=False)) == reserved, annos  # fmt: skip


def test_a_pods_second_container_on_its_own_card() -> None:
    # HAMi counts only other pods on a card (PodInfos), and its AddResourceUsage sets the card's QoS to the pod's:
    # a second container of an unclassed pod shares the card its first took, though the card is registered with
    # another policy; a second container of an online pod does not (the card is in use and runs no classed pod)
    one_card = [card("dev-0", qos=BURST_SHARE)]
    two = (req(1, 32, cores=10), req(1, 32, cores=10))
    got = fit(one_card, *two, annotations={QOS_POLICY_KEY: BEST_EFFORT})
    assert uuids(got, 0) == ["dev-0"] and uuids(got, 1) == ["dev-0"]
    assert reason(fit(one_card, *two, annotations={APP: "online"})) == "1/1 CardAppClassMismatch"
    got = fit([*one_card, card("dev-1", index=1)], *two, annotations={APP: "online"})
    assert uuids(got, 0) == ["dev-1"] and uuids(got, 1) == ["dev-0"]


# ---- TestPrioritizeOnlineDevices, TestScoreOnlineDevices -----------------------------------------------------------


def _classed(*spec: tuple[str, int, int]) -> tuple[list[DeviceInfo], dict[str, DeviceUsage]]:
    """(uuid, online pods, offline pods) per card."""
    devices = [card(u, index=i) for i, (u, _, _) in enumerate(spec)]
    usage = {
        u: held(on + off, *((t, n) for t, n in ((ONLINE_TAG, on), (OFFLINE_TAG, off)) if n))
        for u, on, off in spec
        if on + off
    }
    return devices, usage


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        # "prioritize idle device"
        ([("GPU-1", 0, 0), ("GPU-2", 1, 0), ("GPU-3", 2, 0), ("GPU-4", 1, 1), ("GPU-5", 2, 1), ("GPU-6", 0, 1),
          ("GPU-7", 0, 2)], "GPU-1"),
        # "prioritize onlyOnline device"
        ([("GPU-1", 1, 0), ("GPU-2", 2, 0), ("GPU-3", 3, 1), ("GPU-4", 0, 2)], "GPU-1"),
        # "prioritize online&offline device"
        ([("GPU-1", 3, 0), ("GPU-2", 1, 1), ("GPU-3", 2, 1), ("GPU-4", 0, 1), ("GPU-5", 0, 2)], "GPU-2"),
        # "prioritize onlyOffline device"
        ([("GPU-1", 0, 1), ("GPU-2", 0, 2)], "GPU-1"),
    ],
)  # fmt: skip
def test_prioritize_online_devices(spec: list[tuple[str, int, int]], expected: str) -> None:
    devices, usage = _classed(*spec)
    assert [d.id for d in metax_sgpu.prioritize_online(devices, usage, 1)] == [expected]
    # the same order from the end of the list (HAMi sorts; the input order does not matter)
    assert [d.id for d in metax_sgpu.prioritize_online(devices[::-1], usage, 1)] == [expected]
    # through the Fit: an online pod takes that card of the node
    assert uuids(fit(devices, req(1, 8, cores=10), usage=usage, annotations={APP: "online"})) == [expected]


@pytest.mark.parametrize(
    ("online", "offline", "expected"),
    [
        (0, 0, 0),  # "test idle device"
        (2, 0, -40),  # "test only online device"
        (0, 2, -200),  # "test only offline device"
        (2, 2, -44),  # "test online/offline device"
    ],
)
def test_score_online_devices(online: int, offline: int, expected: int) -> None:
    _, usage = _classed(("GPU-123", online, offline))
    assert metax_sgpu.score_online(_got(("GPU-123", 0)), usage) == expected
    # a card a pod lists twice counts once (HAMi scores the node's cards the pod took)
    assert metax_sgpu.score_online(_got(("GPU-123", 0), ("GPU-123", 0)), usage) == expected


def test_online_score_ranks_the_nodes() -> None:
    # TestScoreNodePolicyIndependence "online allocation": an online pod's node score is the online term × 10000
    # (× −10000 under spread, which then takes the lowest): both prefer the node whose card runs fewer online pods
    a_devs, a_use = _classed(("a-1", 2, 0))
    b_devs, b_use = _classed(("b-1", 1, 0))
    nodes = [
        NodeSnapshot(NodeInventory("node-a", SG, tuple(a_devs)), a_use),
        NodeSnapshot(NodeInventory("node-b", SG, tuple(b_devs)), b_use),
    ]
    pod = PodRequest(containers=(req(1, 8, cores=10),), init_count=0)
    online = decode_vendor_constraints({APP: "online"}, VENDORS)
    for policies in (Policies(), Policies(node=NodePolicy.SPREAD)):
        got = plan(pod, online, nodes, policies=policies, rules=VENDORS.rules)
        assert isinstance(got, Decision) and got.node == "node-b", policies
    # an unclassed pod fits neither (both cards run classed pods); an offline one goes by the usage score alone
    assert isinstance(plan(pod, decode_vendor_constraints({}, VENDORS), nodes, policies=Policies(),
                           rules=VENDORS.rules), Failure)  # fmt: skip

    # an idle card wins over both, though its node is the least used (its term is 0)
    c_devs, c_use = _classed(("c-1", 0, 0))
    idle = [*nodes, NodeSnapshot(NodeInventory("node-c", SG, tuple(c_devs)), c_use)]
    got = plan(pod, online, idle, policies=Policies(), rules=VENDORS.rules)
    assert isinstance(got, Decision) and got.node == "node-c"


@pytest.mark.parametrize("seed", range(30))
def test_online_pod_takes_the_best_total_of_all_nodes(seed: int) -> None:
    # the walk stops early (the online term never improves a node's rank); it must still find the node with the
    # best total that evaluating every node on its own finds (HAMi scores every node)
    rnd = random.Random(seed)
    nodes = []
    for k in range(rnd.randint(2, 7)):
        spec = [(f"n{k}-{c}", rnd.choice((0, 0, 1, 2)), rnd.choice((0, 1, 2))) for c in range(rnd.randint(1, 3))]
        devs, use = _classed(*spec)
        nodes.append(NodeSnapshot(NodeInventory(f"node-{k}", SG, tuple(devs)), use))
    pod = PodRequest(containers=(req(1, 8, cores=10),), init_count=0)
    online = decode_vendor_constraints({APP: "online"}, VENDORS)
    for policies in (Policies(), Policies(node=NodePolicy.SPREAD)):
        totals = []
        for snap in nodes:
            alone = plan(pod, online, [snap], policies=policies, rules=VENDORS.rules)
            if isinstance(alone, Decision):
                term = metax_sgpu.SGPU_RULES.pod_score(snap, alone.devices, policies.node, online)  # type: ignore[attr-defined]
                totals.append((alone.score + term, snap.name))
        got = plan(pod, online, nodes, policies=policies, rules=VENDORS.rules)
        if not totals:
            assert isinstance(got, Failure)
            continue
        binpack = policies.node is NodePolicy.BINPACK
        best = min(totals, key=lambda t: (-t[0] if binpack else t[0], t[1]))
        assert isinstance(got, Decision) and got.node == best[1], (seed, policies, totals)


# ---- TestAddJitteryQos, TestJitteryQosCacheSync, TestGet (qos.go): a card's policy from its holders ---------------


def test_add_jittery_qos() -> None:
    # TestAddJitteryQos "request BestEffort": a best-effort pod takes GPU-123 (registered best-effort) and GPU-456
    # (registered burst-share) with 50 cores each, and GPU-789 (registered best-effort) whole. HAMi caches the
    # cards whose policy changes: GPU-456 → best-effort, GPU-789 → "". Here each card holds the pod's tag, and the
    # card's policy is the tag's: the same three policies, read by every replica.
    devices = [card("GPU-123", qos=BEST_EFFORT), card("GPU-456", index=1, qos=BURST_SHARE),
               card("GPU-789", index=2, qos=BEST_EFFORT)]  # fmt: skip
    pod = ((ContainerDevice("GPU-123", 64, 50, SG), ContainerDevice("GPU-456", 64, 50, SG)),
           (ContainerDevice("GPU-789", 128, 100, SG),))  # fmt: skip
    charges = {
        c.uuid: metax_sgpu.MetaxSgpuVendor().recorded_charge({QOS_POLICY_KEY: BEST_EFFORT}, c).tags
        for c in collapse(pod, 0)
    }
    after = {u: DeviceUsage(1, tags=((t[0], 1),)) for u, t in charges.items()}
    policy = {u: metax_sgpu.held_policies(after[u]) for u in after}
    jittery = {d.id: next(iter(policy[d.id])) for d in devices if policy[d.id] != {metax_sgpu.qos_of(d)}}
    assert jittery == {"GPU-456": BEST_EFFORT, "GPU-789": ""}
    # what the cache is for: GPU-456 now takes best-effort pods and refuses burst-share ones, though its
    # registration still says burst-share; GPU-789 (a whole card: "") takes any policy
    gpu456, gpu789 = devices[1], devices[2]
    assert metax_sgpu.device_qos_ok(gpu456, after["GPU-456"], 0, BEST_EFFORT, 50)
    assert not metax_sgpu.device_qos_ok(gpu456, after["GPU-456"], 0, BURST_SHARE, 50)
    assert metax_sgpu.device_qos_ok(gpu789, after["GPU-789"], 0, FIXED_SHARE, 50)


def test_jittery_qos_cache_sync_and_get() -> None:
    # TestJitteryQosCacheSync "no sync": the plugin still reports best-effort for GPU-123 while HAMi's cache says
    # fixed-share: the card counts as fixed-share
    gpu = card("GPU-123", qos=BEST_EFFORT)
    fixed = DeviceUsage(1, tags=(("qos=fixed-share", 1),))
    assert not metax_sgpu.device_qos_ok(gpu, fixed, 0, BEST_EFFORT, 50)
    assert metax_sgpu.device_qos_ok(gpu, fixed, 0, FIXED_SHARE, 50)
    # "sync sccuess": the plugin reports the cached policy, HAMi drops the entry; the registration and the holders
    # agree, and the card takes that policy either way
    same = DeviceUsage(1, tags=(("qos=best-effort", 1),))
    assert metax_sgpu.device_qos_ok(gpu, same, 0, BEST_EFFORT, 50)
    assert not metax_sgpu.device_qos_ok(gpu, same, 0, BURST_SHARE, 50)
    # TestGet "test get": the policy a card is held in
    assert metax_sgpu.held_policies(DeviceUsage(2, tags=(("qos=burst-share", 2),))) == {BURST_SHARE}
    # the registration decides only when no holder names a policy (pods recorded before tags existed)
    untagged = DeviceUsage(1)
    assert metax_sgpu.device_qos_ok(gpu, untagged, 0, BEST_EFFORT, 50)
    assert not metax_sgpu.device_qos_ok(gpu, untagged, 0, FIXED_SHARE, 50)
    # difference: HAMi keeps an entry until the plugin reports it, also after the pod ended; here a card whose pods
    # ended is idle and takes any policy (the Fit asks about cards in use only)
    assert uuids(fit([gpu], req(1, 64, cores=50), annotations={QOS_POLICY_KEY: FIXED_SHARE})) == ["GPU-123"]
