"""The field maps of the kinds the store keeps, version by version, and the strict readers that decode them.

* node inventory: version 1 (NVIDIA devices only) and 2 (a ``vendor`` on every device), see below;
* allocation: version 1;
* quota limits: version 1 (NVIDIA's) and 2 (``others``: every other vendor's by common word).

Each kind has its ``*_fields`` (object to field map), ``*_from`` (field map to object), ``*_version`` where an
object is written at the oldest version that can hold it, and ``*_v1_to_v2`` upgraders. ``envelope`` wraps them
in ``{"k", "v", "d"}`` envelopes (``envelope.STANDARD_REGISTRY``). The readers are strict about types, so garbage
never turns into a silently wrong value: a wrong field raises :class:`~shared.errors.DecodeError` naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from vgpu_scheduler.shared.domain.allocation import Allocation
from vgpu_scheduler.shared.domain.model import (
    NVIDIA,
    ContainerDevice,
    DeviceCharge,
    DeviceInfo,
    MigAllocation,
    MigPlacement,
    MigProfile,
    NodeInventory,
)
from vgpu_scheduler.shared.domain.quota import QuotaLimits, VendorLimits, is_quota_word, quota_limits
from vgpu_scheduler.shared.errors import DecodeError

Fields = dict[str, Any]
"""An envelope's field map (its ``"d"``)."""
_T = TypeVar("_T")


# --------------------------------------------------------------------------------------------
# Field access helpers: strict about types, so garbage never turns into a silently wrong value
# --------------------------------------------------------------------------------------------


def _get(d: Mapping[str, Any], name: str, what: str) -> Any:
    if not isinstance(d, Mapping):
        raise DecodeError(what, f"expected a map, got {type(d).__name__}")
    if name not in d:
        raise DecodeError(what, f"missing field {name!r}")
    return d[name]


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _typed(d: Mapping[str, Any], name: str, what: str, typ: type[_T], label: str) -> _T:
    """Field ``name`` of ``d``, which must be a ``typ`` (a bool is not an integer here)."""
    v = _get(d, name, what)
    if not isinstance(v, typ) or (typ is not bool and isinstance(v, bool)):
        raise DecodeError(what, f"field {name!r} must be {label}", repr(v))
    return v


def _int(d: Mapping[str, Any], name: str, what: str) -> int:
    return _typed(d, name, what, int, "an integer")


def _opt_int(d: Mapping[str, Any], name: str, what: str) -> int | None:
    return None if _get(d, name, what) is None else _int(d, name, what)


def _str(d: Mapping[str, Any], name: str, what: str) -> str:
    return _typed(d, name, what, str, "a string")


def _opt_str(d: Mapping[str, Any], name: str, what: str) -> str | None:
    return None if _get(d, name, what) is None else _str(d, name, what)


def _bool(d: Mapping[str, Any], name: str, what: str) -> bool:
    return _typed(d, name, what, bool, "a boolean")


def _list(d: Mapping[str, Any], name: str, what: str) -> list[Any]:
    return _typed(d, name, what, list, "a list")


def _strs(d: Mapping[str, Any], name: str, what: str) -> tuple[str, ...]:
    """An optional list of strings (absent: empty)."""
    if name not in d:
        return ()
    items = _list(d, name, what)
    if not all(isinstance(x, str) for x in items):
        raise DecodeError(what, f"field {name!r} must be a list of strings", repr(items))
    return tuple(items)


def _pair(v: Any, name: str, what: str) -> tuple[int, int]:
    if not isinstance(v, list) or len(v) != 2 or not all(_is_int(x) for x in v):
        raise DecodeError(what, f"{name} must be a pair of integers", repr(v))
    return int(v[0]), int(v[1])


# --------------------------------------------------------------------------------------------
# NodeInventory
#
# Version 1 (every inventory until devices had vendors) has no per-device vendor: its devices are NVIDIA's.
# Version 2 adds ``vendor`` (HAMi's common word) to every device. An inventory whose devices are all NVIDIA's is
# still written as version 1, byte for byte as before, so a reader that predates vendors keeps reading
# NVIDIA nodes; an inventory with another vendor's device is written as version 2, which such a reader refuses
# (SchemaVersionError) instead of taking a DCU for a GPU.
# --------------------------------------------------------------------------------------------

INVENTORY_VERSION = 2
"""The newest node-inventory format (see above)."""


def _placements_out(ps: tuple[MigPlacement, ...]) -> list[list[int]]:
    return [[p.start, p.size] for p in ps]


def _placements_in(v: list[Any], what: str) -> tuple[MigPlacement, ...]:
    return tuple(MigPlacement(*_pair(p, "placement", what)) for p in v)


def inventory_version(inv: NodeInventory) -> int:
    return 1 if all(d.vendor == NVIDIA for d in inv.devices) else INVENTORY_VERSION


