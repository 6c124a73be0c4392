"""What a bind writes on the pod, and how it recognises its own write.

One bind's write is the ``hami.io/vgpu-node``, ``hami.io/vgpu-time`` and ``hami.io/bind-time`` annotations with
every vendor's *allocated* device list (the device plugin changes the *to-allocate* list and the phase later),
carried by the Binding. :func:`foreign_allocation` tells another decision's write from this one before the pod is
bound; :func:`carries` tells whether a pod found bound (after a Binding whose answer was lost) carries this one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.k8s.objects import meta

BINDING_ATTEMPTS: Final = 3
"""Attempts of one guarded Binding (a stale resourceVersion re-reads the pod and tries again at its version)."""

_OWN_KEYS: Final = (keys.VGPU_NODE, keys.VGPU_TIME, keys.BIND_TIME)
"""With every vendor's allocated key, the annotations that identify one bind's write (the device plugin changes
to-allocate and the phase)."""


def carries(
    pod: Mapping[str, Any], annos: Mapping[str, str], allocated_keys: tuple[str, ...] = (keys.DEVICES_ALLOCATED,)
) -> bool:
    """The pod still shows the allocation annotations exactly as ``annos`` (one bind's write) set them."""
    have = meta(pod).get("annotations") or {}
    return all(have.get(k) == annos.get(k) for k in (*_OWN_KEYS, *allocated_keys) if k in annos)


def foreign_allocation(
    pod: Mapping[str, Any], annos: Mapping[str, str], allocated_keys: tuple[str, ...] = (keys.DEVICES_ALLOCATED,)
) -> str:
    """Describe another decision's allocation on the pod ('' when none, or when it is the same devices)."""
    have = meta(pod).get("annotations") or {}
    node = have.get(keys.VGPU_NODE)
    lists = {k: have.get(k) for k in allocated_keys if have.get(k) is not None or k in annos}
    if node is None and all(v is None for v in lists.values()):
        return ""
    if node == annos.get(keys.VGPU_NODE) and all(v == annos.get(k) for k, v in lists.items()):
        return ""
    devices = "; ".join(f"{k}={v}" for k, v in lists.items() if v is not None) or "none"
    if lists.keys() == {keys.DEVICES_ALLOCATED}:
        devices = str(lists[keys.DEVICES_ALLOCATED])
    return f"node {node}, devices {devices}"
