"""The pod annotations of an allocation: what ``/bind`` writes (difference 3) and what accounting reads (difference 10).

``/bind`` writes, in one merge patch, ``hami.io/vgpu-node`` (plus the label of the same key), ``hami.io/vgpu-time``,
the to-allocate and allocated device lists (identical; one pair per vendor the pod was given devices of, each
under that vendor's keys), ``hami.io/vgpu-mig-allocations`` when there are MIG placements,
``hami.io/bind-phase: allocating`` and ``hami.io/bind-time``. Accounting reads the *allocated* list, never
to-allocate (the device plugin rewrites that one while it consumes it).

This module holds what needs no vendor set: the label, the split of a device list by vendor and the reading of an
allocation; writing the annotations asks every vendor for its keys and encoding and lives in the vendor layer
(``shared.vendors.pods.allocation_annotations``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec._go import fail
from vgpu_scheduler.shared.codec.mig import decode_mig_allocations
from vgpu_scheduler.shared.codec.poddevices import align_to_containers, decode_pod_devices
from vgpu_scheduler.shared.codec.resources import pod_containers
from vgpu_scheduler.shared.domain.model import ContainerDevice, MigAllocation, PodDevices


class AllocatedReader(Protocol):
    """What reading a vendor's allocation needs (a :class:`~shared.vendors.base.Vendor` is one): the pod annotation
    its device plugin reads the allocation from, and the decoder of that annotation's device list."""

    @property
    def allocated_key(self) -> str: ...

    def decode_devices(self, value: str) -> tuple[tuple[ContainerDevice, ...], ...]: ...


@dataclass(frozen=True, slots=True)
class _NvidiaReader:
    @property
    def allocated_key(self) -> str:
        return keys.DEVICES_ALLOCATED

    def decode_devices(self, value: str) -> tuple[tuple[ContainerDevice, ...], ...]:
        return decode_pod_devices(value)


NVIDIA_READER: AllocatedReader = _NvidiaReader()
"""``hami.io/vgpu-devices-allocated``: the reader :func:`decode_allocation` uses when given no vendors."""


def merge_pod_devices(parts: Sequence[PodDevices]) -> PodDevices:
    """Several vendors' device lists of one pod (each aligned to the same containers) as one: container ``i``
    holds the entries of every part for ``i``, part after part (vendor order), each part's own order kept."""
    if not parts:
        return ()
    if len(parts) == 1:
        return parts[0]
    count = len(parts[0])
    if any(len(p) != count for p in parts):
        raise ValueError("merge_pod_devices needs device lists of the same container count")
    return tuple(tuple(d for p in parts for d in p[i]) for i in range(count))


def vendors_used(devices: PodDevices) -> tuple[str, ...]:
    """The common words of the devices' types, in order of first appearance."""
    return tuple(dict.fromkeys(d.type for ctr in devices for d in ctr))


def split_by_vendor(devices: PodDevices, vendor: str) -> PodDevices:
    """``vendor``'s devices of every container, one entry per container (empty where it has none)."""
    return tuple(tuple(d for d in ctr if d.type == vendor) for ctr in devices)


_LABEL_VALUE_MAX: Final = 63
_LABEL_VALUE_RE: Final = re.compile(r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?\Z")


def is_valid_label_value(value: str) -> bool:
    """Kubernetes ``IsValidLabelValue``: at most 63 characters, alphanumeric at both ends, ``-_.`` inside."""
    return len(value) <= _LABEL_VALUE_MAX and _LABEL_VALUE_RE.match(value) is not None


def allocation_labels(node: str) -> dict[str, str]:
    """The label written with the annotations (vGPUmonitor selects pods by it).

    Empty when the node name is no valid label value (node names may have up to 253 characters, label values
    63): the API server would refuse the whole pod patch, so the label is left out, as HAMi's
    ``PatchPodAnnotations`` does; the ``hami.io/vgpu-node`` annotation still names the node."""
    return {keys.VGPU_NODE_LABEL: node} if is_valid_label_value(node) else {}


def _annotations(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = pod.get("metadata") if isinstance(pod, Mapping) else None
    if meta is None:
        return {}
    if not isinstance(meta, Mapping):
        fail("pod.metadata", "expected an object")
    annos = meta.get("annotations")
    if annos is None:
        return {}
    if not isinstance(annos, Mapping):
        fail("pod.metadata.annotations", "expected an object")
    return annos


def _text(annos: Mapping[str, Any], key: str) -> str | None:
    v = annos.get(key)
    if v is not None and not isinstance(v, str):
        fail(key, f"annotation value must be a string, got {type(v).__name__}")
    return v


def decode_allocation(
    pod: Mapping[str, Any], vendors: Sequence[AllocatedReader] = (NVIDIA_READER,)
) -> tuple[PodDevices, tuple[MigAllocation, ...]] | None:
    """A pod's allocation from the *allocated* annotation of every vendor in ``vendors`` (default NVIDIA's only),
    each aligned to the pod's init + app containers and merged per container in vendor order
    (:func:`merge_pod_devices`).

    ``None`` when the pod carries no ``hami.io/vgpu-node`` (not placed by a HAMi-compatible scheduler). A placed
    pod without any allocated list has all-empty entries. A malformed list raises DecodeError naming its key.
    MIG placements are decoded and validated on their own; matching them to device entries is accounting's job.
    """
    if not isinstance(pod, Mapping):
        fail("pod", f"expected an object, got {type(pod).__name__}")
    annos = _annotations(pod)
    if _text(annos, keys.VGPU_NODE) is None:
        return None
    init, app = pod_containers(pod)
    count = len(init) + len(app)
    parts: list[PodDevices] = []
    for vendor in vendors:
        key = vendor.allocated_key
        allocated = _text(annos, key)
        if allocated is None and parts:
            continue  # nothing from this vendor (the first part keeps the all-empty shape)
        entries = vendor.decode_devices(allocated) if allocated is not None else ()
        parts.append(align_to_containers(entries, count, key))
    devices = merge_pod_devices(parts) if parts else ((),) * count
    mig_text = _text(annos, keys.MIG_ALLOCATIONS)
    mig = decode_mig_allocations(mig_text) if mig_text is not None else ()
    return devices, mig
