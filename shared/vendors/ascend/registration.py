"""Ascend node registration: ``hami.io/node-register-<cw>`` (JSON, with ``custominfo.NetworkID``), the handshake
key, and what the device plugin writes (for the simulator and tests). Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction
from typing import Any

from vgpu_scheduler.shared.codec._go import (
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
from vgpu_scheduler.shared.codec.register import device_from_fields, device_json
from vgpu_scheduler.shared.domain.model import DeviceInfo
from vgpu_scheduler.shared.vendors.ascend.config import NETWORK_ID

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
        net = nets.get(d.id)
        items.append(
            device_json(
                d,
                ("health", "true", d.health),
                ("devicevendor", dump_str(d.vendor), d.vendor != ""),
                ("custominfo", dump_object([(NETWORK_ID, str(net))]), net is not None),
            )
        )
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
