"""Enflame vendors (GCU and DRS vGCU): HAMi's ``pkg/device/enflame`` tests restated. The index holds no copy at
v2.10.0 (4707fb02); read at the nearest stored versions: device.go at the version with the DRS memory/core API
(``enflameRequestModeBySpec``, ceil-priced profile cores; the shape hami-wire §9.2 gives v2.10), gcu.go 8e4f53e8,
device_test.go (the DRS version with ``TestGenerateResourceRequests_ByMemoryCore``), gcu_test.go 0e91ed3e (older:
its Fit cases use the vGCU type, restated with ``GCU``), device_cordon_test.go ad358d3a, and three files newer than
v2.10 whose cases are restated against v2.10's behaviour (each says where it differs): config_test.go 3e90e7a8,
device_corebudget_test.go 769b40f4, drs_reconstruction_test.go 7e9ad4f2. Every HAMi case names its test in a
comment; the differences are listed in docs/vendors/enflame.md."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.unit.vendors.kit import NOW, Fit, ctr, reason
from vgpu_scheduler.shared.domain.model import (
    MEM_PCT_UNSET,
    ContainerDevice,
    ContainerRequest,
    DeviceInfo,
    DeviceUsage,
    GpuPolicy,
    GpuPolicyToken,
    NodeInventory,
    NvidiaConfig,
    PodConstraints,
)
from vgpu_scheduler.shared.domain.plan import Decision, Failure
from vgpu_scheduler.shared.domain.scoring import Policies
from vgpu_scheduler.shared.errors import ConfigError, DecodeError
from vgpu_scheduler.shared.protocol.jsonpatch import apply_patch
from vgpu_scheduler.shared.protocol.webhook import mutate_pod
from vgpu_scheduler.shared.vendors import enflame
from vgpu_scheduler.shared.vendors.base import NodeLockKind
from vgpu_scheduler.shared.vendors.nvidia import NvidiaVendor
from vgpu_scheduler.shared.vendors.pods import allocation_annotations, needs_inventory
from vgpu_scheduler.shared.vendors.registration import (
    DecodeFailure,
    Invalid,
    NodeView,
    NotRegistered,
    Registered,
    Unregistered,
)
from vgpu_scheduler.shared.vendors.registry import Vendors

G, V = enflame.build(None)
VENDORS = Vendors((NvidiaVendor(), G, V))
fit = Fit(VENDORS)
GCU, DRS, MEM, CORE = "enflame.com/gcu", "enflame.com/drs-gcu", "enflame.com/gcu-memory", "enflame.com/gcu-core"
MENU = '{"devices":[{"index":"0","minor":"0","capacity":6}],"profiles":{"1g.6gb":"0","3g.20gb":"1","6g.40gb":"2"}}'


def node(
    annotations: dict[str, str] | None = None, capacity: dict[str, Any] | None = None, name: str = "node-a"
) -> NodeView:
    return NodeView(name, "1", annotations or {}, capacity or {}, capacity=capacity or {})


def drs_cards(
    menu: dict[str, str] | None = None, n: int = 1, capacity: int = 6, node_name: str = "node-a"
) -> list[DeviceInfo]:
    """Cards as the registrar makes them from a capacity annotation (HAMi's drsCard / drsBudgetDevice)."""
    spec = {
        "devices": [{"index": str(i), "minor": str(i), "capacity": capacity} for i in range(n)],
        "profiles": menu or {"1g.6gb": "0", "3g.20gb": "1", "6g.40gb": "2"},
    }
    return list(enflame.decode_drs_capacity(json.dumps(spec), node_name))


def gcu_card(uuid: str, index: int = 0) -> DeviceInfo:
    return DeviceInfo(uuid, index, 1, 100, 100, "GCU", 0, "", True, vendor="GCU")


def slices(n: int) -> ContainerRequest:
    """HAMi's ``ContainerDeviceRequest{Nums: 1, Type: Enflame, Memreq: n}`` (direct mode)."""
    return ContainerRequest(nums=1, mem_mib=n, mem_pct=enflame.DIRECT, cores_pct=0, type="Enflame")


def by_spec(mem: int, cores: int) -> ContainerRequest:
    return ContainerRequest(nums=1, mem_mib=mem, mem_pct=MEM_PCT_UNSET, cores_pct=cores, type="Enflame")


def gcu_req(nums: int = 1, kind: str = "GCU") -> ContainerRequest:
    return ContainerRequest(nums=nums, mem_mib=100, mem_pct=100, cores_pct=100, type=kind)


def picked(result: Decision | Failure) -> ContainerDevice:
    assert isinstance(result, Decision), result
    return result.devices[0][0]


def test_keys_and_names() -> None:
    # TestInitGCUDevice, TestGCUDevices_CommonWord
    assert (G.name, G.to_allocate_key, G.allocated_key, G.register_key, G.handshake_key) == (
        "GCU",
        "hami.io/enflame-gcu-devices-to-allocate",
        "hami.io/enflame-gcu-devices-allocated",
        None,
        None,
    )
    assert (V.name, V.to_allocate_key, V.allocated_key, V.register_key, V.handshake_key) == (
        "Enflame",
        None,
        "hami.io/enflame-vgpu-devices-allocated",
        "enflame.com/gcu-drs-capacity",
        None,
    )
    assert G.node_lock is NodeLockKind.NONE and V.node_lock is NodeLockKind.NONE  # HAMi's LockNode takes none
    assert G.resources.all == {GCU} and V.resources.all == {DRS, MEM, CORE}


# ---- config_test.go (newer than v2.10: its flags are HAMi's command line; ours is the device-config section) ------


def test_drs_name_resolution() -> None:
    # TestDRSGCUFlagResolution "no flags falls back to default" / TestDRSGCUIsolationAcrossReinits: nothing given
    assert enflame.parse_config(None).resource_name_drs_gcu == DRS
    assert enflame.parse_config({}).resource_name_drs_gcu == DRS
    # TestDRSGCUYamlPrecedenceOverFlags: the yaml key wins; the legacy yaml key when the new one is absent; the new
    # key over the legacy one
    assert enflame.parse_config({"resourceNameDRSGCU": "from-yaml"}).resource_name_drs_gcu == "from-yaml"
    assert enflame.parse_config({"resourceNameVGCU": "from-yaml-legacy"}).resource_name_drs_gcu == "from-yaml-legacy"
    both = {"resourceNameDRSGCU": "from-yaml", "resourceNameVGCU": "from-yaml-legacy"}
    assert enflame.parse_config(both).resource_name_drs_gcu == "from-yaml"
    # blank memory / core names keep the defaults, as InitEnflameDevice does
    c = enflame.parse_config({"resourceNameGCUMemory": "", "resourceNameGCUCore": " "})
    assert (c.resource_name_gcu_memory, c.resource_name_gcu_core) == (MEM, CORE)
    with pytest.raises(ConfigError, match=re.escape("enflame.resourceNameGCU: must not be empty")):
        enflame.build({"resourceNameGCU": ""})
    with pytest.raises(ConfigError, match=re.escape("enflame.bogus: unknown key")):
        enflame.build({"bogus": "x"})


def test_resource_name_mismatch_skips_the_pod() -> None:
    # TestResourceNameMismatchSilentlySkipsPod: a pod written with the legacy name is not ours under the DRS name …
    legacy = ctr({"enflame.com/vgcu": "2"})
    assert not V.mutate_container(legacy, "c") and V.container_request(legacy, "c").empty
    # … and is when the section names it (2 slices, one instance)
    named = enflame.build({"resourceNameDRSGCU": "enflame.com/vgcu"})[1]
    assert named.mutate_container(ctr({"enflame.com/vgcu": "2"}), "c")
    assert named.container_request(ctr({"enflame.com/vgcu": "2"}), "c") == slices(2)


# ---- gcu_test.go ---------------------------------------------------------------------------------------------------


def test_gcu_mutate_admission() -> None:
    # TestGCUDevices_MutateAdmission "GCU resource set to limits" / "GCU resource not set"
    assert G.mutate_container(ctr({GCU: 2}), "c") is True
    assert G.mutate_container(ctr(), "c") is False


def test_gcu_health_and_node_devices() -> None:
    # TestGCUDevices_CheckHealth "Node with GCU resources" / "Node without GCU resources"
    assert isinstance(G.observe(node(capacity={GCU: 2}), NOW), Registered)
    assert G.observe(node(), NOW) == NotRegistered(Unregistered.ABSENT)
    # TestGCUDevices_GetNodeDevices "Test with valid node": testnode-GCU-0/1, one slot, 100/100
    got = G.observe(node(capacity={GCU: 2}, name="testnode"), NOW)
    assert isinstance(got, Registered)
    assert got.inventory.devices == (
        DeviceInfo("testnode-GCU-0", 0, 1, 100, 100, "GCU", 0, "", True, vendor="GCU"),
        DeviceInfo("testnode-GCU-1", 1, 1, 100, 100, "GCU", 0, "", True, vendor="GCU"),
    )
    # "Test with missing resource" (HAMi: an error and no device); a count of 0 likewise
    assert G.observe(node(capacity={}, name="testnode"), NOW) == NotRegistered(Unregistered.ABSENT)
    assert G.observe(node(capacity={GCU: 0}), NOW) == NotRegistered(Unregistered.NO_DEVICES)
    bad = G.observe(node(capacity={GCU: "1.5"}), NOW)
    assert isinstance(bad, Invalid) and bad.failure is DecodeFailure.REGISTER
    # TestGCUDevices_NodeCleanUp: nothing to clean (no handshake)
    assert G.handshake_key is None


def test_gcu_registration_roundtrip() -> None:
    annotations, capacity, labels = G.node_registration(enflame.gcu_devices("n", 3))
    assert (annotations, capacity, labels) == ({}, {GCU: "3"}, {})
    got = G.observe(node(capacity=capacity, name="n"), NOW)
    assert isinstance(got, Registered) and got.inventory.devices == enflame.gcu_devices("n", 3)


def test_gcu_patch_annotations() -> None:
    # TestGCUDevices_PatchAnnotations "With GCU devices": both keys, the same list
    got = allocation_annotations("n1", ((ContainerDevice("testnode-GCU-0", 0, 0, "GCU"),),), (), 1, VENDORS)
    assert got["hami.io/enflame-gcu-devices-to-allocate"] == "testnode-GCU-0,GCU,0,0:;"
    assert got["hami.io/enflame-gcu-devices-allocated"] == "testnode-GCU-0,GCU,0,0:;"
    # "No devices": no Enflame key at all
    none = allocation_annotations("n1", ((ContainerDevice("GPU-0", 0, 0),),), (), 1, VENDORS)
    assert not any("enflame" in k for k in none)


def test_gcu_generate_resource_requests() -> None:
    # TestGCUDevices_GenerateResourceRequests "set to limits" (3) / "set to requests" (2) / "not set"
    assert G.container_request(ctr({GCU: "3"}), "c") == ContainerRequest(3, 100, 100, 100, "GCU")
    assert G.container_request(ctr(requests={GCU: "2"}), "c") == ContainerRequest(2, 100, 100, 100, "GCU")
    assert G.container_request(ctr(), "c").empty
    with pytest.raises(DecodeError, match="counts whole GPUs"):
        G.container_request(ctr({GCU: "1.5"}), "c")  # HAMi: no request (AsInt64 fails); ours says why


def test_gcu_fit() -> None:
    two = [gcu_card("dev-0"), gcu_card("dev-1", 1)]
    # TestGCUDevices_Fit "fit success": one whole card, dev-1, the last, as HAMi (difference 8)
    assert picked(fit(two, gcu_req())) == ContainerDevice("dev-1", 100, 100, "GCU")
    # "fit fail: type mismatch": another family's request is never shown GCUs
    assert reason(fit([gcu_card("dev-0")], gcu_req(kind="OtherType"))) == "NodeInsufficientDevice"
    # "fit fail: device already used": the card's one slot is taken, HAMi's word ExclusiveDeviceAllocateConflict
    assert reason(fit([gcu_card("dev-0")], gcu_req(), usage={"dev-0": DeviceUsage(1)})) == (
        "1/1 ExclusiveDeviceAllocateConflict"
    )
    # "fit fail: insufficient devices" (2 of 1): HAMi AllocatedCardsInsufficientRequest; the core knows first
    assert reason(fit([gcu_card("dev-0")], gcu_req(2))) == "NodeInsufficientDevice"
    # TestGCUDevices_AddResourceUsage: the usage a card records is the entry's (whole card: 100/100)
    got = fit(two, gcu_req(2))
    assert isinstance(got, Decision) and [d.uuid for d in got.devices[0]] == ["dev-1", "dev-0"]  # HAMi's walk


def test_gcu_fit_cordon() -> None:
    # TestGCUFit_DeviceCordon: the cordoned card is skipped; all cordoned → CardCordoned; none → fits
    two = [gcu_card("dev-0"), gcu_card("dev-1", 1)]
    assert picked(fit(two, gcu_req(), cordoned=frozenset({"dev-1"}))).uuid == "dev-0"
    assert reason(fit(two, gcu_req(), cordoned=frozenset({"dev-0", "dev-1"}))) == "2/2 CardCordoned"
    assert isinstance(fit(two, gcu_req()), Decision)


# ---- device_test.go: vGCU (DRS) ----------------------------------------------------------------------------------


def test_get_node_devices_drs_annotation() -> None:
    # TestGetNodeDevices_DRSAnnotation: one card, type Enflame, 40960 MiB (the biggest profile), 6 slots, minor 0
    got = V.observe(node({enflame.DRS_CAPACITY_KEY: MENU}), NOW)
    assert isinstance(got, Registered)
    (card,) = got.inventory.devices
    assert (card.id, card.type, card.devmem_mib, card.count, card.devcore) == (
        "node-a-enflame-drs-0",
        "Enflame",
        40960,
        6,
        100,
    )
    assert enflame.device_minor(card) == "0"
    assert [(p.name, p.id, p.size, p.memory_gb, p.core_pct) for p in enflame.device_profiles(card)] == [
        ("1g.6gb", "0", 1, 6, 17),
        ("3g.20gb", "1", 3, 20, 50),
        ("6g.40gb", "2", 6, 40, 100),
    ]
    # the annotation round-trips through what a simulated plugin writes
    annotations, capacity, _ = V.node_registration(got.inventory.devices)
    assert json.loads(annotations[enflame.DRS_CAPACITY_KEY]) == json.loads(MENU) and capacity == {DRS: "6"}


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("{", "not JSON"),
        ('{"devices":[{"index":"0","capacity":6}],"profiles":{"big":"0"}}', "no valid DRS profile"),
        ('{"devices":[{"index":"0","capacity":0}],"profiles":{"1g.6gb":"0"}}', "capacity must be from 1"),
        # TestParseDRSCapacity_RejectsNaNAndInf (newer than v2.10): 1e300 and a non-whole number are refused
        ('{"devices":[{"index":"0","capacity":1e300}],"profiles":{"1g.6gb":"0"}}', "capacity must be from 1"),
        ('{"devices":[{"index":"0","capacity":1.5}],"profiles":{"1g.6gb":"0"}}', "capacity must be a whole number"),
        # HAMi's string form "2147483648" is clamped by the newer version, wrapped by v2.10: ours refuses it
        ('{"devices":[{"index":"0","capacity":"2147483648"}],"profiles":{"1g.6gb":"0"}}', "capacity must be from 1"),
        ('{"devices":[{"index":0,"capacity":6}],"profiles":{"1g.6gb":"0"}}', "index must be a string"),
        # TestFit_OversizedProfileRejected (newer than v2.10; v2.10 wraps int32): sizes / memory beyond int32
        ('{"devices":[{"index":"0","capacity":6}],"profiles":{"4294967299g.4294967299gb":"0"}}', "beyond int32"),
        ('{"devices":[{"index":"0","capacity":6}],"profiles":{"4294967299g.20gb":"0"}}', "beyond int32"),
        ('{"devices":[{"index":"0","capacity":6}],"profiles":{"2g.4294967299gb":"0"}}', "beyond int32"),
    ],
)
def test_bad_capacity_annotations_are_invalid(value: str, problem: str) -> None:
    got = V.observe(node({enflame.DRS_CAPACITY_KEY: value}), NOW)
    assert isinstance(got, Invalid) and got.failure is DecodeFailure.REGISTER, got
    assert problem in str(got.error)


