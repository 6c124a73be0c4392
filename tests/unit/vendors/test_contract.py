"""The contract every vendor keeps, run once per vendor the catalog builds (:func:`all_vendors`, HAMi's defaults).

Each vendor is checked through the public :class:`~shared.vendors.base.Vendor` interface and the catalog against
its row of :data:`FACTS` (config section and enable flag, resource names, annotation keys, lock, selector keys: the
names HAMi uses): requests (a count-only request, memory and cores where the family has them, bad quantities
refused naming the resource), fit and refusal reasons through the shared fit (a card too small, an unhealthy card,
type and UUID selectors), selectors decoding, the pod device list round trip, and a node with no registration. A
family's own behaviour (templates, QoS, topology, HAMi's own test tables) stays in its own file; a new family adds a
row here and its file."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from tests.unit.vendors.kit import NOW, Fit, ctr, reason, uuids
from vgpu_scheduler.shared.codec.resources import ResourceRequestError
from vgpu_scheduler.shared.domain.model import ContainerDevice, ContainerRequest, DeviceInfo, MigProfile, NvidiaConfig
from vgpu_scheduler.shared.domain.plan import Decision, Failure
from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.vendors.base import NodeLockKind, Vendor
from vgpu_scheduler.shared.vendors.catalog import BUILDERS, FAMILIES, all_vendors, enabled_vendors
from vgpu_scheduler.shared.vendors.registration import NodeView, NotRegistered, Unregistered

VENDORS = all_vendors()
fit = Fit(VENDORS)

NONE = NodeLockKind.NONE


@dataclass(frozen=True)
class Facts:
    """One vendor's wire names and the few numbers its generic cases need."""

    count: str
    memory: str | None = None
    cores: str | None = None
    _: dataclasses.KW_ONLY
    section: str | None
    """The family's key in the device config file (None: NVIDIA, which is no family of the catalog)."""
    flag: str | None = None
    """HAMi's flag that enables the family (None: on by default)."""
    keys: tuple[str | None, str | None, str | None, str]
    """(register, handshake, to-allocate, allocated) annotation keys."""
    lock: NodeLockKind = NodeLockKind.HAMI
    uuid_keys: tuple[str, str] | None = None
    """The (use, nouse) UUID selector annotations; None: the family has no UUID selector."""
    type_keys: tuple[str, str] | None = None
    """The (use, nouse) type selector annotations, where the family has them."""
    per_count: int = 1
    """Devices one unit of the count resource asks for (Ascend 910C: a pair)."""
    card_mem: int = 16384
    """The memory of a card a count-only request fits on."""
    unhealthy: str = "CardNotHealth"
    """The reason of an unhealthy card, as the family's HAMi ``Fit`` words it."""
    card: Callable[[str, int, bool], DeviceInfo] | None = None
    """A card of the family other than the common ``DeviceInfo`` (uuid, index, health)."""
    too_big: str | None = None
    """A memory quantity one card of ``card_mem`` cannot hold, where the memory resource is read."""
    sized_alone: bool = False
    """Memory and cores are asked without the count resource (Enflame: the count asks for a DRS profile by size,
    memory and cores for the smallest profile holding them)."""


def _hami(cw: str, register: str, handshake: str | None) -> tuple[str | None, str | None, str | None, str]:
    return (register, handshake, f"hami.io/{cw}-devices-to-allocate", f"hami.io/{cw}-devices-allocated")


def _ascend(chip: str, *, per_count: int = 1, capacity_mib: int = 65536) -> Facts:
    keys = _hami(chip, f"hami.io/node-register-{chip}", f"hami.io/node-handshake-{chip}")
    uuid_keys = (f"hami.io/use-{chip}-uuid", f"hami.io/no-use-{chip}-uuid")
    too_big = None if per_count > 1 else str(capacity_mib)  # a slice is a single-device request
    return Facts(f"huawei.com/{chip}", f"huawei.com/{chip}-memory", f"huawei.com/{chip}-core", section="vnpus",
                 flag="enable-ascend", keys=keys,
                 uuid_keys=uuid_keys, per_count=per_count, too_big=too_big)  # fmt: skip


