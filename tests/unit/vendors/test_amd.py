"""AMD vendor: every case of HAMi's ``pkg/device/amd`` tests restated, plus our own strictness cases.

The index holds no copy of these files at v2.10.0 (4707fb02). ``device_cordon_test.go`` is read at ad358d3a and
``device_alloctype_test.go`` at 52e15616. Of ``device_test.go`` two stored versions bracket v2.10.0, both with the
JSON register and the product type in the allocation, neither named by a commit in the index: an earlier one
(its device.go has no cordon yet; ``Test_MutateAdmission`` has "gpu memory only (no count) -> false",
``TestDevices_Fit`` "clamps a core request to the device total") and a later one (``GenerateResourceRequests``
returning an error, cores from the requests, "rejects an out of range core request", plus the RDNA ``cuPerWGP``
rounding, ``TestMemoryPercentage`` and ``TestPriority``, which came after v2.10.0 and are not restated). The
cases of both are restated: where they disagree the comment gives both answers and says which we follow.

| Go file | cases | restated | pass as HAMi expects | differences (listed) |
|---|---|---|---|---|
| device_test.go (both versions' cases, post-v2.10 features left out) | 53 | 53 | 46 | 7 |
| device_cordon_test.go | 4 | 4 | 4 | 0 |
| device_alloctype_test.go | 2 | 2 | 2 | 0 |

A case whose name or answer differs between the two versions counts once per version (``Test_MutateAdmission``
10, ``Test_GenerateResourceRequests`` 12, ``TestDevices_Fit`` 13; ``Test_GetNodeDevices``,
``Test_PatchAnnotations`` and ``Test_checkType`` 1 each; ``TestCheckAMDType`` 15).

The differences: the earlier version's "gpu memory only (no count) -> false" and "core percentage only (no
count) -> false" (ours: true, as the later version's "gpu memory in limits" and "core percentage in limits"; the
request is then refused); memory or cores without the count are refused where HAMi gives an empty request
(``Test_GenerateResourceRequests`` "no gpu limits -> empty", difference 21); a use type list of only commas is
refused at admission where HAMi matches no card (``TestCheckAMDType`` "use with only commas rejects card",
difference 22); a core request above 100 (or negative) built elsewhere is clamped as the earlier version's
"clamps a core request to the device total" expects, where the later version fails the container with "core
limit out of range" (its three "out of range" cases; with no AMD card, or only another family's, ours answers
``NodeInsufficientDevice``)."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest

from tests.unit.vendors.kit import NOW, Fit, reason
from vgpu_scheduler.shared.codec.envelope import decode_allocation, encode_allocation
from vgpu_scheduler.shared.domain.allocation import Allocation
from vgpu_scheduler.shared.domain.model import (
    MEM_PCT_UNSET,
    ContainerDevice,
    ContainerRequest,
    DeviceCharge,
    DeviceInfo,
    DeviceUsage,
    PodConstraints,
)
from vgpu_scheduler.shared.domain.plan import Decision, Failure
from vgpu_scheduler.shared.errors import ConfigError, DecodeError
from vgpu_scheduler.shared.vendors import amd
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

V = amd.build(None)[0]
VENDORS = Vendors((NvidiaVendor(), V))
fit = Fit(VENDORS)
TEST_NAMES = {"resourceMemoryName": "amd.com/gpu-mem", "resourceCoreName": "amd.com/gpu-core-pct"}
T = amd.build(TEST_NAMES)[0]
"""The resource names HAMi's tests configure."""


def ctr(
    limits: dict[str, Any] | None = None, requests: dict[str, Any] | None = None, name: str = "c"
) -> dict[str, Any]:
    return {"name": name, "resources": {"limits": limits or {}, "requests": requests or {}}}


def gpu(
    uuid: str,
    *,
    index: int = 0,
    count: int = 2,
    mem: int = 1000,
    core: int = 100,
    type: str = "AMD",
    health: bool = True,
) -> DeviceInfo:
    return DeviceInfo(uuid, index, count, mem, core, type, 0, "", health, vendor=amd.NAME)


def req(nums: int = 1, mem: int = 0, cores: int = 100) -> ContainerRequest:
    return ContainerRequest(nums=nums, mem_mib=mem, mem_pct=MEM_PCT_UNSET, cores_pct=cores, type=amd.NAME)