def test_registration_defaults() -> None:
    assert V.observe(node(), NOW) == NotRegistered(Unregistered.ABSENT)
    empty = '{"devices":[],"profiles":{"1g.6gb":"0"}}'
    assert V.observe(node({enflame.DRS_CAPACITY_KEY: empty}), NOW) == NotRegistered(Unregistered.NO_DEVICES)
    # an index that is not a number takes the card's position; a blank minor its index; a string capacity counts
    odd = '{"devices":[{"index":"x","minor":" ","capacity":"4"}],"profiles":{"2g.8gb":"a"}}'
    got = V.observe(node({enflame.DRS_CAPACITY_KEY: odd}), NOW)
    assert isinstance(got, Registered)
    (card,) = got.inventory.devices
    assert (card.id, card.count, card.devmem_mib, enflame.device_minor(card)) == ("node-a-enflame-drs-0", 4, 8192, "0")


def test_check_type() -> None:
    # Test_checkType "the same type" / "the different type"
    card = drs_cards()[0]
    assert V.rules.type_ok(card, slices(1), PodConstraints())
    assert not V.rules.type_ok(card, ContainerRequest(1, 1, 0, 0, "test123"), PodConstraints())


def test_generate_resource_requests() -> None:
    # TestGenerateResourceRequests: drs-gcu 3 → one instance, Memreq 3, direct mode
    assert V.container_request(ctr({DRS: "3"}), "c") == slices(3)
    # TestGenerateResourceRequests_ByMemoryCore: memory 20480 and cores 40 → by spec
    assert V.container_request(ctr({MEM: "20480", CORE: "40"}), "c") == by_spec(20480, 40)
    assert V.container_request(ctr(requests={DRS: "2"}), "c") == slices(2)
    assert V.container_request(ctr(), "c").empty


