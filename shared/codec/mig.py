"""``hami.io/vgpu-mig-allocations``: dynamic-MIG placements of a pod (hami-wire §7.1, HAMi ``mig_allocations.go``).

``[{"containerIndex":1,"deviceIndex":0,"gpuUUID":"GPU-x","profile":"2g.10gb","placement":{"start":2,"size":2}}]``;
after Allocate the device plugin adds ``"migUUID":"MIG-…","gpuInstanceID":<n>,"computeInstanceID":<n>``.

Validation as ``DecodeMigAllocations``: indices ≥ 0, non-empty ``gpuUUID`` and ``profile``, ``placement.size`` > 0,
the runtime fields all three or none (an empty ``migUUID`` or a ``null`` id counts as absent), no duplicate
(containerIndex, deviceIndex). An empty string or ``null`` is no allocation. The encoder enforces the same rules.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec._go import (
    INT64_MAX,
    INT64_MIN,
    UINT32_MAX,
    dump_array,
    dump_object,
    dump_str,
    each,
    fail,
    json_int,
    json_list,
    json_str,
    loads,
    struct_fields,
)
from vgpu_scheduler.shared.codec.register import placement_from_json, placement_json
from vgpu_scheduler.shared.domain.model import MigAllocation

WHAT = keys.MIG_ALLOCATIONS

_FIELDS = (
    "containerIndex",
    "deviceIndex",
    "gpuUUID",
    "profile",
    "placement",
    "migUUID",
    "gpuInstanceID",
    "computeInstanceID",
)
_POINTERS = ("gpuInstanceID", "computeInstanceID")


def _from_json(obj: Any, what: str) -> MigAllocation:
    f = struct_fields({} if obj is None else obj, _FIELDS, what, pointers=_POINTERS)
    mig_uuid = json_str(f.get("migUUID", ""), f"{what}.migUUID")
    gi = f.get("gpuInstanceID")
    ci = f.get("computeInstanceID")
    return MigAllocation(
        container_index=json_int(f.get("containerIndex", 0), INT64_MIN, INT64_MAX, f"{what}.containerIndex"),
        device_index=json_int(f.get("deviceIndex", 0), INT64_MIN, INT64_MAX, f"{what}.deviceIndex"),
        gpu_uuid=json_str(f.get("gpuUUID", ""), f"{what}.gpuUUID"),
        profile=json_str(f.get("profile", ""), f"{what}.profile"),
        placement=placement_from_json(f.get("placement"), f"{what}.placement"),
        mig_uuid=mig_uuid or None,
        gpu_instance_id=None if gi is None else json_int(gi, 0, UINT32_MAX, f"{what}.gpuInstanceID"),
        compute_instance_id=None if ci is None else json_int(ci, 0, UINT32_MAX, f"{what}.computeInstanceID"),
    )


def _validate(allocs: Iterable[MigAllocation], what: str) -> None:
    seen: set[tuple[int, int]] = set()
    for i, a in enumerate(allocs):
        if a.container_index < 0 or a.device_index < 0 or not a.gpu_uuid or not a.profile or a.placement.size <= 0:
            fail(what, f"MIG allocation {i} is incomplete", a.gpu_uuid)
        runtime = (
            a.mig_uuid is not None and a.mig_uuid != "",
            a.gpu_instance_id is not None,
            a.compute_instance_id is not None,
        )
        if any(runtime) and not all(runtime):
            fail(what, f"MIG allocation {i} has a partial runtime identity", a.gpu_uuid)
        key = (a.container_index, a.device_index)
        if key in seen:
            fail(what, f"duplicate MIG allocation for container {key[0]} device {key[1]}", a.gpu_uuid)
        seen.add(key)


def decode_mig_allocations(value: str) -> tuple[MigAllocation, ...]:
    """Decode and validate; ``""`` and ``null`` are the empty tuple."""
    if value == "":
        return ()
    doc = loads(value, WHAT)
    if doc is None:
        return ()
    allocs: tuple[MigAllocation, ...] = each(json_list(doc, WHAT), WHAT, _from_json)
    _validate(allocs, WHAT)
    return allocs


def encode_mig_allocations(allocs: Iterable[MigAllocation]) -> str:
    """Encode with HAMi's key order: containerIndex, deviceIndex, gpuUUID, profile, placement, then the runtime
    identity when present. Invalid allocations (the decoder's rules) raise DecodeError."""
    items = tuple(allocs)
    _validate(items, WHAT)
    out = []
    for a in items:
        if not (0 <= a.placement.start <= UINT32_MAX and a.placement.size <= UINT32_MAX):
            fail(WHAT, "cannot encode a placement outside uint32", a.gpu_uuid)
        if max(a.container_index, a.device_index) > INT64_MAX:
            fail(WHAT, "cannot encode an index outside int64", a.gpu_uuid)
        for rid in (a.gpu_instance_id, a.compute_instance_id):
            if rid is not None and not 0 <= rid <= UINT32_MAX:
                fail(WHAT, "cannot encode an instance id outside uint32", a.gpu_uuid)
        pairs = [
            ("containerIndex", str(a.container_index)),
            ("deviceIndex", str(a.device_index)),
            ("gpuUUID", dump_str(a.gpu_uuid)),
            ("profile", dump_str(a.profile)),
            ("placement", placement_json(a.placement)),
        ]
        if a.mig_uuid:
            pairs.append(("migUUID", dump_str(a.mig_uuid)))
        if a.gpu_instance_id is not None:
            pairs.append(("gpuInstanceID", str(a.gpu_instance_id)))
        if a.compute_instance_id is not None:
            pairs.append(("computeInstanceID", str(a.compute_instance_id)))
        out.append(dump_object(pairs))
    return dump_array(out)
