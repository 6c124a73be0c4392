"""Every vendor module this build knows, by device-config section, and the :class:`Vendors` a config enables.

A vendor is enabled when its section is present in the device config file (``hygon:``, ``cambricon:``, ``amd:``,
``vnpus:``…); NVIDIA always is. Each module exports ``SECTION`` and ``build(section) -> tuple[Vendor, ...]``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from vgpu_scheduler.shared.domain.model import NodeInventory, NvidiaConfig
from vgpu_scheduler.shared.vendors import amd, ascend, biren, cambricon, hygon, iluvatar, mthreads, vastai
from vgpu_scheduler.shared.vendors.base import Vendor
from vgpu_scheduler.shared.vendors.nvidia import NvidiaVendor
from vgpu_scheduler.shared.vendors.registration import Invalid, NodeView, Observation, Registered
from vgpu_scheduler.shared.vendors.registry import Vendors

Builder = Callable[[object], tuple[Vendor, ...]]

BUILDERS: Mapping[str, Builder] = {
    hygon.SECTION: hygon.build,
    cambricon.SECTION: cambricon.build,
    amd.SECTION: amd.build,
    ascend.SECTION: ascend.build,
    iluvatar.SECTION: iluvatar.build,
    biren.SECTION: biren.build,
    vastai.SECTION: vastai.build,
    mthreads.SECTION: mthreads.build,
}
"""Device-config section → the builder of its vendors, in the order vendors are listed (after NVIDIA)."""


def enabled_vendors(nvidia: NvidiaConfig, document: Mapping[str, Any] | None = None) -> Vendors:
    """NVIDIA (with its parsed config) plus every vendor whose section ``document`` has (the parsed device config
    file; None: NVIDIA only). Raises :class:`~shared.errors.ConfigError` naming a bad key."""
    found: list[Vendor] = [NvidiaVendor(nvidia)]
    if document:
        for section, build in BUILDERS.items():
            if section in document:
                found.extend(build(document[section]))
    return Vendors(tuple(found))


NVIDIA_ONLY_VENDORS = Vendors((NvidiaVendor(),))


# ------------------------------------------------------------------------------------------------------------
# One node, every vendor: what the registrar (and the extender's Node-object path) make of a node
# ------------------------------------------------------------------------------------------------------------

VENDOR_SEPARATOR = ","
"""Joins the common words in ``NodeInventory.vendor`` of a node that carries devices of several vendors."""


class NodeObserver(Protocol):
    """The part of a :class:`~shared.vendors.base.Vendor` that registers a node's devices."""

    @property
    def name(self) -> str: ...

    @property
    def handshake_key(self) -> str | None: ...

    def observe(self, node: NodeView, now_local: datetime, *, reported_before: bool = False) -> Observation: ...


def inventory_vendor(vendors: Sequence[str]) -> str:
    """``NodeInventory.vendor`` of a node whose registered vendors are ``vendors`` (in catalog order): the common
    word of a single-vendor node (``NVIDIA`` as always for NVIDIA nodes), ``NVIDIA,DCU`` for a mixed one. Every
    device also carries its own ``DeviceInfo.vendor``, which is what scheduling looks at."""
    return VENDOR_SEPARATOR.join(vendors)


def node_vendors(inventory: NodeInventory) -> tuple[str, ...]:
    """The vendors whose devices ``inventory`` holds, in the order their devices first appear."""
    return tuple(dict.fromkeys(d.vendor for d in inventory.devices))


@dataclass(frozen=True, slots=True)
class UuidCollision:
    """``vendor`` registered device IDs that ``owner`` (a vendor listed before it) already registered on the node:
    ``vendor``'s devices are left out of the node's inventory (two devices with one ID cannot be told apart by
    allocations, usage or the capacity checks)."""

    vendor: str
    owner: str
    uuids: tuple[str, ...]

    @property
    def message(self) -> str:
        ids = VENDOR_SEPARATOR.join(self.uuids)
        return (
            f"device ID(s) {ids} registered by both {self.owner} and {self.vendor}; "
            f"the node's {self.vendor} devices are not registered until this is fixed"
        )