@pytest.mark.parametrize(
    ("cores", "accepted"),
    # Test_GenerateResourceRequests_CoresValidation (newer than v2.10): 50 and 100 accepted; 101, 150, 200 and -1
    # refused. "cores 0 accepted" there; v2.10's webhook refuses 0 ("must be in range (0,100]"), and so do we.
    [(50, True), (100, True), (0, False), (101, False), (150, False), (200, False), (-1, False)],
)
def test_cores_validation(cores: int, accepted: bool) -> None:
    c = ctr({MEM: "20480", CORE: str(cores)})
    if accepted:
        assert V.container_request(c, "c") == by_spec(20480, cores)
    else:
        with pytest.raises(DecodeError):
            V.container_request(c, "c")


def test_mutate_admission() -> None:
    # TestMutateAdmission_ByMemoryCoreAPI: memory and cores in the limits → ours, copied to the requests
    c = ctr({MEM: "20480", CORE: "50"})
    assert V.mutate_container(c, "c") is True
    assert c["resources"]["requests"] == {MEM: "20480", CORE: "50"}
    # the direct API from the requests only: copied to the limits
    c = ctr(requests={DRS: "3"})
    assert V.mutate_container(c, "c") is True and c["resources"]["limits"] == {DRS: "3"}
    # HAMi's webhook errors: drs-gcu 0, memory 0
    for bad in ({DRS: "0"}, {MEM: "0"}):
        with pytest.raises(DecodeError, match="must be greater than 0"):
            V.mutate_container(ctr(bad), "c")
    assert V.mutate_container(ctr({"cpu": "1"}), "c") is False