def inventory_fields(inv: NodeInventory) -> Fields:
    with_vendor = inventory_version(inv) >= 2
    return {
        "node": inv.node,
        "vendor": inv.vendor,
        "devices": [
            {
                **({"vendor": d.vendor} if with_vendor else {}),
                "id": d.id,
                "index": d.index,
                "count": d.count,
                "devmem_mib": d.devmem_mib,
                "devcore": d.devcore,
                "type": d.type,
                "numa": d.numa,
                "mode": d.mode,
                "health": d.health,
                "mig_profiles": [
                    {
                        "name": p.name,
                        "memory_mib": p.memory_mib,
                        "core_pct": p.core_pct,
                        "slice_count": p.slice_count,
                        "placements": _placements_out(p.placements),
                    }
                    for p in d.mig_profiles
                ],
            }
            for d in inv.devices
        ],
        "pair_scores": {a: {b: int(s) for b, s in sorted(row.items())} for a, row in sorted(inv.pair_scores.items())},
        "cordoned": sorted(inv.cordoned),
    }


def _profile_from(p: Any, what: str) -> MigProfile:
    return MigProfile(
        name=_str(p, "name", what),
        memory_mib=_int(p, "memory_mib", what),
        core_pct=_int(p, "core_pct", what),
        slice_count=_int(p, "slice_count", what),
        placements=_placements_in(_list(p, "placements", what), what),
    )


def _device_from(dev: Any, what: str) -> DeviceInfo:
    return DeviceInfo(
        id=_str(dev, "id", what),
        index=_int(dev, "index", what),
        count=_int(dev, "count", what),
        devmem_mib=_int(dev, "devmem_mib", what),
        devcore=_int(dev, "devcore", what),
        type=_str(dev, "type", what),
        numa=_int(dev, "numa", what),
        mode=_str(dev, "mode", what),
        health=_bool(dev, "health", what),
        mig_profiles=tuple(_profile_from(p, what) for p in _list(dev, "mig_profiles", what)),
        vendor=_str(dev, "vendor", what),
    )


def inventory_v1_to_v2(d: Fields) -> Fields:
    """Version 1 devices are NVIDIA's (malformed fields are left for the decoder to name)."""
    devices = d.get("devices")
    if not isinstance(devices, list):
        return d
    return {**d, "devices": [{**dev, "vendor": NVIDIA} if isinstance(dev, dict) else dev for dev in devices]}


def inventory_from(d: Fields) -> NodeInventory:
    what = "envelope node-inventory"
    node = _str(d, "node", what)
    vendor = _str(d, "vendor", what)
    devices = tuple(_device_from(dev, what) for dev in _list(d, "devices", what))
    raw_scores = _get(d, "pair_scores", what)
    if not isinstance(raw_scores, dict):
        raise DecodeError(what, "field 'pair_scores' must be a map")
    scores: dict[str, dict[str, int]] = {}
    for a, row in raw_scores.items():
        if not isinstance(a, str) or not isinstance(row, dict):
            raise DecodeError(what, "pair_scores rows must be maps", repr(a))
        scores[a] = {}
        for b, s in row.items():
            if not isinstance(b, str) or not _is_int(s):
                raise DecodeError(what, "pair score must map a UUID to an integer", repr(b))
            scores[a][b] = s
    cordoned = _list(d, "cordoned", what)
    if not all(isinstance(u, str) for u in cordoned):
        raise DecodeError(what, "cordoned must list UUID strings")
    return NodeInventory(node=node, vendor=vendor, devices=devices, pair_scores=scores, cordoned=frozenset(cordoned))


# --------------------------------------------------------------------------------------------
# Allocation
# --------------------------------------------------------------------------------------------


def allocation_fields(a: Allocation) -> Fields:
    return {
        "pod_uid": a.pod_uid,
        "namespace": a.namespace,
        "name": a.name,
        "node": a.node,
        "devices": [
            [
                {
                    "uuid": cd.uuid,
                    "type": cd.type,
                    "used_mem_mib": cd.used_mem_mib,
                    "used_cores": cd.used_cores,
                    "legacy_mig": list(cd.legacy_mig) if cd.legacy_mig is not None else None,
                    **({"shown_type": cd.shown_type} if cd.shown_type else {}),
                }
                for cd in container
            ]
            for container in a.devices
        ],
        "charges": [
            {
                "uuid": c.uuid,
                "slots": c.slots,
                "mem_mib": c.mem_mib,
                "cores_pct": c.cores_pct,
                "exclusive": c.exclusive,
                "mig_placements": _placements_out(c.mig_placements),
                "legacy_mig": [list(x) for x in c.legacy_mig],
                **({"uniform": True} if c.uniform else {}),
                **({"tags": list(c.tags)} if c.tags else {}),
                **({"refuse_tags": list(c.refuse_tags)} if c.refuse_tags else {}),
                **({"need_tags": list(c.need_tags)} if c.need_tags else {}),
                **({"cores_unchecked": True} if c.cores_unchecked else {}),
            }
            for c in a.charges
        ],
        "mig": [
            {
                "container_index": m.container_index,
                "device_index": m.device_index,
                "gpu_uuid": m.gpu_uuid,
                "profile": m.profile,
                "placement": [m.placement.start, m.placement.size],
                "mig_uuid": m.mig_uuid,
                "gpu_instance_id": m.gpu_instance_id,
                "compute_instance_id": m.compute_instance_id,
            }
            for m in a.mig
        ],
    }


