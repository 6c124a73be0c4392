"""Enflame GCUs as two vendors (HAMi's ``pkg/device/enflame``): whole ``GCU`` cards and DRS-partitioned ``Enflame``
(vGCU) instances. Pure.

What an Enflame pod and node look like on the wire (docs/vendors/enflame.md):

**GCU** (common word ``GCU``): resource ``enflame.com/gcu`` (whole cards); registration from **node capacity**
(``capacity[enflame.com/gcu]`` cards ``<node>-GCU-<i>``, each one slot, 100 "memory" and 100 cores, so a card is
never shared); pod device lists ``hami.io/enflame-gcu-devices-to-allocate`` and ``…-allocated``
(``<id>,GCU,100,100:`` per card); no node lock, no handshake, no UUID selectors.

**vGCU** (common word ``Enflame``, Enflame's DRS hard partitions): a container asks either for a profile size
directly (``enflame.com/drs-gcu: 3`` selects the ``3g.…`` profile) or by memory and cores
(``enflame.com/gcu-memory`` in GB, or MiB when larger than twice the biggest profile's GB, and ``enflame.com/gcu-core``
from 1 to 100): the smallest profile that holds both. One instance per container, on one card. Registration from the
node annotation ``enflame.com/gcu-drs-capacity`` (JSON: the cards with their slice capacity, and the profile menu
``"<n>g.<m>gb": "<profile id>"``): each card ``<node>-enflame-drs-<index>`` has its capacity as slots, the biggest
profile's memory, and 100 cores; a profile of ``n`` slices of ``maxSlice`` takes ``ceil(n × 100 / maxSlice)`` cores and
its memory. The pod's device list only under ``hami.io/enflame-vgpu-devices-allocated``, plus
``enflame.com/gcu-assigned`` (``false``), ``gcu-assigned-time`` (ns), ``gcu-assigned-index`` / ``gcu-assigned-id``,
``gcu-assigned-minor``, ``gcu-request-size`` (slices) and ``assigned-containers`` (JSON by container name: the
profile); no node lock, no handshake; selectors ``enflame.com/use-gpuuuid`` / ``enflame.com/nouse-gpuuuid``.

The registered profile menu is kept on each card as :class:`~shared.domain.model.MigProfile` entries (name
``<profile>=<id>``, memory, cores, ``slice_count`` = slices) and the card's minor in ``DeviceInfo.mode``
(``drs/<minor>``): what ``/bind`` needs to write the profile annotations. Both vendors are on by default, as in HAMi.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from vgpu_scheduler.shared.codec._go import INT32_MAX, fail
from vgpu_scheduler.shared.codec.resources import (
    QuantityKind,
    RequestReader,
    ResourceRequestError,
    container_label,
    container_lists,
    pod_containers,
    raw_value,
)
from vgpu_scheduler.shared.domain.model import (
    EMPTY_REQUEST,
    MEM_PCT_UNSET,
    ContainerRequest,
    DeviceInfo,
    MigProfile,
    NodeInventory,
    PodDevices,
    Reason,
    Selectors,
)
from vgpu_scheduler.shared.domain.vendor import DeviceRules, Take
from vgpu_scheduler.shared.errors import ConfigError, DecodeError
from vgpu_scheduler.shared.vendors.base import NodeLockKind, ResourceNames
from vgpu_scheduler.shared.vendors.capacity import (
    cordoned_ids,
    count_in_limits,
    count_registration,
    observe_count,
)
from vgpu_scheduler.shared.vendors.common import names_section, reader_config
from vgpu_scheduler.shared.vendors.described import DescribedVendor, Description
from vgpu_scheduler.shared.vendors.registration import (
    DecodeFailure,
    Invalid,
    NodeView,
    NotRegistered,
    Observation,
    Registered,
    Unregistered,
)
from vgpu_scheduler.shared.vendors.simple import UuidOnlyRules, count_only_request, uuid_selectors

SECTION: Final = "enflame"
ENABLE_FLAG: Final[str | None] = None
"""HAMi v2.10 initialises both Enflame vendors whatever its device config holds."""

GCU: Final = "GCU"
"""Common word of whole GCU cards."""
VGCU: Final = "Enflame"
"""Common word of DRS instances (HAMi's ``EnflameVGCUDevice``)."""

GCU_TO_ALLOCATE_KEY: Final = "hami.io/enflame-gcu-devices-to-allocate"
GCU_ALLOCATED_KEY: Final = "hami.io/enflame-gcu-devices-allocated"
VGCU_ALLOCATED_KEY: Final = "hami.io/enflame-vgpu-devices-allocated"
DRS_CAPACITY_KEY: Final = "enflame.com/gcu-drs-capacity"
USE_UUID: Final = "enflame.com/use-gpuuuid"
NOUSE_UUID: Final = "enflame.com/nouse-gpuuuid"
REQUEST_SIZE_KEY: Final = "enflame.com/gcu-request-size"
ASSIGNED_KEY: Final = "enflame.com/gcu-assigned"
ASSIGNED_ID_KEY: Final = "enflame.com/gcu-assigned-id"
ASSIGNED_INDEX_KEY: Final = "enflame.com/gcu-assigned-index"
ASSIGNED_MINOR_KEY: Final = "enflame.com/gcu-assigned-minor"
ASSIGNED_TIME_KEY: Final = "enflame.com/gcu-assigned-time"
ASSIGNED_CONTAINERS_KEY: Final = "assigned-containers"

GCU_SHARE: Final = 100
"""A GCU card's "memory" and cores as HAMi registers them, and what a request takes of each: the whole card."""
_GCU_INFIX: Final = f"-{GCU}-"
_DRS_INFIX: Final = "-enflame-drs-"
_MINOR_PREFIX: Final = "drs/"
_INT_RE: Final = re.compile(r"[+-]?[0-9]+\Z")


@dataclass(frozen=True, slots=True)
class EnflameConfig:
    """The ``enflame:`` section (HAMi's ``EnflameConfig``, defaults of ``InitDefaultDevices``)."""

    resource_name_gcu: str = "enflame.com/gcu"
    resource_name_drs_gcu: str = "enflame.com/drs-gcu"
    resource_name_gcu_memory: str = "enflame.com/gcu-memory"
    resource_name_gcu_core: str = "enflame.com/gcu-core"
    resource_name_vgcu: str = ""
    """The legacy shared-GCU count name: used as the DRS name when ``resourceNameDRSGCU`` is not given."""
    resource_name_vgcu_percentage: str = ""
    """The legacy shared-GCU percentage name: accepted, unused (as in HAMi v2.10)."""


_KEYS: Mapping[str, str] = {
    "resourceNameGCU": "resource_name_gcu",
    "resourceNameDRSGCU": "resource_name_drs_gcu",
    "resourceNameGCUMemory": "resource_name_gcu_memory",
    "resourceNameGCUCore": "resource_name_gcu_core",
    "resourceNameVGCU": "resource_name_vgcu",
    "resourceNameVGCUPercentage": "resource_name_vgcu_percentage",
}


def parse_config(section: object) -> EnflameConfig:
    """Validate the ``enflame:`` section. As HAMi's ``InitEnflameDevice``: a blank DRS name falls back to the legacy
    ``resourceNameVGCU``, then to ``enflame.com/drs-gcu``; blank memory and core names to their defaults. A blank
    ``resourceNameGCU`` is refused (no container could ask for cards). ConfigError names the key path."""
    values = names_section(section, SECTION, _KEYS, unit="GCUs")
    base = EnflameConfig()
    if "resource_name_gcu" in values and not values["resource_name_gcu"].strip():
        raise ConfigError(f"{SECTION}.resourceNameGCU: must not be empty (it is how a container asks for GCUs)")
    drs = values.get("resource_name_drs_gcu", "").strip() or values.get("resource_name_vgcu", "").strip()
    values["resource_name_drs_gcu"] = drs or base.resource_name_drs_gcu
    for field in ("resource_name_gcu_memory", "resource_name_gcu_core"):
        if not values.get(field, "").strip():
            values[field] = getattr(base, field)
    return EnflameConfig(**values)


def build(section: object) -> tuple[GcuVendor, VgcuVendor]:
    config = parse_config(section)
    return GcuVendor(config), VgcuVendor(config)


# ------------------------------------------------------------------------------------------------------------
# GCU: whole cards
# ------------------------------------------------------------------------------------------------------------


GCU_RULES: DeviceRules = UuidOnlyRules(GCU)
"""GCU ``Fit``: the request's type, and a card nobody uses (one slot, and a request takes all 100 cores)."""


@dataclass(frozen=True, slots=True)
class GcuVendor(DescribedVendor):
    """Whole Enflame GCU cards (see the module docstring)."""

    description = Description(
        name=GCU,
        rules=GCU_RULES,
        allocated_key=GCU_ALLOCATED_KEY,
        to_allocate_key=GCU_TO_ALLOCATE_KEY,
        node_lock=NodeLockKind.NONE,
    )

    config: EnflameConfig = dataclasses.field(default_factory=EnflameConfig)

    @property
    def resources(self) -> ResourceNames:
        return ResourceNames(count=self.config.resource_name_gcu)

    def container_request(self, container: Mapping[str, Any], what: str) -> ContainerRequest:
        """HAMi's ``GenerateResourceRequests``: the count from the limits, else the requests; each card taken whole
        (100 "memory", 100 %, 100 cores). A bad quantity is a ResourceRequestError."""
        name = self.config.resource_name_gcu
        return count_only_request(container, what, name, GCU, mem_mib=GCU_SHARE, cores_pct=GCU_SHARE)

    def mutate_container(self, container: dict[str, Any], where: str) -> bool:
        """HAMi's ``MutateAdmission``: no edit; ours when the count is in the limits (validated here)."""
        return count_in_limits(container, where, self.config.resource_name_gcu, self.container_request)

    def selectors(self, annotations: Mapping[str, str]) -> Selectors:
        del annotations
        return Selectors()  # HAMi's GCU Fit checks no UUID list

    def observe(self, node: NodeView, now_local: datetime, *, reported_before: bool = False) -> Observation:
        """Registration from ``status.capacity[enflame.com/gcu]``: absent → not registered; not a whole number →
        invalid; 0 → not registered (HAMi's ``CheckHealth``: unhealthy without cards)."""
        del now_local, reported_before
        return observe_count(
            node,
            vendor=GCU,
            count_name=self.config.resource_name_gcu,
            top=INT32_MAX,
            expected=f"expected a whole number from 0 to {INT32_MAX}",
            devices=gcu_devices,
        )

    def node_registration(self, devices: Sequence[DeviceInfo]) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
        """What the GCU device plugin advertises: one count per card."""
        return count_registration(devices, self.config.resource_name_gcu)


def gcu_devices(node: str, count: int) -> tuple[DeviceInfo, ...]:
    """HAMi's ``GetNodeDevices`` of GCU: ``count`` cards ``<node>-GCU-<i>``, one slot, 100/100 each."""
    return tuple(
        DeviceInfo(f"{node}{_GCU_INFIX}{i}", i, 1, GCU_SHARE, GCU_SHARE, GCU, 0, "", True, vendor=GCU)
        for i in range(count)
    )


# ------------------------------------------------------------------------------------------------------------
# vGCU: DRS profiles
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DrsProfile:
    """One profile of the menu: ``name`` (``3g.20gb``), the device plugin's ``id``, ``size`` in slices, its memory in
    GB and the cores it takes (``ceil(size × 100 / maxSlice)``)."""

    name: str
    id: str
    size: int
    memory_gb: int
    core_pct: int

    @property
    def memory_mib(self) -> int:
        return self.memory_gb * 1024


def _go_atoi(text: str) -> int | None:
    return int(text) if _INT_RE.match(text) else None


def parse_profile(name: str) -> tuple[int, int]:
    """HAMi's ``parseProfile``: ``"<n>g.<m>gb"`` → ``(n, m)``; ``(0, 0)`` when the size is not a number, ``(n, 0)``
    when the memory is not."""
    parts = name.strip().lower().split(".")
    if len(parts) < 2:
        return 0, 0
    size = _go_atoi(parts[0].strip().removesuffix("g"))
    if size is None:
        return 0, 0
    memory = _go_atoi(parts[1].strip().removesuffix("gb"))
    return size, memory if memory is not None else 0


def drs_profiles(menu: Mapping[str, str], what: str = DRS_CAPACITY_KEY) -> tuple[DrsProfile, ...]:
    """The usable profiles of a menu (name → id), smallest first (slices, then memory, then name): HAMi's
    ``collectDRSProfiles``. Names without a positive size and memory are skipped; a size or memory beyond int32 is a
    DecodeError (HAMi would wrap it)."""
    max_slice = max((parse_profile(n)[0] for n in menu), default=0)
    out: list[DrsProfile] = []
    for name, pid in menu.items():
        size, memory = parse_profile(name)
        if size <= 0 or memory <= 0:
            continue
        if size > INT32_MAX or memory * 1024 > INT32_MAX:
            fail(what, f"profile {name!r} is beyond int32 (slices, or memory in MiB)", name)
        out.append(DrsProfile(name, pid, size, memory, math.ceil(size * 100 / max_slice)))
    return tuple(sorted(out, key=lambda p: (p.size, p.memory_gb, p.name)))


def normalize_memory_gb(raw: int, max_profile_gb: int) -> int:
    """HAMi's ``normalizeMemoryRequestToGB``: GB as given, or MiB (rounded up to GB) when more than twice the
    biggest profile's GB."""
    if raw <= 0:
        return 0
    if max_profile_gb > 0 and raw > max_profile_gb * 2:
        return math.ceil(raw / 1024)
    return raw


DIRECT: Final = 0
"""``ContainerRequest.mem_pct`` of a request by profile size (``mem_mib`` holds the slices; HAMi's
``enflameRequestModeDirect``); a request by memory and cores has ``MEM_PCT_UNSET``."""


def select_profile(profiles: Sequence[DrsProfile], req: ContainerRequest) -> DrsProfile | None:
    """HAMi's ``selectProfileByRequest``: by size, the first profile of that many slices; by memory and cores,
    the first (smallest) profile holding both. None: no profile fits (``ModeNotFit``)."""
    if not profiles:
        return None
    if req.mem_pct == DIRECT:
        return next((p for p in profiles if p.size == req.mem_mib), None)
    memory_gb = normalize_memory_gb(req.mem_mib, profiles[-1].memory_gb)
    for p in profiles:
        if memory_gb > 0 and p.memory_gb < memory_gb:
            continue
        if req.cores_pct > 0 and p.core_pct < req.cores_pct:
            continue
        return p
    return None


def device_profiles(dev: DeviceInfo) -> tuple[DrsProfile, ...]:
    """The profile menu registered on a card (kept as its ``mig_profiles``)."""
    out = []
    for m in dev.mig_profiles:
        name, _, pid = m.name.partition("=")
        out.append(DrsProfile(name, pid, m.slice_count, m.memory_mib // 1024, m.core_pct))
    return tuple(out)


def device_minor(dev: DeviceInfo) -> str:
    """The card's minor number as registered (its index when the plugin gave none)."""
    return dev.mode.removeprefix(_MINOR_PREFIX) if dev.mode.startswith(_MINOR_PREFIX) else str(dev.index)


@dataclass(frozen=True, slots=True)
class VgcuRules(UuidOnlyRules):
    """vGCU ``Fit``: the common skeleton (health, cordon, type, UUID lists, slots, ``mutex``, memory, cores) where
    what a request takes is its profile's memory and cores; no profile for the request → ``ModeNotFit``."""

    def take(self, dev: DeviceInfo, req: ContainerRequest, used_mem_mib: int) -> Take:
        del used_mem_mib
        profile = select_profile(device_profiles(dev), req)
        if profile is None:
            return Take(0, 0, Reason.MODE_NOT_FIT)
        return Take(profile.memory_mib, profile.core_pct)


VGCU_RULES: DeviceRules = VgcuRules(VGCU)


def _string(v: object, what: str, field: str) -> str:
    if not isinstance(v, str):
        fail(what, f"{field} must be a string, got {type(v).__name__}", json.dumps(v))
    return v


def _capacity(raw: object, what: str) -> int:
    """HAMi's ``parseDRSCapacity``: a JSON number or a numeric string; here whole and from 1 to int32."""
    if isinstance(raw, bool) or raw is None:
        fail(what, "capacity must be a number", json.dumps(raw))
    if isinstance(raw, str):
        value = _go_atoi(raw.strip())
        if value is None:
            fail(what, "capacity is not a whole number", raw)
    elif isinstance(raw, int):
        value = raw
    elif isinstance(raw, float) and raw.is_integer():
        value = int(raw)
    else:
        fail(what, "capacity must be a whole number", json.dumps(raw))
    if not 1 <= value <= INT32_MAX:
        fail(what, f"capacity must be from 1 to {INT32_MAX}", str(value))
    return value


def decode_drs_capacity(value: str, node: str) -> tuple[DeviceInfo, ...]:
    """``enflame.com/gcu-drs-capacity`` → the node's cards (HAMi's ``GetNodeDevices``). DecodeError names the
    problem: not JSON, no usable profile, a bad capacity, a profile beyond int32."""
    what = DRS_CAPACITY_KEY
    try:
        spec = json.loads(value)
    except ValueError as e:
        fail(what, f"not JSON: {e}", value)
    if not isinstance(spec, dict):
        fail(what, "expected a JSON object with devices and profiles", value)
    menu_raw = spec.get("profiles") or {}
    devices_raw = spec.get("devices") or []
    if not isinstance(menu_raw, dict):
        fail(what, "profiles must be an object of profile name to id", value)
    if not isinstance(devices_raw, list):
        fail(what, "devices must be a list", value)
    menu = {_string(k, what, "a profile name"): _string(v, what, f"profile {k!r}'s id") for k, v in menu_raw.items()}
    max_slice = max((parse_profile(n)[0] for n in menu), default=0)
    max_gb = max((parse_profile(n)[1] for n in menu), default=0)
    if max_slice <= 0:
        fail(what, f"no valid DRS profile on node {node} (expected names like 3g.20gb)", value)
    if max_gb <= 0:
        max_gb = max_slice
    if max_gb * 1024 > INT32_MAX:
        fail(what, "the biggest profile's memory is beyond int32 MiB", str(max_gb))
    profiles = tuple(
        MigProfile(f"{p.name}={p.id}", p.memory_mib, p.core_pct, p.size, ()) for p in drs_profiles(menu, what)
    )
    out: list[DeviceInfo] = []
    for pos, d in enumerate(devices_raw):
        if not isinstance(d, dict):
            fail(what, f"devices[{pos}] must be an object", json.dumps(d))
        index = _go_atoi(_string(d.get("index", ""), what, f"devices[{pos}].index"))
        idx = index if index is not None else pos
        capacity = _capacity(d.get("capacity"), f"{what} devices[{pos}].capacity")
        minor = _string(d.get("minor", ""), what, f"devices[{pos}].minor").strip() or str(idx)
        out.append(
            DeviceInfo(
                f"{node}{_DRS_INFIX}{idx}",
                idx,
                capacity,
                max_gb * 1024,
                100,
                VGCU,
                0,
                f"{_MINOR_PREFIX}{minor}",
                True,
                mig_profiles=profiles,
                vendor=VGCU,
            )
        )
    return tuple(out)


def encode_drs_capacity(devices: Sequence[DeviceInfo]) -> str:
    """The annotation a device plugin writes for ``devices`` (the inverse of :func:`decode_drs_capacity`; the cards
    share one menu, the first card's)."""
    menu = {p.name: p.id for p in device_profiles(devices[0])} if devices else {}
    cards = [{"index": str(d.index), "minor": device_minor(d), "capacity": d.count} for d in devices]
    return json.dumps({"devices": cards, "profiles": menu}, separators=(",", ":"))


def default_menu(memory_mib: int, slices: int) -> dict[str, str]:
    """A profile menu for a simulated card of ``memory_mib`` and ``slices`` slices: 1 slice, half the card and the
    whole card (each with its share of the memory in whole GB)."""
    total_gb = memory_mib // 1024
    menu: dict[str, str] = {}
    for size in sorted({1, slices // 2, slices}):
        gb = total_gb * size // slices
        if size > 0 and gb > 0:
            menu[f"{size}g.{gb}gb"] = str(len(menu))
    return menu


@dataclass(frozen=True, slots=True)
class VgcuVendor(DescribedVendor):
    """Enflame DRS instances (see the module docstring)."""

    description = Description(
        name=VGCU,
        rules=VGCU_RULES,
        allocated_key=VGCU_ALLOCATED_KEY,
        register_key=DRS_CAPACITY_KEY,
        node_lock=NodeLockKind.NONE,
        use_uuid=USE_UUID,
        nouse_uuid=NOUSE_UUID,
    )

    config: EnflameConfig = dataclasses.field(default_factory=EnflameConfig)

    @property
    def resources(self) -> ResourceNames:
        c = self.config
        return ResourceNames(
            count=c.resource_name_drs_gcu, memory=c.resource_name_gcu_memory, cores=c.resource_name_gcu_core
        )

    def container_request(self, container: Mapping[str, Any], what: str) -> ContainerRequest:
        """HAMi's ``GenerateResourceRequests`` with its webhook's checks: ``drs-gcu`` (limits, else requests) asks for
        a profile of that many slices; otherwise ``gcu-memory`` and/or ``gcu-core`` ask for the smallest profile
        holding both. Always one instance. Refused (ResourceRequestError), as HAMi's webhook refuses them: a
        ``drs-gcu`` or memory of 0, cores outside 1..100, and any bad quantity."""
        c = self.config
        limits, requests = container_lists(container, what)
        r = RequestReader(
            reader_config(c.resource_name_drs_gcu, c.resource_name_gcu_memory, c.resource_name_gcu_core),
            container_label(container, what),
        )
        if raw_value(limits, requests, c.resource_name_drs_gcu)[0]:
            n = r.read(limits, requests, c.resource_name_drs_gcu, QuantityKind.COUNT)
            if n == 0:
                r.problem(f"{c.resource_name_drs_gcu} must be greater than 0 (the slices of one DRS profile)")
            if r.problems or n is None:
                raise ResourceRequestError(r.problems)
            return ContainerRequest(nums=1, mem_mib=n, mem_pct=DIRECT, cores_pct=0, type=VGCU)
        has_mem = raw_value(limits, requests, c.resource_name_gcu_memory)[0]
        has_core = raw_value(limits, requests, c.resource_name_gcu_core)[0]
        if not has_mem and not has_core:
            return EMPTY_REQUEST
        mem = r.read(limits, requests, c.resource_name_gcu_memory, QuantityKind.MEMORY)
        core = r.read(limits, requests, c.resource_name_gcu_core, QuantityKind.PRIORITY)
        if has_mem and mem == 0:
            r.problem(f"{c.resource_name_gcu_memory} must be greater than 0")
        if has_core and core is not None and not 1 <= core <= 100:
            r.problem(f"{c.resource_name_gcu_core} must be from 1 to 100 (a percentage of one GCU): got {core}")
        if r.problems:
            raise ResourceRequestError(r.problems)
        return ContainerRequest(nums=1, mem_mib=mem or 0, mem_pct=MEM_PCT_UNSET, cores_pct=core or 0, type=VGCU)

    def mutate_container(self, container: dict[str, Any], where: str) -> bool:
        """HAMi's ``MutateAdmission``: a container naming ``drs-gcu`` (or else memory / cores) in its limits or
        requests is ours; each of them given on one side only is copied to the other."""
        c = self.config
        limits, requests = container_lists(container, where)
        names = (c.resource_name_drs_gcu, c.resource_name_gcu_memory, c.resource_name_gcu_core)
        if not any(raw_value(limits, requests, n)[0] for n in names):
            return False
        self.container_request(container, where)
        resources = container.setdefault("resources", {})
        lim = resources.get("limits")
        req = resources.get("requests")
        if not isinstance(lim, dict):
            lim = resources["limits"] = {}
        if not isinstance(req, dict):
            req = resources["requests"] = {}
        copy = names[:1] if raw_value(lim, req, names[0])[0] else names[1:]
        for n in copy:
            if n in lim and n not in req:
                req[n] = lim[n]
            elif n in req and n not in lim:
                lim[n] = req[n]
        return True

    def selectors(self, annotations: Mapping[str, str]) -> Selectors:
        return uuid_selectors(annotations, USE_UUID, NOUSE_UUID)

    def plugin_device_count(self, container: Mapping[str, Any]) -> int:
        """How many instances Enflame's DRS plugin serves ``container``: one when it asks for a DRS resource (the
        count resource holds slices, not instances), else none. Used by the simulated device plugin."""
        return 1 if self.manages(container) else 0

    def observe(self, node: NodeView, now_local: datetime, *, reported_before: bool = False) -> Observation:
        """Registration from ``enflame.com/gcu-drs-capacity``: absent → not registered; undecodable → invalid; no
        card → not registered. HAMi's ``CheckHealth`` always says healthy: no handshake."""
        del now_local, reported_before
        value = node.annotations.get(DRS_CAPACITY_KEY)
        if value is None:
            return NotRegistered(Unregistered.ABSENT)
        try:
            devices = decode_drs_capacity(value, node.name)
        except DecodeError as e:
            return Invalid(DecodeFailure.REGISTER, DRS_CAPACITY_KEY, value, e)
        if not devices:
            return NotRegistered(Unregistered.NO_DEVICES)
        return Registered(NodeInventory(node.name, VGCU, devices, cordoned=cordoned_ids(node, devices)))

    def node_registration(self, devices: Sequence[DeviceInfo]) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
        """What Enflame's DRS plugin writes for ``devices``: the capacity annotation (a card without a menu gets
        :func:`default_menu` of its memory and slots) and the count resource (one per slice)."""
        if not devices:
            return {}, {}, {}
        first = devices[0]
        if not first.mig_profiles:
            menu = default_menu(first.devmem_mib, first.count)
            if not menu:
                raise ValueError("a DRS card needs at least 1 GiB of memory and 1 slot")
            profiles = tuple(
                MigProfile(f"{p.name}={p.id}", p.memory_mib, p.core_pct, p.size, ()) for p in drs_profiles(menu)
            )
            devices = [dataclasses.replace(d, mig_profiles=profiles) for d in devices]
        count = {self.config.resource_name_drs_gcu: str(sum(d.count for d in devices))}
        return {DRS_CAPACITY_KEY: encode_drs_capacity(devices)}, count, {}

    def bind_pod_annotations(
        self, pod: Mapping[str, Any] | None, inventory: NodeInventory | None, devices: PodDevices, now_unix: int
    ) -> Mapping[str, str]:
        """HAMi's ``PatchAnnotations`` extras (see the module docstring); the first container with an instance
        names the card and the slices. DecodeError when the node's inventory or the card is gone."""
        if not any(devices):
            return {}
        out = {ASSIGNED_KEY: "false", ASSIGNED_TIME_KEY: str(now_unix * 1_000_000_000)}
        assigned: dict[str, dict[str, Any]] = {}
        for i, ctr in enumerate(devices):
            if not ctr:
                continue
            chosen = ctr[0]
            dev = inventory.device(chosen.uuid) if inventory is not None else None
            if dev is None:
                fail(VGCU_ALLOCATED_KEY, "the card is not registered on the node any more", chosen.uuid)
            profile = next(
                (
                    p
                    for p in device_profiles(dev)
                    if p.memory_mib == chosen.used_mem_mib and p.core_pct == chosen.used_cores
                ),
                None,
            )
            entry: dict[str, Any] = {"allocated": False, "request": profile.size if profile else 1}
            if profile is not None:
                entry["profileID"] = profile.id
                entry["profileName"] = profile.name
            assigned[container_name(pod, i)] = entry
            out.setdefault(ASSIGNED_INDEX_KEY, str(dev.index))
            out.setdefault(ASSIGNED_ID_KEY, str(dev.index))
            out.setdefault(ASSIGNED_MINOR_KEY, device_minor(dev))
            out.setdefault(REQUEST_SIZE_KEY, str(entry["request"]))
        out[ASSIGNED_CONTAINERS_KEY] = json.dumps(dict(sorted(assigned.items())), separators=(",", ":"))
        return out


def container_name(pod: Mapping[str, Any] | None, index: int) -> str:
    """HAMi's ``containerNameByIndex``: init containers first, then the others; ``container-<i>`` when unknown."""
    if pod is not None:
        inits, ctrs = pod_containers(pod)
        both = [*inits, *ctrs]
        if 0 <= index < len(both) and isinstance(both[index], Mapping):
            name = both[index].get("name")
            if isinstance(name, str):
                return name
    return f"container-{index}"