def _pod(containers: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "d"},
        "spec": {"containers": containers},
    }


def test_the_webhook_admits_and_denies_as_hamis_does() -> None:
    pod = _pod([{**ctr({DRS: "3"}), "image": "x"}])
    out = mutate_pod(pod, cfg=NvidiaConfig(), scheduler_name="vgpu", force_overwrite_default_scheduler=True,
                     vendors=VENDORS)  # fmt: skip
    assert out.allowed, out.message
    patched = apply_patch(pod, out.patch_ops)
    assert patched["spec"]["schedulerName"] == "vgpu"
    assert patched["spec"]["containers"][0]["resources"]["requests"] == {DRS: "3"}
    bad = _pod([{**ctr({MEM: "20480", CORE: "101"}), "image": "x"}])
    out = mutate_pod(bad, cfg=NvidiaConfig(), scheduler_name="vgpu", force_overwrite_default_scheduler=True,
                     vendors=VENDORS)  # fmt: skip
    assert not out.allowed and "must be from 1 to 100" in out.message


def test_fit_select_profile_by_request() -> None:
    # TestFit_SelectProfileByRequest: 3 slices → 3g.20gb: 20480 MiB and 50 cores
    assert picked(fit(drs_cards(), slices(3))) == ContainerDevice("node-a-enflame-drs-0", 20480, 50, "Enflame")
    # TestFit_SelectProfileByMemoryCoreRequest: 20480 (MiB → 20 GB) and 40 % → 3g.20gb
    assert picked(fit(drs_cards(), by_spec(20480, 40))) == ContainerDevice("node-a-enflame-drs-0", 20480, 50, "Enflame")
    # memory in GB selects the same way; cores alone the smallest profile with that many
    assert picked(fit(drs_cards(), by_spec(20, 0))).used_mem_mib == 20480
    assert picked(fit(drs_cards(), by_spec(0, 60))).used_cores == 100


