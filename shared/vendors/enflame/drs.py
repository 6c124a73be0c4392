"""Enflame DRS profiles: the capacity annotation ``enflame.com/gcu-drs-capacity`` read and written, the profile a
request takes and the DRS ``Fit`` (:class:`VgcuRules`). Pure."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from vgpu_scheduler.shared.codec._go import INT32_MAX, fail
from vgpu_scheduler.shared.domain.model import ContainerRequest, DeviceInfo, MigProfile, Reason
from vgpu_scheduler.shared.domain.vendor import DeviceRules, Take
from vgpu_scheduler.shared.vendors.enflame.keys import _DRS_INFIX, _INT_RE, _MINOR_PREFIX, DRS_CAPACITY_KEY, VGCU
from vgpu_scheduler.shared.vendors.simple import UuidOnlyRules


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
