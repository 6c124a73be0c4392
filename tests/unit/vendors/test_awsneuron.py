"""AWS Neuron vendor: HAMi's ``pkg/device/awsneuron`` tests restated. The index holds no copy at v2.10.0
(4707fb02); read at the nearest stored versions: ``device_test.go`` 0b9cf5d9 (the #2674 request validation, with
``splitCoreRequest``) and f23d1f5d (its ``Test_checkUUID``), ``device_wholecore_test.go`` 7300c199 (the whole-device
rule with the two-core cap of HAMi #2809, just after v2.10.0, which we follow on Inferentia1; see
docs/vendors/awsneuron.md), ``device_geometry_test.go`` 4535110d (newer than v2.10: geometry per node, cores
still capped at two; restated because per-node geometry is what we do, see docs/vendors/awsneuron.md) and
``device_cordon_test.go`` ad358d3a. Cases of those files that test the later four-core Inferentia1 layout (the
0b9cf5d9 ``device_wholecore_test.go``, the ``coresPerAWSNeuron: 4`` rows of ``Test_splitCoreRequest``) are not
restated: we address two cores per device. Every HAMi case names its test in a comment; ours are marked."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.unit.vendors.kit import Fit, reason
from vgpu_scheduler.services.extender.metrics import AllocationCollector, QuotaView
from vgpu_scheduler.services.informer.pods import pod_allocation
from vgpu_scheduler.shared.codec.resources import ResourceRequestError
from vgpu_scheduler.shared.domain.diagnosis import nearest_miss
from vgpu_scheduler.shared.domain.model import (
    ContainerDevice,
    ContainerRequest,
    DeviceCharge,
    DeviceInfo,
    DeviceUsage,
    NodeInventory,
    NvidiaConfig,
    PodConstraints,
    PodRequest,
)
from vgpu_scheduler.shared.domain.plan import Decision, Failure, plan
from vgpu_scheduler.shared.domain.scoring import Policies
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.errors import ConfigError, DecodeError
from vgpu_scheduler.shared.protocol.webhook import mutate_pod
from vgpu_scheduler.shared.vendors import awsneuron
from vgpu_scheduler.shared.vendors.awsneuron import NAME, bits, contiguous_run, split_cores
from vgpu_scheduler.shared.vendors.nvidia import NvidiaVendor
from vgpu_scheduler.shared.vendors.pods import (
    allocation_annotations,
    decode_vendor_constraints,
    device_list_annotations,
)
from vgpu_scheduler.shared.vendors.registration import (
    DecodeFailure,
    Invalid,
    NodeView,
    NotRegistered,
    Registered,
    Unregistered,
)
from vgpu_scheduler.shared.vendors.registry import Vendors

V = awsneuron.build(None)[0]
VENDORS = Vendors((NvidiaVendor(), V))
fit = Fit(VENDORS)
NOW = datetime(2026, 8, 21, 12, 0, 0)
COUNT = "aws.amazon.com/neuron"
CORE = "aws.amazon.com/neuroncore"
MUTEX = {"hami.io/gpu-scheduler-policy": "mutex"}


def ctr(
    limits: dict[str, Any] | None = None, requests: dict[str, Any] | None = None, name: str = "c"
) -> dict[str, Any]:
    return {"name": name, "resources": {"limits": limits or {}, "requests": requests or {}}}


def dev(
    uuid: str, index: int = 0, count: int = 2, mask: int = 3, node_type: str = "trn", health: bool = True
) -> DeviceInfo:
    """HAMi's ``makeAWSDeviceUsage`` without the usage: slots, core mask, instance type (our ``mode``)."""
    return DeviceInfo(uuid, index, count, 0, mask, NAME, 0, node_type, health, vendor=NAME)


def req(nums: int = 1, cores: int = 2, kind: str = NAME) -> ContainerRequest:
    return ContainerRequest(nums=nums, mem_mib=0, cores_pct=cores, type=kind)


def taken(result: Decision | Failure) -> list[tuple[str, int]]:
    """(device id, core mask) of the one container's devices."""
    assert isinstance(result, Decision), result
    return [(d.uuid, d.used_cores) for d in result.devices[0]]


def capacity_node(
    name: str, count: Any, cores: Any, instance_type: str = "inf2.xlarge", allocatable: dict[str, Any] | None = None
) -> NodeView:
    cap: dict[str, Any] = {}
    if count is not None:
        cap[COUNT] = count
    if cores is not None:
        cap[CORE] = cores
    labels = {awsneuron.INSTANCE_TYPE_LABEL: instance_type} if instance_type else {}
    return NodeView(name, "1", {}, allocatable if allocatable is not None else dict(cap), cap, labels)


def registered(node: NodeView) -> tuple[DeviceInfo, ...]:
    got = V.observe(node, NOW)
    assert isinstance(got, Registered), got
    return got.inventory.devices


def test_config_section() -> None:
    # the section, enable flag, names, keys and lock: test_contract.py
    assert V.resources.all == {COUNT, CORE}
    renamed = awsneuron.build({"resourceCountName": "x.io/n", "resourceCoreName": "x.io/c"})[0]
    assert renamed.resources.all == {"x.io/n", "x.io/c"}
    with pytest.raises(ConfigError, match=re.escape("awsneuron.resourceMemoryName: unknown key")):
        awsneuron.build({"resourceMemoryName": "x"})
    with pytest.raises(ConfigError, match=re.escape("awsneuron.resourceCoreName: must not be empty")):
        awsneuron.build({"resourceCoreName": " "})


