"""How much free GPU memory is stranded on shared cards: ``fragmentation`` is the one definition of it, shared by
``simulate``'s report and ``usage``. Pure: it reads each device's load through ``DeviceLoad``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol


class DeviceLoad(Protocol):
    """What fragmentation needs of one device: whether it can take pods, how many it holds, its free memory."""

    @property
    def usable(self) -> bool: ...
    @property
    def used(self) -> int: ...
    @property
    def free_mem_mib(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Fragmentation:
    """Free GPU memory on usable devices, the part of it stranded on devices that already hold a pod (usable only
    by pods that share a card, never by a whole-card request), and the usable devices holding nothing."""

    free_memory_mib: int
    stranded_memory_mib: int
    idle_devices: int

    @property
    def ratio(self) -> float:
        """Stranded over free memory (0 when nothing is free), rounded to 4 places."""
        return round(self.stranded_memory_mib / self.free_memory_mib, 4) if self.free_memory_mib else 0.0

    def to_json(self) -> dict[str, int | float]:
        return {
            "free_memory_mib": self.free_memory_mib,
            "stranded_memory_mib": self.stranded_memory_mib,
            "ratio": self.ratio,
            "idle_devices": self.idle_devices,
        }


def fragmentation(devices: Iterable[DeviceLoad]) -> Fragmentation:
    """Fragmentation over ``devices`` (unusable ones are left out: healthy, not cordoned, on a live node)."""
    free = stranded = idle = 0
    for d in devices:
        if not d.usable:
            continue
        free += d.free_mem_mib
        if d.used > 0:
            stranded += d.free_mem_mib
        else:
            idle += 1
    return Fragmentation(free_memory_mib=free, stranded_memory_mib=stranded, idle_devices=idle)
