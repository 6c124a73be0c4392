"""``hami.io/node-nvidia-register``: the device plugin's GPU inventory of a node (hami-wire §2.1).

Two encodings, told apart by the first non-blank character (difference 1): ``[`` is the JSON array of v2.8+
(unknown keys ignored, omitted fields at their zero value, so a missing ``health`` is ``false``); anything else
is the colon/comma format of ≤ v2.7, 9 fields (v2.5–v2.7) or 7 fields (≤ v2.4, index 0, mode ``hami-core``).

An empty JSON array decodes to an empty tuple. HAMi reads it as "no gpu found on node", i.e. the node is not
registered for NVIDIA; callers treat ``()`` the same way.

Beyond HAMi's own checks, a device with an empty ``id`` or an ``id`` listed twice is rejected: per-device state
is keyed by UUID, so such a value would silently merge two cards.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec._go import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    JSON_SPACE,
    UINT32_MAX,
    UINT64_MAX,
    dump_array,
    dump_object,
    dump_str,
    each,
    fail,
    json_bool,
    json_int,
    json_list,
    json_str,
    loads,
    parse_bool,
    parse_int,
    struct_fields,
)
from vgpu_scheduler.shared.domain.model import NVIDIA, DeviceInfo, DeviceMode, MigPlacement, MigProfile

WHAT = keys.NODE_NVIDIA_REGISTER

_DEVICE_FIELDS = ("id", "index", "count", "devmem", "devcore", "type", "numa", "mode", "migProfiles", "health")
_PROFILE_FIELDS = ("name", "memoryMB", "core", "sliceCount", "placements")
_PLACEMENT_FIELDS = ("start", "size")


def is_json(value: str) -> bool:
    """Difference 1: the value is JSON when its first non-blank character is ``[``."""
    return value.lstrip(JSON_SPACE).startswith("[")


def decode_register(value: str) -> tuple[DeviceInfo, ...]:
    """Decode either encoding into the node's devices, in annotation order."""
    devices = _decode_json(value) if is_json(value) else _decode_colon(value)
    seen: set[str] = set()
    for i, d in enumerate(devices):
        if d.id == "":
            fail(WHAT, f"device {i} has an empty id")
        if d.id in seen:
            fail(WHAT, f"device id {d.id!r} is listed twice", d.id)
        seen.add(d.id)
    return devices


# ------------------------------------------------------------------------------------------------
# JSON (v2.8+)
# ------------------------------------------------------------------------------------------------


def _decode_json(value: str) -> tuple[DeviceInfo, ...]:
    doc = loads(value, WHAT)
    return each(json_list(doc, WHAT), WHAT, _device_from_json)


def _device_from_json(obj: Any, what: str) -> DeviceInfo:
    if obj is None:
        fail(what, "null device entry")
    f = struct_fields(obj, _DEVICE_FIELDS, what)
    profiles: tuple[MigProfile, ...] = ()
    if "migProfiles" in f:
        profiles = each(json_list(f["migProfiles"], f"{what}.migProfiles"), f"{what}.migProfiles", _profile_from_json)
    return device_from_fields(f, what, mig_profiles=profiles)


def device_from_fields(
    f: Mapping[str, Any], what: str, *, mig_profiles: tuple[MigProfile, ...] = (), vendor: str = NVIDIA
) -> DeviceInfo:
    """A device from the fields of HAMi's ``DeviceInfo`` JSON (``struct_fields`` output: keys matched as Go does),
    with HAMi's ranges; absent fields read as Go's zero values. Shared by every vendor's JSON registration."""
    return DeviceInfo(
        id=json_str(f.get("id", ""), f"{what}.id"),
        index=json_int(f.get("index", 0), 0, UINT64_MAX, f"{what}.index"),
        count=json_int(f.get("count", 0), INT32_MIN, INT32_MAX, f"{what}.count"),
        devmem_mib=json_int(f.get("devmem", 0), INT32_MIN, INT32_MAX, f"{what}.devmem"),
        devcore=json_int(f.get("devcore", 0), INT32_MIN, INT32_MAX, f"{what}.devcore"),
        type=json_str(f.get("type", ""), f"{what}.type"),
        numa=json_int(f.get("numa", 0), INT64_MIN, INT64_MAX, f"{what}.numa"),
        mode=json_str(f.get("mode", ""), f"{what}.mode"),
        health=json_bool(f.get("health", False), f"{what}.health"),
        mig_profiles=mig_profiles,
        vendor=vendor,
    )


def _profile_from_json(obj: Any, what: str) -> MigProfile:
    f = struct_fields({} if obj is None else obj, _PROFILE_FIELDS, what)
    placements: tuple[MigPlacement, ...] = ()
    if "placements" in f:
        placements = each(json_list(f["placements"], f"{what}.placements"), f"{what}.placements", placement_from_json)
    return MigProfile(
        name=json_str(f.get("name", ""), f"{what}.name"),
        memory_mib=json_int(f.get("memoryMB", 0), INT32_MIN, INT32_MAX, f"{what}.memoryMB"),
        core_pct=json_int(f.get("core", 0), INT32_MIN, INT32_MAX, f"{what}.core"),
        slice_count=json_int(f.get("sliceCount", 0), 0, UINT32_MAX, f"{what}.sliceCount"),
        placements=placements,
    )


def placement_from_json(obj: Any, what: str) -> MigPlacement:
    """A ``{"start": s, "size": n}`` object (both uint32); shared with the MIG-allocations codec."""
    f = struct_fields({} if obj is None else obj, _PLACEMENT_FIELDS, what)
    return MigPlacement(
        start=json_int(f.get("start", 0), 0, UINT32_MAX, f"{what}.start"),
        size=json_int(f.get("size", 0), 0, UINT32_MAX, f"{what}.size"),
    )


def placement_json(p: MigPlacement) -> str:
    return dump_object([("start", str(p.start)), ("size", str(p.size))])


def _profile_json(p: MigProfile) -> str:
    placements = dump_array([placement_json(x) for x in p.placements]) if p.placements else "null"
    return dump_object(
        [
            ("name", dump_str(p.name)),
            ("memoryMB", str(p.memory_mib)),
            ("core", str(p.core_pct)),
            ("sliceCount", str(p.slice_count)),
            ("placements", placements),
        ]
    )


def encode_register_json(devices: tuple[DeviceInfo, ...] | list[DeviceInfo]) -> str:
    """Encode as HAMi HEAD's device plugin does: keys ``id,index,count,devmem,devcore,type,numa,mode,
    migProfiles,health``, Go ``omitempty`` (zero numbers, empty strings, no profiles and ``false`` omitted).

    A profile with no placements is written as ``null`` (a nil Go slice).
    """
    return dump_array(
        [
            device_json(
                d,
                ("migProfiles", dump_array([_profile_json(p) for p in d.mig_profiles]), bool(d.mig_profiles)),
                ("health", "true", d.health),
            )
            for d in devices
        ]
    )


def device_json(d: DeviceInfo, *tail: tuple[str, str, bool]) -> str:
    """One device as Go's ``json.Marshal`` writes HAMi's ``DeviceInfo`` with ``omitempty`` on every key: the keys
    ``id,index,count,devmem,devcore,type,numa,mode`` every plugin writes, then ``tail`` (key, JSON value, present)
    in order; a key that is not present (a zero number, an empty string) is left out."""
    fields = (
        ("id", dump_str(d.id), d.id != ""),
        ("index", str(d.index), d.index != 0),
        ("count", str(d.count), d.count != 0),
        ("devmem", str(d.devmem_mib), d.devmem_mib != 0),
        ("devcore", str(d.devcore), d.devcore != 0),
        ("type", dump_str(d.type), d.type != ""),
        ("numa", str(d.numa), d.numa != 0),
        ("mode", dump_str(d.mode), d.mode != ""),
        *tail,
    )
    return dump_object([(key, val) for key, val, present in fields if present])


# ------------------------------------------------------------------------------------------------
# Colon / comma (≤ v2.7)
# ------------------------------------------------------------------------------------------------


def _decode_colon(value: str) -> tuple[DeviceInfo, ...]:
    """Go ``DecodeNodeDevices``: ``:``-terminated devices, 7 or 9 ``,``-separated fields each."""
    if ":" not in value:
        fail(WHAT, "neither JSON nor colon format: no ':' device separator", value)
    out = []
    for seg in value.split(":"):
        if seg == "":
            continue
        if "," not in seg:
            fail(WHAT, "device segment without ','", seg)
        items = seg.split(",")
        if len(items) not in (7, 9):
            fail(WHAT, f"device segment has {len(items)} fields, expected 7 or 9", seg)
        index, mode = 0, DeviceMode.HAMI_CORE.value
        if len(items) == 9:
            index = parse_int(items[7], 64, f"{WHAT}.index", seg)
            if index < 0:
                fail(f"{WHAT}.index", "index must not be negative", seg)
            mode = items[8]
        out.append(
            DeviceInfo(
                id=items[0],
                index=index,
                count=parse_int(items[1], 32, f"{WHAT}.count", seg),
                devmem_mib=parse_int(items[2], 32, f"{WHAT}.devmem", seg),
                devcore=parse_int(items[3], 32, f"{WHAT}.devcore", seg),
                type=items[4],
                numa=parse_int(items[5], 64, f"{WHAT}.numa", seg),
                mode=mode,
                health=parse_bool(items[6], f"{WHAT}.health", seg),
            )
        )
    return tuple(out)


def _colon_text(text: str, field: str) -> str:
    if "," in text or ":" in text:
        fail(f"{WHAT}.{field}", "cannot encode a value containing ',' or ':' in the colon format", text)
    return text


def encode_register_colon(devices: tuple[DeviceInfo, ...] | list[DeviceInfo], fields: int = 9) -> str:
    """Encode in the ≤ v2.7 colon format, ``fields`` = 9 (``EncodeNodeDevices``, v2.5–v2.7) or 7 (≤ v2.4).

    Raises DecodeError for what the format cannot carry: ``,``/``:`` inside a text field, MIG profiles, and in the
    7-field form an index other than 0 or a mode other than ``hami-core``.
    """
    if fields not in (7, 9):
        raise ValueError(f"fields must be 7 or 9, not {fields}")
    out = []
    for d in devices:
        if d.mig_profiles:
            fail(WHAT, "the colon format cannot carry migProfiles", d.id)
        if d.id == "":
            fail(WHAT, "cannot encode a device with an empty id")
        parts = [
            _colon_text(d.id, "id"),
            str(d.count),
            str(d.devmem_mib),
            str(d.devcore),
            _colon_text(d.type, "type"),
            str(d.numa),
            "true" if d.health else "false",
        ]
        if fields == 9:
            parts += [str(d.index), _colon_text(d.mode, "mode")]
        elif d.index != 0 or d.mode != DeviceMode.HAMI_CORE.value:
            fail(WHAT, "the 7-field format carries only index 0 and mode hami-core", d.id)
        out.append(",".join(parts) + ":")
    text = "".join(out)
    if is_json(text):
        fail(WHAT, "a colon-format value must not start with '['", text)
    return text
