"""MetaX sGPU vendor: HAMi's ``pkg/device/metax`` sGPU tests restated. The index holds no copy at v2.10.0
(4707fb02): ``sdevice_test.go`` was read at 0fb30836, ``sdevice.go`` at 12ca202d, ``protocol.go`` at 264ba8ab,
``qos.go`` at f278854e and ``config.go`` at 5f611c76 (the nearest stored versions; our ``metax:`` section follows
``config.go``, which has no topology-aware key). Every HAMi case names its test in a comment; the cases of
``TestAddJitteryQos``, ``TestCheckAppClass``, ``TestPrioritizeOnlineDevices`` and ``TestScoreOnlineDevices`` are not
restated: the QoS cache and the app classes are not implemented (docs/vendors/metax.md says why)."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import datetime
from typing import Any

import pytest

from vgpu_scheduler.services.informer.quotas import read_quota
from vgpu_scheduler.shared.codec.podannotations import allocation_annotations
from vgpu_scheduler.shared.codec.resources import ResourceRequestError
from vgpu_scheduler.shared.codec.selectors import decode_vendor_constraints
from vgpu_scheduler.shared.domain.model import (
    MEM_PCT_UNSET,
    ContainerDevice,
    ContainerRequest,
    DeviceInfo,
    DeviceUsage,
    NodeInventory,
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
from vgpu_scheduler.shared.vendors.base import NodeLockKind
from vgpu_scheduler.shared.vendors.catalog import enabled_vendors
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
SG = "Metax-SGPU"
COUNT, VCORE, VMEM = "metax-tech.com/sgpu", "metax-tech.com/vcore", "metax-tech.com/vmemory"
APP = "metax-tech.com/sgpu-app-class"
NOW = datetime(2025, 1, 7, 12, 0, 0)


def ctr(limits: dict[str, Any] | None = None, requests: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": "c", "resources": {"limits": limits or {}, "requests": requests or {}}}


def card(
    uuid: str, *, index: int = 0, count: int = 100, mem: int = 128, qos: str = "", link: int = 0, health: bool = True
) -> DeviceInfo:
    return DeviceInfo(uuid, index, count, mem, 100, SG, 0, device_mode(qos, link), health, vendor=SG)


def req(nums: int = 1, mem: int = 0, pct: int = MEM_PCT_UNSET, cores: int = 0, kind: str = SG) -> ContainerRequest:
    return ContainerRequest(nums=nums, mem_mib=mem, mem_pct=pct, cores_pct=cores, type=kind)


def fit(
    devices: list[DeviceInfo],
    *requests: ContainerRequest,
    usage: dict[str, DeviceUsage] | None = None,
    annotations: dict[str, str] | None = None,
) -> Decision | Failure:
    inv = NodeInventory(node="n1", vendor=SG, devices=tuple(devices))
    constraints = decode_vendor_constraints(annotations or {}, VENDORS)
    pod = PodRequest(containers=tuple(requests), init_count=0)
    return plan(pod, constraints, [NodeSnapshot(inv, usage or {})], policies=Policies(), rules=VENDORS.rules)


def reason(result: Decision | Failure) -> str:
    assert isinstance(result, Failure), result
    return result.reasons["n1"]


def uuids(result: Decision | Failure, container: int = 0) -> list[str]:
    assert isinstance(result, Decision), result
    return [d.uuid for d in result.devices[container]]


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
    assert (V.name, V.register_key, V.handshake_key, V.to_allocate_key, V.allocated_key) == (
        SG,
        "metax-tech.com/node-gpu-devices",
        None,
        "hami.io/metax-sgpu-devices-to-allocate",
        "hami.io/metax-sgpu-devices-allocated",
    )
    assert V.node_lock is NodeLockKind.HAMI  # MetaxNodeLock = hami.io/mutex.lock
    assert V.resources.all == frozenset({COUNT, VCORE, VMEM})
    # a namespace quota's limits.metax-tech.com/vmemory is in GiB, as HAMi's MemoryFactor (1024) reads it
    quota = {"spec": {"hard": {f"limits.{VMEM}": "16", f"limits.{VCORE}": "150"}}}
    limits = read_quota(quota, NvidiaConfig(), VENDORS).limits.of(SG)
    assert (limits.mem_mib, limits.cores_pct) == (16 * 1024, 150)
    assert SG in enabled_vendors(NvidiaConfig()).names  # on by default with the whole GPUs
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
    # "app class task must allocate single device", "offline task with qos", "online task with qos": HAMi admits a
    # valid class (and checks the count, then the QoS of an offline pod); app classes are not scheduled here, so a
    # valid class is refused with a message saying so, whatever the count or QoS
    for annos in ({APP: "online"}, {APP: "offline", QOS_POLICY_KEY: "best-effortx"}):
        for count in ("1", "2"):
            allowed, message, _ = admit(_pod([{**ctr({COUNT: count}), "image": "x"}], annos))
            assert not allowed and "is not scheduled by this release" in message, message


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
        ({COUNT: "1", VCORE: "120"}, "more than a whole card"),
        ({COUNT: "1", VMEM: "1k"}, "less than 1 MiB"),
        ({COUNT: "1", VMEM: "3000000"}, "out of range"),
    ]:
        with pytest.raises(ResourceRequestError, match=re.escape(needle)):
            V.container_request(ctr(limits), "c")
    allowed, message, _ = admit(_pod([{**ctr({COUNT: "1", VCORE: "120"}), "image": "x"}]))
    assert not allowed and "metax-tech.com/vcore 120 is more than a whole card" in message


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
    # "fit success": HAMi takes dev-1 (the last); ours the lowest index on a tie (difference 8)
    got = fit([card("dev-0"), card("dev-1")], req(1, 64, cores=50))
    assert isinstance(got, Decision) and got.devices == ((ContainerDevice("dev-0", 64, 50, SG),),)


@pytest.mark.parametrize(
    ("devices", "asked", "usage", "annotations", "expected"),
    [
        # "fit fail: memory not enough"
        ([card("dev-0")], req(1, 512, cores=50), {}, {}, "1/1 CardInsufficientMemory"),
        # "fit fail: core not enough"
        ([card("dev-0", mem=1024)], req(1, 512, cores=50), {"dev-0": DeviceUsage(0, 0, 100)}, {},
         "1/1 CardInsufficientCore"),
        # "fit fail: type mismatch": another family's request is never shown sGPUs
        ([card("dev-0")], req(1, 512, cores=50, kind="OtherType"), {}, {}, "NodeInsufficientDevice"),
        # "fit fail: device unhealthy": HAMi's sGPU reason is CardUnhealthy, ours the common CardNotHealth
        ([card("dev-0", health=False)], req(1, 512, cores=50), {}, {}, "1/1 CardNotHealth"),
        # "fit fail: card overused"
        ([card("dev-0", mem=1280)], req(1, 512, cores=50), {"dev-0": DeviceUsage(100)}, {},
         "1/1 CardTimeSlicingExhausted"),
        # "fit success: but core limit can't exceed 100" (HAMi: a fit failure): 120 is not capped
        ([card("dev-0", mem=1280)], req(1, 512, cores=120), {}, {}, "1/1 CardInsufficientCore"),
        # "fit fail:  card exclusively"
        ([card("dev-0", mem=1280)], req(1, 512, cores=100), {"dev-0": DeviceUsage(20)}, {},
         "1/1 ExclusiveDeviceAllocateConflict"),
        # "fit fail: user assign use uuid mismatch" (2 asked, 1 card): the core knows first
        ([card("dev-1", mem=1280)], req(2, 512, cores=50), {}, {"metax-tech.com/use-gpuuuid": "dev-0"},
         "NodeInsufficientDevice"),
        ([card("dev-1", mem=1280)], req(1, 512, cores=50), {}, {"metax-tech.com/use-gpuuuid": "dev-0"},
         "1/1 CardUuidMismatch"),
        # "fit fail: user assign no use uuid match"
        ([card("dev-0", mem=1280)], req(1, 512, cores=50), {}, {"metax-tech.com/nouse-gpuuuid": "dev-0"},
         "1/1 CardUuidMismatch"),
        # "fit fail:  CardComputeUnitsExhausted"
        ([card("dev-0", mem=1280)], req(1, 512, cores=0), {"dev-0": DeviceUsage(20, 0, 100)}, {},
         "1/1 CardComputeUnitsExhausted"),
        # "fit fail:  AllocatedCardsInsufficientRequest" (2 of 1 card): the core knows first
        ([card("dev-0", mem=1280)], req(2, 512, cores=20), {"dev-0": DeviceUsage(20, 0, 10)}, {},
         "NodeInsufficientDevice"),
        # "mutex policy rejects used device"
        ([card("dev-0")], req(1, 64, cores=50), {"dev-0": DeviceUsage(1)}, {"hami.io/gpu-scheduler-policy": "mutex"},
         "1/1 ExclusiveDeviceAllocateConflict"),
    ],
)  # fmt: skip
def test_fit_refusals(
    devices: list[DeviceInfo],
    asked: ContainerRequest,
    usage: dict[str, DeviceUsage],
    annotations: dict[str, str],
    expected: str,
) -> None:
    assert reason(fit(devices, asked, usage=usage, annotations=annotations)) == expected


def test_fit_memory_percentage_and_usage() -> None:
    # "fit success:  memory percentage": 10 % of 1280 MiB
    got = fit([card("dev-0", mem=1280)], req(1, 0, 10, cores=20), usage={"dev-0": DeviceUsage(20, 0, 10)})
    assert isinstance(got, Decision) and got.devices == ((ContainerDevice("dev-0", 128, 20, SG),),)
    # TestMetaxSDevices_AddResourceUsage: usage adds up (15 + 50 cores, 2000 + 1024 MiB): the next request sees it
    used = {"dev-0": DeviceUsage(1, 3024, 65)}
    assert isinstance(fit([card("dev-0", mem=4096)], req(1, 1072, cores=35), usage=used), Decision)
    assert reason(fit([card("dev-0", mem=4096)], req(1, 1072, cores=36), usage=used)) == "1/1 CardInsufficientCore"


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
    # a shared request (50 cores) keeps the plain preference order
    assert uuids(fit(cards, req(2, 64, cores=50))) == ["GPU-1", "GPU-2"]


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
