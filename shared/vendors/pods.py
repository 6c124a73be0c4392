"""Reading pods and writing their annotations with the enabled vendors (the vendor layer over the codecs).

The codecs (``shared.codec``) know one annotation or resource format each and nothing of the vendor set; this
module asks a :class:`~shared.vendors.registry.Vendors` which families a pod's containers name and combines their
answers: the pod's requests (:func:`vendors_pod_request`), whether a pod is ours (:func:`vendors_manage_pod`),
its selectors (:func:`decode_vendor_constraints`, memoised per annotation set) and the annotations ``/bind``
writes (:func:`allocation_annotations`, with the optional per-vendor hooks :class:`ExtraPodAnnotations`,
:class:`NodePodAnnotations` and :class:`BindPodAnnotations`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Protocol, runtime_checkable

from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec._go import fail
from vgpu_scheduler.shared.codec.mig import encode_mig_allocations
from vgpu_scheduler.shared.codec.podannotations import split_by_vendor, vendors_used
from vgpu_scheduler.shared.codec.poddevices import encode_pod_devices
from vgpu_scheduler.shared.codec.resources import ResourceRequestError, located_containers
from vgpu_scheduler.shared.codec.selectors import decode_pod_constraints
from vgpu_scheduler.shared.domain.hooks import implements
from vgpu_scheduler.shared.domain.model import (
    EMPTY_REQUEST,
    NO_SELECTORS,
    NVIDIA,
    BindPhase,
    ContainerRequest,
    MigAllocation,
    NodeInventory,
    PodConstraints,
    PodDevices,
    PodRequest,
    Selectors,
)
from vgpu_scheduler.shared.vendors.registry import Vendors


def vendors_pod_request(pod: Mapping[str, Any], vendors: Vendors) -> PodRequest:
    """The pod's requests from every enabled vendor, init containers first (HAMi's ``Resourcereqs``).

    Each container gets one entry per vendor it asks for, in the vendors' order (NVIDIA first); a container that
    asks for none gets one empty entry. When some container asks for several vendors, ``owners`` names the
    container of every entry; otherwise it is empty, and the request equals
    :func:`~shared.codec.resources.pod_request`'s for an NVIDIA-only pod. Raises :class:`ResourceRequestError`
    with the problems of every container and every vendor.
    """
    located, init_count = located_containers(pod)
    entries: list[ContainerRequest] = []
    owners: list[int] = []
    problems: list[str] = []
    multi = False
    for ci, (what, c) in enumerate(located):
        asked: list[ContainerRequest] = []
        # a container of the wrong shape is a DecodeError, whatever the vendors; the others have nothing to say
        for vendor in vendors.managing(c, what):
            try:
                req = vendor.container_request(c, what)
            except ResourceRequestError as e:
                problems.extend(e.problems)
                continue
            if not req.empty:
                asked.append(req)
        multi = multi or len(asked) > 1
        entries.extend(asked or [EMPTY_REQUEST])
        owners.extend([ci] * max(len(asked), 1))
    if problems:
        raise ResourceRequestError(problems)
    return PodRequest(containers=tuple(entries), init_count=init_count, owners=tuple(owners) if multi else ())


def vendors_manage_pod(pod: Mapping[str, Any], vendors: Vendors) -> bool:
    """Whether any (init) container names a resource of any enabled vendor (whatever the value): what makes a
    pod "ours" for the extender and the webhook."""
    located, _ = located_containers(pod)
    return any(vendors.managing(c, what) for what, c in located)


def decode_vendor_constraints(annotations: Mapping[str, str], vendors: Vendors) -> PodConstraints:
    """:func:`~shared.codec.selectors.decode_pod_constraints` plus every other enabled vendor's selectors
    (``Vendor.selectors``) in ``vendor_selectors``, by common word; vendors whose annotations select nothing are
    left out. A malformed selector of any vendor is a DecodeError naming its key.

    Pods of one workload carry the same annotations, and each pod is decoded by the webhook and by ``/filter``:
    the result is kept per set of annotations (``Vendors.constraints_memo``, the latest few hundred), so each
    vendor's selectors are read once per workload, not twice per pod. Refusals are not kept."""
    try:
        key = frozenset(annotations.items())
    except TypeError:  # a value that cannot be hashed (not a string): decoded, and refused, below
        return _decode_vendor_constraints(annotations, vendors)
    memo = vendors.constraints_memo
    found = memo.get(key)
    if found is None:
        found = _decode_vendor_constraints(annotations, vendors)
        if len(memo) >= _MEMO_SIZE:
            del memo[next(iter(memo))]  # the oldest
        memo[key] = found
    return found


_MEMO_SIZE = 512


def _decode_vendor_constraints(annotations: Mapping[str, str], vendors: Vendors) -> PodConstraints:
    constraints = decode_pod_constraints(annotations)
    found: dict[str, Selectors] = {}
    for vendor in vendors:
        if vendor.name == NVIDIA:
            continue
        sel = vendor.selectors(annotations)
        if sel != NO_SELECTORS:
            found[vendor.name] = sel
    return replace(constraints, vendor_selectors=found) if found else constraints


