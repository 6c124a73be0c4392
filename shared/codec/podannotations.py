"""The pod annotations of an allocation: what ``/bind`` writes (difference 3) and what accounting reads (difference 10).

``/bind`` writes, in one merge patch, ``hami.io/vgpu-node`` (plus the label of the same key), ``hami.io/vgpu-time``,
the to-allocate and allocated device lists (identical), ``hami.io/vgpu-mig-allocations`` when there are MIG
placements, ``hami.io/bind-phase: allocating`` and ``hami.io/bind-time``. Accounting reads the *allocated* list,
never to-allocate (the device plugin rewrites that one while it consumes it).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from shared.codec import annotations as keys
from shared.codec._go import fail
from shared.codec.mig import decode_mig_allocations, encode_mig_allocations
from shared.codec.poddevices import align_to_containers, decode_pod_devices, encode_pod_devices
from shared.codec.resources import pod_containers
from shared.domain.model import BindPhase, MigAllocation, PodDevices


def allocation_annotations(
    node: str, devices: PodDevices, mig: tuple[MigAllocation, ...], now_unix: int
) -> dict[str, str]:
    """The annotations ``/bind`` patches onto the pod, exactly as the device plugin expects them."""
    if not node:
        fail(keys.VGPU_NODE, "cannot encode an empty node name")
    if now_unix < 0:
        fail(keys.VGPU_TIME, "cannot encode a negative Unix time", str(now_unix))
    device_list = encode_pod_devices(devices)
    stamp = str(now_unix)
    out = {
        keys.VGPU_NODE: node,
        keys.VGPU_TIME: stamp,
        keys.DEVICES_TO_ALLOCATE: device_list,
        keys.DEVICES_ALLOCATED: device_list,
    }
    if mig:
        out[keys.MIG_ALLOCATIONS] = encode_mig_allocations(mig)
    out[keys.BIND_PHASE] = BindPhase.ALLOCATING.value
    out[keys.BIND_TIME] = stamp
    return out


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


def decode_allocation(pod: Mapping[str, Any]) -> tuple[PodDevices, tuple[MigAllocation, ...]] | None:
    """A pod's NVIDIA allocation from its *allocated* annotation, aligned to its init + app containers.

    ``None`` when the pod carries no ``hami.io/vgpu-node`` (not placed by a HAMi-compatible scheduler). A placed
    pod without an allocated list (e.g. one that only uses another vendor) has all-empty entries.
    MIG placements are decoded and validated on their own; matching them to device entries is accounting's job.
    """
    if not isinstance(pod, Mapping):
        fail("pod", f"expected an object, got {type(pod).__name__}")
    annos = _annotations(pod)
    if _text(annos, keys.VGPU_NODE) is None:
        return None
    init, app = pod_containers(pod)
    count = len(init) + len(app)
    allocated = _text(annos, keys.DEVICES_ALLOCATED)
    entries = decode_pod_devices(allocated) if allocated is not None else ()
    devices = align_to_containers(entries, count)
    mig_text = _text(annos, keys.MIG_ALLOCATIONS)
    mig = decode_mig_allocations(mig_text) if mig_text is not None else ()
    return devices, mig