# ---- Test_MutateAdmission -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("container", "want", "error"),
    [
        (ctr({COUNT: 2}), True, None),  # "set neuron number"
        (ctr(requests={COUNT: 2}), True, None),  # "set request-only neuron number"
        # "reject request-only neuron number that overflows device count"
        (ctr(requests={COUNT: 2**31}), False, f"{COUNT} must not exceed 2147483647"),
        (ctr({CORE: 2}), True, None),  # "set neuron cores"
        # "reject odd neuron core count greater than one"
        (ctr({CORE: 3}), False, f"{CORE} must be 1 or a multiple of 2, got 3"),
        # "reject request-only odd neuron core count greater than one"
        (ctr(requests={CORE: 3}), False, f"{CORE} must be 1 or a multiple of 2, got 3"),
        (ctr({CORE: 0}), False, f"{CORE} must be greater than 0"),  # "reject zero neuron core count"
        (ctr({CORE: -2}), False, f"{CORE} must be greater than 0"),  # "reject negative neuron core count"
        # "reject neuron core count that overflows device count"
        (ctr({CORE: (2**31 - 1) * 2 + 2}), False, f"{CORE} must not exceed 4294967294"),
        (ctr(), False, None),  # "no neuron devices"
    ],
)
def test_mutate_admission(container: dict[str, Any], want: bool, error: str | None) -> None:
    before = repr(container)
    if error is None:
        assert V.mutate_container(container, "spec.containers[0]") is want
    else:
        with pytest.raises(ResourceRequestError, match=re.escape(error)):
            V.mutate_container(container, "spec.containers[0]")
    assert repr(container) == before  # HAMi's MutateAdmission edits nothing


def test_requests_that_are_not_integers() -> None:
    # ours: validateResourceRequest's other refusal, and a value that is no quantity at all
    with pytest.raises(ResourceRequestError, match=re.escape(f'container "c": {COUNT} must be an integer')):
        V.container_request(ctr({COUNT: "1.5"}), "c")
    with pytest.raises(ResourceRequestError, match=re.escape(f"{CORE}: 'lots' is not a number")):
        V.container_request(ctr({CORE: "lots"}), "c")
    # ours: the count wins when a container names both (HAMi reads the count first)
    assert V.container_request(ctr({COUNT: 1, CORE: 1}), "c") == req(1, 2)


# ---- Test_GenerateResourceRequests, Test_splitCoreRequest, geometry and whole-core tests ---------------------------


@pytest.mark.parametrize(
    ("container", "want"),
    [
        (ctr({COUNT: "1"}, {COUNT: "1"}), req(1, 2)),  # "allocate neuron device": the whole device, two cores
        (ctr({CORE: "1"}, {CORE: "1"}), req(1, 1)),  # "allocate neuron core"
    ],
)
def test_generate_resource_requests(container: dict[str, Any], want: ContainerRequest) -> None:
    assert V.container_request(container, "c") == want


@pytest.mark.parametrize(
    ("container", "error"),
    [
        # "reject request-only neuron number that overflows device count when admission is bypassed"
        (ctr(requests={COUNT: 2**31}), f"{COUNT} must not exceed 2147483647"),
        # "reject odd neuron core request when admission is bypassed" (limits and requests)
        (ctr({CORE: "3"}, {CORE: "3"}), f"{CORE} must be 1 or a multiple of 2, got 3"),
        # "reject request-only odd neuron core request when admission is bypassed"
        (ctr(requests={CORE: "3"}), f"{CORE} must be 1 or a multiple of 2, got 3"),
        # "reject zero neuron core request when admission is bypassed"
        (ctr({CORE: "0"}), f"{CORE} must be greater than 0"),
        # "reject negative neuron core request when admission is bypassed"
        (ctr({CORE: "-2"}), f"{CORE} must be greater than 0"),
        # "reject neuron core request that overflows device count when admission is bypassed"
        (ctr({CORE: (2**31 - 1) * 2 + 2}), f"{CORE} must not exceed 4294967294"),
    ],
)
def test_generate_resource_requests_refusals(container: dict[str, Any], error: str) -> None:
    # HAMi's scheduler ignores such a container (an empty request); ours refuses it with the same words, so the
    # pod is never placed without the device it asked for
    with pytest.raises(ResourceRequestError, match=re.escape(error)):
        V.container_request(container, "c")


@pytest.mark.parametrize(
    ("cores", "want"),
    [
        (1, (1, 1)),  # "single core takes one device"
        (2, (1, 2)),  # "a full device is one device"
        (6, (3, 2)),  # "whole devices divide evenly"
        (4, (2, 2)),  # "unknown per-device cores falls back to the addressable limit"
    ],
)
def test_split_core_request(cores: int, want: tuple[int, int]) -> None:
    # Test_splitCoreRequest (its two-core rows; v2.10 addresses two cores of any device)
    assert split_cores(cores, CORE) == want
    assert V.container_request(ctr({CORE: cores}), "c") == req(*want)


