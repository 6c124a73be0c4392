"""A node as the scheduling core sees it: its inventory plus current usage, with a summary computed once.

``NodeSnapshot`` is immutable. Building one aligns the usage with the inventory's devices (a UUID missing from
``usage`` is idle, ``ZERO_USAGE``) and computes a ``NodeSummary``: the node's default score before any new pod
(hami-wire §6.2) and a few maxima that let ``plan`` skip a node that cannot fit a pod in O(1).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from vgpu_scheduler.shared.domain.model import ZERO_USAGE, DeviceMode, DeviceUsage, NodeInventory

_MIG = DeviceMode.MIG.value


@dataclass(frozen=True, slots=True)
class NodeSummary:
    """Cheap facts about a node's devices, computed once per snapshot.

    Every count and maximum is taken over the *usable* devices only: healthy, not cordoned and with a free
    time slice (``used < count``). A device that fails one of those can never be chosen, so comparing a pod's
    needs against these figures is a sound "hopeless" test: it may keep a node that later fails, never drop
    one that fits.
    """

    score: float
    """Default node score before the pod (§6.2) plus the vendor's ``ScoreNode`` (0 for NVIDIA)."""
    usable_count: int
    idle_count: int
    """Usable devices with ``used == 0`` (what ``mutex`` needs)."""
    exclusive_ok_count: int
    """Usable devices a whole-card request may take: idle, or not a 100-core card."""
    zero_core_ok_count: int
    """Usable devices a 0-core request may take: cores not fully allocated."""
    max_free_mem_mib: int
    max_free_cores: int
    max_fit_pct: int
    """The largest memory percentage ``p`` (0–100) some usable device still fits: ``devmem·p//100 ≤ free``."""
    has_mig: bool


def default_node_score(inventory: NodeInventory, usages: tuple[DeviceUsage, ...]) -> float:
    """HAMi's default node score over every device, before the pod (§6.2).

    ``10 × (Σused/ΣCount + ΣUsedcores/ΣTotalcore + ΣUsedmem/ΣTotalmem)``, and 0 when any denominator is 0.
    """
    count = cores_total = mem_total = used = used_cores = used_mem = 0
    for dev, u in zip(inventory.devices, usages, strict=True):
        count += dev.count
        cores_total += dev.devcore
        mem_total += dev.devmem_mib
        used += u.used
        used_cores += u.used_cores
        used_mem += u.used_mem_mib
    if count == 0 or cores_total == 0 or mem_total == 0:
        return 0.0
    return 10.0 * (used / count + used_cores / cores_total + used_mem / mem_total)


def vendor_node_score(inventory: NodeInventory) -> float:
    """The vendor's ``ScoreNode`` hook added to the default score (§6.2). NVIDIA, and every vendor we know, add 0.

    It may depend only on the node before the pod: the fast path in ``plan`` relies on node order being known
    before any fit.
    """
    del inventory
    return 0.0


def _fit_pct(devmem: int, free: int) -> int:
    """The largest ``p`` in 0..100 with ``devmem·p//100 ≤ free`` (-1 when even 0 % does not fit)."""
    if free < 0:
        return -1
    if devmem <= 0:
        return 100
    return min(100, (100 * (free + 1) - 1) // devmem)


def summarize(inventory: NodeInventory, usages: tuple[DeviceUsage, ...]) -> NodeSummary:
    """Compute a node's ``NodeSummary`` (see its docstring for what each figure means)."""
    usable = idle = excl_ok = zero_ok = 0
    max_mem = max_cores = max_pct = -1
    has_mig = False
    for dev, u in zip(inventory.devices, usages, strict=True):
        if dev.mode == _MIG:
            has_mig = True
        if not dev.health or dev.id in inventory.cordoned or u.used >= dev.count:
            continue
        usable += 1
        if u.used == 0:
            idle += 1
        if u.used == 0 or dev.devcore != 100:
            excl_ok += 1
        if dev.devcore == 0 or u.used_cores != dev.devcore:
            zero_ok += 1
        free_mem = dev.devmem_mib - u.used_mem_mib
        max_mem = max(max_mem, free_mem)
        max_cores = max(max_cores, dev.devcore - u.used_cores)
        max_pct = max(max_pct, _fit_pct(dev.devmem_mib, free_mem))
    return NodeSummary(
        score=default_node_score(inventory, usages) + vendor_node_score(inventory),
        usable_count=usable,
        idle_count=idle,
        exclusive_ok_count=excl_ok,
        zero_core_ok_count=zero_ok,
        max_free_mem_mib=max_mem,
        max_free_cores=max_cores,
        max_fit_pct=max_pct,
        has_mig=has_mig,
    )


def node_shape(inventory: NodeInventory, usages: tuple[DeviceUsage, ...]) -> str:
    """A node's devices and usage with the names left out, as text (hashed once, compared in C): each device's
    fields but its UUID, whether it is cordoned, which earlier device (if any) shares its UUID, and its usage.
    Fit reads UUIDs only to match UUID selectors, for cordons and topology pair scores, and to tell devices
    apart; the shape keeps the last two. Equal shapes mean equal nodes for Fit; unequal ones may still be."""
    first: dict[str, int] = {}
    return repr(
        tuple(
            (
                d.index,
                d.count,
                d.devmem_mib,
                d.devcore,
                d.type,
                d.numa,
                d.mode,
                d.health,
                d.mig_profiles,
                d.vendor,
                d.id in inventory.cordoned,
                first.setdefault(d.id, i),
                u.used,
                u.used_mem_mib,
                u.used_cores,
                u.mig_in_use,
                u.legacy_geometry,
                tuple(sorted(u.legacy_slots)),
                u.tags,
            )
            for i, (d, u) in enumerate(zip(inventory.devices, usages, strict=True))
        )
    )


@dataclass(frozen=True, slots=True)
class NodeSnapshot:
    """One node's inventory and current usage, keyed by device UUID (a missing UUID is idle)."""

    inventory: NodeInventory
    usage: Mapping[str, DeviceUsage] = field(default_factory=dict)
    usages: tuple[DeviceUsage, ...] = field(init=False, repr=False, compare=False)
    """The usage of each inventory device, in inventory order."""
    summary: NodeSummary = field(init=False, repr=False, compare=False)
    name: str = field(init=False, repr=False, compare=False)
    """The node's name (``inventory.node``), kept at hand for ordering."""
    score: float = field(init=False, repr=False, compare=False)
    """``summary.score``, kept at hand for ordering."""
    _shape: str | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        usages = tuple(self.usage.get(d.id, ZERO_USAGE) for d in self.inventory.devices)
        summary = summarize(self.inventory, usages)
        object.__setattr__(self, "usages", usages)
        object.__setattr__(self, "summary", summary)
        object.__setattr__(self, "name", self.inventory.node)
        object.__setattr__(self, "score", summary.score)

    @property
    def shape(self) -> str:
        """Everything a fit reads of the node but its name, device UUIDs and topology pair scores
        (:func:`node_shape`, computed on first use): two nodes of equal shape give a pod the same verdict when no
        UUID selector or topology policy is in play."""
        shape = self._shape
        if shape is None:
            shape = node_shape(self.inventory, self.usages)
            object.__setattr__(self, "_shape", shape)
        return shape

    def device_usage(self, uuid: str) -> DeviceUsage:
        """The usage of one device (``ZERO_USAGE`` when nothing is recorded for it)."""
        return self.usage.get(uuid, ZERO_USAGE)
