"""Huawei Ascend NPUs (HAMi's ``pkg/device/ascend``): one vendor per chip entry of the device config's ``vnpus:``.

Each entry (``commonWord`` ``Ascend910A``, ``Ascend910B2``, ``Ascend910B3``, ``Ascend910B4``, ``Ascend310P``,
``Ascend910C`` …) is its own vendor with its own keys, all built from the common word ``<cw>``:

* resources ``huawei.com/<chip>`` (count), ``huawei.com/<chip>-memory`` (MiB × ``memoryFactor``) and
  ``huawei.com/<chip>-core`` (named by the config);
* registration ``hami.io/node-register-<cw>`` (the device plugin's JSON device list, with an optional
  ``custominfo.NetworkID`` per NPU) and handshake ``hami.io/node-handshake-<cw>``;
* pod device lists ``hami.io/<cw>-devices-to-allocate`` / ``hami.io/<cw>-devices-allocated`` (the NVIDIA
  ``UUID,Type,mem,cores:`` format) and the plugin's runtime list ``huawei.com/<cw>``
  (:meth:`AscendVendor.runtime_info`);
* UUID selectors ``hami.io/use-<cw>-uuid`` / ``hami.io/no-use-<cw>-uuid``; HAMi's node lock ``hami.io/mutex.lock``.

vNPU templates: a memory request is rounded up to the smallest template that holds it (its memory is what the
device entry records; the template's AI cores are the device plugin's business, the entry records 0 cores); a
request above every template but within ``memoryCapacity`` takes ``memoryAllocatable`` (the whole card); no
memory at all takes 100 % of the card's registered memory. vNPU slices are single-device: several NPUs in one
container are whole cards.

Multi-NPU choice (``DeviceRules.select``): on an ``Ascend910*`` chip whose NPUs all report a ``NetworkID``, the
NPUs are taken from the largest network first; ``Ascend910C`` NPUs come in modules of two (index // 2) and a
multi-NPU request takes whole modules only. The 910C super-pod placement, eNPU and the ``hami-core`` soft-split
mode are not implemented (a core request is refused, see docs/vendors/ascend.md).

Pure: no I/O. The NetworkID of each NPU travels in ``NodeInventory.pair_scores`` (see :func:`network_groups`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from fractions import Fraction
from typing import Any, Final

from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec._go import (
    INT32_MAX,
    INT64_MAX,
    INT64_MIN,
    JsonFraction,
    dump_array,
    dump_object,
    dump_str,
    each,
    fail,
    json_list,
    json_map_pairs,
    loads,
    struct_fields,
)
from vgpu_scheduler.shared.codec.poddevices import decode_pod_devices, encode_pod_devices
from vgpu_scheduler.shared.codec.quantity import parse_quantity
from vgpu_scheduler.shared.codec.register import device_from_fields
from vgpu_scheduler.shared.codec.resources import (
    ResourceRequestError,
    container_label,
    container_lists,
    decimal_text,
    names_any,
    raw_value,
    shown_value,
)
from vgpu_scheduler.shared.codec.selectors import decode_cordon, decode_uuid_list
from vgpu_scheduler.shared.domain.model import (
    EMPTY_REQUEST,
    MEM_PCT_UNSET,
    ContainerDevice,
    ContainerRequest,
    DeviceInfo,
    NodeInventory,
    PodConstraints,
    PodDevices,
    Selectors,
)
from vgpu_scheduler.shared.domain.vendor import Take, fit_mem_mib, selectors_uuid_ok
from vgpu_scheduler.shared.errors import ConfigError, DecodeError
from vgpu_scheduler.shared.vendors.base import NodeLockKind, ResourceNames
from vgpu_scheduler.shared.vendors.registration import (
    HANDSHAKE_TIMEOUT_S,
    DecodeFailure,
    HandshakeState,
    Invalid,
    NodeView,
    NotRegistered,
    Observation,
    Registered,
    Unregistered,
    judge_handshake,
)

SECTION: Final = "vnpus"
"""The device-config section of the Ascend chips (HAMi: ``vnpus:``); ``--enable-ascend`` enables them."""

ENABLE_FLAG: Final[str | None] = "enable-ascend"
"""Opt-in: HAMi's ``--enable-ascend`` enables it (``shared.vendors.catalog``)."""

ASCEND910_PREFIX = "Ascend910"
"""Common words starting with this get the network-aware multi-NPU choice (HAMi's ``Ascend910Prefix``)."""
ASCEND910C = "Ascend910C"
"""The 910C: two NPUs per module, multi-NPU requests take whole modules."""
NETWORK_ID = "NetworkID"
"""The ``custominfo`` key of an NPU's HCCS network in the registration."""
NPUS_PER_910C_MODULE = 2
VNPU_MODE_ANNOTATION = "huawei.com/vnpu-mode"
PREDICATE_TIME = "predicate-time"
"""Pod annotation HAMi writes at bind for Ascend pods (Unix seconds): Huawei's device plugins find the pod by it."""
"""HAMi's pod annotation for the ``hami-core`` soft-split mode (not supported here)."""
VISIBLE_DEVICES_ENV = "ASCEND_VISIBLE_DEVICES"

_COMMON_WORD_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")
_BINARY_SUFFIX = re.compile(r"(?P<mantissa>.*?)(?P<suffix>[KMGTPE]i)\Z")
_MIB = 2**20


# ------------------------------------------------------------------------------------------------------------
# Configuration (one ``vnpus`` entry)
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Template:
    """A vNPU template: ``name`` (what the device plugin creates), its memory in MiB and its AI cores / CPUs."""

    name: str
    memory_mib: int
    ai_core: int = 0
    ai_cpu: int = 0