def test_split_core_request_refusals() -> None:
    # Test_splitCoreRequest "odd count above one has no representable shape"
    with pytest.raises(ValueError, match=re.escape(f"{CORE} must be 1 or a multiple of 2, got 3")):
        split_cores(3, CORE)
    # ours: the device-count bound of splitCoreRequest
    with pytest.raises(ValueError, match=re.escape(f"{CORE} needs 2147483648 devices")):
        split_cores(2**32, CORE)


def test_whole_device_request_caps_cores_and_does_not_depend_on_nodes() -> None:
    # Test_GenerateResourceRequests_WholeDeviceCapsCores (7300c199): a whole device reserves the capped two cores,
    # also where a device has four; TestGenerateResourceRequestsDoesNotDependOnRegisteredNode: registering an
    # Inferentia1 or Inferentia2 node changes nothing (our vendor is immutable: nothing to cache)
    want = V.container_request(ctr({COUNT: "1"}), "c")
    assert want.cores_pct == awsneuron.MAX_CORES_PER_DEVICE == 2
    registered(capacity_node("inf1-node", 1, 4, "inf1.xlarge"))
    assert V.container_request(ctr({COUNT: "1"}), "c") == want
    registered(capacity_node("inf2-node", 1, 2, "inf2.xlarge"))
    assert V.container_request(ctr({COUNT: "1"}), "c") == want


# ---- Test_GetNodeDevices, geometry, whole-core masks ---------------------------------------------------------------


def test_get_node_devices() -> None:
    # Test_GetNodeDevices "get node device": inf2, 1 device of 2 cores
    devices = registered(capacity_node("test", 1, 2, "inf2"))
    assert devices == (DeviceInfo("test-AWSNeuron-0", 0, 2, 0, 3, NAME, 0, "inf2", True, vendor=NAME),)
    # Test_GetNodeDevices_CoreMaskCappedOnFourCoreHardware (7300c199): 4 devices of 4 cores: mask 3, not 15
    inf1 = registered(capacity_node("inf1-node", "4", "16", "inf1.6xlarge"))
    assert len(inf1) == 4 and {d.devcore for d in inf1} == {3} and {d.count for d in inf1} == {4}
    # Test_GetNodeDevices_CoreMaskUnaffectedOnTwoCoreHardware: trn1, 1 device of 2 cores, mask 3
    assert [d.devcore for d in registered(capacity_node("trn1-node", "1", "2", "trn1.2xlarge"))] == [3]


def test_geometry_is_per_node() -> None:
    # TestGetNodeDevicesKeepsGeometryPerNode (both orders) and TestGetNodeDevicesConcurrentMixedGeometry: each
    # node keeps its own geometry (count = cores per device, mask capped at 3) whatever was registered before
    four = capacity_node("inf1-node", 2, 8, "inf1.6xlarge")
    two = capacity_node("inf2-node", 2, 4, "inf2.8xlarge")
    for _ in range(100):
        for node, cores in ((four, 4), (two, 2), (two, 2), (four, 4)):
            devices = registered(node)
            assert len(devices) == 2 and {(d.count, d.devcore) for d in devices} == {(cores, 3)}


def test_invalid_geometry_and_capacity() -> None:
    # TestGetNodeDevicesRejectsInvalidGeometry: 3 cores over 2 devices
    got = V.observe(capacity_node("invalid-node", 2, 3, "inf1.xlarge"), NOW)
    assert isinstance(got, Invalid) and got.failure is DecodeFailure.REGISTER
    assert "cannot be split evenly" in str(got.error)
    # ours: no core capacity at all (HAMi registers devices of 0 cores no request could ever use)
    assert isinstance(V.observe(capacity_node("n", 2, None), NOW), Invalid)
    # ours: not a whole number; no device resource; no devices; the plugin gone (allocatable 0)
    assert isinstance(V.observe(capacity_node("n", "1.5", 2), NOW), Invalid)
    assert V.observe(capacity_node("n", None, None), NOW) == NotRegistered(Unregistered.ABSENT)
    assert V.observe(capacity_node("n", 0, 0), NOW) == NotRegistered(Unregistered.NO_DEVICES)
    gone = capacity_node("n", 2, 4, allocatable={COUNT: "0"})
    assert V.observe(gone, NOW) == NotRegistered(Unregistered.NO_ALLOCATABLE)
    # ours: the cordon annotation lists device ids of the node
    cordoned = NodeView("n", "1", {"hami.io/device-cordon": "n-AWSNeuron-1, x"}, {COUNT: 2}, {COUNT: 2, CORE: 4})
    got = V.observe(cordoned, NOW)
    assert isinstance(got, Registered) and got.inventory.cordoned == {"n-AWSNeuron-1"}


def test_node_registration_round_trip() -> None:
    # ours: what the simulated device plugin advertises decodes to the same devices
    devices = registered(capacity_node("n", 4, 16, "inf1.6xlarge"))
    annotations, capacity, labels = V.node_registration(devices)
    assert (annotations, capacity, labels) == (
        {},
        {COUNT: "4", CORE: "16"},
        {"node.kubernetes.io/instance-type": "inf1.6xlarge"},
    )
    again = NodeView("n", "2", annotations, capacity, capacity, labels)
    assert registered(again) == devices