def entries(result: Decision | Failure) -> list[tuple[str, int, int]]:
    assert isinstance(result, Decision), result
    return [(d.uuid, d.used_mem_mib, d.used_cores) for d in result.devices[0]]


# ---- identity, config -------------------------------------------------------------------------------------------


def test_section_and_defaults() -> None:
    # the names and keys: test_contract.py
    assert amd.SECTION == "amd" and V.resources.memory_unit_mib == 1
    assert amd.build({}) == amd.build(None)


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"resourceCoreName": 3}, "amd.resourceCoreName: expected a string, got 3"),
        ({"resourceCountName": ""}, "amd.resourceCountName: must not be empty"),
        ({"memoryFactor": 2}, "amd.memoryFactor: unknown key"),
        ("amd.com/gpu", "amd: expected a mapping, got str"),
    ],
)
def test_config_errors_name_the_key(section: object, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        amd.build(section)


# ---- MutateAdmission --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("container", "ours"),
    [
        # Test_MutateAdmission, in order ("rejects zero core percentage" and "rejects core percentage above 100":
        # test_core_percentage_outside_1_to_100_is_refused)
        pytest.param(ctr({"amd.com/gpu": 2}), True, id="gpu count in limits"),
        # the later version's "gpu memory in limits" → true; the earlier one's "gpu memory only (no count) ->
        # false". Ours true (the pod is ours), and the request is then refused: memory needs the count
        pytest.param(ctr({"amd.com/gpu-mem": 1024}), True, id="gpu memory in limits"),
        # "core percentage in limits" → true (later); "core percentage only (no count) -> false" (earlier)
        pytest.param(ctr({"amd.com/gpu-core-pct": 50}), True, id="core percentage in limits"),
        pytest.param(ctr(requests={"amd.com/gpu": 1}), False, id="requests only (limits empty) -> false"),
        pytest.param(
            ctr({"amd.com/gpu": 1, "amd.com/gpu-mem": 1024}), True, id="accepts partial memory without a core pct"
        ),
        pytest.param(ctr(), False, id="no resources"),
    ],
)
def test_mutate(container: dict[str, Any], ours: bool) -> None:
    before = repr(container)
    assert T.mutate_container(container, "c") is ours
    assert repr(container) == before  # no edit


@pytest.mark.parametrize("cores", [0, 101, 150, 200])
def test_core_percentage_outside_1_to_100_is_refused(cores: int) -> None:
    # Test_MutateAdmission "rejects zero core percentage", "rejects core percentage above 100" ("must be an integer
    # percentage between 1 and 100"); Test_GenerateResourceRequests "rejects zero core percentage", "rejects
    # excessive core percentage" and the rejected half of "cores 1, 50, 100 accepted and out-of-range rejected"
    # (0, 101, 150, 200; -1, "50m" and "99.1" in test_request_refusals): refused with a message
    with pytest.raises(DecodeError, match=re.escape("amd.com/gpu-core-pct")):
        T.container_request(ctr({"amd.com/gpu": 1, "amd.com/gpu-core-pct": cores}), "c")


# ---- GenerateResourceRequests -----------------------------------------------------------------------------------


def test_request_count_and_memory_from_limits() -> None:
    # Test_GenerateResourceRequests "parses limits only" (the requests' 99s are ignored)
    limits = {"amd.com/gpu": 2, "amd.com/gpu-mem": 4096, "amd.com/gpu-core-pct": 33}
    requests = {"amd.com/gpu": 99, "amd.com/gpu-mem": 99, "amd.com/gpu-core-pct": 99}
    assert T.container_request(ctr(limits, requests), "c") == ContainerRequest(2, 4096, MEM_PCT_UNSET, 33, "AMD")


def test_request_defaults() -> None:
    # Test_GenerateResourceRequests "defaults an omitted core limit to 100 percent"; ours: no memory is the whole card
    assert T.container_request(ctr({"amd.com/gpu": 1, "amd.com/gpu-mem": 4096}), "c").cores_pct == 100
    assert T.container_request(ctr({"amd.com/gpu": 1}), "c") == ContainerRequest(1, 0, 100, 100, "AMD")
    # "uses core percentage from requests when limits omitted" (later version)
    got = T.container_request(ctr({"amd.com/gpu": 1}, {"amd.com/gpu-core-pct": 42}), "c")
    assert got.cores_pct == 42
    # the accepted half of "cores 1, 50, 100 accepted and out-of-range rejected"
    for cores in (1, 50, 100):
        assert T.container_request(ctr({"amd.com/gpu": 1, "amd.com/gpu-core-pct": cores}), "c").cores_pct == cores