@dataclass(frozen=True, slots=True)
class MergedInventory:
    """The node's one inventory (None: no vendor registered), the vendors it holds, and the vendors left out."""

    inventory: NodeInventory | None
    vendors: tuple[str, ...]
    collisions: tuple[UuidCollision, ...] = ()


def merge_inventories(node: str, parts: Sequence[NodeInventory]) -> MergedInventory:
    """Merge the inventories of the vendors registered on ``node`` (one per vendor, in catalog order).

    Devices keep their order within a vendor and vendors follow ``parts``; pair scores and cordoned IDs are each
    vendor's own (a pair score never spans two vendors). A vendor with a device ID an earlier vendor already has
    is left out whole (:class:`UuidCollision`)."""
    owner_of: dict[str, str] = {}
    kept: list[NodeInventory] = []
    collisions: list[UuidCollision] = []
    for part in parts:
        vendor = part.vendor
        clash = tuple(dict.fromkeys(d.id for d in part.devices if d.id in owner_of))
        if clash:
            collisions.append(UuidCollision(vendor, owner_of[clash[0]], clash))
            continue
        owner_of.update((d.id, vendor) for d in part.devices)
        kept.append(part)
    if not kept:
        return MergedInventory(None, (), tuple(collisions))
    if len(kept) == 1 and kept[0].node == node:
        return MergedInventory(kept[0], (kept[0].vendor,), tuple(collisions))
    names = tuple(p.vendor for p in kept)
    scores: dict[str, Mapping[str, int]] = {}
    for p in kept:
        scores.update(p.pair_scores)
    merged = NodeInventory(
        node=node,
        vendor=inventory_vendor(names),
        devices=tuple(d for p in kept for d in p.devices),
        pair_scores=scores,
        cordoned=frozenset().union(*(p.cordoned for p in kept)),
    )
    return MergedInventory(merged, names, tuple(collisions))


@dataclass(frozen=True, slots=True)
class NodeObservation:
    """Every vendor's :class:`Observation` of one node (in vendor order) and their merged inventory."""

    node: str
    observations: Mapping[str, Observation]
    merged: MergedInventory

    @property
    def registered(self) -> tuple[str, ...]:
        """The vendors whose devices are in the merged inventory."""
        return self.merged.vendors

    @property
    def legacy(self) -> bool:
        """Some vendor speaks the ≤ v2.7 handshake here: the node's state changes with time alone."""
        return any(not isinstance(o, Invalid) and o.legacy for o in self.observations.values())


def observe_node(
    vendors: Iterable[NodeObserver],
    node: NodeView,
    now_local: datetime,
    reported_before: Callable[[str], bool] = lambda vendor: False,
) -> NodeObservation:
    """Ask every vendor about ``node`` and merge the registered ones (:func:`merge_inventories`).

    ``reported_before(vendor)``: that vendor's plugin on this node was seen answering the handshake earlier."""
    observations: dict[str, Observation] = {}
    for v in vendors:
        observations[v.name] = v.observe(node, now_local, reported_before=reported_before(v.name))
    parts = [o.inventory for o in observations.values() if isinstance(o, Registered)]
    return NodeObservation(node.name, observations, merge_inventories(node.name, parts))


def with_handshake_timeout(vendors: Vendors, timeout_s: float) -> Vendors:
    """``vendors`` with ``timeout_s`` as the handshake timeout of every vendor that has one (a frozen dataclass
    with a ``handshake_timeout_s`` field, like :class:`NvidiaVendor`); the others are kept as they are."""
    out: list[Vendor] = []
    for v in vendors:
        obj: Any = v
        if (
            dataclasses.is_dataclass(obj)
            and not isinstance(obj, type)
            and any(f.name == "handshake_timeout_s" for f in dataclasses.fields(obj))
        ):
            obj = dataclasses.replace(obj, handshake_timeout_s=timeout_s)
        out.append(obj)
    return Vendors(tuple(out))