def test_count_mask_available() -> None:
    # Test_countMaskAvailable: 3 → 2, 2 → 1, 1 → 1, 0 → 0
    assert [bits(m) for m in (3, 2, 1, 0)] == [2, 1, 1, 0]


def test_core_masks_are_contiguous_free_runs() -> None:
    # Test_addCoreUsage_FourCoreDevice's two-core rows: "2-core device unaffected" (2 of 2 → 0b11),
    # "2-core device single-core unaffected" (1 of 2 → 0b01); then ours: the second core is the free one, and a
    # run must be contiguous (the Neuron runtime takes a core range)
    assert awsneuron.free_run(0b11, 0, 2) == 0b11
    assert awsneuron.free_run(0b11, 0, 1) == 0b01
    assert awsneuron.free_run(0b11, 0b01, 1) == 0b10
    assert awsneuron.free_run(0b11, 0b10, 1) == 0b01
    assert awsneuron.free_run(0b11, 0b01, 2) is None
    assert awsneuron.free_run(0b1111, 0b0010, 2) == 0b1100


def test_core_tags_and_the_cores_in_use() -> None:
    # ours: a charge's cores as usage tags (what the atomic reserve re-checks), and Fit reading them
    tags = [awsneuron.core_tags(m) for m in (0, 0b01, 0b10, 0b11)]
    assert tags == [(), ("core=0",), ("core=1",), ("core=0", "core=1")]
    tagged = DeviceUsage(1, 0, 0b01, tags=(("core=0", 1),))
    assert awsneuron.tagged_cores(tagged) == 0b01 and awsneuron.cores_in_use(0b01, tagged) == 0b01
    # two pods recorded on core 0 of an Inferentia1 device (4 slots; an over-commit from before the tags): their
    # masks sum to 2, which read as a mask says core 1 is taken and core 0 free; the tags say core 0 is taken; Fit
    # takes both as taken, so no third pod joins core 0 and the device is full
    doubled = DeviceUsage(2, 0, 0b01 + 0b01, tags=(("core=0", 2),))
    assert awsneuron.cores_in_use(doubled.used_cores, doubled) == 0b11
    inf1 = dev("dev-0", count=4)
    assert reason(fit([inf1], req(1, 1), usage={"dev-0": doubled})) == "1/1 CardInsufficientCore"
    assert taken(fit([inf1, dev("dev-1", 1, count=4)], req(1, 1), usage={"dev-0": doubled})) == [("dev-1", 0b01)]
    assert miss([inf1], req(1, 1), {"dev-0": doubled})[1].endswith("the most free on n1 is 0 on dev-0")
    # pods recorded without tags (before this change): the sum of the masks, as before
    untagged = DeviceUsage(1, 0, 0b10)
    assert awsneuron.tagged_cores(untagged) == 0
    assert taken(fit([dev("dev-0")], req(1, 1), usage={"dev-0": untagged})) == [("dev-0", 0b01)]
    assert taken(fit([dev("dev-0")], req(1, 1), usage={"dev-0": tagged})) == [("dev-0", 0b10)]
    # a device whose tagged holder holds a core is not idle for a whole-device run either
    ring = [dev(f"d{i}", i, count=4, node_type="inf1.xlarge") for i in range(3)]
    held = {"d0": DeviceUsage(2, 0, 0b01 + 0b01, tags=(("core=0", 2),))}
    assert taken(fit(ring, req(2, 2), usage=held)) == [("d1", 0b11), ("d2", 0b11)]


def test_charges_carry_their_cores_as_tags_and_the_informer_records_them() -> None:
    # ours: the reservation's charge and the informer's record of the same pod are equal, tags and rule and all
    core0 = DeviceUsage(1, 0, 0b01, tags=(("core=0", 1),))
    got = fit([dev("dev-0"), dev("dev-1", 1)], req(1, 1), usage={"dev-0": core0})
    assert isinstance(got, Decision)
    (charge,) = got.charges  # every device scores 0: the last of the two, dev-1, its first core
    assert (charge.uuid, charge.cores_pct, charge.tags, charge.refuse_tags) == ("dev-1", 0b01, ("core=0",), ("core=0",))
    got = fit([dev("dev-0")], req(1, 1), usage={"dev-0": core0})
    assert isinstance(got, Decision)
    (charge,) = got.charges  # next to a tagged holder: the next core
    assert (charge.uuid, charge.cores_pct, charge.tags, charge.refuse_tags) == ("dev-0", 0b10, ("core=1",), ("core=1",))
    # two containers of one pod on one device (a core each), and a whole-device run
    inv = NodeInventory(node="n1", vendor=NAME, devices=(dev("n1-AWSNeuron-0", node_type="inf2.xlarge"),))
    pod = PodRequest(containers=(req(1, 1), req(1, 1)), init_count=0)
    two = plan(pod, PodConstraints(), [NodeSnapshot(inv, {})], policies=Policies(), rules=VENDORS.rules)
    assert isinstance(two, Decision)
    (shared,) = two.charges
    assert (shared.slots, shared.cores_pct, shared.tags) == (2, 0b11, ("core=0", "core=1"))
    assert shared.refuse_tags == shared.tags
    containers = [ctr({CORE: "1"}, name="a"), ctr({CORE: "1"}, name="b")]
    placed = {
        "metadata": {
            "uid": "u1",
            "namespace": "default",
            "name": "p",
            "annotations": {"hami.io/vgpu-node": "n1", awsneuron.ALLOCATED_KEY: V.encode_devices(two.devices)},
        },
        "spec": {"containers": containers},
    }
    recorded = pod_allocation(placed, {"n1-AWSNeuron-0": 0b11}, VENDORS.all)
    assert recorded is not None and recorded.charges == two.charges
    assert V.recorded_charge({}, DeviceCharge("d", 1, 0, 0b10)).tags == ("core=1",)