def test_request_zero_count_is_device_less() -> None:
    # Test_GenerateResourceRequests "zero count is device-less, not invalid" (later), "rejects zero count" (earlier,
    # an empty request too)
    assert T.container_request(ctr({"amd.com/gpu": 0}), "c").empty
    assert T.container_request(ctr(), "c").empty


@pytest.mark.parametrize(
    ("limits", "fragment"),
    [
        # Test_GenerateResourceRequests "rejects overflowing count", "rejects negative memory", "rejects overflowing
        # memory" (later: an empty request and an "out of range" error; earlier: an empty request): refused
        ({"amd.com/gpu": 2**31}, "amd.com/gpu: 2147483648 is too large"),
        ({"amd.com/gpu": 1, "amd.com/gpu-mem": -1}, "amd.com/gpu-mem cannot be negative"),
        ({"amd.com/gpu": 1, "amd.com/gpu-mem": 2**31}, "amd.com/gpu-mem is in MiB"),
        ({"amd.com/gpu": 1, "amd.com/gpu-core-pct": "50m"}, "amd.com/gpu-core-pct must be a whole number"),
        ({"amd.com/gpu": 1, "amd.com/gpu-core-pct": "99.1"}, "amd.com/gpu-core-pct must be a whole number"),
        ({"amd.com/gpu": 1, "amd.com/gpu-core-pct": -1}, "cannot be negative"),
        # Test_GenerateResourceRequests "no gpu limits -> empty": HAMi gives an empty request (the pod runs without
        # a GPU); ours refuses it (difference 21)
        ({"amd.com/gpu-mem": 4096, "amd.com/gpu-core-pct": 33}, "amd.com/gpu-mem needs amd.com/gpu"),
        ({"amd.com/gpu": 0, "amd.com/gpu-mem": 4096}, "amd.com/gpu is 0 but amd.com/gpu-mem"),
    ],
)
def test_request_refusals(limits: dict[str, Any], fragment: str) -> None:
    with pytest.raises(DecodeError, match=re.escape(fragment)):
        T.container_request(ctr(limits), "c")


def test_request_count_or_memory_only_in_requests_is_refused() -> None:
    # HAMi reads them from the limits only and would silently ignore them
    with pytest.raises(DecodeError, match=re.escape("amd.com/gpu is read from the limits only")):
        T.container_request(ctr(requests={"amd.com/gpu": 1}), "c")
    with pytest.raises(DecodeError, match=re.escape("amd.com/gpu-mem is read from the limits only")):
        T.container_request(ctr({"amd.com/gpu": 1}, {"amd.com/gpu-mem": 10}), "c")


def test_manages() -> None:
    assert V.manages(ctr(requests={"amd.com/gpucores": 1}))
    assert not V.manages(ctr({"hygon.com/dcunum": 1}))


# ---- CheckType / CheckUUID --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotations", "card", "ok"),
    [
        # TestCheckAMDType, in order ("use with only commas rejects card": test_use_type_of_only_commas_is_refused)
        pytest.param({}, "MI300X", True, id="no annotations"),
        pytest.param({"amd.com/use-gputype": "MI300"}, "MI300X", True, id="matching use type"),
        pytest.param({"amd.com/use-gputype": "MI250"}, "MI300X", False, id="non-matching use type"),
        pytest.param({"amd.com/nouse-gputype": "MI300"}, "MI300X", False, id="matching nouse type excludes card"),
        pytest.param({"amd.com/nouse-gputype": "MI250"}, "MI300X", True, id="non-matching nouse type keeps card"),
        pytest.param({"amd.com/nouse-gputype": ""}, "MI300X", True, id="empty nouse annotation keeps card"),
        pytest.param({"amd.com/use-gputype": ""}, "MI300X", True, id="empty use annotation keeps card"),
        pytest.param({"amd.com/nouse-gputype": "   "}, "MI300X", True, id="whitespace-only nouse keeps card"),
        pytest.param({"amd.com/use-gputype": "   "}, "MI300X", True, id="whitespace-only use keeps card"),
        pytest.param({"amd.com/nouse-gputype": "MI250,"}, "MI300X", True, id="nouse with trailing comma"),
        pytest.param({"amd.com/nouse-gputype": ",MI250"}, "MI300X", True, id="nouse with leading comma"),
        pytest.param({"amd.com/nouse-gputype": " MI250 , "}, "MI250X", False, id="nouse with blank member"),
        pytest.param({"amd.com/nouse-gputype": ", "}, "MI300X", True, id="nouse with only commas keeps card"),
        pytest.param({"amd.com/use-gputype": "MI300,"}, "MI250X", False, id="use with trailing comma"),
        # ours: case-insensitive
        pytest.param({"amd.com/use-gputype": "mi300"}, "AMD-MI300X", True, id="lower case"),
    ],
)
def test_check_type(annotations: dict[str, str], card: str, ok: bool) -> None:
    dev = gpu("d", type=card)
    constraints = PodConstraints(vendor_selectors={"AMD": V.selectors(annotations)})
    assert amd.AMD_RULES.type_ok(dev, req(), constraints) is ok
    assert amd.AMD_RULES.type_ok(dev, ContainerRequest(1, type="other"), constraints) is False


