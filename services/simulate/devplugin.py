"""What HAMi's NVIDIA device plugin does with a bound pod, as pure functions (hami-wire §3.1, §4.3).

The driver settles each bound pod the way the plugin would after the kubelet's Allocate calls, and refuses to
settle it when the real plugin could not serve it:

* :func:`lock_choice` then :func:`fallback_choice` are ``util.GetPendingPod``'s decision: the pod named by
  ``hami.io/mutex.lock`` (a malformed lock fails Allocate, no fallback), else the first pod on the node that is
  Pending with ``hami.io/bind-time``, a bind phase of ``allocating``/``success`` and ``hami.io/vgpu-node`` = the
  node;
* :func:`allocation_problems` replays the kubelet's Allocate calls (one per container asking for the count
  resource, init containers first) against the to-allocate list as the HEAD plugin consumes it: each call pops
  the first non-empty entry, which must belong to that container and hold exactly the number of devices the
  kubelet asks for ("device number not matched" otherwise);
* :func:`unserved_resources`: a pod kube-scheduler placed by itself (no scheduler allocation) on a node where a HAMi
  device plugin serves a resource it asks for (a vendor the device config does not enable): that plugin's Allocate
  fails, so the kubelet rejects the pod.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec.nodelock import parse_node_lock
from vgpu_scheduler.shared.codec.poddevices import decode_pod_devices
from vgpu_scheduler.shared.codec.quantity import parse_quantity, whole_int64
from vgpu_scheduler.shared.codec.resources import pod_containers
from vgpu_scheduler.shared.domain.model import PodDevices
from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.vendors.base import NodeLockKind
from vgpu_scheduler.shared.vendors.registration import NodeView, NotRegistered, Unregistered
from vgpu_scheduler.shared.vendors.registry import Vendors

_CANDIDATE_PHASES = ("allocating", "success")


@dataclass(frozen=True, slots=True)
class LockedPod:
    """The lock names this pod: the plugin GETs it (whatever its phase) and fails Allocate if it cannot."""

    namespace: str
    name: str


@dataclass(frozen=True, slots=True)
class FallbackPod:
    """No usable lock: the plugin takes the first pod of its node list that passes the fallback test."""

    namespace: str
    name: str


@dataclass(frozen=True, slots=True)
class NoPod:
    """Allocate fails: ``reason`` says why (malformed lock, no binding pod)."""

    reason: str


PendingPod = LockedPod | FallbackPod | NoPod


def lock_choice(node: Mapping[str, Any]) -> LockedPod | NoPod | None:
    """``GetPendingPod``'s first step: the pod ``hami.io/mutex.lock`` names, NoPod for a malformed lock (Allocate
    fails, no fallback), None when there is no lock naming a pod (absent or legacy: the fallback decides)."""
    meta = node.get("metadata") or {}
    lock = (meta.get("annotations") or {}).get(keys.NODE_LOCK)
    if lock is None:
        return None
    try:
        parsed = parse_node_lock(str(lock))
    except DecodeError as e:
        return NoPod(f"node {meta.get('name', '')}: {e}")
    if parsed.namespace and parsed.name:
        return LockedPod(parsed.namespace, parsed.name)
    return None


def fallback_choice(node_name: str, pods_on_node: Sequence[Mapping[str, Any]]) -> FallbackPod | NoPod:
    """``GetPendingPod``'s fallback over the node's pods (``spec.nodeName`` = node, in list order)."""
    for pod in pods_on_node:
        meta = pod.get("metadata") or {}
        annos = meta.get("annotations") or {}
        if (
            (pod.get("status") or {}).get("phase") == "Pending"
            and keys.BIND_TIME in annos
            and annos.get(keys.BIND_PHASE) in _CANDIDATE_PHASES
            and annos.get(keys.VGPU_NODE) == node_name
        ):
            return FallbackPod(str(meta.get("namespace", "")), str(meta.get("name", "")))
    return NoPod(f"no binding pod found on node {node_name}")


def _device_count(container: Mapping[str, Any], resource: str) -> int:
    """How many devices the kubelet asks for: the count resource of the container (requests, else limits)."""
    resources = container.get("resources") or {}
    for source in ("requests", "limits"):
        values = resources.get(source) or {}
        if resource in values:
            return whole_int64(parse_quantity(values[resource], f"{source}[{resource}]")) or 0
    return 0


def allocation_problems(
    pod: Mapping[str, Any],
    count_resource: str,
    to_allocate_key: str = keys.DEVICES_TO_ALLOCATE,
    decode: Callable[[str], PodDevices] = decode_pod_devices,
    count_of: Callable[[Mapping[str, Any]], int] | None = None,
) -> list[str]:
    """Why the HEAD plugin could not serve ``pod``'s Allocate calls as the scheduler meant them ([] if it can).

    ``count_resource``, ``to_allocate_key`` and ``decode`` are the vendor's (NVIDIA's by default); ``count_of``,
    when given, says how many devices the plugin serves a container instead of its count resource (Enflame's DRS
    plugin: one instance, whatever the slices asked)."""
    annos = (pod.get("metadata") or {}).get("annotations") or {}
    try:
        init, app = pod_containers(pod)
        entries = [list(e) for e in decode(str(annos.get(to_allocate_key, "")))]
        devices_of = count_of or (lambda c: _device_count(c, count_resource))
        asks = [(i, str(c.get("name", "")), devices_of(c)) for i, c in enumerate([*init, *app])]
    except DecodeError as e:
        return [f"unreadable device request: {e}"]
    problems = []
    for index, container, count in asks:
        if count <= 0:
            continue
        entry = next((i for i, e in enumerate(entries) if e), None)
        if entry is None:
            problems.append(f"container {container}: device request not found")
            continue
        if entry != index:
            problems.append(f"container {container}: the next device entry is #{entry}, not #{index}")
        if len(entries[entry]) != count:
            problems.append(f"container {container}: device number not matched ({len(entries[entry])} != {count})")
        entries[entry] = []
    leftover = sum(len(e) for e in entries)
    if leftover:
        problems.append(f"{leftover} device(s) listed for no container")
    return problems


def vendor_allocation_problems(pod: Mapping[str, Any], vendors: Vendors) -> list[str]:
    """:func:`allocation_problems` for every enabled vendor whose devices the pod asks for, each reading its own
    to-allocate key (the allocated key for a vendor without one) with its own device-list codec; problems are
    prefixed with the vendor's common word."""
    problems: list[str] = []
    for vendor in vendors:
        if not any(vendor.manages(c) for group in _safe_containers(pod) for c in group):
            continue
        key = vendor.to_allocate_key or vendor.allocated_key
        count_of = getattr(vendor, "plugin_device_count", None)  # optional: devices served per container
        found = allocation_problems(pod, vendor.resources.count, key, vendor.decode_devices, count_of)
        problems.extend(f"{vendor.name}: {p}" for p in found)
    return problems