def _iluvatar(chip: str) -> Facts:
    keys = _hami(chip, f"hami.io/node-{chip}-register", f"hami.io/node-handshake-{chip}")
    uuid_keys = (f"hami.io/use-{chip}-uuid", f"hami.io/no-use-{chip}-uuid")
    return Facts(f"iluvatar.ai/{chip}-vgpu", f"iluvatar.ai/{chip}.vMem", f"iluvatar.ai/{chip}.vCore",
                 section="iluvatars", flag="enable-iluvatar", keys=keys,
                 uuid_keys=uuid_keys, too_big="128")  # fmt: skip  # units of 256 MiB


def _drs_card(uuid: str, index: int, health: bool) -> DeviceInfo:
    """An Enflame card of one 6 GiB DRS profile (as ``enflame.com/gcu-drs-capacity`` registers it)."""
    profile = MigProfile(name="1g.6gb=0", memory_mib=6144, core_pct=100, slice_count=1, placements=())
    return DeviceInfo(uuid, index, 6, 6144, 100, "Enflame", 0, f"drs/{index}", health, (profile,), vendor="Enflame")


FACTS: dict[str, Facts] = {
    "NVIDIA": Facts("nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores", section=None,
                    keys=("hami.io/node-nvidia-register", "hami.io/node-handshake", "hami.io/vgpu-devices-to-allocate",
                          "hami.io/vgpu-devices-allocated"),
                    uuid_keys=("nvidia.com/use-gpuuuid", "nvidia.com/nouse-gpuuuid"),
                    type_keys=("nvidia.com/use-gputype", "nvidia.com/nouse-gputype"), too_big="32768"),
    "DCU": Facts("hygon.com/dcunum", "hygon.com/dcumem", "hygon.com/dcucores", section="hygon",
                 keys=_hami("dcu", "hami.io/node-dcu-register", "hami.io/node-handshake-dcu"),
                 uuid_keys=("hygon.com/use-gpuuuid", "hygon.com/nouse-gpuuuid"),
                 type_keys=("hygon.com/use-dcutype", "hygon.com/nouse-dcutype"), too_big="32768"),
    "MLU": Facts("cambricon.com/vmlu", "cambricon.com/mlu.smlu.vmemory", "cambricon.com/mlu.smlu.vcore",
                 section="cambricon",
                 keys=(None, None, "hami.io/cambricon-mlu-devices-to-allocate",
                       "hami.io/cambricon-mlu-devices-allocated"),
                 lock=NodeLockKind.CAMBRICON, uuid_keys=("cambricon.com/use-gpuuuid", "cambricon.com/nouse-gpuuuid"),
                 type_keys=("cambricon.com/use-mlutype", "cambricon.com/nouse-mlutype"),
                 too_big="128"),  # units of 256 MiB
    "AMD": Facts("amd.com/gpu", "amd.com/gpumem", "amd.com/gpucores", section="amd",
                 keys=_hami("amd", "hami.io/node-amd-register", None),
                 uuid_keys=("amd.com/use-gpu-uuid", "amd.com/nouse-gpu-uuid"),
                 type_keys=("amd.com/use-gputype", "amd.com/nouse-gputype"), too_big="32768"),
    **{chip: _ascend(chip) for chip in ("Ascend910B2", "Ascend910B3", "Ascend910B4-1")},
    **{chip: _ascend(chip, capacity_mib=32768) for chip in ("Ascend910A", "Ascend910B4")},
    "Ascend310P": _ascend("Ascend310P", capacity_mib=24576),
    "Ascend910C": _ascend("Ascend910C", per_count=2),
    **{chip: _iluvatar(chip) for chip in ("MR-V100", "MR-V50", "BI-V150", "BI-V100")},
    "Biren": Facts("birentech.com/gpu", section="biren",
                   keys=_hami("Biren", "hami.io/node-biren-register", "hami.io/node-handshake-biren"),
                   uuid_keys=("birentech.com/use-gpuuuid", "birentech.com/nouse-gpuuuid")),
    "Vastai": Facts("vastaitech.com/va", section="vastai",
                    keys=_hami("Vastai", "hami.io/node-va-register", "hami.io/node-handshake-va"),
                    uuid_keys=("vastaitech.com/use-gpuuuid", "vastaitech.com/nouse-gpuuuid")),
    "Mthreads": Facts("mthreads.com/vgpu", "mthreads.com/sgpu-memory", "mthreads.com/sgpu-core", section="mthreads",
                      keys=(None, None, None, "hami.io/mthreads-vgpu-devices-allocated"), lock=NONE,
                      uuid_keys=("mthreads.ai/use-gpuuuid", "mthreads.ai/nouse-gpuuuid"),
                      too_big="64"),  # units of 512 MiB, one of the sGPU sizes
    "Metax-GPU": Facts("metax-tech.com/gpu", section="metax", lock=NONE,
                       keys=(None, None, "hami.io/metax-gpu-devices-to-allocate",
                             "hami.io/metax-gpu-devices-allocated")),
    "Metax-SGPU": Facts("metax-tech.com/sgpu", "metax-tech.com/vmemory", "metax-tech.com/vcore", section="metax",
                        keys=("metax-tech.com/node-gpu-devices", None, "hami.io/metax-sgpu-devices-to-allocate",
                              "hami.io/metax-sgpu-devices-allocated"),
                        uuid_keys=("metax-tech.com/use-gpuuuid", "metax-tech.com/nouse-gpuuuid"), too_big="32",  # GiB
                        unhealthy="CardUnhealthy"),
    "GCU": Facts("enflame.com/gcu", section="enflame", lock=NONE,
                 keys=(None, None, "hami.io/enflame-gcu-devices-to-allocate", "hami.io/enflame-gcu-devices-allocated")),
    "Enflame": Facts("enflame.com/drs-gcu", "enflame.com/gcu-memory", "enflame.com/gcu-core", section="enflame",
                     keys=("enflame.com/gcu-drs-capacity", None, None, "hami.io/enflame-vgpu-devices-allocated"),
                     lock=NONE, uuid_keys=("enflame.com/use-gpuuuid", "enflame.com/nouse-gpuuuid"), card=_drs_card,
                     sized_alone=True),
    "AWSNeuron": Facts("aws.amazon.com/neuron", section="awsneuron",
                       keys=(None, None, None, "hami.io/aws-neuron-devices-allocated"), lock=NONE,
                       uuid_keys=("aws.amazon.com/use-neuron-uuid", "aws.amazon.com/nouse-neuron-uuid")),
    "kunlun": Facts("kunlunxin.com/xpu", section="kunlun", keys=(None, None, None, "hami.io/kunlun-allocated"),
                    lock=NONE, uuid_keys=("hami.io/use-xpu-uuid", "hami.io/no-use-xpu-uuid")),
    "XPU": Facts("kunlunxin.com/vxpu", "kunlunxin.com/vxpu-memory", section="kunlun",
                 keys=_hami("xpu", "hami.io/node-register-xpu", "hami.io/node-handshake-xpu"),
                 uuid_keys=("hami.io/use-xpu-uuid", "hami.io/no-use-xpu-uuid"), card_mem=98304),
}  # fmt: skip