def test_check_type_of_the_request() -> None:
    # Test_checkType: an AMD request on an "AMD-MI300X" card matches; with use-gputype MI250 the card is not
    # found; a request of type "other" never matches
    card = gpu("d", type="AMD-MI300X")
    assert amd.AMD_RULES.type_ok(card, req(), PodConstraints()) is True
    mi250 = PodConstraints(vendor_selectors={"AMD": V.selectors({"amd.com/use-gputype": "MI250"})})
    assert amd.AMD_RULES.type_ok(card, req(), mi250) is False
    assert amd.AMD_RULES.type_ok(card, ContainerRequest(1, type="other"), PodConstraints()) is False


def test_use_type_of_only_commas_is_refused() -> None:
    # TestCheckAMDType "use with only commas rejects card": HAMi matches no card; ours refuses the annotation with
    # a message (difference 22)
    with pytest.raises(DecodeError, match=re.escape("amd.com/use-gputype")):
        V.selectors({"amd.com/use-gputype": ", "})


# ---- Fit (HAMi's TestDevices_Fit, through the core) -------------------------------------------------------------


def test_two_whole_cards() -> None:
    # TestDevices_Fit "allocate two whole cards (memreq=0 uses totalmem; coresreq=0 uses totalcore when whole mem)":
    # dev-1 then dev-0, 1000 MiB and 100 units each
    devices = [gpu("dev-0"), gpu("dev-1", index=1, count=12)]
    # memory 0 takes the whole card; no core percentage with the whole memory takes every unit; the card with
    # more free slots comes first (spread), as in HAMi's expected order
    assert entries(fit(devices, req(2, 0, 0))) == [("dev-1", 1000, 100), ("dev-0", 1000, 100)]
    parsed = V.container_request(ctr({"amd.com/gpu": 2}), "c")
    assert entries(fit(devices, parsed)) == [("dev-1", 1000, 100), ("dev-0", 1000, 100)]


def test_core_percentage_maps_per_device() -> None:
    # TestDevices_Fit "core percentage maps per device": dev-0 (10 units, 2 slots), dev-1 (100 units, 12 slots),
    # 500 MiB and 50 % → dev-1, 50 units
    two = [gpu("dev-0", core=10), gpu("dev-1", index=1, count=12, core=100)]
    assert entries(fit(two, req(1, 500, 50))) == [("dev-1", 500, 50)]
    assert entries(fit([gpu("dev-1", core=100)], req(1, 500, 50))) == [("dev-1", 500, 50)]
    assert entries(fit([gpu("dev-0", core=10)], req(1, 500, 50))) == [("dev-0", 500, 5)]
    # CDNA: 5 % of 64 units is 3; "clamps a positive percentage to at least one CU" (1 % of 64 → 1)
    assert entries(fit([gpu("dev-0", core=64)], req(1, 100, 5))) == [("dev-0", 100, 3)]
    assert entries(fit([gpu("dev-0", core=64)], req(1, 100, 1))) == [("dev-0", 100, 1)]
    # partial memory without a core percentage takes no unit
    assert entries(fit([gpu("dev-0")], req(1, 100, 0))) == [("dev-0", 100, 0)]
    # "clamps a core request to the device total" (earlier version): 101 % of 64 units → 64
    assert entries(fit([gpu("dev-0", core=64)], req(1, 100, 101))) == [("dev-0", 100, 64)]


