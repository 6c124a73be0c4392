"""MetaX GPU vendor (whole GPUs): HAMi's ``pkg/device/metax`` tests of ``device.go`` restated. The index holds no
copy at v2.10.0 (4707fb02): read at the nearest stored versions, ``device_test.go`` 06d9b907, ``device.go`` the
stored version importing ``pkg/device`` (Fit with NodeInfo), ``device_multicontainer_test.go`` f181ff9b and
``device_cordon_test.go`` ad358d3a. ``Test_CustomFilterRule`` tests a rule the later HAMi removed (its
multi-container test): ours follows the later HAMi (docs/vendors/metax.md). The sGPU tests are in
``test_metax_sgpu.py``. Every HAMi case names its test in a comment."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.unit.vendors.kit import NOW, Fit, Refusal, check_share_usage, ctr, hami_share_refusals, reason, uuids
from vgpu_scheduler.shared.domain.model import (
    MEM_PCT_UNSET,
    ContainerDevice,
    ContainerRequest,
    DeviceInfo,
    DeviceUsage,
    NodePolicy,
    NvidiaConfig,
    PodConstraints,
    PodRequest,
)
from vgpu_scheduler.shared.domain.plan import Decision, plan, plan_ranked, rank_key
from vgpu_scheduler.shared.domain.scoring import Policies
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.errors import ConfigError, DecodeError
from vgpu_scheduler.shared.protocol.jsonpatch import apply_patch
from vgpu_scheduler.shared.protocol.webhook import mutate_pod
from vgpu_scheduler.shared.vendors import metax
from vgpu_scheduler.shared.vendors.nvidia import NvidiaVendor
from vgpu_scheduler.shared.vendors.pods import allocation_annotations
from vgpu_scheduler.shared.vendors.registration import (
    DecodeFailure,
    Invalid,
    NodeView,
    NotRegistered,
    Registered,
    Unregistered,
)
from vgpu_scheduler.shared.vendors.registry import Vendors

V = metax.build(None)[0]
VENDORS = Vendors((NvidiaVendor(), V))
fit = Fit(VENDORS)
COUNT = "metax-tech.com/gpu"
MX = "Metax-GPU"
TABLE = '{"1":0,"2":110,"3":270,"4":540,"5":580,"6":730,"7":930,"8":1240}'


def gpu(uuid: str, *, index: int = 0, count: int = 100, mem: int = 128, core: int = 100) -> DeviceInfo:
    return DeviceInfo(uuid, index, count, mem, core, MX, 0, "", True, vendor=MX)


def req(nums: int = 1, mem: int = 0, pct: int = MEM_PCT_UNSET, cores: int = 0, kind: str = MX) -> ContainerRequest:
    return ContainerRequest(nums=nums, mem_mib=mem, mem_pct=pct, cores_pct=cores, type=kind)


def test_config_section() -> None:
    # the section, enable flag, names, keys and lock (HAMi's LockNode takes none for MetaX): test_contract.py
    assert V.resources.all == frozenset({COUNT})
    renamed, renamed_sgpu = metax.build({"resourceCountName": "x.io/gpu", "resourceVCountName": "x.io/sgpu"})
    assert renamed.resources.count == "x.io/gpu" and renamed_sgpu.resources.count == "x.io/sgpu"
    with pytest.raises(ConfigError, match=re.escape("metax.resourceCountName")):
        metax.build({"resourceCountName": ""})
    with pytest.raises(ConfigError, match=re.escape("metax.resourceMemoryName: unknown key")):
        metax.build({"resourceMemoryName": "x"})


# ---- TestGetNodeDevices --------------------------------------------------------------------------------------------


def node(capacity: dict[str, Any], name: str = "test", annotations: dict[str, str] | None = None) -> NodeView:
    return NodeView(name, "1", annotations or {}, capacity, capacity=capacity)


def test_get_node_devices() -> None:
    # "Test with valid node": capacity 1 → test-metax-0, 65536 MiB, 100 cores (one slot: the later HAMi's
    # multi-container test says whole GPUs register with Count 1)
    got = V.observe(node({COUNT: "1"}), NOW)
    assert isinstance(got, Registered)
    assert got.inventory.devices == (DeviceInfo("test-metax-0", 0, 1, 65536, 100, MX, 0, "", True, vendor=MX),)
    got = V.observe(node({COUNT: "3"}, annotations={"hami.io/device-cordon": "test-metax-1"}), NOW)
    assert isinstance(got, Registered)
    assert [d.id for d in got.inventory.devices] == [f"test-metax-{i}" for i in range(3)]
    assert got.inventory.cordoned == frozenset({"test-metax-1"})
    # no capacity / 0 ("device not found", CheckHealth false) / not a whole number
    assert V.observe(node({}), NOW) == NotRegistered(Unregistered.ABSENT)
    assert V.observe(node({COUNT: "0"}), NOW) == NotRegistered(Unregistered.NO_DEVICES)
    bad = V.observe(node({COUNT: "1.5"}), NOW)
    assert isinstance(bad, Invalid) and bad.failure is DecodeFailure.REGISTER


def test_node_registration_roundtrip() -> None:
    devices = metax.devices_from_capacity("n", 2)
    annotations, capacity, labels = V.node_registration(devices)
    assert (annotations, capacity, labels) == ({}, {COUNT: "2"}, {})
    got = V.observe(node(capacity, name="n"), NOW)
    assert isinstance(got, Registered) and got.inventory.devices == devices
    with pytest.raises(ValueError, match="65536 MiB, 100 cores and one slot"):
        V.node_registration([gpu("x")])


# ---- TestParseMetaxAnnos, Test_ScoreNode ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("index", "value"), [(1, 0), (2, 110), (3, 270), (4, 540), (5, 580), (6, 730), (7, 930), (8, 1240)]
)
def test_parse_metax_annos(index: int, value: float) -> None:
    # TestParseMetaxAnnos: every entry of HAMi's table
    assert metax.parse_topology(TABLE, index) == value


def test_parse_metax_annos_bad_input() -> None:
    # not in the table, not JSON, a key that is no integer: 0 (HAMi logs and reads 0)
    assert metax.parse_topology(TABLE, 9) == 0
    assert metax.parse_topology("{1:2}", 1) == 0
    assert metax.parse_topology('{"a":1,"1":5}', 1) == 0
    assert metax.parse_topology("[1, 2]", 1) == 0


def test_score_node() -> None:
    # "policy is binpack": 2 GPUs, losses {"1":100,"2":200} → 2000 - 200
    assert metax.score_node({metax.LOSSES_KEY: '{"1":100,"2":200}'}, 2, "binpack") == 1800
    # "policy is spread": 1 GPU, scores {"1":100,...} → 2000 - 100
    assert metax.score_node({metax.SCORES_KEY: '{"1":100,"2":200}'}, 1, "spread") == 1900
    # without the policy's annotation, or another policy: 0
    assert metax.score_node({metax.SCORES_KEY: '{"1":100}'}, 1, "binpack") == 0
    assert metax.score_node({metax.LOSSES_KEY: '{"1":100}'}, 1, "topology-aware") == 0


def test_the_registrar_keeps_the_topology_tables() -> None:
    annotations = {metax.LOSSES_KEY: TABLE, metax.SCORES_KEY: "not json"}
    got = V.observe(node({COUNT: "2"}, annotations=annotations), NOW)
    assert isinstance(got, Registered)
    assert got.inventory.pair_scores[metax.LOSSES_KEY] == json.loads(TABLE)
    assert got.inventory.pair_scores[metax.SCORES_KEY] == {}  # unreadable: every figure 0, as HAMi reads it
    plain = V.observe(node({COUNT: "2"}), NOW)
    assert isinstance(plain, Registered) and plain.inventory.pair_scores == {}


def _mx_node(name: str, annotations: dict[str, str]) -> NodeSnapshot:
    got = V.observe(node({COUNT: "4"}, name=name, annotations=annotations), NOW)
    assert isinstance(got, Registered)
    return NodeSnapshot(got.inventory, {})


def test_score_node_ranks_the_nodes() -> None:
    # Test_ScoreNode through the plan: HAMi adds 2000 − the figure of the GPUs the pod gets to the node's score
    # (binpack: the losses table, highest total first; spread: the scores table, lowest total first)
    plain = _mx_node("node-a", {})
    lossy = _mx_node("node-b", {metax.LOSSES_KEY: '{"1":0,"2":300}', metax.SCORES_KEY: '{"1":0,"2":300}'})
    tight = _mx_node("node-c", {metax.LOSSES_KEY: '{"1":0,"2":100}', metax.SCORES_KEY: '{"1":0,"2":100}'})
    nodes = [plain, lossy, tight]
    two = PodRequest(containers=(ContainerRequest(2, 0, 100, 100, MX),), init_count=0)
    constraints = PodConstraints()
    binpack, spread = Policies(node=NodePolicy.BINPACK), Policies(node=NodePolicy.SPREAD)
    got = plan(two, constraints, nodes, policies=binpack, rules=VENDORS.rules)
    assert isinstance(got, Decision) and got.node == "node-c"  # 2000 − 100 beats 2000 − 300 and 0
    ranked = plan_ranked(two, constraints, sorted(nodes, key=rank_key(NodePolicy.BINPACK)), policies=binpack,
                         rules=VENDORS.rules)  # fmt: skip
    assert ranked is not None and ranked.node == "node-c"
    # spread takes the lowest total: the node without a table (0), then HAMi's 2000 − 300 before 2000 − 100
    got = plan(two, constraints, nodes, policies=spread, rules=VENDORS.rules)
    assert isinstance(got, Decision) and got.node == "node-a"
    got = plan(two, constraints, [lossy, tight], policies=spread, rules=VENDORS.rules)
    assert isinstance(got, Decision) and got.node == "node-b"
    assert metax.pod_score_of(lossy.inventory.pair_scores, 2, NodePolicy.BINPACK) == 1700
    assert metax.pod_score_of(plain.inventory.pair_scores, 2, NodePolicy.BINPACK) == 0


# ---- Test_MutateAdmission, Test_checkType, Test_GenerateResourceRequests -------------------------------------------


def test_mutate_admission() -> None:
    # "set to resources limits": ours, no edit
    c = ctr({COUNT: "1"})
    assert V.mutate_container(c, "c") is True and c == ctr({COUNT: "1"})
    # "don't set to resources limits": not ours
    assert V.mutate_container(ctr(), "c") is False
    with pytest.raises(DecodeError):
        V.mutate_container(ctr({COUNT: "-1"}), "c")


def test_check_type() -> None:
    # "node type the same as device" / "node type the different from device"
    assert V.rules.type_ok(gpu("d"), req(), PodConstraints())
    assert not V.rules.type_ok(gpu("d"), req(kind="test"), PodConstraints())
    assert V.rules.uuid_ok(gpu("d"), PodConstraints())  # checkUUID: always


def test_generate_resource_requests() -> None:
    # "resource set to limit and request": 1 GPU, memory 100 %, 100 cores
    assert V.container_request(ctr({COUNT: "1"}, {COUNT: "1"}), "c") == ContainerRequest(1, 0, 100, 100, MX)
    # "resource don't set to limit and request": none
    assert V.container_request(ctr(), "c").empty
    # the count from the requests when the limits lack it
    assert V.container_request(ctr(requests={COUNT: "2"}), "c") == ContainerRequest(2, 0, 100, 100, MX)


def _pod(containers: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "d"},
            "spec": {"containers": containers}}  # fmt: skip


def test_the_webhook_takes_the_pod_without_editing_its_resources() -> None:
    pod = _pod([{**ctr({COUNT: "2"}), "image": "x"}])
    out = mutate_pod(pod, cfg=NvidiaConfig(), scheduler_name="vgpu", force_overwrite_default_scheduler=True,
                     vendors=VENDORS)  # fmt: skip
    assert out.allowed, out.message
    patched = apply_patch(pod, out.patch_ops)
    assert patched["spec"]["schedulerName"] == "vgpu"
    assert patched["spec"]["containers"][0]["resources"]["limits"] == {COUNT: "2"}


def test_patch_annotations() -> None:
    # PatchAnnotations: the same single-device list under both keys
    devices = ((ContainerDevice("n1-metax-0", 65536, 100, MX),),)
    got = allocation_annotations("n1", devices, (), 1_700_000_000, VENDORS)
    assert got["hami.io/metax-gpu-devices-allocated"] == "n1-metax-0,Metax-GPU,65536,100:;"
    assert got["hami.io/metax-gpu-devices-to-allocate"] == got["hami.io/metax-gpu-devices-allocated"]


# ---- Test_CustomFilterRule, Test_Fit_MultiContainerPodSpreadsOverCards ---------------------------------------------


def test_multi_container_pod_spreads_over_cards() -> None:
    # Test_Fit_MultiContainerPodSpreadsOverCards: 8 whole GPUs of one slot, two containers (1024 MiB, 10 cores)
    # land on two distinct GPUs. Test_CustomFilterRule ("allocated id is different from device id" → refused)
    # tests the same-card rule this later test removed: a deliberate difference (docs/vendors/metax.md)
    eight = [gpu(f"node-metax-{i}", index=i, count=1, mem=65536) for i in range(8)]
    got = fit(eight, req(1, 1024, cores=10), req(1, 1024, cores=10))
    assert len({*uuids(got, 0), *uuids(got, 1)}) == 2
    # through the webhook's whole-GPU requests: a pod of 3 containers takes 3 GPUs
    whole = ContainerRequest(1, 0, 100, 100, MX)
    got = fit(eight[:3], whole, whole, whole)
    assert sorted(uuids(got, 0) + uuids(got, 1) + uuids(got, 2)) == [f"node-metax-{i}" for i in range(3)]
    # three containers, two GPUs: the third finds both taken by its own pod
    assert reason(fit(eight[:2], whole, whole, whole)) == "2/2 CardTimeSlicingExhausted"


# ---- TestMetaxDevices_Fit, TestMetaxDevices_AddResourceUsage -------------------------------------------------------


def test_fit_success() -> None:
    # "fit success": dev-1 (the last), as HAMi (difference 8)
    got = fit([gpu("dev-0"), gpu("dev-1", index=1)], req(1, 64, cores=50))
    assert isinstance(got, Decision) and got.devices == ((ContainerDevice("dev-1", 64, 50, MX),),)


@pytest.mark.parametrize(
    "case",
    [
        *hami_share_refusals(gpu, req),
        # "fit fail: type mismatch": another family's request is never shown MetaX GPUs
        Refusal([gpu("dev-0")], req(1, 512, cores=50, kind="OtherType"), {}, {}, "NodeInsufficientDevice"),
        # "fit fail:  AllocatedCardsInsufficientRequest" (2 of 1 GPU): the core knows first
        Refusal([gpu("dev-0", mem=1280)], req(2, 512, cores=20), {"dev-0": DeviceUsage(20, 0, 10)}, {},
                "NodeInsufficientDevice"),
        # "mutex policy rejects used device"
        Refusal([gpu("dev-0")], req(1, 64, cores=50), {"dev-0": DeviceUsage(1)},
                {"hami.io/gpu-scheduler-policy": "mutex"}, "1/1 ExclusiveDeviceAllocateConflict"),
    ],
)  # fmt: skip
def test_fit_refusals(case: Refusal) -> None:
    assert fit.refusal(case) == case.expected


def test_fit_cores_above_100_and_memory_percentage() -> None:
    # "fit success: but core limit can't exceed 100": 120 read as 100
    got = fit([gpu("dev-0", mem=1280)], req(1, 512, cores=120))
    assert isinstance(got, Decision) and got.devices[0][0].used_cores == 100
    # "fit success:  memory percentage", TestMetaxDevices_AddResourceUsage
    check_share_usage(fit, gpu, req)


def test_fit_cordon() -> None:
    # TestFit_DeviceCordon: "cordoned device is skipped, healthy sibling still fits"
    two = [gpu("dev-0"), gpu("dev-1", index=1)]
    assert uuids(fit(two, req(1, 64, cores=50), cordoned=frozenset({"dev-1"}))) == ["dev-0"]
    # "all devices cordoned fails with CardCordoned reason"
    assert reason(fit(two, req(1, 64, cores=50), cordoned=frozenset({"dev-0", "dev-1"}))) == "2/2 CardCordoned"
    # "running pods on a cordoned device are unaffected"
    used = {"dev-1": DeviceUsage(1, 64, 50)}
    assert uuids(fit(two, req(1, 64, cores=50), usage=used, cordoned=frozenset({"dev-1"}))) == ["dev-0"]
    # "no annotation or no node info means nothing cordoned" (dev-1, the last, as HAMi)
    assert uuids(fit(two, req(1, 64, cores=50))) == ["dev-1"]