def allocation_from(d: Fields) -> Allocation:
    what = "envelope allocation"
    pod_uid, namespace = _str(d, "pod_uid", what), _str(d, "namespace", what)
    name, node = _str(d, "name", what), _str(d, "node", what)
    containers = []
    for container in _list(d, "devices", what):
        if not isinstance(container, list):
            raise DecodeError(what, "each container's devices must be a list")
        entries = []
        for cd in container:
            lm = _get(cd, "legacy_mig", what)
            entries.append(
                ContainerDevice(
                    uuid=_str(cd, "uuid", what),
                    type=_str(cd, "type", what),
                    used_mem_mib=_int(cd, "used_mem_mib", what),
                    used_cores=_int(cd, "used_cores", what),
                    legacy_mig=None if lm is None else _pair(lm, "legacy_mig", what),
                    shown_type=(_opt_str(cd, "shown_type", what) or "") if "shown_type" in cd else "",
                )
            )
        containers.append(tuple(entries))
    charges = tuple(
        DeviceCharge(
            uuid=_str(c, "uuid", what),
            slots=_int(c, "slots", what),
            mem_mib=_int(c, "mem_mib", what),
            cores_pct=_int(c, "cores_pct", what),
            exclusive=_bool(c, "exclusive", what),
            mig_placements=_placements_in(_list(c, "mig_placements", what), what),
            legacy_mig=tuple(_pair(x, "legacy_mig", what) for x in _list(c, "legacy_mig", what)),
            uniform=_bool(c, "uniform", what) if "uniform" in c else False,
            tags=_strs(c, "tags", what),
            refuse_tags=_strs(c, "refuse_tags", what),
            need_tags=_strs(c, "need_tags", what),
            cores_unchecked=_bool(c, "cores_unchecked", what) if "cores_unchecked" in c else False,
        )
        for c in _list(d, "charges", what)
    )
    mig = tuple(
        MigAllocation(
            container_index=_int(m, "container_index", what),
            device_index=_int(m, "device_index", what),
            gpu_uuid=_str(m, "gpu_uuid", what),
            profile=_str(m, "profile", what),
            placement=MigPlacement(*_pair(_get(m, "placement", what), "placement", what)),
            mig_uuid=_opt_str(m, "mig_uuid", what),
            gpu_instance_id=_opt_int(m, "gpu_instance_id", what),
            compute_instance_id=_opt_int(m, "compute_instance_id", what),
        )
        for m in _list(d, "mig", what)
    )
    return Allocation(
        pod_uid=pod_uid,
        namespace=namespace,
        name=name,
        node=node,
        devices=tuple(containers),
        charges=charges,
        mig=mig,
    )


# --------------------------------------------------------------------------------------------
# QuotaLimits
# --------------------------------------------------------------------------------------------


QUOTA_VERSION = 2
"""Version 2 adds ``others`` (every other vendor's limits by common word); NVIDIA-only limits are still written
at version 1, byte for byte as before."""


def quota_version(q: QuotaLimits) -> int:
    return QUOTA_VERSION if q.others else 1


def quota_fields(q: QuotaLimits) -> Fields:
    fields: Fields = {"mem_mib": q.mem_mib, "cores_pct": q.cores_pct}
    if q.others:
        fields["others"] = {w: {"mem_mib": v.mem_mib, "cores_pct": v.cores_pct} for w, v in q.others}
    return fields


def quota_v1_to_v2(d: Fields) -> Fields:
    """Version 1 limits are NVIDIA's only."""
    return {**d, "others": {}}


def quota_from(d: Fields) -> QuotaLimits:
    what = "envelope quota-limits"
    others = _get(d, "others", what)
    if not isinstance(others, dict):
        raise DecodeError(what, "field 'others' must be a map", repr(others))
    vendors: dict[str, VendorLimits] = {}
    for word, lim in others.items():
        where = f"{what} others[{word!r}]"
        if not isinstance(word, str) or not is_quota_word(word) or word == NVIDIA:
            raise DecodeError(what, "field 'others' has a key that is not another vendor's common word", repr(word))
        vendors[word] = VendorLimits(_opt_int(lim, "mem_mib", where), _opt_int(lim, "cores_pct", where))
    nvidia = VendorLimits(_opt_int(d, "mem_mib", what), _opt_int(d, "cores_pct", what))
    return quota_limits(nvidia, vendors)