# ---- Test_checkType, Test_checkUUID --------------------------------------------------------------------------------


def test_check_type_and_uuid() -> None:
    rules = V.rules
    # Test_checkType "the same type" / "the different type"
    assert rules.type_ok(dev("d"), req(), PodConstraints())
    assert not rules.type_ok(dev("d"), req(kind="test111"), PodConstraints())

    def uuid_ok(annotations: dict[str, str], uuid: str) -> bool:
        return rules.uuid_ok(dev(uuid), decode_vendor_constraints(annotations, VENDORS))

    # Test_checkUUID (f23d1f5d): "no annos", "use id the same as device id", "use id the different from device
    # id", "no use id the same as device id", "no use id the different from device id"
    assert uuid_ok({}, "")
    assert uuid_ok({awsneuron.USE_UUID: "test1"}, "test1")
    assert not uuid_ok({awsneuron.USE_UUID: "test1"}, "test2")
    assert not uuid_ok({awsneuron.NOUSE_UUID: "test1"}, "test1")
    assert uuid_ok({awsneuron.NOUSE_UUID: "test1"}, "test2")


# ---- Test_graphSelect ----------------------------------------------------------------------------------------------


def ring(
    node_type: str, used: frozenset[int] | set[int] = frozenset(), n: int = 16
) -> tuple[list[DeviceInfo], frozenset[str]]:
    """HAMi's ``makeDeviceUsages``: 16 devices by index, the node type on them; the free ones' ids."""
    devices = [dev(f"dev-{i}", i, node_type=node_type) for i in range(n)]
    return devices, frozenset(d.id for d in devices if d.index not in used)


@pytest.mark.parametrize(
    ("node_type", "used", "nums", "want"),
    [
        ("inf2", set(), 16, list(range(16))),  # "full allocate"
        ("trn", {7, 13}, 8, None),  # "8 allocate fail": runs of 8 start at 0 or 8 only
        ("trn", {7}, 8, list(range(8, 16))),  # "8 allocate success"
        ("inf", {5, 14}, 8, list(range(6, 14))),  # "8 allocate": a ring run may start anywhere
    ],
)
def test_graph_select(node_type: str, used: set[int], nums: int, want: list[int] | None) -> None:
    devices, free = ring(node_type, used)
    got = contiguous_run(devices, free, nums)
    assert (None if got is None else [d.index for d in got]) == want


# ---- TestDevices_Fit, Test_Fit_WholeDeviceNotShared, TestMixedNodeGeometryAllocationWorkflow -----------------------


def test_fit_success() -> None:
    # "fit success": dev-0 (2 slots) and dev-1 (12 slots), both index 0, two cores asked: HAMi walks from the last
    # device and takes dev-1. A Neuron device has no memory, so the device score (HAMi's and ours) is 0 for every
    # one: ours walks equal devices from the last registered too (difference 8): dev-1
    got = fit([dev("dev-0", count=2), dev("dev-1", count=12)], req(1, 2))
    assert taken(got) == [("dev-1", 0b11)]
    # ours: with dev-0's cores in use, dev-1
    assert taken(fit([dev("dev-0"), dev("dev-1", count=12)], req(1, 2), usage={"dev-0": DeviceUsage(1, 0, 1)})) == [
        ("dev-1", 0b11)
    ]


@pytest.mark.parametrize(
    ("devices", "request_", "usage", "annotations", "want"),
    [
        # "fit fail: core not enough": one core of two in use, two asked
        ([dev("dev-0")], req(1, 2), {"dev-0": DeviceUsage(0, 0, 0b01)}, {}, "1/1 CardInsufficientCore"),
        # "fit fail: user assign use uuid mismatch"
        ([dev("dev-1")], req(1, 2), {}, {awsneuron.USE_UUID: "dev-0"}, "1/1 CardUuidMismatch"),
        # "fit fail: user assign no use uuid match"
        ([dev("dev-0")], req(1, 2), {}, {awsneuron.NOUSE_UUID: "dev-0"}, "1/1 CardUuidMismatch"),
        # "fit fail: card overused": 2 of 2 slots used
        ([dev("dev-0")], req(1, 2), {"dev-0": DeviceUsage(2)}, {}, "1/1 CardTimeSlicingExhausted"),
        # "mutex policy rejects used device"
        ([dev("dev-0")], req(1, 2), {"dev-0": DeviceUsage(1)}, MUTEX, "1/1 ExclusiveDeviceAllocateConflict"),
        # "fit fail: NumaNotFit with multiple devices": two Trainium devices, two asked (only 1, 4, 8, 16 form runs)
        ([dev("dev-0"), dev("dev-1", 1)], req(2, 2), {}, {}, "1/2 NumaNotFit"),
        # "fit fail: CardNotHealth"
        ([dev("dev-0", health=False)], req(1, 2), {}, {}, "1/1 CardNotHealth"),
        # "fit fail: memory not enough": two devices asked of a node with one: HAMi's scheduler counts the node's
        # devices before it calls Fit (the Go test calls Fit directly and gets "1/1 NumaNotFit")
        ([dev("dev-0")], req(2, 2), {}, {}, "NodeInsufficientDevice"),
    ],
)
def test_fit_failures(
    devices: list[DeviceInfo],
    request_: ContainerRequest,
    usage: dict[str, DeviceUsage],
    annotations: dict[str, str],
    want: str,
) -> None:
    assert reason(fit(devices, request_, usage=usage, annotations=annotations)) == want


