"""Pieces the smaller device families share (Iluvatar, Biren, Vastai …): the register annotation read in one format
only (colon or JSON) and written in the colon format, UUID-only selectors, the ``Fit`` of families that check only
UUIDs or hand out slots, and a count-only request. Pure."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vgpu_scheduler.shared.codec._go import fail
from vgpu_scheduler.shared.codec.register import decode_register, encode_register_colon, is_json
from vgpu_scheduler.shared.codec.resources import (
    QuantityKind,
    ResourceRequestError,
    raw_value,
)
from vgpu_scheduler.shared.codec.selectors import decode_uuid_list
from vgpu_scheduler.shared.domain.model import EMPTY_REQUEST, ContainerRequest, DeviceInfo, PodConstraints, Selectors
from vgpu_scheduler.shared.domain.vendor import BasicRules, Take, selectors_uuid_ok
from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.vendors.common import read_container, rekey

COLON_FORMAT = "id,count,devmem,devcore,type,numa,health[,index,mode]:"


def decode_colon(value: str, key: str, vendor: str) -> tuple[DeviceInfo, ...]:
    """A register value in the colon format only (HAMi's ``DecodeNodeDevices``); JSON is a DecodeError."""
    if is_json(value):
        fail(key, f"expected the colon format ({COLON_FORMAT}), got JSON", value)
    try:
        devices = decode_register(value)
    except DecodeError as e:
        raise rekey(e, key) from e
    return tuple(dataclasses.replace(d, vendor=vendor) for d in devices)


def encode_colon(devices: Sequence[DeviceInfo], key: str) -> str:
    """The 9-field colon register value of ``devices``, as a colon-format plugin writes it under ``key`` (a
    DecodeError names ``key``)."""
    try:
        return encode_register_colon(tuple(devices), 9)
    except DecodeError as e:
        raise rekey(e, key) from e


def decode_json(value: str, key: str, vendor: str, devcore: int | None = None) -> tuple[DeviceInfo, ...]:
    """A register value in JSON only (HAMi's ``UnMarshalNodeDevices``; unknown keys ignored). ``devcore``: the
    core total every device gets whatever it registered (Biren and Vastai set 100)."""
    if not is_json(value):
        fail(key, "expected a JSON array of devices", value)
    try:
        devices = decode_register(value)
    except DecodeError as e:
        raise rekey(e, key) from e
    if devcore is None:
        return tuple(dataclasses.replace(d, vendor=vendor) for d in devices)
    return tuple(dataclasses.replace(d, vendor=vendor, devcore=devcore) for d in devices)


def uuid_selectors(annotations: Mapping[str, str], use_key: str, nouse_key: str, device: str = "device") -> Selectors:
    """HAMi's two UUID lists (both apply); a use list that names nothing is a DecodeError (it matches nothing:
    "no ``device`` could ever match")."""

    def text(key: str) -> str | None:
        value = annotations.get(key)
        if value is not None and not isinstance(value, str):
            fail(key, f"annotation value must be a string, got {type(value).__name__}")
        return value

    use: frozenset[str] = frozenset()
    nouse: frozenset[str] = frozenset()
    if (v := text(use_key)) is not None:
        use = decode_uuid_list(v)
        if v.strip() and not use:
            fail(use_key, f"list holds no UUID, so no {device} could ever match", v)
    if (v := text(nouse_key)) is not None:
        nouse = decode_uuid_list(v)
    return Selectors(use_uuids=use, nouse_uuids=nouse)


@dataclass(frozen=True, slots=True)
class UuidOnlyRules(BasicRules):
    """``Fit`` of a family whose ``checkType`` only compares the request's type with the common word, and whose
    UUID lists both apply."""

    def type_ok(self, dev: DeviceInfo, req: ContainerRequest, constraints: PodConstraints) -> bool:
        return req.type == self.name

    def uuid_ok(self, dev: DeviceInfo, constraints: PodConstraints) -> bool:
        return selectors_uuid_ok(dev, constraints.selectors(self.name))


@dataclass(frozen=True, slots=True)
class SlotOnlyRules(UuidOnlyRules):
    """``Fit`` of a family that hands out devices by slot alone (Biren, Vastai): a device takes no memory and no
    cores in the pod's device list, so only health, cordon, UUID, time slices and ``mutex`` decide."""

    def take(self, dev: DeviceInfo, req: ContainerRequest, used_mem_mib: int) -> Take:
        del dev, req, used_mem_mib
        return Take(0, 0)


def count_only_request(
    container: Mapping[str, Any], what: str, count_name: str, vendor: str, *, mem_mib: int = 0, cores_pct: int = 0
) -> ContainerRequest:
    """HAMi's ``GenerateResourceRequests`` of a family with a count resource only: ``n`` devices, memory as a
    percentage (100, the whole device; ``mem_mib`` beside it where the family sets one), ``cores_pct`` cores (none
    by default). The count is read from the limits, else the requests; a bad quantity is a ResourceRequestError."""
    limits, requests, r = read_container(container, what, count_name)
    n = r.read(limits, requests, count_name, QuantityKind.COUNT)
    if r.problems:
        raise ResourceRequestError(r.problems)
    if not raw_value(limits, requests, count_name)[0] or not n:
        return EMPTY_REQUEST
    return ContainerRequest(nums=n, mem_mib=mem_mib, mem_pct=100, cores_pct=cores_pct, type=vendor)