@dataclass(frozen=True, slots=True)
class ChipConfig:
    """One ``vnpus`` entry. ``templates`` are sorted by memory, ascending (HAMi sorts them at start-up)."""

    common_word: str
    chip_name: str
    resource_name: str
    resource_memory_name: str
    resource_core_name: str
    memory_allocatable: int
    memory_capacity: int
    memory_factor: int = 1
    ai_core: int = 0
    ai_cpu: int = 0
    templates: tuple[Template, ...] = ()
    super_pod: bool = False
    overwrite_env: bool = False
    runtime_class_name: str = ""

    def trim_memory(self, mib: int) -> tuple[int, str]:
        """HAMi's ``trimMemory``: (memory taken, template name). The smallest template holding ``mib``; else the
        whole card (``memoryAllocatable``, no template) when ``mib ≤ memoryCapacity``; else ``(0, "")``."""
        for t in self.templates:
            if mib <= t.memory_mib:
                return t.memory_mib, t.name
        if mib <= self.memory_capacity:
            return self.memory_allocatable, ""
        return 0, ""

    @property
    def is_910(self) -> bool:
        return self.common_word.startswith(ASCEND910_PREFIX)


def _chip(
    cw: str,
    chip: str,
    memory: tuple[int, int],
    ai: tuple[int, int],
    templates: tuple[Template, ...],
    *,
    super_pod: bool = False,
) -> ChipConfig:
    """A chart default: ``memory`` is (allocatable, capacity), ``ai`` is (aiCore, aiCPU)."""
    res = f"huawei.com/{cw}"
    (alloc, cap), (ai_core, ai_cpu) = memory, ai
    return ChipConfig(
        common_word=cw,
        chip_name=chip,
        resource_name=res,
        resource_memory_name=f"{res}-memory",
        resource_core_name=f"{res}-core",
        memory_allocatable=alloc,
        memory_capacity=cap,
        ai_core=ai_core,
        ai_cpu=ai_cpu,
        templates=templates,
        super_pod=super_pod,
    )


_T16_5 = Template("vir05_1c_16g", 16384, 5, 1)
_T32_10 = Template("vir10_3c_32g", 32768, 10, 3)

DEFAULT_CHIPS: tuple[ChipConfig, ...] = (
    _chip(
        "Ascend910A",
        "910A",
        (32768, 32768),
        (30, 0),
        (
            Template("vir02", 2184, 2),
            Template("vir04", 4369, 4),
            Template("vir08", 8738, 8),
            Template("vir16", 17476, 16),
        ),
    ),
    _chip(
        "Ascend910B2",
        "910B2",
        (65536, 65536),
        (24, 6),
        (
            Template("vir03_1c_8g", 8192, 3, 1),
            Template("vir06_1c_16g", 16384, 6, 1),
            Template("vir12_3c_32g", 32768, 12, 3),
        ),
    ),
    _chip("Ascend910B3", "910B3", (65536, 65536), (20, 7), (_T16_5, _T32_10)),
    _chip("Ascend910B4-1", "910B4-1", (65536, 65536), (20, 7), (_T16_5, _T32_10)),
    _chip(
        "Ascend910B4",
        "910B4",
        (32768, 32768),
        (20, 7),
        (Template("vir05_1c_8g", 8192, 5, 1), Template("vir10_3c_16g", 16384, 10, 3)),
    ),
    _chip(
        "Ascend310P",
        "310P3",
        (21527, 24576),
        (8, 7),
        (Template("vir01", 3072, 1, 1), Template("vir02", 6144, 2, 2), Template("vir04", 12288, 4, 4)),
    ),
    _chip("Ascend910C", "Ascend910", (65536, 65536), (20, 7), (_T16_5, _T32_10), super_pod=True),
)
"""The chart's default ``vnpus.configs`` (``charts/hami/templates/scheduler/device-configmap.yaml``)."""


# ------------------------------------------------------------------------------------------------------------
# Fit hooks
# ------------------------------------------------------------------------------------------------------------


def network_groups(inventory: NodeInventory, vendor: str) -> dict[str, frozenset[str]] | None:
    """Each of ``vendor``'s NPUs on the node → the UUIDs of its network (itself included), or None when some NPU
    reported no ``NetworkID`` (HAMi then chooses greedily).

    :meth:`AscendVendor.observe` records the NetworkIDs as ``pair_scores[a][b] = 1`` for every pair ``a, b`` of
    NPUs in one network, ``a == b`` included, so a row exists exactly for the NPUs that reported one.
    """
    out: dict[str, frozenset[str]] = {}
    for d in inventory.devices:
        if d.vendor != vendor:
            continue
        row = inventory.pair_scores.get(d.id)
        if row is None or d.id not in row:
            return None
        out[d.id] = frozenset(row)
    return out


def _by_network(candidates: Sequence[DeviceInfo], nums: int, groups: Mapping[str, frozenset[str]]) -> list[DeviceInfo]:
    """HAMi's ``computeBestCombination``: candidates grouped by network, largest group first (ties: the group of
    the more preferred candidate first), taken in order until ``nums``."""
    order: dict[frozenset[str], list[DeviceInfo]] = {}
    for d in candidates:
        order.setdefault(groups.get(d.id, frozenset({d.id})), []).append(d)
    ranked = sorted(order.values(), key=len, reverse=True)  # stable: first-seen order breaks ties
    out: list[DeviceInfo] = []
    for group in ranked:
        for d in group:
            out.append(d)
            if len(out) == nums:
                return out
    return out


