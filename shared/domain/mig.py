"""MIG instance choice and MIG accounting (hami-wire §7, difference 11). Pure; no I/O.

Two models share one physical-GPU device entry (``mode == "mig"``):

* **Dynamic MIG** (v2.10 device plugin): the GPU publishes ``migProfiles`` with their NVML placements; a pod's
  instances are recorded in ``hami.io/vgpu-mig-allocations``. :func:`select_dynamic` is HAMi's
  ``selectMigCandidate``.
* **Legacy MIG** (≤ v2.9): whole-GPU geometries from ``nvidia.knownMigGeometries``; the instance is the
  ``[<geometry>-<slot>]`` suffix of the UUID in the pod device list. :func:`select_legacy` is HAMi v2.9's
  ``AddResourceUsage`` MIG branch, with the slot always the flattened slot index (docs/topology-mig.md says why).

:func:`mig_accounting` rebuilds what is in use from the pods' allocations and names the GPUs that must be
treated as unhealthy because their MIG state cannot be trusted (fail-closed, §7.1 "Accounting").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from vgpu_scheduler.shared.domain.allocation import Allocation
from vgpu_scheduler.shared.domain.model import (
    DeviceInfo,
    DeviceMode,
    DeviceUsage,
    MigAllocation,
    MigGeometryEntry,
    MigPlacement,
    MigProfile,
    MigTemplate,
)

_HIGH_START_PREFIXES = ("1g.", "3g.")

# --------------------------------------------------------------------------------------------
# Dynamic MIG (hami-wire §7.1)
# --------------------------------------------------------------------------------------------


def profile_order(profiles: Sequence[MigProfile]) -> tuple[MigProfile, ...]:
    """Profiles in the order HAMi tries them: ``memoryMB`` ascending, then ``sliceCount`` ascending (stable)."""
    return tuple(sorted(profiles, key=lambda p: (p.memory_mib, p.slice_count)))


def placement_order(profile: MigProfile) -> tuple[MigPlacement, ...]:
    """Placements in the order HAMi tries them: descending start for ``1g.*``/``3g.*``, ascending otherwise.

    Zero-size placements are malformed table rows, not slots, and are left out (HAMi HEAD would hand one out).
    """
    descending = profile.name.startswith(_HIGH_START_PREFIXES)
    usable = [p for p in profile.placements if p.size > 0]
    return tuple(sorted(usable, key=lambda p: -p.start if descending else p.start))


def free_placement(profile: MigProfile, occupied: Sequence[MigPlacement]) -> MigPlacement | None:
    """The first placement of ``profile`` (in :func:`placement_order`) that overlaps nothing in ``occupied``."""
    for candidate in placement_order(profile):
        if not any(candidate.overlaps(o) for o in occupied):
            return candidate
    return None


def select_dynamic(
    device: DeviceInfo, occupied: Sequence[MigPlacement], mem_req_mib: int
) -> tuple[MigProfile, MigPlacement] | None:
    """The profile and placement HAMi gives one vGPU request of ``mem_req_mib`` on a dynamic-MIG GPU.

    The first profile (smallest memory, then fewest slices) with ``memoryMB >= mem_req_mib`` that still has a
    free placement; ``None`` when none has. ``occupied`` is every placement in use on the GPU, including the
    ones already chosen for the same pod. Raises ``ValueError`` on a negative request.
    """
    if mem_req_mib < 0:
        raise ValueError(f"select_dynamic: negative memory request {mem_req_mib}")
    for profile in profile_order(device.mig_profiles):
        if profile.memory_mib < mem_req_mib:
            continue
        placement = free_placement(profile, occupied)
        if placement is not None:
            return profile, placement
    return None


# --------------------------------------------------------------------------------------------
# Legacy MIG templates (hami-wire §7.2)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LegacyMigChoice:
    """A legacy MIG instance: geometry index ``g`` and flattened slot ``s`` (the UUID suffix ``[g-s]``)."""

    geometry: int
    slot: int
    template: MigTemplate

    @property
    def suffix(self) -> tuple[int, int]:
        """The ``(g, s)`` pair kept in ``ContainerDevice.legacy_mig``."""
        return (self.geometry, self.slot)


def legacy_geometries(device_type: str, entries: Sequence[MigGeometryEntry]) -> tuple[tuple[MigTemplate, ...], ...]:
    """The geometries of the first config entry with a model substring contained in ``device_type``.

    Case-sensitive, as HAMi's ``strings.Contains``. Empty when no entry matches (the GPU then has no template).
    """
    for entry in entries:
        if any(model in device_type for model in entry.models):
            return entry.geometries
    return ()


def flatten_geometry(geometry: Sequence[MigTemplate]) -> tuple[MigTemplate, ...]:
    """The slot list of one geometry: each template repeated ``count`` times, in order (HAMi's ``PlatternMIG``)."""
    return tuple(t for t in geometry for _ in range(max(t.count, 0)))


def select_legacy(
    device: DeviceInfo, entries: Sequence[MigGeometryEntry], usage: DeviceUsage, mem_req_mib: int
) -> LegacyMigChoice | None:
    """The legacy MIG instance HAMi v2.9 gives one request of ``mem_req_mib`` on ``device``.

    No instance in use (``usage.legacy_geometry`` is ``None`` or no slot is taken): the first geometry holding a
    template with ``memory >= request``, and in it the first slot of the first such template. Otherwise: the
    first free slot with ``memory >= request`` of the geometry in use. ``None`` when nothing fits, when no
    config entry matches the device type, or when the usage names a geometry or slot the config does not
    have (fail closed: the partitioning on the GPU is unknown). Raises ``ValueError`` on a negative request.
    """
    if mem_req_mib < 0:
        raise ValueError(f"select_legacy: negative memory request {mem_req_mib}")
    geometries = legacy_geometries(device.type, entries)
    if usage.legacy_geometry is None or not usage.legacy_slots:
        for g, geometry in enumerate(geometries):
            slot = 0
            for template in geometry:
                if template.count > 0 and template.memory_mib >= mem_req_mib:
                    return LegacyMigChoice(geometry=g, slot=slot, template=template)
                slot += max(template.count, 0)
        return None
    g = usage.legacy_geometry
    if not 0 <= g < len(geometries):
        return None
    slots = flatten_geometry(geometries[g])
    if any(not 0 <= s < len(slots) for s in usage.legacy_slots):
        return None
    for s, template in enumerate(slots):
        if s not in usage.legacy_slots and template.memory_mib >= mem_req_mib:
            return LegacyMigChoice(geometry=g, slot=s, template=template)
    return None


def legacy_state_from_suffixes(suffixes: Iterable[tuple[int, int]]) -> tuple[int | None, frozenset[int]]:
    """The legacy MIG state of one GPU from the ``[g-s]`` suffixes of every pod entry on it.

    ``(None, ∅)`` when there is none. Raises ``ValueError`` when the suffixes name different geometries, take
    the same slot twice or hold a negative number: such a GPU's partitioning is unknown
    (:func:`mig_accounting` marks it unhealthy instead of raising).
    """
    geometry: int | None = None
    slots: set[int] = set()
    for g, s in suffixes:
        if g < 0 or s < 0:
            raise ValueError(f"legacy MIG suffix [{g}-{s}] is negative")
        if geometry is None:
            geometry = g
        elif g != geometry:
            raise ValueError(f"legacy MIG suffixes name geometries {geometry} and {g} on one GPU")
        if s in slots:
            raise ValueError(f"legacy MIG slot [{g}-{s}] is taken twice")
        slots.add(s)
    return geometry, frozenset(slots)


# --------------------------------------------------------------------------------------------
# Accounting (hami-wire §7.1 "Accounting")
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MigAccounting:
    """MIG state of one node's GPUs, rebuilt from its pods' allocations.

    ``placements``: dynamic-MIG placements in use per MIG GPU UUID. ``legacy``: ``(geometry, slots)`` per GPU
    with legacy instances. ``unhealthy``: UUIDs (among the node's devices) whose MIG state cannot be trusted.
    """

    placements: Mapping[str, tuple[MigPlacement, ...]]
    legacy: Mapping[str, tuple[int, frozenset[int]]]
    unhealthy: frozenset[str]


def mig_accounting(devices: Sequence[DeviceInfo], allocations: Iterable[Allocation]) -> MigAccounting:
    """What MIG instances are in use on one node's GPUs, and which GPUs to treat as unhealthy.

    ``allocations`` are the node's non-terminated pods. Per pod, as HAMi's ``getNodesUsage``: the pod's
    ``hami.io/vgpu-mig-allocations`` reservations are grouped by GPU and consumed in order, one per device
    entry (containers in order, raw entries, not collapsed). A GPU is unhealthy when:

    * a MIG reservation or a legacy ``[g-s]`` suffix lands on a GPU not in ``mig`` mode (HAMi checks
      ``hami-core`` only; any non-MIG mode is just as wrong);
    * a device entry on a ``mig`` GPU has neither a reservation nor a legacy suffix;
    * a legacy suffix lands on a GPU that publishes ``migProfiles`` (a v2.10 plugin knows no templates), or a
      reservation on a ``mig`` GPU that publishes none (a ≤ v2.9 plugin knows no reservations);
    * its legacy suffixes disagree (two geometries, a slot taken twice);
    * a pod's unconsumed reservations name a non-MIG GPU — or a GPU this node does not have, which makes
      every ``mig`` GPU of the node unhealthy, as HAMi does.

    Unconsumed reservations on a known ``mig`` GPU still count as in use (HAMi restores them).
    Entries naming a GPU the node does not have are ignored here (the usage side reports them).
    """
    by_id = {d.id: d for d in devices}
    is_mig = {d.id: d.mode == DeviceMode.MIG.value for d in devices}
    placements: dict[str, list[MigPlacement]] = {}
    suffixes: dict[str, list[tuple[int, int]]] = {}
    unhealthy: set[str] = set()

    for alloc in allocations:
        pending: dict[str, list[MigAllocation]] = {}
        for m in alloc.mig:
            pending.setdefault(m.gpu_uuid, []).append(m)
        for container in alloc.devices:
            for entry in container:
                dev = by_id.get(entry.uuid)
                if dev is None:
                    continue
                if entry.legacy_mig is not None:
                    if not is_mig[dev.id] or dev.mig_profiles:
                        unhealthy.add(dev.id)
                    suffixes.setdefault(dev.id, []).append(entry.legacy_mig)
                    continue
                queue = pending.get(dev.id)
                if queue:
                    if not is_mig[dev.id]:
                        unhealthy.add(dev.id)
                        continue
                    if not dev.mig_profiles:
                        unhealthy.add(dev.id)
                    placements.setdefault(dev.id, []).append(queue.pop(0).placement)
                elif is_mig[dev.id]:
                    unhealthy.add(dev.id)
        for gpu, left in pending.items():
            if not left:
                continue
            if gpu not in by_id:
                unhealthy.update(uuid for uuid, mig in is_mig.items() if mig)
            elif not is_mig[gpu]:
                unhealthy.add(gpu)
            else:
                if not by_id[gpu].mig_profiles:
                    unhealthy.add(gpu)
                placements.setdefault(gpu, []).extend(m.placement for m in left)

    legacy: dict[str, tuple[int, frozenset[int]]] = {}
    for gpu, pairs in suffixes.items():
        try:
            geometry, slots = legacy_state_from_suffixes(pairs)
        except ValueError:
            unhealthy.add(gpu)
            continue
        if geometry is not None:
            legacy[gpu] = (geometry, slots)

    return MigAccounting(
        placements={gpu: tuple(ps) for gpu, ps in placements.items()},
        legacy=legacy,
        unhealthy=frozenset(unhealthy),
    )
