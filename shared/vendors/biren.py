"""Biren GPUs as a vendor (HAMi's ``pkg/device/biren``): common word ``Biren``, pure.

What a Biren pod and node look like on the wire (docs/vendors/biren.md):

* one resource, ``birentech.com/gpu`` (the number of cards; renamed by the ``biren:`` section's
  ``resourceCountName``); a card is handed out by slot, with no memory or core share;
* registration ``hami.io/node-biren-register`` in HAMi's JSON (every card's core total read as 100), liveness
  through the ``hami.io/node-handshake-biren`` handshake;
* pod device lists ``hami.io/Biren-devices-to-allocate`` and ``hami.io/Biren-devices-allocated`` (the same value:
  ``UUID,Biren,0,0:`` per card, ``;`` per container), the shared node lock ``hami.io/mutex.lock``;
* selectors ``birentech.com/use-gpuuuid`` / ``birentech.com/nouse-gpuuuid`` (both apply).

On by default, as in HAMi (:data:`ENABLE_FLAG` is None).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from vgpu_scheduler.shared.codec.poddevices import decode_pod_devices, encode_pod_devices
from vgpu_scheduler.shared.codec.register import encode_register_json
from vgpu_scheduler.shared.codec.resources import container_lists, names_any
from vgpu_scheduler.shared.domain.model import ContainerDevice, ContainerRequest, DeviceInfo, Selectors
from vgpu_scheduler.shared.domain.vendor import DeviceRules
from vgpu_scheduler.shared.vendors.base import NodeLockKind, ResourceNames
from vgpu_scheduler.shared.vendors.common import names_section
from vgpu_scheduler.shared.vendors.registration import HANDSHAKE_TIMEOUT_S, NodeView, Observation
from vgpu_scheduler.shared.vendors.simple import (
    SlotOnlyRules,
    count_only_request,
    decode_json,
    observe_with_handshake,
    uuid_selectors,
)

SECTION: Final = "biren"
"""The device-config section that configures the vendor."""

ENABLE_FLAG: Final[str | None] = None
"""HAMi v2.10 initialises Biren whatever its device config holds: no flag enables it."""

NAME: Final = "Biren"
"""HAMi's common word: the ``type`` of Biren requests and pod device entries, ``DeviceInfo.vendor``."""

REGISTER_KEY: Final = "hami.io/node-biren-register"
HANDSHAKE_KEY: Final = "hami.io/node-handshake-biren"
TO_ALLOCATE_KEY: Final = "hami.io/Biren-devices-to-allocate"
ALLOCATED_KEY: Final = "hami.io/Biren-devices-allocated"
USE_UUID: Final = "birentech.com/use-gpuuuid"
NOUSE_UUID: Final = "birentech.com/nouse-gpuuuid"
CARD_CORES: Final = 100
"""HAMi sets every registered card's core total to 100 ("only for calscore use")."""


@dataclass(frozen=True, slots=True)
class BirenConfig:
    """The ``biren:`` section (HAMi's ``BirenConfig``)."""

    resource_count_name: str = "birentech.com/gpu"


def parse_config(section: object) -> BirenConfig:
    """Validate the ``biren:`` section; absent keys keep HAMi's default. ConfigError names the key path."""
    return BirenConfig(**names_section(section, SECTION, {"resourceCountName": "resource_count_name"}, unit="cards"))


def build(section: object) -> tuple[BirenVendor, ...]:
    """The vendor the ``biren:`` section configures (``None`` or ``{}``: HAMi's default)."""
    return (BirenVendor(parse_config(section)),)


BIREN_RULES: DeviceRules = SlotOnlyRules(NAME)
"""Biren ``Fit``: type, UUID, time slices (and the core's health, cordon and ``mutex``); no memory, no cores."""


@dataclass(frozen=True, slots=True)
class BirenVendor:
    """Biren (see the module docstring)."""

    config: BirenConfig = dataclasses.field(default_factory=BirenConfig)
    handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S

    @property
    def name(self) -> str:
        return NAME

    @property
    def resources(self) -> ResourceNames:
        return ResourceNames(count=self.config.resource_count_name)

    @property
    def rules(self) -> DeviceRules:
        return BIREN_RULES

    @property
    def to_allocate_key(self) -> str | None:
        return TO_ALLOCATE_KEY

    @property
    def allocated_key(self) -> str:
        return ALLOCATED_KEY

    @property
    def register_key(self) -> str | None:
        return REGISTER_KEY

    @property
    def handshake_key(self) -> str | None:
        return HANDSHAKE_KEY

    @property
    def node_lock(self) -> NodeLockKind:
        return NodeLockKind.HAMI

    def manages(self, container: Mapping[str, Any]) -> bool:
        return names_any(container, self.resources.all)

    def container_request(self, container: Mapping[str, Any], what: str) -> ContainerRequest:
        """HAMi's ``GenerateResourceRequests``: the count from the limits, else the requests; the whole card's
        memory as a percentage (100), no cores. A bad quantity is a ResourceRequestError."""
        return count_only_request(container, what, self.config.resource_count_name, NAME)

    def mutate_container(self, container: dict[str, Any], where: str) -> bool:
        """HAMi's ``MutateAdmission``: no edit; ours when the count is in the limits (validated here)."""
        limits, _ = container_lists(container, where)
        if self.config.resource_count_name not in limits:
            return False
        self.container_request(container, where)
        return True

    def selectors(self, annotations: Mapping[str, str]) -> Selectors:
        return uuid_selectors(annotations, USE_UUID, NOUSE_UUID)

    def observe(self, node: NodeView, now_local: datetime, *, reported_before: bool = False) -> Observation:
        """Registration (JSON) and the handshake, in Hygon's order (``simple.observe_with_handshake``)."""
        del reported_before
        return observe_with_handshake(
            node,
            now_local,
            vendor=NAME,
            register_key=REGISTER_KEY,
            handshake_key=HANDSHAKE_KEY,
            count_name=self.config.resource_count_name,
            decode=decode_devices_register,
            timeout_s=self.handshake_timeout_s,
        )

    def node_registration(self, devices: Sequence[DeviceInfo]) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
        """What the Biren device plugin writes on its Node: the JSON register value and one count per slot."""
        annotations = {REGISTER_KEY: encode_register_json(tuple(devices))}
        return annotations, {self.config.resource_count_name: str(sum(max(d.count, 0) for d in devices))}, {}

    def encode_devices(self, devices: tuple[tuple[ContainerDevice, ...], ...]) -> str:
        return encode_pod_devices(devices, ALLOCATED_KEY)

    def decode_devices(self, value: str) -> tuple[tuple[ContainerDevice, ...], ...]:
        return decode_pod_devices(value, ALLOCATED_KEY)


def decode_devices_register(value: str) -> tuple[DeviceInfo, ...]:
    """``hami.io/node-biren-register`` → the node's cards (JSON only, core total 100)."""
    return decode_json(value, REGISTER_KEY, NAME, devcore=CARD_CORES)