def allocation_annotations(
    node: str,
    devices: PodDevices,
    mig: tuple[MigAllocation, ...],
    now_unix: int,
    vendors: Vendors | None = None,
    *,
    pod: Mapping[str, Any] | None = None,
    inventory: NodeInventory | None = None,
) -> dict[str, str]:
    """The annotations ``/bind`` patches onto the pod, exactly as the device plugins expect them.

    ``vendors`` None: NVIDIA's keys only (the device list as is). Otherwise, for every vendor the devices use
    (``ContainerDevice.type``), its to-allocate key (when it has one) and its allocated key with
    ``vendor.encode_devices`` of that vendor's devices per container, one entry per container (init first),
    empty where a container has none of them: a pod asking two vendors gets one pair per vendor, each listing
    only its own devices. A device of a type no vendor has is a DecodeError (its plugin could never find it).
    ``pod`` and ``inventory`` (the node's registered devices) are handed to the vendors with a
    :class:`BindPodAnnotations` hook (:func:`needs_inventory` says whether to read the inventory at all).
    """
    if not node:
        fail(keys.VGPU_NODE, "cannot encode an empty node name")
    if now_unix < 0:
        fail(keys.VGPU_TIME, "cannot encode a negative Unix time", str(now_unix))
    stamp = str(now_unix)
    out = {keys.VGPU_NODE: node, keys.VGPU_TIME: stamp}
    out.update(device_list_annotations(devices, vendors, now_unix))
    if vendors is not None:
        for name in vendors_used(devices):
            hook: object = vendors.get(name)
            if implements(hook, NodePodAnnotations):  # type: ignore[type-abstract]
                out.update(hook.node_pod_annotations(node, split_by_vendor(devices, name)))
            if implements(hook, BindPodAnnotations):  # type: ignore[type-abstract]
                out.update(hook.bind_pod_annotations(pod, inventory, split_by_vendor(devices, name), now_unix))
    if mig:
        out[keys.MIG_ALLOCATIONS] = encode_mig_allocations(mig)
    out[keys.BIND_PHASE] = BindPhase.ALLOCATING.value
    out[keys.BIND_TIME] = stamp
    return out


@runtime_checkable
class ExtraPodAnnotations(Protocol):
    """Optional vendor hook: further pod annotations its device plugin reads besides the device lists (HAMi's
    ``PatchAnnotations`` of Cambricon adds ``CAMBRICON_DSMLU_PROFILE`` …, Ascend's adds its runtime list and
    ``predicate-time``). ``devices`` holds only the vendor's devices, one entry per container; ``now_unix`` is the
    bind's time."""

    def extra_pod_annotations(self, devices: PodDevices, now_unix: int) -> Mapping[str, str]: ...


@runtime_checkable
class NodePodAnnotations(Protocol):
    """Optional vendor hook: pod annotations that name the node the pod is bound to (Moore Threads'
    ``mthreads.com/predicate-node``). ``devices`` holds only the vendor's devices, one entry per container."""

    def node_pod_annotations(self, node: str, devices: PodDevices) -> Mapping[str, str]: ...


@runtime_checkable
class BindPodAnnotations(Protocol):
    """Optional vendor hook: pod annotations that need the pod (its container names) and the node's registered
    devices (what the device plugin needs besides the device list: Enflame's DRS profile, index and minor).
    ``inventory`` is None when the node has none (the hook then raises a DecodeError rather than guess);
    ``devices`` holds only the vendor's devices, one entry per container; ``now_unix`` is the bind's time."""

    def bind_pod_annotations(
        self, pod: Mapping[str, Any] | None, inventory: NodeInventory | None, devices: PodDevices, now_unix: int
    ) -> Mapping[str, str]: ...


def needs_inventory(devices: PodDevices, vendors: Vendors | None) -> bool:
    """Whether a vendor of ``devices`` has a :class:`BindPodAnnotations` hook (``/bind`` then reads the node's
    inventory before writing the annotations)."""
    if vendors is None:
        return False
    return any(implements(vendors.get(name), BindPodAnnotations) for name in vendors_used(devices))  # type: ignore[type-abstract]


def device_list_annotations(devices: PodDevices, vendors: Vendors | None = None, now_unix: int = 0) -> dict[str, str]:
    """The to-allocate and allocated device lists of every vendor ``devices`` use (see
    :func:`allocation_annotations`). ``vendors`` None, or devices of no vendor at all: NVIDIA's pair, as is."""
    used = vendors_used(devices)
    if vendors is None or not used:
        device_list = encode_pod_devices(devices)
        return {keys.DEVICES_TO_ALLOCATE: device_list, keys.DEVICES_ALLOCATED: device_list}
    out: dict[str, str] = {}
    for name in used:
        vendor = vendors.get(name)
        if vendor is None:
            fail(keys.DEVICES_ALLOCATED, f"no enabled vendor has device type {name!r}", name)
        encoded = vendor.encode_devices(split_by_vendor(devices, name))
        if vendor.to_allocate_key is not None:
            out[vendor.to_allocate_key] = encoded
        out[vendor.allocated_key] = encoded
        if implements(vendor, ExtraPodAnnotations):  # type: ignore[type-abstract]
            out.update(vendor.extra_pod_annotations(split_by_vendor(devices, name), now_unix))
    return out
