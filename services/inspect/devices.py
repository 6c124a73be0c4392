"""One device's state as the operator commands show it: capacity, what is in use, the pods holding it.

Built from the store's node snapshots (the extender's view: inventory + usage counters) and its allocation
records (which pod holds what); the figures are the ones ``/filter`` plans against.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.store import AllocationRecord


@dataclass(frozen=True, slots=True)
class PodShare:
    """One pod's charge on one device (collapsed over its containers, as usage counts it)."""

    namespace: str
    name: str
    uid: str
    state: str
    """``reserved`` (by /filter, not yet seen bound) or ``confirmed`` (seen in the pod's annotations)."""
    mem_mib: int
    cores_pct: int
    slots: int

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "state": self.state,
            "mem_mib": self.mem_mib,
            "cores_pct": self.cores_pct,
            "slots": self.slots,
        }


@dataclass(frozen=True, slots=True)
class DeviceRow:
    """One registered GPU: capacity, usage and holders. ``usable``: healthy and not cordoned."""

    node: str
    uuid: str
    index: int
    type: str
    mode: str
    numa: int
    health: bool
    cordoned: bool
    slots: int
    slots_used: int
    mem_mib: int
    mem_used_mib: int
    cores: int
    cores_used: int
    pods: tuple[PodShare, ...] = field(default=())

    @property
    def usable(self) -> bool:
        return self.health and not self.cordoned

    @property
    def used(self) -> int:
        return self.slots_used

    @property
    def free_mem_mib(self) -> int:
        return max(self.mem_mib - self.mem_used_mib, 0)

    def to_json(self) -> dict[str, Any]:
        return {
            "uuid": self.uuid,
            "index": self.index,
            "type": self.type,
            "mode": self.mode,
            "numa": self.numa,
            "health": self.health,
            "cordoned": self.cordoned,
            "usable": self.usable,
            "slots": {"used": self.slots_used, "capacity": self.slots},
            "memory_mib": {"used": self.mem_used_mib, "capacity": self.mem_mib},
            "cores_pct": {"used": self.cores_used, "capacity": self.cores},
            "pods": [p.to_json() for p in self.pods],
        }


def shares_by_device(records: Iterable[AllocationRecord]) -> dict[str, list[PodShare]]:
    """Every allocation's per-device charges, by device UUID, pods in name order."""
    out: dict[str, list[PodShare]] = {}
    for rec in records:
        a = rec.allocation
        for c in a.charges:
            out.setdefault(c.uuid, []).append(
                PodShare(a.namespace, a.name, a.pod_uid, rec.state.value, c.mem_mib, c.cores_pct, c.slots)
            )
    for shares in out.values():
        shares.sort(key=lambda s: (s.namespace, s.name, s.uid))
    return out


def device_rows(snap: NodeSnapshot, shares: Mapping[str, Sequence[PodShare]]) -> list[DeviceRow]:
    """The node's devices in inventory order, with their usage and the pods on each."""
    inv = snap.inventory
    return [
        DeviceRow(
            node=snap.name,
            uuid=d.id,
            index=d.index,
            type=d.type,
            mode=d.mode,
            numa=d.numa,
            health=d.health,
            cordoned=d.id in inv.cordoned,
            slots=d.count,
            slots_used=u.used,
            mem_mib=d.devmem_mib,
            mem_used_mib=u.used_mem_mib,
            cores=d.devcore,
            cores_used=u.used_cores,
            pods=tuple(shares.get(d.id, ())),
        )
        for d, u in zip(inv.devices, snap.usages, strict=True)
    ]


def short_uuid(uuid: str, width: int = 18) -> str:
    """``GPU-…`` plus the UUID's tail when it is longer than ``width`` (tables); JSON and ``wide`` keep it whole."""
    if len(uuid) <= width:
        return uuid
    head = uuid[:4] if uuid.startswith("GPU-") else ""
    return f"{head}…{uuid[-(width - len(head) - 1) :]}"


def ratio(num: int, den: int) -> float:
    return round(num / den, 4) if den else 0.0


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"
