"""The sGPU register annotation ``metax-tech.com/node-gpu-devices`` read and written (cards with their QoS policy and
MetaLink zone in the device mode). Pure."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from vgpu_scheduler.shared.codec._go import fail
from vgpu_scheduler.shared.domain.model import DeviceInfo
from vgpu_scheduler.shared.vendors.metax_sgpu.keys import INT32_MAX, NAME, REGISTER_KEY


def device_mode(qos: str, link_zone: int) -> str:
    """The device's mode: its registered QoS policy and MetaLink zone (``qos=best-effort link=2``)."""
    return f"qos={qos} link={link_zone}"


def qos_of(dev: DeviceInfo) -> str:
    """The QoS policy the card registered (``""`` when none)."""
    for part in dev.mode.split(" "):
        if part.startswith("qos="):
            return part[4:]
    return ""


def link_zone_of(dev: DeviceInfo) -> int:
    """The card's MetaLink zone (0: none)."""
    for part in dev.mode.split(" "):
        if part.startswith("link="):
            try:
                return int(part[5:])
            except ValueError:
                return 0
    return 0


def _int32(item: Mapping[str, Any], key: str, where: str, value: str) -> int:
    v = item.get(key, 0)
    if isinstance(v, bool) or not isinstance(v, int) or not -(2**31) <= v <= INT32_MAX:
        fail(f"{where}.{key}", "expected a whole number within int32", value)
    return v


def decode_devices_register(value: str) -> tuple[DeviceInfo, ...]:
    """``metax-tech.com/node-gpu-devices`` → the node's cards (HAMi's ``convertMetaxSDeviceToHAMIDevice``: index by
    position, ``totalDevCount`` slots, ``totalVRam`` MiB, ``totalCompute`` cores). A value that is not a JSON array
    of objects with a string ``uuid``, a number field out of int32, or a ``qosPolicy`` or ``uuid`` with a space or
    ``,:;`` is a DecodeError."""
    try:
        items = json.loads(value)
    except ValueError:
        fail(REGISTER_KEY, "expected a JSON array of cards", value)
    if not isinstance(items, list):
        fail(REGISTER_KEY, "expected a JSON array of cards", value)
    out: list[DeviceInfo] = []
    for i, item in enumerate(items):
        where = f"{REGISTER_KEY}[{i}]"
        if not isinstance(item, Mapping):
            fail(where, "expected an object", value)
        uuid = item.get("uuid")
        if not isinstance(uuid, str) or not uuid or any(c in uuid for c in " ,:;"):
            fail(f"{where}.uuid", "expected a card UUID (a string without spaces or ,:;)", value)
        qos = item.get("qosPolicy", "")
        if not isinstance(qos, str) or any(c in qos for c in " ,:;"):
            fail(f"{where}.qosPolicy", "expected a QoS policy name", value)
        healthy = item.get("healthy", False)
        if not isinstance(healthy, bool):
            fail(f"{where}.healthy", "expected true or false", value)
        out.append(
            DeviceInfo(
                id=uuid,
                index=i,
                count=_int32(item, "totalDevCount", where, value),
                devmem_mib=_int32(item, "totalVRam", where, value),
                devcore=_int32(item, "totalCompute", where, value),
                type=NAME,
                numa=_int32(item, "numa", where, value),
                mode=device_mode(qos, _int32(item, "linkZone", where, value)),
                health=healthy,
                vendor=NAME,
            )
        )
    return tuple(out)


def registration_value(devices: Sequence[DeviceInfo]) -> str:
    """The register value the MetaX device plugin writes for ``devices`` (the simulator's nodes)."""
    items = [
        {
            "uuid": d.id,
            "model": NAME,
            "totalDevCount": d.count,
            "totalCompute": d.devcore,
            "totalVRam": d.devmem_mib,
            "numa": d.numa,
            "healthy": d.health,
            "qosPolicy": qos_of(d),
            "linkZone": link_zone_of(d),
        }
        for d in devices
    ]
    return json.dumps(items, separators=(",", ":"))