def test_fit_profile_not_found() -> None:
    # TestFit_ProfileNotFound: only 1g.6gb on the card, 3 slices asked → ModeNotFit
    assert reason(fit(drs_cards({"1g.6gb": "0"}), slices(3))) == "1/1 ModeNotFit"
    assert reason(fit(drs_cards(), by_spec(41, 0))) == "1/1 ModeNotFit"  # more memory than any profile


def test_fit_mutex_and_health() -> None:
    # TestFit_MutexRejectsUsedDevice: 2 slots, one in use, mutex policy → ExclusiveDeviceAllocateConflict
    mutex = Policies(gpu=GpuPolicy((GpuPolicyToken.MUTEX,)))
    card = drs_cards(capacity=2)
    got = fit(card, slices(3), usage={card[0].id: DeviceUsage(1, 6144, 17)}, policies=mutex)
    assert reason(got) == "1/1 ExclusiveDeviceAllocateConflict"
    # TestFit_UnhealthyDeviceRejected
    sick = [DeviceInfo(**{**{f: getattr(card[0], f) for f in card[0].__slots__}, "health": False})]
    assert reason(fit(sick, slices(3))) == "1/1 CardNotHealth"


def test_fit_cordon() -> None:
    # TestFit_DeviceCordon: the cordoned card is skipped, all cordoned → CardCordoned, none → the other fits
    two = drs_cards(n=2)
    assert picked(fit(two, slices(3), cordoned=frozenset({two[1].id}))).uuid == two[0].id
    assert reason(fit(two, slices(3), cordoned=frozenset({two[0].id, two[1].id}))) == "2/2 CardCordoned"
    assert isinstance(fit(two, slices(3)), Decision)