def test_core_request_out_of_range() -> None:
    # The later version's "rejects an out of range core request" (101, 150, 200, -1 on a 64-unit card), "empty
    # devices with invalid coresreq returns out of range" and "mismatched device type with invalid coresreq returns
    # out of range": HAMi fails with "core limit out of range". Ours clamps, as the earlier version's case above
    # expects (the change from cap to refusal came after v2.10.0 for the other families too, as far as the stored
    # copies show): a request built elsewhere is clamped to the card, a negative one takes no unit; parsed
    # requests never carry such a value (test_core_percentage_outside_1_to_100_is_refused)
    card = gpu("dev-0", core=64)
    for cores, units in ((101, 64), (150, 64), (200, 64), (-1, 0)):
        assert entries(fit([card], req(1, 100, cores))) == [("dev-0", 100, units)]
    assert reason(fit([], req(1, 100, 150))) == "NodeInsufficientDevice"
    other = DeviceInfo("other-0", 0, 1, 0, 0, "OtherType", 0, "", True, vendor="OtherType")
    assert reason(fit([other], req(1, 100, -1))) == "NodeInsufficientDevice"


@pytest.mark.parametrize(
    ("device", "asked", "usage", "annotations", "expected"),
    [
        # TestDevices_Fit "insufficient memory", "insufficient core", "uuid mismatch (use)", ours (nouse), "time
        # slicing exhausted", "unhealthy device is rejected"; then ours
        (gpu("dev-0"), req(1, 500, 10), DeviceUsage(0, 900, 0), {}, "1/1 CardInsufficientMemory"),
        (gpu("dev-0", core=10), req(1, 100, 100), DeviceUsage(0, 0, 9), {}, "1/1 CardInsufficientCore"),
        (gpu("dev-1"), req(1, 100, 10), DeviceUsage(), {"amd.com/use-gpu-uuid": "dev-0"}, "1/1 CardUuidMismatch"),
        (gpu("dev-0"), req(1, 100, 10), DeviceUsage(), {"amd.com/nouse-gpu-uuid": "dev-0"}, "1/1 CardUuidMismatch"),
        (gpu("dev-0"), req(1, 100, 10), DeviceUsage(2), {}, "1/1 CardTimeSlicingExhausted"),
        (gpu("dev-0", health=False), req(1, 100, 10), DeviceUsage(), {}, "1/1 CardNotHealth"),
        (
            gpu("dev-0", type="MI250X"),
            req(1, 100, 10),
            DeviceUsage(),
            {"amd.com/use-gputype": "MI300"},
            "1/1 CardTypeMismatch",
        ),
        (gpu("dev-0", core=0), req(1, 100, 10), DeviceUsage(), {}, "1/1 CardInsufficientCore"),
        (gpu("dev-0", core=0), req(1, 5000, 10), DeviceUsage(), {}, "1/1 CardInsufficientMemory"),
    ],
)
def test_fit_refusals(
    device: DeviceInfo, asked: ContainerRequest, usage: DeviceUsage, annotations: dict[str, str], expected: str
) -> None:
    assert reason(fit([device], asked, usage={device.id: usage}, annotations=annotations)) == expected


def test_whole_card_needs_an_idle_card() -> None:
    # a whole-card request (memory and units) does not fit next to a partial one
    assert reason(fit([gpu("dev-0")], req(1), usage={"dev-0": DeviceUsage(1, 100, 10)})) == "1/1 CardInsufficientMemory"


def cordon_of(value: str) -> frozenset[str]:
    """What the registrar keeps of a ``hami.io/device-cordon`` value on a node with dev-0 and dev-1."""
    register = '[{"id":"dev-0","index":0,"count":100,"health":true},{"id":"dev-1","index":1,"count":100,"health":true}]'
    got = V.observe(node({amd.REGISTER_KEY: register, "hami.io/device-cordon": value}), NOW)
    assert isinstance(got, Registered)
    return got.inventory.cordoned


