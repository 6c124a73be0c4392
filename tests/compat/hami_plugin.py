"""HAMi's NVIDIA device plugin, READ side, re-implemented from docs/hami-wire.md alone (§3.1, §4.1, §4.3).

Deliberately independent of ``shared.codec``: it is the yardstick our writers are measured against, so it must
not share their code. It covers what a real plugin does when the kubelet calls Allocate for a freshly bound pod:

* :func:`get_pending_pod` — ``util.GetPendingPod``: the pod named by ``hami.io/mutex.lock`` (no fallback on
  errors), else the first pod on the node that is Pending, has ``hami.io/bind-time``, a bind phase of
  ``allocating``/``success`` and ``hami.io/vgpu-node == <node>``;
* :func:`decode_head` / :func:`decode_v28` — ``DecodePodDevices`` at HEAD (empty entries kept, the trailing
  piece included) and ≤ v2.8 (empty entries dropped);
* :func:`allocate` — one ``Allocate`` call: pop the first non-empty entry, map it to a container (HEAD: init
  containers first; ≤ v2.8: ``spec.containers[index]``), check the device count, write the list back with the
  entry emptied, and when no ``NVIDIA`` is left set ``hami.io/bind-phase: success`` and release the lock
  (owner-checked, resourceVersion-guarded).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from vgpu_scheduler.shared.errors import ConflictError
from vgpu_scheduler.shared.k8s import Api

LOCK = "hami.io/mutex.lock"
TO_ALLOCATE = "hami.io/vgpu-devices-to-allocate"
BIND_PHASE = "hami.io/bind-phase"
BIND_TIME = "hami.io/bind-time"
VGPU_NODE = "hami.io/vgpu-node"
COMMON_WORD = "NVIDIA"

# Go time.Parse(time.RFC3339, ...): 'T', optional fraction, 'Z' or ±hh:mm
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})\Z")
_INT = re.compile(r"[+-]?\d+\Z")


class PluginError(Exception):
    """What makes the plugin's Allocate fail."""


class Variant(enum.Enum):
    HEAD = "head"
    """v2.9+: init containers first, empty entries kept."""
    V28 = "v2.8"
    """≤ v2.8: empty entries dropped, the index read as ``spec.containers[index]``."""


@dataclass(frozen=True)
class Device:
    uuid: str
    type: str
    mem_mib: int
    cores: int


def parse_rfc3339(text: str) -> datetime:
    if not _RFC3339.match(text):
        raise PluginError(f"parse node lock time {text!r}: not RFC3339")
    return datetime.fromisoformat(text)


def parse_lock(value: str) -> tuple[datetime, str, str] | datetime:
    """``ParseNodeLock``: a legacy time alone, or exactly ``<RFC3339>,<ns>,<name>``."""
    if "," not in value:
        return parse_rfc3339(value)
    parts = value.split(",")
    if len(parts) != 3:
        raise PluginError(f"malformed node lock {value!r}")
    return parse_rfc3339(parts[0]), parts[1], parts[2]


def _int32(text: str) -> int:
    if not _INT.match(text) or not -(2**31) <= int(text) < 2**31:
        raise PluginError(f"not an int32: {text!r}")
    return int(text)


def decode_head(value: str) -> list[list[Device]]:
    """HEAD ``DecodePodDevices`` for one vendor: every ``;`` piece, the trailing empty one included."""
    out: list[list[Device]] = []
    for piece in value.split(";"):
        devices = []
        for sub in piece.split(":"):
            if "," not in sub:
                continue
            f = sub.split(",")
            if len(f) < 4:
                raise PluginError(f"device entry {sub!r} has fewer than 4 fields")
            devices.append(Device(f[0], f[1], _int32(f[2]), _int32(f[3])))
        out.append(devices)
    return out


def decode_v28(value: str) -> list[list[Device]]:
    """≤ v2.8 ``DecodePodDevices``: the same, empty entries dropped."""
    return [c for c in decode_head(value) if c]