def test_uuid_selectors() -> None:
    two = drs_cards(n=2)
    assert picked(fit(two, slices(1), annotations={enflame.USE_UUID: two[1].id})).uuid == two[1].id
    assert reason(fit(two[:1], slices(1), annotations={enflame.NOUSE_UUID: two[0].id})) == "1/1 CardUuidMismatch"


def _usage(*taken: ContainerDevice) -> DeviceUsage:
    return DeviceUsage(len(taken), sum(d.used_mem_mib for d in taken), sum(d.used_cores for d in taken))


def test_core_budget_and_slices() -> None:
    card = drs_cards()
    one = picked(fit(card, slices(1)))
    # TestFit_AllAdvertisedSlicesSchedulable (newer than v2.10, which prices a slice at ceil(100/6) = 17 cores):
    # as in v2.10, five 1g.6gb instances fit and the sixth is refused on cores (85 + 17 > 100)
    assert isinstance(fit(card, slices(1), usage={card[0].id: _usage(*[one] * 4)}), Decision)
    assert reason(fit(card, slices(1), usage={card[0].id: _usage(*[one] * 5)})) == "1/1 CardInsufficientCore"
    # TestFit_MixedProfilesFillDevice (newer): 3g.20gb + three 1g.6gb is 50 + 51 cores: the third 1g is refused
    three = picked(fit(card, slices(3)))
    assert isinstance(fit(card, slices(1), usage={card[0].id: _usage(three, one)}), Decision)
    assert reason(fit(card, slices(1), usage={card[0].id: _usage(three, one, one)})) == "1/1 CardInsufficientCore"


