"""Whole Enflame GCUs (:class:`GcuVendor`): a count resource, registered from node capacity. Pure."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from vgpu_scheduler.shared.codec._go import INT32_MAX
from vgpu_scheduler.shared.domain.model import (
    ContainerRequest,
    DeviceInfo,
    Selectors,
)
from vgpu_scheduler.shared.domain.vendor import DeviceRules
from vgpu_scheduler.shared.vendors.base import NodeLockKind, ResourceNames
from vgpu_scheduler.shared.vendors.capacity import (
    count_in_limits,
    count_registration,
    observe_count,
)
from vgpu_scheduler.shared.vendors.described import DescribedVendor, Description
from vgpu_scheduler.shared.vendors.enflame.keys import (
    _GCU_INFIX,
    GCU,
    GCU_ALLOCATED_KEY,
    GCU_SHARE,
    GCU_TO_ALLOCATE_KEY,
    EnflameConfig,
)
from vgpu_scheduler.shared.vendors.registration import (
    NodeView,
    Observation,
)
from vgpu_scheduler.shared.vendors.simple import UuidOnlyRules, count_only_request

GCU_RULES: DeviceRules = UuidOnlyRules(GCU)
"""GCU ``Fit``: the request's type, and a card nobody uses (one slot, and a request takes all 100 cores)."""


@dataclass(frozen=True, slots=True)
class GcuVendor(DescribedVendor):
    """Whole Enflame GCU cards (see the module docstring)."""

    description = Description(
        name=GCU,
        rules=GCU_RULES,
        allocated_key=GCU_ALLOCATED_KEY,
        to_allocate_key=GCU_TO_ALLOCATE_KEY,
        node_lock=NodeLockKind.NONE,
    )

    config: EnflameConfig = dataclasses.field(default_factory=EnflameConfig)

    @property
    def resources(self) -> ResourceNames:
        return ResourceNames(count=self.config.resource_name_gcu)

    def container_request(self, container: Mapping[str, Any], what: str) -> ContainerRequest:
        """HAMi's ``GenerateResourceRequests``: the count from the limits, else the requests; each card taken whole
        (100 "memory", 100 %, 100 cores). A bad quantity is a ResourceRequestError."""
        name = self.config.resource_name_gcu
        return count_only_request(container, what, name, GCU, mem_mib=GCU_SHARE, cores_pct=GCU_SHARE)

    def mutate_container(self, container: dict[str, Any], where: str) -> bool:
        """HAMi's ``MutateAdmission``: no edit; ours when the count is in the limits (validated here)."""
        return count_in_limits(container, where, self.config.resource_name_gcu, self.container_request)

    def selectors(self, annotations: Mapping[str, str]) -> Selectors:
        del annotations
        return Selectors()  # HAMi's GCU Fit checks no UUID list

    def observe(self, node: NodeView, now_local: datetime, *, reported_before: bool = False) -> Observation:
        """Registration from ``status.capacity[enflame.com/gcu]``: absent → not registered; not a whole number →
        invalid; 0 → not registered (HAMi's ``CheckHealth``: unhealthy without cards)."""
        del now_local, reported_before
        return observe_count(
            node,
            vendor=GCU,
            count_name=self.config.resource_name_gcu,
            top=INT32_MAX,
            expected=f"expected a whole number from 0 to {INT32_MAX}",
            devices=gcu_devices,
        )

    def node_registration(self, devices: Sequence[DeviceInfo]) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
        """What the GCU device plugin advertises: one count per card."""
        return count_registration(devices, self.config.resource_name_gcu)


def gcu_devices(node: str, count: int) -> tuple[DeviceInfo, ...]:
    """HAMi's ``GetNodeDevices`` of GCU: ``count`` cards ``<node>-GCU-<i>``, one slot, 100/100 each."""
    return tuple(
        DeviceInfo(f"{node}{_GCU_INFIX}{i}", i, 1, GCU_SHARE, GCU_SHARE, GCU, 0, "", True, vendor=GCU)
        for i in range(count)
    )