def test_fit_cordon() -> None:
    # TestFit_DeviceCordon: two cards of 1000 MiB and 100 units, 500 MiB and 50 % asked
    devices = [gpu("dev-0", count=100), gpu("dev-1", index=1, count=100)]
    asked = req(1, 500, 50)
    # "cordoned device is skipped, healthy sibling still fits" (the annotation "dev-1, ")
    assert entries(fit(devices, asked, cordoned=cordon_of("dev-1, "))) == [("dev-0", 500, 50)]
    # "all devices cordoned fails with CardCordoned reason"
    assert reason(fit(devices, asked, cordoned=cordon_of("dev-0,dev-1"))) == "2/2 CardCordoned"
    # "running pods on a cordoned device are unaffected"
    used = {"dev-1": DeviceUsage(1, 500, 50)}
    assert entries(fit(devices, asked, usage=used, cordoned=cordon_of("dev-1"))) == [("dev-0", 500, 50)]
    assert used["dev-1"] == DeviceUsage(1, 500, 50)
    # "no annotation or no node info means nothing cordoned" (none, "", "   "): dev-1, the last, as HAMi
    for value in ("", "   "):
        assert cordon_of(value) == frozenset()
    assert entries(fit(devices, asked)) == [("dev-1", 500, 50)]
    assert entries(fit(devices, req(1, 64, 50), cordoned=frozenset({"dev-0"}))) == [("dev-1", 64, 50)]


def test_fit_retains_the_registered_product_type_in_the_allocation() -> None:
    # TestDevices_Fit "retains the registered product type in the allocation": the device entry's type is the
    # card's registered type; the entry stays keyed by the common word (HAMi: tmpDevs[k.Type])
    got = fit([gpu("dev-0", count=2, mem=1000, type="AMD_Instinct_MI300X_VF")], req(1, 100, 10))
    assert isinstance(got, Decision)
    [[entry]] = got.devices
    assert (entry.type, entry.shown_type) == ("AMD", "AMD_Instinct_MI300X_VF")
    written = V.encode_devices(got.devices)
    assert written == "dev-0,AMD_Instinct_MI300X_VF,100,10:;"
    assert V.decode_devices(written) == (*got.devices, ())  # what the informer reads back is what was planned
    # a registration without a product type: HAMi falls back to the common word
    plain = fit([gpu("dev-0", type="AMD")], req(1, 100, 10))
    assert isinstance(plain, Decision) and V.encode_devices(plain.devices) == "dev-0,AMD,100,10:;"


def test_fit_empty_registered_type_stays_decodable() -> None:
    # device_alloctype_test.go Test_Fit_EmptyRegisteredTypeStaysDecodable: a card registered with type "" → the
    # entry's type is AMD, and what is written decodes back to the same card
    got = fit([gpu("GPU-amd-0", count=10, mem=8192, type="")], req(1, 4096, 100))
    assert isinstance(got, Decision)
    written = V.encode_devices(got.devices)
    assert written == "GPU-amd-0,AMD,4096,100:;"
    [[entry]] = V.decode_devices(written)[:1]
    assert (entry.uuid, entry.type, entry.shown_type) == ("GPU-amd-0", "AMD", "")


def test_fit_registered_product_type_preserved() -> None:
    # device_alloctype_test.go Test_Fit_RegisteredProductTypePreserved: "AMD Instinct MI300X" is written as is
    got = fit([gpu("GPU-amd-0", count=10, mem=8192, type="AMD Instinct MI300X")], req(1, 4096, 100))
    assert isinstance(got, Decision)
    assert got.devices[0][0].shown_type == "AMD Instinct MI300X"
    assert V.encode_devices(got.devices) == "GPU-amd-0,AMD Instinct MI300X,4096,100:;"


def test_the_written_type_survives_the_reservation_record() -> None:
    # /filter's reservation is read back by whichever replica binds: the product type travels with it
    entry = ContainerDevice("dev-0", 100, 10, amd.NAME, shown_type="AMD_Instinct_MI300X_VF")
    alloc = Allocation("uid", "ns", "p", "n1", ((entry,),), (DeviceCharge("dev-0", 1, 100, 10, False),))
    assert decode_allocation(encode_allocation(alloc)) == alloc
    plain = dataclasses.replace(alloc, devices=((dataclasses.replace(entry, shown_type=""),),))
    assert b"shown_type" not in encode_allocation(plain)  # records without it keep their bytes


# ---- registration and liveness ----------------------------------------------------------------------------------

REGISTER = '[{"id":"GPU-0","index":0,"count":1,"devmem":8192,"devcore":100,"type":"amd","numa":0,"health":true}]'