def test_drs_reconstruction() -> None:
    # drs_reconstruction_test.go (newer than v2.10, which counts one slot per instance after a restart):
    # ours rebuilds usage from the pod entries alone, where a profile's cores stand for its slices.
    card = drs_cards()
    three = picked(fit(card, slices(3)))
    # TestDRSSlice_SlotCountSurvivesReconstruction: the entry round-trips with its 50 cores
    decoded = V.decode_devices(V.encode_devices(((three,),)))
    assert decoded[0] == (three,) and three.used_cores == 50
    # TestDRSSlice_PartialCapacityRejectsFullProfile: 4 of 6 slices used (four 1g) → 3g refused, 1g fits. HAMi's
    # card there has 400000 MiB and no core total, so slices refuse it (CardTimeSlicingExhausted); a registered card
    # has its profiles' memory and 100 cores, and the memory left (16384 MiB) refuses it first
    one = picked(fit(card, slices(1)))
    four = {card[0].id: _usage(*[one] * 4)}
    assert reason(fit(card, slices(3), usage=four)) == "1/1 CardInsufficientMemory"
    assert isinstance(fit(card, slices(1), usage=four), Decision)
    # TestDRSSlice_ReconstructionRejectsSliceOversubscription: two 3g fill the card; a third is refused
    assert reason(fit(card, slices(3), usage={card[0].id: _usage(three, three)})) == "1/1 CardInsufficientMemory"
    # TestDRSSlice_SliceCountPrefersSlots: the slices written to the pod are the profile's (below)


def test_patch_annotations_drs_fields() -> None:
    # TestPatchAnnotations_DRSFields: the list, gcu-assigned false, index / id, minor, request size 3, the time and
    # assigned-containers by container name with the profile
    inv = NodeInventory("node-a", "Enflame", tuple(drs_cards()))
    devices = ((ContainerDevice("node-a-enflame-drs-0", 20480, 50, "Enflame"),),)
    pod = _pod([{"name": "pod-gcu-example1"}])
    assert needs_inventory(devices, VENDORS)
    got = allocation_annotations("node-a", devices, (), 1_700_000_000, VENDORS, pod=pod, inventory=inv)
    assert got["hami.io/enflame-vgpu-devices-allocated"] == "node-a-enflame-drs-0,Enflame,20480,50:;"
    assert "hami.io/enflame-vgpu-devices-to-allocate" not in got
    assert got[enflame.ASSIGNED_KEY] == "false"
    assert got[enflame.ASSIGNED_INDEX_KEY] == got[enflame.ASSIGNED_ID_KEY] == "0"
    assert got[enflame.ASSIGNED_MINOR_KEY] == "0"
    assert got[enflame.REQUEST_SIZE_KEY] == "3"
    assert got[enflame.ASSIGNED_TIME_KEY] == "1700000000000000000"
    assert json.loads(got[enflame.ASSIGNED_CONTAINERS_KEY]) == {
        "pod-gcu-example1": {"allocated": False, "request": 3, "profileID": "1", "profileName": "3g.20gb"}
    }
    # the node's inventory gone: refused rather than guessed
    with pytest.raises(DecodeError, match="not registered on the node any more"):
        allocation_annotations("node-a", devices, (), 1, VENDORS, pod=pod, inventory=None)
    assert not needs_inventory(((ContainerDevice("GPU-0", 0, 0),),), VENDORS)


def test_score_is_zero() -> None:
    # ScoreNode of both vendors: 0
    assert V.rules.score_node(NodeInventory("n", "Enflame", tuple(drs_cards()))) == 0.0
    assert G.rules.score_node(NodeInventory("n", "GCU", enflame.gcu_devices("n", 1))) == 0.0
