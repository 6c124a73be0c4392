"""Every device family this build knows, which of them a deployment enables, and the :class:`Vendors` it gets.

HAMi's scheduler initialises every family it knows at start-up, each with its built-in defaults, whatever the
device config file holds (``pkg/scheduler/config/config.go``: ``InitDevicesWithConfig`` / ``InitDefaultDevices``),
except the families it keeps behind a flag of its own: ``--enable-ascend`` (Huawei Ascend) and ``--enable-iluvatar``
(Iluvatar). We do the same:

* a family **on by default** is enabled with no device config at all, with HAMi's default resource names and
  settings; its section of the device config (``hygon:``, ``amd:``…) overrides them, key by key;
* an **opt-in** family is enabled only when its HAMi flag is given (same name: ``--enable-ascend``); its section
  then overrides the defaults as above. Its section alone does not enable it, as in HAMi;
* a pod that asks only for a family that is not enabled is not ours: kube-scheduler's native fit and that family's
  own device plugin serve it, exactly as with HAMi.

**The contract of a family module** (one module or package under ``shared/vendors/``), so that a new family plugs
in with one entry in :data:`FAMILIES`:

``SECTION: str``
    its key in the device config file (HAMi's YAML key: ``hygon``, ``vnpus``, ``iluvatars``…);
``ENABLE_FLAG: str | None``
    ``None`` when HAMi initialises the family by default; otherwise the name of HAMi's flag that enables it,
    without dashes (``"enable-ascend"``). The flag itself is declared in ``shared/config/options.py``
    (:data:`ENABLE_FLAGS` lists the names this catalog knows; a test keeps the two in step);
``build(section: object) -> tuple[Vendor, ...]``
    the family's vendors from its section (``None`` when the file has no such section: HAMi's defaults).
    Raises :class:`~shared.errors.ConfigError` naming a bad key. One family may give several vendors (one per
    Ascend chip, MetaX GPU and sGPU…), each with its own common word.

Each vendor a family builds implements :class:`~shared.vendors.base.Vendor`; optional extras are picked up when
present: ``admission_warnings(container, where)`` (:class:`~shared.vendors.base.AdmissionWarnings`: requests
accepted but adjusted, returned to the client as admission warnings), ``extra_pod_annotations``
(:class:`~shared.vendors.pods.ExtraPodAnnotations`), and on its rules ``entry_type(dev)``
(:class:`~shared.domain.vendor.EntryType`: the type written in a pod's device entry when it is not the common
word).

Every process builds its vendors with :func:`enabled_vendors` from the same inputs (the parsed device config
and the enable flags), so the registrar, informer, extender, webhook and simulator agree.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from vgpu_scheduler.shared.domain.model import NodeInventory, NvidiaConfig
from vgpu_scheduler.shared.vendors import (
    amd,
    ascend,
    awsneuron,
    biren,
    cambricon,
    enflame,
    hygon,
    iluvatar,
    kunlun,
    metax,
    mthreads,
    vastai,
)
from vgpu_scheduler.shared.vendors.base import Vendor
from vgpu_scheduler.shared.vendors.nvidia import NvidiaVendor
from vgpu_scheduler.shared.vendors.registration import Invalid, NodeView, Observation, Registered
from vgpu_scheduler.shared.vendors.registry import Vendors

Builder = Callable[[object], tuple[Vendor, ...]]


class Family(Protocol):
    """What a family module exports (see the module docstring)."""

    @property
    def SECTION(self) -> str: ...

    @property
    def ENABLE_FLAG(self) -> str | None: ...

    def build(self, section: object) -> tuple[Vendor, ...]: ...


FAMILIES: tuple[Family, ...] = (
    hygon,
    cambricon,
    amd,
    ascend,
    iluvatar,
    biren,
    vastai,
    mthreads,
    metax,
    enflame,
    awsneuron,
    kunlun,
)
"""Every family after NVIDIA, in the order their vendors are listed (and a mixed node's devices are merged)."""

BUILDERS: Mapping[str, Builder] = {f.SECTION: f.build for f in FAMILIES}
"""Device-config section → the builder of its vendors (every family, enabled or not), in :data:`FAMILIES` order."""

ENABLE_FLAGS: tuple[str, ...] = ("enable-ascend", "enable-iluvatar")
"""HAMi's flags that enable an opt-in family (``pkg/device/ascend``, ``pkg/device/iluvatar`` ``ParseConfig``),
declared as options of every process. A flag whose family this build does not have yet is accepted and does
nothing."""


def enabled(family: Family, flags: Collection[str]) -> bool:
    """Whether ``family`` is scheduled: on by default, or its HAMi flag is among ``flags``."""
    return family.ENABLE_FLAG is None or family.ENABLE_FLAG in flags


def enabled_vendors(
    nvidia: NvidiaConfig, document: Mapping[str, Any] | None = None, enable_flags: Collection[str] = ()
) -> Vendors:
    """NVIDIA (with its parsed config) plus every enabled family's vendors: the families HAMi initialises by
    default, and the opt-in ones whose flag is in ``enable_flags`` (``{"enable-ascend"}``). ``document`` holds
    the device config's other sections (parsed YAML by section; None or a missing section: HAMi's defaults).
    Raises :class:`~shared.errors.ConfigError` naming a bad key, also in the section of a family not enabled
    (the file is wrong either way)."""
    found: list[Vendor] = [NvidiaVendor(nvidia)]
    sections = document or {}
    for family in FAMILIES:
        built = family.build(sections.get(family.SECTION))
        if enabled(family, enable_flags):
            found.extend(built)
    return Vendors(tuple(found))


def all_vendors(nvidia: NvidiaConfig | None = None) -> Vendors:
    """Every family with HAMi's defaults, opt-in ones included (the simulator's vendor names, tests)."""
    return enabled_vendors(nvidia or NvidiaConfig(), None, {f.ENABLE_FLAG for f in FAMILIES if f.ENABLE_FLAG})


def enable_flag_of(vendor: str) -> str | None:
    """The HAMi flag that enables the family of the vendor named ``vendor`` (a common word of HAMi's defaults,
    ``Ascend910B3`` → ``enable-ascend``); None for a family on by default or a name no family has."""
    for family in FAMILIES:
        if family.ENABLE_FLAG and any(v.name == vendor for v in family.build(None)):
            return family.ENABLE_FLAG
    return None


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
