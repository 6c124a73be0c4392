"""A whole family that hands out devices by slot (HAMi's Biren and Vastai): its modules give only a
:class:`~shared.vendors.described.Description`, the count resource's default name and the register value writer
(:func:`build_slot_only`). Pure."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vgpu_scheduler.shared.codec.resources import container_lists
from vgpu_scheduler.shared.domain.model import ContainerRequest, DeviceInfo
from vgpu_scheduler.shared.vendors.base import ResourceNames
from vgpu_scheduler.shared.vendors.capacity import slot_capacity
from vgpu_scheduler.shared.vendors.common import names_section
from vgpu_scheduler.shared.vendors.described import DescribedVendor
from vgpu_scheduler.shared.vendors.description import Description
from vgpu_scheduler.shared.vendors.registration import HANDSHAKE_TIMEOUT_S
from vgpu_scheduler.shared.vendors.simple import count_only_request


@dataclass(frozen=True, slots=True)
class SlotOnlyVendor(DescribedVendor):
    """A family that hands out whole devices by slot: the count resource alone (read from the limits, else the
    requests; no memory, no cores), registration from a JSON annotation with HAMi's handshake (``description``'s
    ``decode_register``; ``encode`` writes devices back as the device plugin would, for the simulator's nodes),
    the shared node lock, UUID selectors, and pod device lists ``UUID,<word>,0,0:``. The webhook makes no edit: a
    container is ours when the count is in its limits (validated there)."""

    description: Description
    count_name: str
    encode: Callable[[Sequence[DeviceInfo]], str]
    handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S

    @property
    def resources(self) -> ResourceNames:
        return ResourceNames(count=self.count_name)

    def container_request(self, container: Mapping[str, Any], what: str) -> ContainerRequest:
        """HAMi's ``GenerateResourceRequests``: the count from the limits, else the requests; the whole device's
        memory as a percentage (100), no cores. A bad quantity is a ResourceRequestError."""
        return count_only_request(container, what, self.count_name, self.description.name)

    def mutate_container(self, container: dict[str, Any], where: str) -> bool:
        """HAMi's ``MutateAdmission``: no edit; ours when the count is in the limits (validated here)."""
        limits, _ = container_lists(container, where)
        if self.count_name not in limits:
            return False
        self.container_request(container, where)
        return True

    def node_registration(self, devices: Sequence[DeviceInfo]) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
        """What the family's device plugin writes on its Node: the JSON register value and one count per slot."""
        annotations = {self.register_key or "": self.encode(devices)}
        return annotations, slot_capacity(devices, self.count_name), {}


def build_slot_only(
    section: object,
    description: Description,
    encode: Callable[[Sequence[DeviceInfo]], str],
    *,
    key: str,
    default_count: str,
    unit: str,
) -> tuple[SlotOnlyVendor, ...]:
    """The vendor a slot-only family's section configures: the section holds only ``resourceCountName`` (HAMi's
    ``BirenConfig``, ``VastaiConfig``); ``None`` or ``{}`` keep ``default_count``. ConfigError names the key path
    (``key``, the section's name; ``unit`` says what a container asks for)."""
    values = names_section(section, key, {"resourceCountName": "resource_count_name"}, unit=unit)
    return (SlotOnlyVendor(description, values.get("resource_count_name", default_count), encode),)