def _by_module(candidates: Sequence[DeviceInfo], nums: int) -> list[DeviceInfo] | None:
    """910C: whole modules (NPUs ``2m`` and ``2m+1``) only, in order of their most preferred NPU."""
    if nums % NPUS_PER_910C_MODULE:
        return None
    modules: dict[int, list[DeviceInfo]] = {}
    for d in candidates:
        modules.setdefault(d.index // NPUS_PER_910C_MODULE, []).append(d)
    out: list[DeviceInfo] = []
    for members in modules.values():
        if len(members) == NPUS_PER_910C_MODULE:
            out.extend(members)
            if len(out) == nums:
                return out
    return None


@dataclass(frozen=True, slots=True)
class AscendRules:
    """Ascend's part of ``Fit`` (HAMi ``Devices.Fit`` in ``pkg/device/ascend/device.go``).

    The skeleton is the common one: a device is a candidate when registered by this chip's vendor, the type must
    equal the common word (HAMi's ``checkType``; there are no type selectors), the UUID selectors are the chip's
    own, cores above 100 are clamped. ``Ascend910*`` chips choose multi-NPU sets (:meth:`select`); ``Ascend310P``
    walks greedily.
    """

    chip: ChipConfig

    @property
    def name(self) -> str:
        return self.chip.common_word

    def candidate(self, dev: DeviceInfo, req: ContainerRequest) -> bool:
        del req
        return dev.vendor == self.chip.common_word

    def normalize(self, req: ContainerRequest) -> ContainerRequest:
        """Cores above 100 are clamped (HAMi's ``Fit``). Memory is not rounded here: the request parser already
        rounded it to a template, and HAMi's ``Fit`` takes the request's memory as it is."""
        if req.cores_pct > 100:
            return ContainerRequest(req.nums, req.mem_mib, req.mem_pct, 100, req.type)
        return req

    def type_ok(self, dev: DeviceInfo, req: ContainerRequest, constraints: PodConstraints) -> bool:
        del dev, constraints
        return req.type == self.chip.common_word

    def uuid_ok(self, dev: DeviceInfo, constraints: PodConstraints) -> bool:
        return selectors_uuid_ok(dev, constraints.selectors(self.chip.common_word))

    def take(self, dev: DeviceInfo, req: ContainerRequest, used_mem_mib: int) -> Take:
        del used_mem_mib
        return Take(fit_mem_mib(req, dev.devmem_mib), req.cores_pct)

    @property
    def selects_sets(self) -> bool:
        return self.chip.is_910

    def select(
        self, candidates: Sequence[DeviceInfo], nums: int, inventory: NodeInventory
    ) -> Sequence[DeviceInfo] | None:
        if len(candidates) < nums or nums <= 0:
            return None
        if nums == 1:
            return candidates[:1]
        if self.chip.common_word == ASCEND910C:
            return _by_module(candidates, nums)
        groups = network_groups(inventory, self.chip.common_word)
        if groups is None or len(candidates) == nums:
            return candidates[:nums]
        return _by_network(candidates, nums, groups)

    def score_node(self, inventory: NodeInventory) -> float:
        del inventory
        return 0.0


# ------------------------------------------------------------------------------------------------------------
# Registration: hami.io/node-register-<cw>
# ------------------------------------------------------------------------------------------------------------

_DEVICE_FIELDS = (
    "id",
    "index",
    "count",
    "devmem",
    "devcore",
    "type",
    "numa",
    "mode",
    "health",
    "devicevendor",
    "custominfo",
)


@dataclass(frozen=True, slots=True)
class RegisteredNpu:
    """One NPU of the registration: the device, and its ``custominfo.NetworkID`` when reported."""

    device: DeviceInfo
    network_id: int | None = None


def _network_id(v: Any, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int | JsonFraction):
        fail(what, "expected a number")
    if isinstance(v, JsonFraction):
        try:
            q = Fraction(v.text)
        except ValueError:
            fail(what, "not a number", v.text)
        if q.denominator != 1:
            fail(what, "not a whole number", v.text)
        v = q.numerator
    if not INT64_MIN <= v <= INT64_MAX:
        fail(what, "out of range", str(v))
    return int(v)


def _npu_from_json(obj: Any, what: str, vendor: str) -> RegisteredNpu:
    if obj is None:
        fail(what, "null device entry")
    f = struct_fields(obj, _DEVICE_FIELDS, what)
    network: int | None = None
    if "custominfo" in f:
        for key, val in json_map_pairs(f["custominfo"], f"{what}.custominfo"):
            if key == NETWORK_ID:
                network = _network_id(val, f"{what}.custominfo.{NETWORK_ID}")
    dev = device_from_fields(f, what, vendor=vendor)
    return RegisteredNpu(dev, network)


def decode_registration(value: str, vendor: str) -> tuple[RegisteredNpu, ...]:
    """The JSON device list of ``hami.io/node-register-<vendor>`` (HAMi's ``UnMarshalNodeDevices``: keys matched
    case-insensitively, unknown keys ignored). Every device gets ``vendor`` (HAMi sets ``DeviceVendor`` so).
    An empty or duplicate ``id`` is a DecodeError (per-device state is keyed by it)."""
    what = register_key(vendor)
    doc = loads(value, what)
    npus: tuple[RegisteredNpu, ...] = each(json_list(doc, what), what, lambda o, w: _npu_from_json(o, w, vendor))
    seen: set[str] = set()
    for i, n in enumerate(npus):
        if n.device.id == "":
            fail(what, f"device {i} has an empty id")
        if n.device.id in seen:
            fail(what, f"device id {n.device.id!r} is listed twice", n.device.id)
        seen.add(n.device.id)
    return npus


def encode_registration(devices: Sequence[DeviceInfo], network_ids: Mapping[str, int] | None = None) -> str:
    """The device plugin's JSON (Go ``json.Marshal`` of HAMi's ``DeviceInfo``: ``omitempty`` on every key, keys
    ``id,index,count,devmem,devcore,type,numa,mode,health,devicevendor,custominfo``)."""
    nets = network_ids or {}
    items = []
    for d in devices:
        pairs: list[tuple[str, str]] = []
        net = nets.get(d.id)
        for key, val, present in (
            ("id", dump_str(d.id), d.id != ""),
            ("index", str(d.index), d.index != 0),
            ("count", str(d.count), d.count != 0),
            ("devmem", str(d.devmem_mib), d.devmem_mib != 0),
            ("devcore", str(d.devcore), d.devcore != 0),
            ("type", dump_str(d.type), d.type != ""),
            ("numa", str(d.numa), d.numa != 0),
            ("mode", dump_str(d.mode), d.mode != ""),
            ("health", "true", d.health),
            ("devicevendor", dump_str(d.vendor), d.vendor != ""),
            ("custominfo", dump_object([(NETWORK_ID, str(net))]), net is not None),
        ):
            if present:
                pairs.append((key, val))
        items.append(dump_object(pairs))
    return dump_array(items)


def _pair_scores(npus: Sequence[RegisteredNpu]) -> dict[str, dict[str, int]]:
    members: dict[int, list[str]] = {}
    for n in npus:
        if n.network_id is not None:
            members.setdefault(n.network_id, []).append(n.device.id)
    return {uuid: dict.fromkeys(ids, 1) for ids in members.values() for uuid in ids}


def register_key(common_word: str) -> str:
    return f"hami.io/node-register-{common_word}"


def handshake_key(common_word: str) -> str:
    return f"hami.io/node-handshake-{common_word}"


def format_reported(now_local: datetime) -> str:
    """What HAMi's Ascend device plugin writes on the handshake key: ``Reported_<2006.01.02 15:04:05>``."""
    return f"Reported_{now_local:%Y.%m.%d %H:%M:%S}"


def registration_annotations(
    devices: Sequence[DeviceInfo],
    *,
    network_ids: Mapping[str, int] | None = None,
    reported_at: datetime | None = None,
) -> dict[str, str]:
    """What HAMi's Ascend device plugin writes on a Node: per chip (``DeviceInfo.vendor``), the register annotation
    and, when ``reported_at`` is given, the handshake ``Reported_…`` (the inverse of :meth:`AscendVendor.observe`)."""
    by_vendor: dict[str, list[DeviceInfo]] = {}
    for d in devices:
        by_vendor.setdefault(d.vendor, []).append(d)
    out: dict[str, str] = {}
    for vendor, devs in by_vendor.items():
        out[register_key(vendor)] = encode_registration(devs, network_ids)
        if reported_at is not None:
            out[handshake_key(vendor)] = format_reported(reported_at)
    return out


def node_capacity(devices: Sequence[DeviceInfo], resource_names: Mapping[str, str] | None = None) -> dict[str, str]:
    """The count resource per chip (``huawei.com/<cw>`` unless ``resource_names`` maps the common word), valued
    at the sum of the chip's NPU ``count`` (vNPU slots)."""
    names = resource_names or {}
    totals: dict[str, int] = {}
    for d in devices:
        name = names.get(d.vendor, f"huawei.com/{d.vendor}")
        totals[name] = totals.get(name, 0) + d.count
    return {k: str(v) for k, v in totals.items()}


# ------------------------------------------------------------------------------------------------------------
# Requests
# ------------------------------------------------------------------------------------------------------------


class _Reader:
    """Reads one container's Ascend resources, collecting every problem."""

    def __init__(self, chip: ChipConfig, label: str) -> None:
        self.chip = chip
        self.label = label
        self.problems: list[str] = []

    def problem(self, text: str) -> None:
        self.problems.append(f"{self.label}: {text}")

    def read(self, raw: Any, name: str, *, memory: bool) -> int | None:
        """A whole, non-negative, int32 value (None when refused; the refusal is recorded)."""
        try:
            q = parse_quantity(raw, name)
        except DecodeError:
            self.problem(f"{name}: {shown_value(raw)} is not a number; {self._hint(name, memory)}")
            return None
        if q < 0:
            self.problem(f"{name} cannot be negative: got {shown_value(raw)}; {self._hint(name, memory)}")
            return None
        binary = _BINARY_SUFFIX.match(raw.strip()) if isinstance(raw, str) else None
        if memory and binary is not None:
            mib = math.floor(q / (_MIB * max(self.chip.memory_factor, 1)))
            mean = f"; did you mean {mib}?" if mib >= 1 else f"; {self._hint(name, memory)}"
            self.problem(f"{name} is in {self._unit()}: {shown_value(raw)} would be {decimal_text(q)}{mean}")
            return None
        if binary is not None:
            self.problem(f"{name} counts NPUs and takes no unit: {shown_value(raw)} would be {decimal_text(q)} NPUs")
            return None
        if q.denominator != 1:
            self.problem(
                f"{name} must be a whole number: {shown_value(raw)} is {decimal_text(q)}; did you mean {math.ceil(q)}?"
            )
            return None
        if q > INT32_MAX:
            self.problem(f"{name}: {shown_value(raw)} is too large (at most {INT32_MAX}); {self._hint(name, memory)}")
            return None
        return q.numerator

    def _unit(self) -> str:
        factor = max(self.chip.memory_factor, 1)
        return "MiB" if factor == 1 else f"units of {factor} MiB (memoryFactor {factor})"

    def _hint(self, name: str, memory: bool) -> str:
        if memory:
            return f"write a whole number of {self._unit()}, e.g. {name}: {self._example()}"
        return f"write a whole number of NPUs, e.g. {name}: 1"

    def _example(self) -> int:
        t = self.chip.templates[0].memory_mib if self.chip.templates else self.chip.memory_allocatable
        return max(t // max(self.chip.memory_factor, 1), 1)


@dataclass(frozen=True, slots=True)
class _Parsed:
    request: ContainerRequest
    count_raw_nums: int
    """The count as written (before the 910C round-up), 0 when absent."""
    memory_given: bool


# ------------------------------------------------------------------------------------------------------------
# The vendor
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AscendVendor:
    """One Ascend chip (one ``vnpus`` entry) as every process sees it."""

    chip: ChipConfig
    handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S
    _rules: AscendRules = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_rules", AscendRules(self.chip))

    @property
    def name(self) -> str:
        return self.chip.common_word

    @property
    def resources(self) -> ResourceNames:
        c = self.chip
        return ResourceNames(
            count=c.resource_name,
            memory=c.resource_memory_name or None,
            cores=c.resource_core_name or None,
            memory_unit_mib=max(c.memory_factor, 1),
        )

    @property
    def rules(self) -> AscendRules:
        return self._rules

    @property
    def to_allocate_key(self) -> str:
        return f"hami.io/{self.name}-devices-to-allocate"

    @property
    def allocated_key(self) -> str:
        return f"hami.io/{self.name}-devices-allocated"

    @property
    def register_key(self) -> str:
        return register_key(self.name)

    @property
    def handshake_key(self) -> str:
        return handshake_key(self.name)

    @property
    def use_uuid_key(self) -> str:
        return f"hami.io/use-{self.name}-uuid"

    @property
    def no_use_uuid_key(self) -> str:
        return f"hami.io/no-use-{self.name}-uuid"

    @property
    def runtime_key(self) -> str:
        """The plugin's runtime list annotation ``huawei.com/<cw>`` (see :meth:`runtime_info`)."""
        return f"huawei.com/{self.name}"

    @property
    def node_lock(self) -> NodeLockKind:
        return NodeLockKind.HAMI

    # ---- requests ------------------------------------------------------------------------------------------

    def manages(self, container: Mapping[str, Any]) -> bool:
        return names_any(container, self.resources.all)

    def container_request(self, container: Mapping[str, Any], what: str) -> ContainerRequest:
        return self._parse(container, what).request

    def _parse(self, container: Mapping[str, Any], what: str) -> _Parsed:
        c = self.chip
        limits, requests = container_lists(container, what)
        r = _Reader(c, container_label(container, what))
        count_given, count_raw = raw_value(limits, requests, c.resource_name)
        mem_given, mem_raw = raw_value(limits, requests, c.resource_memory_name)
        core_given, core_raw = raw_value(limits, requests, c.resource_core_name)
        n = r.read(count_raw, c.resource_name, memory=False) if count_given else None
        mem = r.read(mem_raw, c.resource_memory_name, memory=True) if mem_given else None
        core = r.read(core_raw, c.resource_core_name, memory=False) if core_given else None
        if core:
            r.problem(
                f"{c.resource_core_name} asks for {core} AI-core percent: that is HAMi's hami-core soft split "
                f"({VNPU_MODE_ANNOTATION}: hami-core), which this scheduler does not support; remove it and ask "
                f"for {c.resource_memory_name} (a vNPU template) or whole NPUs"
            )
        if r.problems:
            raise ResourceRequestError(r.problems)
        if not count_given:
            if mem_given or core_given:
                named = c.resource_memory_name if mem_given else c.resource_core_name
                r.problem(f"{named} needs {c.resource_name}, the number of NPUs: add {c.resource_name}: 1")
                raise ResourceRequestError(r.problems)
            return _Parsed(EMPTY_REQUEST, 0, False)
        assert n is not None
        if n == 0:
            if mem_given:
                r.problem(
                    f"{c.resource_name} is 0 but {c.resource_memory_name} asks for NPU memory: set "
                    f"{c.resource_name} to the number of NPUs (e.g. 1) or remove {c.resource_memory_name}"
                )
                raise ResourceRequestError(r.problems)
            return _Parsed(EMPTY_REQUEST, 0, False)
        nums = n
        if c.common_word == ASCEND910C:
            if n == 1:
                nums = NPUS_PER_910C_MODULE
            elif n % NPUS_PER_910C_MODULE:
                r.problem(
                    f"{c.resource_name}: an {ASCEND910C} module holds {NPUS_PER_910C_MODULE} NPUs, so ask for 1 "
                    f"(one module) or an even number, not {n}"
                )
        mem_mib = 0
        if mem is not None:
            mem_mib = self._template_memory(r, mem, nums)
        if r.problems:
            raise ResourceRequestError(r.problems)
        pct = MEM_PCT_UNSET if mem_mib else 100
        return _Parsed(ContainerRequest(nums, mem_mib, pct, 0, c.common_word), n, mem_given)

    def _template_memory(self, r: _Reader, mem: int, nums: int) -> int:
        c = self.chip
        name = c.resource_memory_name
        if mem == 0:
            r.problem(f"{name} is 0: omit it for whole NPUs, or ask for the MiB a vNPU needs")
            return 0
        mib = mem * max(c.memory_factor, 1)
        trimmed, _ = c.trim_memory(mib)
        if trimmed == 0:
            r.problem(
                f"{name}: {mib} MiB is more than one {c.common_word} holds (memoryCapacity {c.memory_capacity} MiB); "
                f"ask for at most {c.memory_capacity // max(c.memory_factor, 1)}, or for more NPUs"
            )
            return 0
        if nums > 1 and trimmed != c.memory_allocatable:
            r.problem(
                f"{name}: a vNPU slice ({trimmed} MiB) is a single-device request, but {nums} NPUs are asked for: "
                f"omit {name} (whole NPUs) or ask for 1 NPU"
            )
            return 0
        return trimmed

    def mutate_container(self, container: dict[str, Any], where: str) -> bool:
        """HAMi's ``MutateAdmission``: a container without the count resource gets ``ASCEND_VISIBLE_DEVICES=""``
        when ``overwriteEnv`` is set and is not ours. Otherwise the request is validated (ResourceRequestError),
        a 910C count of 1 becomes 2, and the memory limit and request are set to what the container takes (the
        template, or ``memoryAllocatable`` for whole NPUs; only when ``memoryFactor`` is 1)."""
        c = self.chip
        limits, requests = container_lists(container, where)
        if c.resource_name not in limits and c.resource_name not in requests:
            if c.overwrite_env:
                env = container.setdefault("env", [])
                if not any(isinstance(e, Mapping) and e.get("name") == VISIBLE_DEVICES_ENV for e in env):
                    env.append({"name": VISIBLE_DEVICES_ENV, "value": ""})
            return False
        parsed = self._parse(container, where)
        req = parsed.request
        if req.empty:
            return False
        res = container.setdefault("resources", {})
        lim = res.setdefault("limits", {})
        rq = res.setdefault("requests", {})
        if req.nums != parsed.count_raw_nums:
            for lst in (lim, rq):
                if c.resource_name in lst:
                    lst[c.resource_name] = str(req.nums)
        if max(c.memory_factor, 1) == 1:
            mem = req.mem_mib if req.mem_mib else c.memory_allocatable
            lim[c.resource_memory_name] = str(mem)
            rq[c.resource_memory_name] = str(mem)
        return True

    def selectors(self, annotations: Mapping[str, str]) -> Selectors:
        use: frozenset[str] = frozenset()
        nouse: frozenset[str] = frozenset()
        if (v := _text(annotations, self.use_uuid_key)) is not None:
            use = decode_uuid_list(v)
            if v.strip() and not use:
                fail(self.use_uuid_key, "list holds no UUID, so no NPU could ever match", v)
        if (v := _text(annotations, self.no_use_uuid_key)) is not None:
            nouse = decode_uuid_list(v)
        return Selectors(use_uuids=use, nouse_uuids=nouse)

    # ---- registration --------------------------------------------------------------------------------------

    def observe(self, node: NodeView, now_local: datetime, *, reported_before: bool = False) -> Observation:
        """Registration and liveness, in the order of the NVIDIA registrar:

        1. no register annotation → not registered (``absent``);
        2. it does not decode → invalid (``register``);
        3. ``allocatable[resourceName]`` is not a quantity → invalid (``allocatable``);
        4. no NPU → not registered (``no_devices``);
        5. liveness by the handshake (HAMi's ``CheckHealth``): live while our ``Requesting_`` is fresh or the
           plugin answered (anything else than a ``Requesting_``, e.g. its ``Reported_…``, is answered with a fresh
           ``Requesting_``); once our ``Requesting_`` is older than the timeout, live only while allocatable > 0.
        """
        a = node.annotations
        key = self.register_key
        register = a.get(key)
        if register is None:
            return NotRegistered(Unregistered.ABSENT, legacy=True)
        try:
            npus = decode_registration(register, self.name)
        except DecodeError as e:
            return Invalid(DecodeFailure.REGISTER, key, register, e)
        count_name = self.chip.resource_name
        source = f"status.allocatable[{count_name}]"
        raw = node.allocatable.get(count_name, 0)
        try:
            allocatable = parse_quantity(raw, source)
        except DecodeError as e:
            return Invalid(DecodeFailure.ALLOCATABLE, source, str(raw), e)
        if not npus:
            return NotRegistered(Unregistered.NO_DEVICES, legacy=True)
        shake = a.get(self.handshake_key)
        judged = judge_handshake(shake, now_local, self.handshake_timeout_s)
        reporter = reported_before or (shake is not None and shake.startswith("Reported"))
        if judged.state is HandshakeState.EXPIRED and allocatable <= 0:
            return NotRegistered(Unregistered.HANDSHAKE_TIMEOUT, legacy=True)
        devices = tuple(n.device for n in npus)
        ids = {d.id for d in devices}
        cordoned = frozenset(u for u in decode_cordon(a.get(keys.DEVICE_CORDON, "")) if u in ids)
        inventory = NodeInventory(
            node=node.name, vendor=self.name, devices=devices, pair_scores=_pair_scores(npus), cordoned=cordoned
        )
        return Registered(inventory, handshake=judged.write, legacy=True, reporter=reporter)

    # ---- pod annotations -----------------------------------------------------------------------------------

    def encode_devices(self, devices: tuple[tuple[ContainerDevice, ...], ...]) -> str:
        return encode_pod_devices(devices, self.allocated_key)

    def decode_devices(self, value: str) -> tuple[tuple[ContainerDevice, ...], ...]:
        return decode_pod_devices(value, self.allocated_key)

    def runtime_info(self, devices: PodDevices) -> str:
        """The value of ``huawei.com/<cw>`` that HAMi's ``PatchAnnotations`` writes for the device plugin: a JSON
        list over every device of every container, ``{"UUID": …, "temp": <template>}`` (``temp`` omitted for a
        whole NPU); ``null`` when there is no device (Go marshals a nil slice so)."""
        items = []
        for ctr in devices:
            for d in ctr:
                _, temp = self.chip.trim_memory(d.used_mem_mib)
                pairs = [("UUID", dump_str(d.uuid))] if d.uuid else []
                if temp:
                    pairs.append(("temp", dump_str(temp)))
                items.append(dump_object(pairs))
        return dump_array(items) if items else "null"

    def extra_pod_annotations(self, devices: PodDevices, now_unix: int) -> dict[str, str]:
        """Written with the device lists when the pod got NPUs of this chip: the plugin's runtime list
        ``huawei.com/<cw>`` and ``predicate-time`` (Unix seconds; Huawei's plugins find the pod by it)."""
        if not any(devices):
            return {}
        return {self.runtime_key: self.runtime_info(devices), PREDICATE_TIME: str(now_unix)}

    def pod_annotations(self, devices: PodDevices) -> dict[str, str]:
        """The Ascend annotations a bind writes when the pod got NPUs of this chip (besides ``predicate-time``,
        which the caller adds): the device list under both keys and the runtime list."""
        if not any(devices):
            return {}
        encoded = self.encode_devices(devices)
        return {
            self.to_allocate_key: encoded,
            self.allocated_key: encoded,
            self.runtime_key: self.runtime_info(devices),
        }

    def registration_annotations(
        self,
        devices: Sequence[DeviceInfo],
        *,
        network_ids: Mapping[str, int] | None = None,
        reported_at: datetime | None = None,
    ) -> dict[str, str]:
        """:func:`registration_annotations` for this chip's devices (their ``vendor`` is set to the common word)."""
        own = [_with_vendor(d, self.name) for d in devices]
        return registration_annotations(own, network_ids=network_ids, reported_at=reported_at)

    def node_capacity(self, devices: Sequence[DeviceInfo]) -> dict[str, str]:
        return {self.chip.resource_name: str(sum(d.count for d in devices))}


def _with_vendor(d: DeviceInfo, vendor: str) -> DeviceInfo:
    if d.vendor == vendor:
        return d
    return DeviceInfo(
        d.id, d.index, d.count, d.devmem_mib, d.devcore, d.type, d.numa, d.mode, d.health, d.mig_profiles, vendor
    )


def _text(annotations: Mapping[str, str], key: str) -> str | None:
    v = annotations.get(key)
    if v is None:
        return None
    if not isinstance(v, str):
        fail(key, f"annotation value must be a string, got {type(v).__name__}")
    return v


# ------------------------------------------------------------------------------------------------------------
# The device-config section
# ------------------------------------------------------------------------------------------------------------

_GLOBAL_KEYS = frozenset(
    {
        "hamiVnpuMode",
        "hamiVnpuCore",
        "enpuPolicy",
        "overwriteEnv",
        "runtimeClassName",
        "vnpuDeviceSplitCount",
        "configs",
    }
)
_CHIP_KEYS = frozenset(
    {
        "chipName",
        "commonWord",
        "resourceName",
        "resourceMemoryName",
        "resourceCoreName",
        "memoryAllocatable",
        "memoryCapacity",
        "memoryFactor",
        "aiCore",
        "aiCPU",
        "templates",
        "superPod",
        "runtimeClassName",
        "overwriteEnv",
    }
)
_TEMPLATE_KEYS = frozenset({"name", "memory", "aiCore", "aiCPU"})


def _kind(v: object) -> str:
    return "null" if v is None else type(v).__name__


def _mapping(v: object, path: str, allowed: frozenset[str]) -> Mapping[str, Any]:
    if not isinstance(v, Mapping):
        raise ConfigError(f"{path}: expected a mapping, got {_kind(v)}")
    for k in v:
        if k not in allowed:
            raise ConfigError(f"{path}.{k}: unknown key (known: {', '.join(sorted(allowed))})")
    return v


def _str(m: Mapping[str, Any], key: str, path: str, default: str) -> str:
    v = m.get(key, default)
    if v is None:
        return default
    if not isinstance(v, str):
        raise ConfigError(f"{path}.{key}: expected a string, got {v!r}")
    return v


def _int(m: Mapping[str, Any], key: str, path: str, default: int, *, lo: int = 0) -> int:
    v = m.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise ConfigError(f"{path}.{key}: expected a whole number, got {v!r}")
    if not lo <= v <= INT64_MAX:
        raise ConfigError(f"{path}.{key}: must be at least {lo}, got {v}")
    return v


def _bool(m: Mapping[str, Any], key: str, path: str, default: bool) -> bool:
    v = m.get(key, default)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise ConfigError(f"{path}.{key}: expected true or false, got {v!r}")
    return v


def _templates(v: object, path: str) -> tuple[Template, ...]:
    if v is None:
        return ()
    if not isinstance(v, list):
        raise ConfigError(f"{path}: expected a list, got {_kind(v)}")
    out: list[Template] = []
    for i, item in enumerate(v):
        p = f"{path}[{i}]"
        m = _mapping(item, p, _TEMPLATE_KEYS)
        name = _str(m, "name", p, "")
        if not name:
            raise ConfigError(f"{p}.name: a template needs a name")
        if any(t.name == name for t in out):
            raise ConfigError(f"{p}.name: template {name!r} is listed twice")
        out.append(Template(name, _int(m, "memory", p, 0, lo=1), _int(m, "aiCore", p, 0), _int(m, "aiCPU", p, 0)))
    return tuple(sorted(out, key=lambda t: t.memory_mib))


def _chip_config(item: object, path: str, overwrite_env: bool, runtime_class: str) -> ChipConfig:
    m = _mapping(item, path, _CHIP_KEYS)
    cw = _str(m, "commonWord", path, "")
    if not _COMMON_WORD_RE.match(cw):
        raise ConfigError(
            f"{path}.commonWord: expected a name of letters, digits, '.', '_' or '-' (it is part of annotation "
            f"keys), got {cw!r}"
        )
    res = _str(m, "resourceName", path, f"huawei.com/{cw}") or f"huawei.com/{cw}"
    alloc = _int(m, "memoryAllocatable", path, 0, lo=1) if "memoryAllocatable" in m else 0
    if alloc <= 0:
        raise ConfigError(f"{path}.memoryAllocatable: expected the MiB of a whole NPU (a number > 0), got {alloc}")
    cap = _int(m, "memoryCapacity", path, alloc, lo=1)
    if cap < alloc:
        raise ConfigError(f"{path}.memoryCapacity: {cap} is less than memoryAllocatable {alloc}")
    templates = _templates(m.get("templates"), f"{path}.templates")
    for t in templates:
        if t.memory_mib > cap:
            raise ConfigError(f"{path}.templates: {t.name!r} has {t.memory_mib} MiB, more than memoryCapacity {cap}")
    return ChipConfig(
        common_word=cw,
        chip_name=_str(m, "chipName", path, ""),
        resource_name=res,
        resource_memory_name=_str(m, "resourceMemoryName", path, f"{res}-memory") or f"{res}-memory",
        resource_core_name=_str(m, "resourceCoreName", path, f"{res}-core") or f"{res}-core",
        memory_allocatable=alloc,
        memory_capacity=cap,
        memory_factor=_int(m, "memoryFactor", path, 1),
        ai_core=_int(m, "aiCore", path, 0),
        ai_cpu=_int(m, "aiCPU", path, 0),
        templates=templates,
        super_pod=_bool(m, "superPod", path, False),
        overwrite_env=_bool(m, "overwriteEnv", path, overwrite_env),
        runtime_class_name=_str(m, "runtimeClassName", path, runtime_class),
    )


def _check_mode(m: Mapping[str, Any]) -> None:
    mode = _str(m, "hamiVnpuMode", SECTION, "").strip().lower()
    if mode in ("hami-core", "hamicore", "enpu"):
        raise ConfigError(
            f"{SECTION}.hamiVnpuMode: {mode!r} is not supported by this scheduler (only template vNPUs); "
            "use 'template' or leave it empty"
        )
    if mode not in ("", "template"):
        raise ConfigError(f"{SECTION}.hamiVnpuMode: must be template, hami-core (or hamiCore), or enpu, got {mode!r}")
    if _bool(m, "hamiVnpuCore", SECTION, False) and mode == "":
        raise ConfigError(f"{SECTION}.hamiVnpuCore: the hami-core soft split is not supported by this scheduler")


def build(section: object) -> tuple[AscendVendor, ...]:
    """The Ascend vendors of the ``vnpus`` section, one per chip entry, in order.

    Accepts HAMi's two shapes: a list of chip entries (≤ v2.8 charts) or a mapping with ``configs:`` and the
    global keys ``hamiVnpuMode``, ``hamiVnpuCore``, ``enpuPolicy``, ``overwriteEnv``, ``runtimeClassName``,
    ``vnpuDeviceSplitCount`` (the last two also per chip). ``None``, ``{}`` or a mapping without ``configs``
    give the chart's default chips. Raises ConfigError naming the key path.
    """
    overwrite_env, runtime_class = False, ""
    if section is None:
        entries: object = None
    elif isinstance(section, list):
        entries = section
    else:
        m = _mapping(section, SECTION, _GLOBAL_KEYS)
        _check_mode(m)
        _str(m, "enpuPolicy", SECTION, "")
        _int(m, "vnpuDeviceSplitCount", SECTION, 0)
        overwrite_env = _bool(m, "overwriteEnv", SECTION, False)
        runtime_class = _str(m, "runtimeClassName", SECTION, "")
        entries = m.get("configs")
    path = SECTION if isinstance(section, list) else f"{SECTION}.configs"
    if entries is None:
        chips = tuple(_with_globals(c, overwrite_env, runtime_class) for c in DEFAULT_CHIPS)
    else:
        if not isinstance(entries, list):
            raise ConfigError(f"{path}: expected a list of chip entries, got {_kind(entries)}")
        chips = tuple(
            _chip_config(item, f"{path}[{i}]", overwrite_env, runtime_class) for i, item in enumerate(entries)
        )
    seen: dict[str, int] = {}
    for i, c in enumerate(chips):
        if c.common_word in seen:
            raise ConfigError(
                f"{path}[{i}].commonWord: {c.common_word!r} is already configured by {path}[{seen[c.common_word]}]"
            )
        seen[c.common_word] = i
    return tuple(AscendVendor(c) for c in chips)


def _with_globals(c: ChipConfig, overwrite_env: bool, runtime_class: str) -> ChipConfig:
    if (overwrite_env, runtime_class) == (c.overwrite_env, c.runtime_class_name):
        return c
    return ChipConfig(
        c.common_word,
        c.chip_name,
        c.resource_name,
        c.resource_memory_name,
        c.resource_core_name,
        c.memory_allocatable,
        c.memory_capacity,
        c.memory_factor,
        c.ai_core,
        c.ai_cpu,
        c.templates,
        c.super_pod,
        overwrite_env,
        runtime_class,
    )