def node(annotations: dict[str, str], allocatable: dict[str, Any] | None = None) -> NodeView:
    return NodeView("node-1", "1", annotations, allocatable if allocatable is not None else {"amd.com/gpu": "1"})


def test_register_decodes_json() -> None:
    # Test_GetNodeDevices: the JSON register, type "amd" kept, vendor AMD ("annos not found": test_not_registered)
    got = V.observe(node({amd.REGISTER_KEY: REGISTER}), NOW)
    assert isinstance(got, Registered)
    (d,) = got.inventory.devices
    assert (d.id, d.type, d.devmem_mib, d.devcore, d.health, d.vendor) == ("GPU-0", "amd", 8192, 100, True, "AMD")
    assert got.inventory.vendor == "AMD"
    assert (got.handshake, got.legacy) == (None, False)


def test_register_ignores_hami_only_keys() -> None:
    value = '[{"id":"a","count":1,"health":true,"devicevendor":"AMD","custominfo":{"cuPerWGP":2}}]'
    got = V.observe(node({amd.REGISTER_KEY: value}), NOW)
    assert isinstance(got, Registered) and got.inventory.devices[0].id == "a"


@pytest.mark.parametrize(
    ("annotations", "allocatable", "expected"),
    [
        ({}, None, NotRegistered(Unregistered.ABSENT)),
        ({amd.REGISTER_KEY: "[]"}, None, NotRegistered(Unregistered.NO_DEVICES)),
        ({amd.REGISTER_KEY: REGISTER}, {}, NotRegistered(Unregistered.NO_ALLOCATABLE)),
        ({amd.REGISTER_KEY: REGISTER}, {"amd.com/gpu": "0"}, NotRegistered(Unregistered.NO_ALLOCATABLE)),
    ],
)
def test_not_registered(
    annotations: dict[str, str], allocatable: dict[str, Any] | None, expected: NotRegistered
) -> None:
    assert V.observe(node(annotations, allocatable), NOW) == expected


@pytest.mark.parametrize("value", ["GPU-0,1,8192,100,AMD,0,true:", "[{", '[{"id":"a"},{"id":"a"}]'])
def test_register_invalid(value: str) -> None:
    got = V.observe(node({amd.REGISTER_KEY: value}), NOW)
    assert isinstance(got, Invalid)
    assert (got.failure, got.source) == (DecodeFailure.REGISTER, amd.REGISTER_KEY)
    assert got.error.what.startswith(amd.REGISTER_KEY)


def test_no_handshake_is_written() -> None:
    got = V.observe(node({amd.REGISTER_KEY: REGISTER, "hami.io/node-handshake-amd": "Requesting_x"}), NOW)
    assert isinstance(got, Registered) and got.handshake is None


def test_registration_roundtrip_and_capacity() -> None:
    devices = (gpu("GPU-0", count=4, mem=8192), gpu("GPU-1", index=1, count=4, mem=8192))
    annotations = amd.registration_annotations(devices)
    capacity = amd.node_capacity(devices)
    assert capacity == {"amd.com/gpu": "8"}
    got = V.observe(node({**annotations, "hami.io/device-cordon": "GPU-1"}, capacity), NOW)
    assert isinstance(got, Registered)
    assert got.inventory.devices == devices
    assert got.inventory.cordoned == frozenset({"GPU-1"})


# ---- pod annotations --------------------------------------------------------------------------------------------


def test_pod_device_list() -> None:
    # Test_PatchAnnotations: two cards of one container, the same value under both keys
    devices = ((ContainerDevice("test1", 100, 3, "AMD"), ContainerDevice("test2", 200, 4, "AMD")),)
    assert V.encode_devices(devices) == "test1,AMD,100,3:test2,AMD,200,4:;"
    assert device_list_annotations(devices, Vendors((NvidiaVendor(), V))) == {
        "hami.io/amd-devices-to-allocate": "test1,AMD,100,3:test2,AMD,200,4:;",
        "hami.io/amd-devices-allocated": "test1,AMD,100,3:test2,AMD,200,4:;",
    }
    assert V.decode_devices("test1,AMD,100,3:test2,AMD,200,4:;") == (*devices, ())
    with pytest.raises(DecodeError, match=re.escape("hami.io/amd-devices-allocated")):
        V.decode_devices("test1,,100,3:;")
