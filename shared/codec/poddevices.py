"""The pod device list: ``hami.io/vgpu-devices-to-allocate`` / ``…-allocated`` (hami-wire §3.1).

Each device is ``<UUID>,<Type>,<Usedmem>,<Usedcores>`` followed by ``:``; each container entry (init containers
first, then regular containers, empty entries included) is followed by ``;``::

    ;GPU-aaaa,NVIDIA,3000,30:;GPU-bbbb,NVIDIA,5000,0:GPU-cccc,NVIDIA,5000,0:;

Decoding follows HAMi's ``DecodePodDevices``: split on ``;`` keeping every piece — *including the empty piece
after the final terminator*, so ``"x:;"`` gives two entries, the last empty, and the value above gives four —
then split each piece on ``:`` and skip sub-pieces without ``,``. A sub-piece with fewer than 4 fields is an
error; extra fields are ignored; memory and cores parse as int32. Like HAMi's current decoder, an empty UUID or
type and negative numbers are errors too. Use :func:`align_to_containers` to map the pieces onto a pod's
containers.

Legacy MIG (≤ v2.9) appends ``[<geometry>-<slot>]`` to the UUID; it is split off into
``ContainerDevice.legacy_mig`` (so ``uuid`` is always the physical GPU) and re-attached on encode.
"""

from __future__ import annotations

import re

from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec._go import INT32_MAX, fail, parse_int
from vgpu_scheduler.shared.domain.model import ContainerDevice, PodDevices

_LEGACY_RE = re.compile(r"(?P<uuid>[^\[\]]+)\[(?P<g>[0-9]{1,18})-(?P<s>[0-9]{1,18})\]\Z")
_FORBIDDEN = frozenset(",:;")


def _device(sub: str, what: str) -> ContainerDevice:
    fields = sub.split(",")
    if len(fields) < 4:
        fail(what, f"device entry has {len(fields)} fields, expected 4", sub)
    raw_uuid, dev_type = fields[0], fields[1]
    if raw_uuid == "":
        fail(what, "device entry without a UUID", sub)
    if dev_type == "":
        fail(what, "device entry without a type", sub)
    mem = parse_int(fields[2], 32, what, sub)
    cores = parse_int(fields[3], 32, what, sub)
    if mem < 0 or cores < 0:
        fail(what, "memory and cores must not be negative", sub)
    uuid, legacy = raw_uuid, None
    if "[" in raw_uuid or "]" in raw_uuid:
        m = _LEGACY_RE.match(raw_uuid)
        if m is None:
            fail(what, "malformed legacy MIG suffix, expected <uuid>[<g>-<s>]", sub)
        uuid, legacy = m["uuid"], (int(m["g"]), int(m["s"]))
    return ContainerDevice(uuid=uuid, used_mem_mib=mem, used_cores=cores, type=dev_type, legacy_mig=legacy)


def decode_pod_devices(value: str, what: str = keys.DEVICES_ALLOCATED) -> PodDevices:
    """Decode every ``;``-separated piece, the trailing empty one included (see the module docstring)."""
    out = []
    for piece in value.split(";"):
        devices = tuple(_device(sub, what) for sub in piece.split(":") if "," in sub)
        out.append(devices)
    return tuple(out)


def align_to_containers(entries: PodDevices, container_count: int, what: str = keys.DEVICES_ALLOCATED) -> PodDevices:
    """Map decoded pieces onto a pod's ``container_count`` containers (init first, then regular).

    * The last piece is dropped when empty: every entry is ``;``-terminated, so that piece is the terminator's,
      and a value we wrote (one entry per container) comes back exactly.
    * Further surplus *empty* pieces at the end are dropped; a surplus non-empty piece is a DecodeError.
    * A shortfall (a ≤ v2.8 scheduler listed regular containers only; HAMi HEAD may omit the entries of
      containers without GPUs) is padded with empty entries at the *front*. Each listed entry then sits at or
      after its true position, so an app container's devices never land on an init container (which would
      under-count usage when init/app are collapsed); at worst an init container's devices are counted as an
      app container's, which over-counts. For ≤ v2.8 values the mapping is exact.
    """
    if container_count < 0:
        raise ValueError("container_count must not be negative")
    items = list(entries)
    if items and not items[-1]:
        items.pop()
    if any(items[container_count:]):
        fail(what, f"{len(items)} device entries for {container_count} containers")
    del items[container_count:]
    return (((),) * (container_count - len(items))) + tuple(items)


def _check_text(text: str, field: str, what: str) -> str:
    if text == "" or any(c in _FORBIDDEN for c in text) or "[" in text or "]" in text:
        fail(what, f"cannot encode {field} {text!r}: empty or containing , : ; [ ]", text)
    return text


def encode_device(d: ContainerDevice, what: str = keys.DEVICES_ALLOCATED) -> str:
    """One ``<UUID>[<g>-<s>],<Type>,<Usedmem>,<Usedcores>:`` entry."""
    uuid = _check_text(d.uuid, "uuid", what)
    if d.legacy_mig is not None:
        g, s = d.legacy_mig
        if g < 0 or s < 0:
            fail(what, "cannot encode a negative legacy MIG index", d.uuid)
        uuid = f"{uuid}[{g}-{s}]"
    if not (0 <= d.used_mem_mib <= INT32_MAX and 0 <= d.used_cores <= INT32_MAX):
        fail(what, "cannot encode memory/cores outside 0..2^31-1", d.uuid)
    return f"{uuid},{_check_text(d.shown_type or d.type, 'type', what)},{d.used_mem_mib},{d.used_cores}:"


def encode_pod_devices(devices: PodDevices, what: str = keys.DEVICES_ALLOCATED) -> str:
    """Encode one ``;``-terminated entry per container (difference 2: init first, empty entries kept)."""
    return "".join("".join(encode_device(d, what) for d in ctr) + ";" for ctr in devices)