def encode(entries: Sequence[Sequence[Device]]) -> str:
    """``EncodePodSingleDevice``: each device ``:``-terminated, each container ``;``-terminated."""
    return "".join("".join(f"{d.uuid},{d.type},{d.mem_mib},{d.cores}:" for d in c) + ";" for c in entries)


def _annos(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("annotations") or {}


async def get_pending_pod(api: Api, node: str) -> dict[str, Any]:
    """``util.GetPendingPod(ctx, node)`` (§4.3)."""
    node_obj = await api.get_node(node)
    lock = _annos(node_obj).get(LOCK)
    if lock is not None:
        parsed = parse_lock(lock)
        if isinstance(parsed, tuple) and parsed[1] and parsed[2]:
            return await api.get_pod(parsed[1], parsed[2])  # NotFound: Allocate fails, no fallback
    for pod in await api.list_pods(node_name=node):
        a = _annos(pod)
        if (
            (pod.get("status") or {}).get("phase") == "Pending"
            and BIND_TIME in a
            and a.get(BIND_PHASE) in ("allocating", "success")
            and a.get(VGPU_NODE) == node
        ):
            return pod
    raise PluginError(f"no binding pod found on node {node}")


@dataclass(frozen=True)
class Allocated:
    """What one Allocate handed out: to which pod and container, which devices."""

    namespace: str
    pod: str
    container: str
    devices: tuple[Device, ...]


def _container_at(pod: Mapping[str, Any], index: int, variant: Variant) -> str:
    spec = pod.get("spec") or {}
    init = spec.get("initContainers") or []
    app = spec.get("containers") or []
    if variant is Variant.V28:
        return str(app[index]["name"])  # p.Spec.Containers[ctridx]
    return str((init[index] if index < len(init) else app[index - len(init)])["name"])


async def allocate(api: Api, node: str, device_count: int, variant: Variant = Variant.HEAD) -> Allocated:
    """One kubelet ``Allocate`` of ``device_count`` devices on ``node`` (§3.1 "How the device plugin consumes")."""
    pod = await get_pending_pod(api, node)
    meta = pod["metadata"]
    ns, name = meta["namespace"], meta["name"]
    decode = decode_head if variant is Variant.HEAD else decode_v28
    entries = decode(_annos(pod).get(TO_ALLOCATE, ""))
    index = next((i for i, c in enumerate(entries) if c), None)
    if index is None:
        raise PluginError("device request not found")
    devices = tuple(entries[index])
    if len(devices) != device_count:
        raise PluginError("device number not matched")
    container = _container_at(pod, index, variant)
    entries[index] = []
    await api.patch_pod_metadata(ns, name, annotations={TO_ALLOCATE: encode(entries)})
    current = await api.get_pod(ns, name)
    if COMMON_WORD not in _annos(current).get(TO_ALLOCATE, ""):
        await api.patch_pod_metadata(ns, name, annotations={BIND_PHASE: "success"})
        await release_lock(api, node, ns, name)
    return Allocated(ns, name, container, devices)


async def release_lock(api: Api, node: str, namespace: str, name: str) -> None:
    """``ReleaseNodeLock``: a current-format lock only if it ends with ``,<ns>,<name>``; a legacy one always."""
    for _ in range(5):
        node_obj = await api.get_node(node)
        lock = _annos(node_obj).get(LOCK)
        if lock is None:
            return
        if "," in lock and not lock.endswith(f",{namespace},{name}"):
            return
        try:
            await api.patch_node_metadata(
                node, annotations={LOCK: None}, resource_version=node_obj["metadata"]["resourceVersion"]
            )
        except ConflictError:
            continue
        return
    raise PluginError(f"could not release the lock of node {node}")


def kubelet_requests(pod: Mapping[str, Any], resource: str = "nvidia.com/gpu") -> list[tuple[str, int]]:
    """The Allocate calls the kubelet makes for a pod: (container, count) for every container asking for the
    resource, init containers first, in spec order."""
    spec = pod.get("spec") or {}
    out = []
    for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        limits = (c.get("resources") or {}).get("limits") or {}
        n = int(limits.get(resource, 0))
        if n > 0:
            out.append((str(c["name"]), n))
    return out