def test_fit_type_mismatch() -> None:
    # "fit fail: type mismatch": a request of another type never reaches a Neuron device (no such vendor here)
    assert reason(fit([dev("dev-0")], req(kind="OtherType"))) == "NodeInsufficientDevice"
    assert not V.rules.type_ok(dev("dev-0"), req(kind="OtherType"), PodConstraints())


def test_whole_device_not_shared() -> None:
    # Test_Fit_WholeDeviceNotShared (7300c199): a four-core Inferentia1 device (mask capped at 3) taken whole by
    # count leaves no core for a two-core request
    inf1 = dev("node-AWSNeuron-0", count=4, mask=3, node_type="inf1.6xlarge")
    whole = V.container_request(ctr({COUNT: "1"}), "c")
    assert taken(fit([inf1], whole)) == [("node-AWSNeuron-0", 0b11)]
    after = {"node-AWSNeuron-0": DeviceUsage(1, 0, 0b11)}
    assert reason(fit([inf1], req(1, 2), usage=after)) == "1/1 CardInsufficientCore"
    # ours: the same with one core asked, and the free core is the one given when one is in use
    assert reason(fit([inf1], req(1, 1), usage=after)) == "1/1 CardInsufficientCore"
    assert taken(fit([inf1], req(1, 1), usage={"node-AWSNeuron-0": DeviceUsage(1, 0, 0b01)})) == [
        ("node-AWSNeuron-0", 0b10)
    ]


def test_multi_device_runs_through_the_core() -> None:
    # ours: a ring node gives the first free run in index order, whole devices (mask 3) in that order
    devices, _ = ring("inf2.48xlarge", n=6)
    used = {"dev-1": DeviceUsage(1, 0, 0b01)}
    assert taken(fit(devices, req(3, 2), usage=used)) == [("dev-2", 3), ("dev-3", 3), ("dev-4", 3)]
    # Trainium: four devices start on a multiple of four
    trn, _ = ring("trn1.32xlarge", n=16)
    got = taken(fit(trn, req(4, 2), usage={"dev-2": DeviceUsage(1, 0, 0b10)}))
    assert [u for u, _ in got] == ["dev-4", "dev-5", "dev-6", "dev-7"]


def test_mixed_node_geometry_allocation_workflow() -> None:
    # TestMixedNodeGeometryAllocationWorkflow: two cores of device 1 of a two-core node are cores "2,3"; of a
    # four-core node (stride 4) "4,5", whichever node registered first
    for node, want in (
        (capacity_node("inf2-node", 2, 4, "inf2.8xlarge"), "2,3"),
        (capacity_node("inf1-node", 2, 8, "inf1.6xlarge"), "4,5"),
    ):
        devices = registered(node)
        inventory = NodeInventory(node.name, NAME, devices)
        pod = {"spec": {"containers": [ctr({CORE: "2"}, name="inference")]}}
        request = V.container_request(pod["spec"]["containers"][0], "c")
        got = plan(
            PodRequest((request,), 0),
            PodConstraints(),
            [NodeSnapshot(inventory, {devices[0].id: DeviceUsage(1, 0, 0b11)})],
            policies=Policies(),
            rules=VENDORS.rules,
        )
        assert isinstance(got, Decision) and got.devices[0][0].uuid == devices[1].id
        annotations = allocation_annotations(node.name, got.devices, (), 1, VENDORS, pod=pod, inventory=inventory)
        assert annotations[awsneuron.ASSIGNED_IDS_KEY] == want


# ---- Test_PatchAnnotations, TestPatchAnnotationsKeepsLargeCoreIndexesPositive --------------------------------------


def patch(pod: dict[str, Any], devices: Any, inventory: NodeInventory | None, node: str = "n1") -> dict[str, str]:
    return allocation_annotations(node, devices, (), 1_700_000_000, VENDORS, pod=pod, inventory=inventory)


INV = NodeInventory("n1", NAME, (dev("n1-AWSNeuron-0", 0), dev("n1-AWSNeuron-1", 1)))