def lock_kinds_of(pod: Mapping[str, Any], vendors: Vendors) -> frozenset[NodeLockKind]:
    """The node locks the pod's vendors take (``NONE`` dropped; none found: HAMi's, as for NVIDIA)."""
    containers = [c for group in _safe_containers(pod) for c in group]
    kinds = {v.node_lock for v in vendors if any(v.manages(c) for c in containers)}
    if not kinds:
        return frozenset({NodeLockKind.HAMI})
    kinds.discard(NodeLockKind.NONE)
    return frozenset(kinds)


def _safe_containers(pod: Mapping[str, Any]) -> tuple[Sequence[Any], ...]:
    try:
        return pod_containers(pod)
    except DecodeError:
        return ()


@dataclass(frozen=True, slots=True)
class Unserved:
    """A resource the pod was given by kube-scheduler alone on a node where HAMi's ``vendor`` device plugin serves
    it: the plugin's Allocate finds no allocation for the pod (no scheduler wrote one) and fails."""

    resource: str
    vendor: str

    @property
    def message(self) -> str:
        """What the kubelet reports (the pod ends ``Failed``, reason ``UnexpectedAdmissionError``)."""
        return (
            f"UnexpectedAdmissionError: Allocate failed due to {self.vendor}'s device plugin holding no allocation "
            f"for {self.resource} (the device config does not enable {self.vendor}), which is unexpected"
        )


def unserved_resources(
    requested: Sequence[str], node: Mapping[str, Any], managed: frozenset[str], known: Vendors, now: datetime
) -> list[Unserved]:
    """For a pod bound without any HAMi allocation (no ``hami.io/vgpu-node``): each ``requested`` resource that no
    enabled vendor manages (``managed``) but that a HAMi device plugin on ``node`` serves, i.e. a vendor of
    ``known`` (every vendor family this build knows) naming the resource has its registration on the node."""
    view = NodeView.of(node)
    out: list[Unserved] = []
    for name in requested:
        if name in managed:
            continue
        for vendor in known:
            if name not in vendor.resources.all:
                continue
            seen = vendor.observe(view, now)
            if not (isinstance(seen, NotRegistered) and seen.reason is Unregistered.ABSENT):
                out.append(Unserved(name, vendor.name))
                break
    return out
