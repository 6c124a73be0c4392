"""Whole Enflame GCUs (:class:`GcuVendor`): a count resource, registered from node capacity. Pure."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar, Final

from vgpu_scheduler.shared.codec._go import INT32_MAX
from vgpu_scheduler.shared.domain.model import DeviceInfo, Reason
from vgpu_scheduler.shared.domain.vendor import DeviceRules
from vgpu_scheduler.shared.vendors.base import NodeLockKind
from vgpu_scheduler.shared.vendors.counted import Counted, CountedVendor
from vgpu_scheduler.shared.vendors.description import Description, PodLists
from vgpu_scheduler.shared.vendors.enflame.keys import (
    _GCU_INFIX,
    GCU,
    GCU_ALLOCATED_KEY,
    GCU_SHARE,
    GCU_TO_ALLOCATE_KEY,
    EnflameConfig,
)
from vgpu_scheduler.shared.vendors.simple import UuidOnlyRules


@dataclass(frozen=True, slots=True)
class GcuRules(UuidOnlyRules):
    """GCU ``Fit``: the request's type, and a card nobody uses (one slot, and a request takes all 100 cores). A card
    in use reads ``ExclusiveDeviceAllocateConflict``, as HAMi's GCU ``Fit`` words it (it tests ``Used > 0``)."""

    slots_full_reason: ClassVar[Reason] = Reason.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT


GCU_RULES: DeviceRules = GcuRules(GCU)


def gcu_devices(node: str, count: int) -> tuple[DeviceInfo, ...]:
    """HAMi's ``GetNodeDevices`` of GCU: ``count`` cards ``<node>-GCU-<i>``, one slot, 100/100 each."""
    return tuple(
        DeviceInfo(f"{node}{_GCU_INFIX}{i}", i, 1, GCU_SHARE, GCU_SHARE, GCU, 0, "", True, vendor=GCU)
        for i in range(count)
    )


GCU_DESCRIPTION: Final = Description(
    GCU, GCU_RULES, PodLists(GCU_ALLOCATED_KEY, GCU_TO_ALLOCATE_KEY), node_lock=NodeLockKind.NONE
)


@dataclass(frozen=True, slots=True)
class GcuVendor(CountedVendor):
    """Whole Enflame GCU cards (see the package docstring): cards ``<node>-GCU-<i>`` from
    ``capacity[enflame.com/gcu]`` (HAMi's ``CheckHealth``: unhealthy without cards), one slot each; a request takes
    each card whole (100 "memory", 100 %, 100 cores). HAMi's GCU ``Fit`` checks no UUID list."""

    description = GCU_DESCRIPTION
    counted = Counted(
        top=INT32_MAX,
        expected=f"expected a whole number from 0 to {INT32_MAX}",
        devices=gcu_devices,
        mem_mib=GCU_SHARE,
        cores_pct=GCU_SHARE,
    )

    config: EnflameConfig = dataclasses.field(default_factory=EnflameConfig)

    @property
    def count_name(self) -> str:
        return self.config.resource_name_gcu