NAMES = list(FACTS)


def vendor(name: str) -> Vendor:
    found = VENDORS.get(name)
    assert found is not None, name
    return found


def one_of(name: str) -> dict[str, Any]:
    """A container asking for one unit of the vendor's count resource only."""
    return ctr({FACTS[name].count: "1"})


def cards(name: str, *, health: bool = True, mem: int | None = None) -> list[DeviceInfo]:
    """As many cards as one unit of the count asks for, each able to hold the count-only request."""
    f = FACTS[name]
    if f.card is not None:
        return [f.card(f"dev-{i}", i, health) for i in range(f.per_count)]
    size = f.card_mem if mem is None else mem
    return [DeviceInfo(f"dev-{i}", i, 10, size, 100, name, 0, "", health, vendor=name) for i in range(f.per_count)]


def refusal(name: str, why: str) -> str:
    """The node's reason when every card of :func:`cards` is refused for ``why``."""
    n = FACTS[name].per_count
    return f"{n}/{n} {why}"


def count_only(name: str) -> ContainerRequest:
    return vendor(name).container_request(one_of(name), "c")


def test_facts_cover_every_vendor_the_catalog_builds() -> None:
    assert sorted(FACTS) == sorted(v.name for v in VENDORS)


# ---- names and keys ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_resource_names_and_annotation_keys(name: str) -> None:
    f, v = FACTS[name], vendor(name)
    assert v.name == name
    assert (v.resources.count, v.resources.memory, v.resources.cores) == (f.count, f.memory, f.cores)
    assert {f.count, f.memory, f.cores} - {None} <= v.resources.all
    assert (v.register_key, v.handshake_key, v.to_allocate_key, v.allocated_key) == f.keys
    assert v.node_lock is f.lock