def test_patch_annotations_neuron_device() -> None:
    # "neuron device": a container asking 2 devices by count lists their indexes "0,1" (the Go case compares the
    # device list under the common word, a key nobody writes: we check the real key)
    pod = {"spec": {"containers": [ctr({COUNT: "2"})]}}
    devices = ((ContainerDevice("n1-AWSNeuron-0", 0, 3, NAME), ContainerDevice("n1-AWSNeuron-1", 0, 3, NAME)),)
    got = patch(pod, devices, INV)
    assert got[V.allocated_key] == "n1-AWSNeuron-0,AWSNeuron,0,3:n1-AWSNeuron-1,AWSNeuron,0,3:;"
    assert got[awsneuron.ASSIGNED_IDS_KEY] == "0,1"
    assert awsneuron.RESOURCE_TYPE_KEY not in got
    # the Go case's predicate node is "" (no node assigned in the test); ours is the node bound to, plus the time
    assert got[awsneuron.PREDICATE_NODE_KEY] == "n1"
    assert (got[awsneuron.ALLOC_TIME_KEY], got[awsneuron.ALLOCATED_FLAG_KEY]) == ("1700000000000000000", "false")
    assert "hami.io/mutex.lock" not in got and not any("to-allocate" in k for k in got if "aws" in k)


def test_patch_annotations_neuroncore_device() -> None:
    # "neuroncore device": two cores of device 0 → core indexes "0,1" and NEURON_RESOURCE_TYPE
    pod = {"spec": {"containers": [ctr({CORE: "2"})]}}
    got = patch(pod, ((ContainerDevice("n1-AWSNeuron-0", 0, 3, NAME),),), INV)
    assert got[V.allocated_key] == "n1-AWSNeuron-0,AWSNeuron,0,3:;"
    assert (got[awsneuron.ASSIGNED_IDS_KEY], got[awsneuron.RESOURCE_TYPE_KEY]) == ("0,1", CORE)
    # ours: the second core of device 1 of a two-core node is core 3
    got = patch(pod, ((ContainerDevice("n1-AWSNeuron-1", 0, 0b10, NAME),),), INV)
    assert got[awsneuron.ASSIGNED_IDS_KEY] == "3"


def test_patch_annotations_init_container() -> None:
    # "init container neuron device": the init container's device index; the app container (none) adds nothing
    pod = {"spec": {"initContainers": [ctr({COUNT: "1"}, name="init")], "containers": [ctr(name="app")]}}
    got = patch(pod, ((ContainerDevice("n1-AWSNeuron-0", 0, 3, NAME),), ()), INV)
    assert got[V.allocated_key] == "n1-AWSNeuron-0,AWSNeuron,0,3:;;"
    assert got[awsneuron.ASSIGNED_IDS_KEY] == "0"


def test_patch_annotations_large_core_indexes() -> None:
    # TestPatchAnnotationsKeepsLargeCoreIndexesPositive: 2^31-1 cores per device, cores 0b11 of device 1
    devices = registered(capacity_node("large-node", 2, (2**31 - 1) * 2, "test.neuron"))
    pod = {"spec": {"containers": [ctr({CORE: "2"}, name="inference")]}}
    got = patch(
        pod, ((ContainerDevice(devices[1].id, 0, 3, NAME),),), NodeInventory("large-node", NAME, devices), "large-node"
    )
    assert got[awsneuron.ASSIGNED_IDS_KEY] == "2147483647,2147483648"


def test_patch_annotations_needs_pod_and_inventory() -> None:
    # ours: the core indexes need the node's inventory, the kind of request the pod: never a guess
    pod = {"spec": {"containers": [ctr({CORE: "1"})]}}
    one = ((ContainerDevice("n1-AWSNeuron-0", 0, 1, NAME),),)
    with pytest.raises(DecodeError, match="inventory"):
        patch(pod, one, None)
    with pytest.raises(DecodeError, match="needs the pod"):
        V.bind_pod_annotations(None, INV, one, 1)
    # no Neuron device: nothing at all (a pod of another vendor)
    assert V.bind_pod_annotations(pod, INV, ((),), 1) == {}
    assert awsneuron.ALLOCATED_FLAG_KEY not in device_list_annotations(((),), VENDORS)


# ---- TestFit_DeviceCordon, TestFit_DeviceCordonMultiCardTopology ---------------------------------------------------


def test_fit_device_cordon() -> None:
    devices = [dev("dev-0", 0, count=2), dev("dev-1", 1, count=12)]
    # "cordoned device is skipped, healthy sibling still fits"
    assert taken(fit(devices, req(1, 2), cordoned=frozenset({"dev-1"}))) == [("dev-0", 3)]
    # "all devices cordoned fails with CardCordoned reason"
    assert reason(fit(devices, req(1, 2), cordoned=frozenset({"dev-0", "dev-1"}))) == "2/2 CardCordoned"
    # "no annotation or no node info means nothing cordoned": HAMi's backward walk takes dev-1, and so do we
    # (difference 8); both devices are candidates, so cordoning dev-0 alone gives dev-1 as well
    assert taken(fit(devices, req(1, 2))) == [("dev-1", 3)]
    assert taken(fit(devices, req(1, 2), cordoned=frozenset({"dev-0"}))) == [("dev-1", 3)]


