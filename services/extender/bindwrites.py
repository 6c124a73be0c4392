"""What a bind writes on the pod, and how it recognises and takes back its own write.

One bind's write is the ``hami.io/vgpu-node``, ``hami.io/vgpu-time`` and ``hami.io/bind-time`` annotations with
every vendor's *allocated* device list (the device plugin changes the *to-allocate* list and the phase later).
:func:`foreign_allocation` tells another decision's write from this one before the pod is patched;
:func:`remove_own_annotations` undoes the write only while the pod still carries exactly it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final

from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.errors import ConflictError
from vgpu_scheduler.shared.k8s import Api, KubeObject
from vgpu_scheduler.shared.k8s.objects import meta, resource_version_of, uid_of
from vgpu_scheduler.shared.protocol.extender import ExtenderBindingArgs

logger = logging.getLogger(__name__)

POD_PATCH_ATTEMPTS: Final = 3
"""Attempts of one guarded pod patch (a 409 re-reads the pod and tries again at its resourceVersion)."""

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


async def remove_own_annotations(
    api: Api,
    args: ExtenderBindingArgs,
    annos: Mapping[str, str],
    written: KubeObject | None,
    *,
    allocated_keys: tuple[str, ...],
    call_timeout_s: float,
) -> None:
    """Remove the allocation annotations and label while the pod still carries exactly the values this bind
    wrote (``annos``; ``written``: the pod as that patch left it, None to read it), guarded by the resourceVersion
    they were seen at (never another bind's)."""
    ns, name = args.pod_namespace, args.pod_name
    pod = written
    for _ in range(POD_PATCH_ATTEMPTS):
        if pod is None:
            pod = await api.get_pod(ns, name, timeout_s=call_timeout_s)
        if uid_of(pod) != args.pod_uid or not carries(pod, annos, allocated_keys):
            return
        try:
            await api.patch_pod_metadata(
                ns,
                name,
                annotations=dict.fromkeys(annos),
                labels={keys.VGPU_NODE_LABEL: None},
                resource_version=resource_version_of(pod) or None,
                timeout_s=call_timeout_s,
            )
            return
        except ConflictError:
            pod = None
    logger.warning("bind undo: pod kept changing, annotations left to the informer", extra={"pod": f"{ns}/{name}"})