@pytest.mark.parametrize("name", NAMES)
def test_config_section_and_enabling(name: str) -> None:
    f = FACTS[name]
    families = [family for family in FAMILIES if name in {v.name for v in family.build(None)}]
    if f.section is None:
        assert not families  # NVIDIA: always on, configured by its own options
    else:
        (family,) = families
        assert (f.section, f.flag) == (family.SECTION, family.ENABLE_FLAG) and BUILDERS[f.section] == family.build
    # on by default (no device config, no flag), or only with its HAMi flag
    assert (name in enabled_vendors(NvidiaConfig()).names) is (f.flag is None)
    assert name in enabled_vendors(NvidiaConfig(), None, {f.flag} if f.flag else ()).names


# ---- requests ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_count_only_request(name: str) -> None:
    v = vendor(name)
    got = count_only(name)
    assert (got.nums, got.type) == (FACTS[name].per_count, name)
    assert v.manages(one_of(name)) and v.mutate_container(one_of(name), "c")
    # a container naming none of the vendor's resources asks it for nothing
    assert v.container_request(ctr({"example.com/other": "1"}), "c").empty
    assert not v.manages(ctr({"example.com/other": "1"}))


def sized(name: str, sizes: dict[str, str]) -> dict[str, Any]:
    """A container asking for one device of the vendor with these memory / cores quantities."""
    f = FACTS[name]
    return ctr(sizes if f.sized_alone else {f.count: "1", **sizes})


@pytest.mark.parametrize("name", [n for n in NAMES if FACTS[n].cores])
def test_cores_are_read(name: str) -> None:
    cores = FACTS[name].cores
    assert cores
    got = vendor(name).container_request(sized(name, {cores: "50"}), "c")
    assert (got.nums, got.cores_pct, got.type) == (FACTS[name].per_count, 50, name)


@pytest.mark.parametrize("name", [n for n in NAMES if FACTS[n].too_big])
def test_memory_is_read(name: str) -> None:
    f = FACTS[name]
    assert f.memory and f.too_big
    got = vendor(name).container_request(sized(name, {f.memory: f.too_big}), "c")
    assert (got.nums, got.type) == (1, name) and got.mem_mib > f.card_mem


@pytest.mark.parametrize("value", ["-1", "abc", "0.5"])
@pytest.mark.parametrize("name", NAMES)
def test_a_bad_count_is_refused_naming_it(name: str, value: str) -> None:
    count = FACTS[name].count
    with pytest.raises(ResourceRequestError, match=re.escape(count)):
        vendor(name).container_request(ctr({count: value}), "c")


@pytest.mark.parametrize("name", NAMES)
def test_a_fractional_count_says_what_to_write(name: str) -> None:
    # the family's share resources, each once, or a whole count when it has none (no blank name)
    with pytest.raises(ResourceRequestError) as e:
        vendor(name).container_request(ctr({FACTS[name].count: "0.5"}), "c")
    text = str(e.value)
    assert "  " not in text and not text.rstrip().endswith((" or", "with"))
    if " with " in text:
        shares = re.findall(r"[\w.-]+/[\w.-]+", text.split(" with ", 1)[1])
        assert shares and len(shares) == len(set(shares)), text
    elif "counts whole" in text:  # the shared reader (others have their own words)
        assert text.endswith("did you mean 1?"), text


BAD_SIZES = [(n, f.memory, "abc") for n, f in FACTS.items() if f.memory] + [
    (n, f.cores, "-5") for n, f in FACTS.items() if f.cores
]


@pytest.mark.parametrize(("name", "resource", "value"), BAD_SIZES)
def test_a_bad_size_is_refused_naming_it(name: str, resource: str, value: str) -> None:
    with pytest.raises(ResourceRequestError, match=re.escape(resource)):
        vendor(name).container_request(sized(name, {resource: value}), "c")


# ---- fit and refusals through the shared fit --------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_a_count_only_request_fits_idle_cards(name: str) -> None:
    got = fit(cards(name), count_only(name))
    assert sorted(uuids(got)) == [f"dev-{i}" for i in range(FACTS[name].per_count)]


@pytest.mark.parametrize("name", NAMES)
def test_an_unhealthy_card_is_refused(name: str) -> None:
    assert reason(fit(cards(name, health=False), count_only(name))) == refusal(name, FACTS[name].unhealthy)