def test_fit_device_cordon_multi_card_topology() -> None:
    devices, _ = ring("inf2")
    # "a run stepping over a cordoned device is rejected, the next run wins": dev-1..dev-4
    got = taken(fit(devices, req(4, 2), cordoned=frozenset({"dev-0"})))
    assert [u for u, _ in got] == ["dev-1", "dev-2", "dev-3", "dev-4"]
    # "all devices cordoned fails with CardCordoned rather than NumaNotFit"
    everything = frozenset(d.id for d in devices)
    assert reason(fit(devices, req(4, 2), cordoned=everything)) == "16/16 CardCordoned"
    # "nothing cordoned still reports NumaNotFit when no run exists": every fourth device in use
    used = {f"dev-{i}": DeviceUsage(1, 0, 0b01) for i in range(3, 16, 4)}
    assert reason(fit(devices, req(4, 2), usage=used)) == "1/16 NumaNotFit"


# ---- ours: explain's words for a Neuron refusal ----------------------------------------------------------------------


def miss(devices: list[DeviceInfo], request: ContainerRequest, usage: dict[str, DeviceUsage]) -> tuple[str, str]:
    """(reason, text) of ``explain``'s nearest miss for the refusal ``plan`` gives on node n1."""
    inv = NodeInventory(node="n1", vendor=NAME, devices=tuple(devices))
    snap = NodeSnapshot(inv, usage)
    pod = PodRequest(containers=(request,), init_count=0)
    got = plan(pod, PodConstraints(), [snap], policies=Policies(), rules=VENDORS.rules)
    assert isinstance(got, Failure)
    rejection = got.rejections["n1"]
    m = nearest_miss(pod, PodConstraints(), snap, rejection, policies=Policies(), rules=VENDORS.rules)
    return m.reason, m.text


def test_explain_counts_neuron_cores_and_names_the_run_rule() -> None:
    # the bit-0 core in use: one core free (the mask's value, 2, is not what is free)
    reason_, text = miss([dev("d0")], req(1, 2), {"d0": DeviceUsage(1, 0, 0b01)})
    assert reason_ == "CardInsufficientCore"
    assert text == "needs 2 NeuronCores in a row on one Neuron device; the most free on n1 is 1 on d0"
    # no run of two idle Trainium devices (two asked: Trainium gives 1, 4, 8 or 16)
    reason_, text = miss([dev("d0"), dev("d1", 1)], req(2, 2), {})
    assert reason_ == "NumaNotFit"
    assert text.startswith("needs 2 idle Neuron devices in a row by index (Trainium: 1, 4, 8 or 16 devices")
    assert text.endswith("n1 has 2 idle but no such run")
    # an Inferentia ring with the middle device busy
    ring3 = [dev(f"d{i}", i, node_type="inf2.xlarge") for i in range(3)]
    _, text = miss(ring3, req(2, 2), {"d1": DeviceUsage(1, 0, 0b01)})
    assert "(an Inferentia ring: any run); n1 has 2 idle but no such run" in text


# ---- ours: the webhook -----------------------------------------------------------------------------------------------


def _pod(*containers: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{**c, "image": "x"} for c in containers]},
    }


def test_the_webhook_sends_neuron_pods_to_us_and_denies_bad_core_counts() -> None:
    pod = _pod(ctr({CORE: "2"}))
    out = mutate_pod(
        pod, cfg=NvidiaConfig(), scheduler_name="vgpu", force_overwrite_default_scheduler=True, vendors=VENDORS
    )
    assert out.allowed, out.message
    assert any(op.get("path") == "/spec/schedulerName" and op.get("value") == "vgpu" for op in out.patch_ops)
    assert not any("resources" in str(op.get("path")) for op in out.patch_ops)  # HAMi edits no Neuron request
    bad = _pod(ctr({CORE: "3"}))
    out = mutate_pod(
        bad, cfg=NvidiaConfig(), scheduler_name="vgpu", force_overwrite_default_scheduler=True, vendors=VENDORS
    )
    assert not out.allowed and f"{CORE} must be 1 or a multiple of 2, got 3" in out.message


# ---- ours: the allocation gauges -------------------------------------------------------------------------------------


def test_allocation_gauges_of_a_neuron_device_carry_the_core_mask() -> None:
    devices = awsneuron.devices_from_capacity("n1", 2, 4, "inf2.xlarge")
    snaps = {"n1": NodeSnapshot(NodeInventory("n1", NAME, devices), {devices[1].id: DeviceUsage(1, 0, 0b10)})}
    registry = CollectorRegistry()
    registry.register(AllocationCollector(lambda: snaps, lambda: QuotaView({})))
    labels = {"node": "n1", "device_uuid": "n1-AWSNeuron-1", "device_index": "1", "device_type": NAME}
    labels |= {"vendor": NAME, "zone": "vGPU"}
    samples = {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for s in family.samples
    }
    assert samples[("hami_gpu_shared_count", frozenset(labels.items()))] == 1
    assert (
        samples[("hami_gpu_core_allocated_ratio", frozenset(labels.items()))] == 0b10
    )  # HAMi's mask, as HAMi shows it
    assert samples[("hami_gpu_memory_limit_bytes", frozenset(labels.items()))] == 0  # no device memory