@pytest.mark.parametrize("name", [n for n in NAMES if FACTS[n].too_big])
def test_a_card_too_small_is_refused(name: str) -> None:
    f = FACTS[name]
    assert f.memory and f.too_big
    asked = vendor(name).container_request(sized(name, {f.memory: f.too_big}), "c")
    assert reason(fit(cards(name, mem=16384), asked)) == refusal(name, "CardInsufficientMemory")


def selected(name: str, annotations: dict[str, str], devices: list[DeviceInfo] | None = None) -> Decision | Failure:
    """The count-only request on :func:`cards` (or ``devices``) for a pod with these annotations."""
    return fit(devices or cards(name), count_only(name), annotations=annotations)


@pytest.mark.parametrize("name", [n for n in NAMES if FACTS[n].uuid_keys])
def test_uuid_selectors(name: str) -> None:
    f = FACTS[name]
    assert f.uuid_keys
    use, nouse = f.uuid_keys
    every = ",".join(f"dev-{i}" for i in range(f.per_count))
    # a use list naming other cards, or a nouse list naming these, leaves no card; a use list naming them keeps them
    assert reason(selected(name, {use: "other"})) == reason(selected(name, {nouse: every}))
    assert reason(selected(name, {use: "other"})) == refusal(name, "CardUuidMismatch")
    assert len(uuids(selected(name, {use: every}))) == f.per_count
    # both lists apply, for every family (HAMi's CheckUUID): a card named in both is never used, whether the lists
    # are the same, overlap on the card, or overlap elsewhere; disjoint lists keep the use list's cards
    mismatch = refusal(name, "CardUuidMismatch")
    assert reason(selected(name, {use: every, nouse: every})) == mismatch
    assert reason(selected(name, {use: f"{every},other", nouse: f"other,{every}"})) == mismatch
    assert len(uuids(selected(name, {use: f"{every},other", nouse: "other"}))) == f.per_count
    assert len(uuids(selected(name, {use: every, nouse: "other"}))) == f.per_count


@pytest.mark.parametrize("name", [n for n in NAMES if FACTS[n].type_keys])
def test_type_selectors(name: str) -> None:
    types = FACTS[name].type_keys
    assert types
    typed = [dataclasses.replace(c, type=f"{name}-X100") for c in cards(name)]
    # types match as upper-cased substrings
    assert reason(selected(name, {types[0]: "y200"}, typed)) == refusal(name, "CardTypeMismatch")
    assert reason(selected(name, {types[1]: "x100"}, typed)) == refusal(name, "CardTypeMismatch")
    assert uuids(selected(name, {types[0]: "x100"}, typed)) == ["dev-0"]


# ---- selectors decoding -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_selectors_decode(name: str) -> None:
    f, v = FACTS[name], vendor(name)
    assert v.selectors({}) == v.selectors({"example.com/use-gpuuuid": "a"})  # other annotations are not read
    assert not (v.selectors({}).use_uuids or v.selectors({}).nouse_uuids)
    if f.uuid_keys:
        use, nouse = f.uuid_keys
        got = v.selectors({use: " a, b ", nouse: "c"})
        assert (got.use_uuids, got.nouse_uuids) == (frozenset({"a", "b"}), frozenset({"c"}))
        assert v.selectors({use: "  ", nouse: " "}) == v.selectors({})  # a blank list is no constraint
        with pytest.raises(DecodeError, match=re.escape(use)):  # a use list naming nothing would match no card
            v.selectors({use: " , "})
    if f.type_keys:
        use, nouse = f.type_keys
        got = v.selectors({use: "a100, v100", nouse: "t4"})
        assert (got.use_types, got.nouse_types) == (("A100", "V100"), ("T4",))


# ---- the pod's device list --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_device_list_round_trip(name: str) -> None:
    v = vendor(name)
    devices = (
        (ContainerDevice("dev-0", 1024, 30, name),),
        (ContainerDevice("dev-1", 0, 0, name), ContainerDevice("dev-2", 10, 0, name)),
    )
    decoded = v.decode_devices(v.encode_devices(devices))
    # entries are not yet aligned to the pod's containers: what follows the given ones is empty
    assert decoded[: len(devices)] == devices and not any(decoded[len(devices) :])


# ---- registration -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_a_node_without_registration_is_not_registered(name: str) -> None:
    got = vendor(name).observe(NodeView("n1", "1", {}, {}), NOW)
    assert isinstance(got, NotRegistered) and got.reason is Unregistered.ABSENT
