"""A small made-up device vendor ("FAKE") for testing the node-side plumbing (registration of several vendors on
one node, merged inventories, per-vendor allocated annotations.

Its register annotation ``hami.io/node-fake-register`` uses NVIDIA's JSON register format; it is live while
``allocatable[example.com/fake] > 0`` (and, when ``handshake`` is set, also while its ``Requesting_`` on
``hami.io/node-handshake-fake`` is fresh, like a ≤ v2.7 plugin); its pod device lists use NVIDIA's format under
its own keys. Nothing here is a real vendor's wire format.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from vgpu_scheduler.shared.codec.poddevices import decode_pod_devices, encode_pod_devices
from vgpu_scheduler.shared.codec.quantity import parse_quantity
from vgpu_scheduler.shared.codec.register import decode_register
from vgpu_scheduler.shared.domain.model import (
    EMPTY_REQUEST,
    ContainerDevice,
    ContainerRequest,
    NodeInventory,
    Selectors,
)
from vgpu_scheduler.shared.domain.vendor import BasicRules, DeviceRules
from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.vendors.base import NodeLockKind, ResourceNames
from vgpu_scheduler.shared.vendors.registration import (
    HANDSHAKE_TIMEOUT_S,
    DecodeFailure,
    HandshakeState,
    Invalid,
    NodeView,
    NotRegistered,
    Observation,
    Registered,
    Unregistered,
    judge_handshake,
)

FAKE = "FAKE"
FAKE_REGISTER = "hami.io/node-fake-register"
FAKE_HANDSHAKE = "hami.io/node-handshake-fake"
FAKE_ALLOCATED = "hami.io/fake-devices-allocated"
FAKE_TO_ALLOCATE = "hami.io/fake-devices-to-allocate"
FAKE_COUNT = "example.com/fake"
FAKE_MEM = "example.com/fakemem"


@dataclass(frozen=True, slots=True)
class FakeVendor:
    name: str = FAKE
    handshake: bool = False
    handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S

    @property
    def resources(self) -> ResourceNames:
        return ResourceNames(count=FAKE_COUNT, memory=FAKE_MEM)

    @property
    def rules(self) -> DeviceRules:
        return BasicRules(self.name)

    @property
    def to_allocate_key(self) -> str:
        return FAKE_TO_ALLOCATE

    @property
    def allocated_key(self) -> str:
        return FAKE_ALLOCATED

    @property
    def register_key(self) -> str:
        return FAKE_REGISTER

    @property
    def handshake_key(self) -> str | None:
        return FAKE_HANDSHAKE if self.handshake else None

    @property
    def node_lock(self) -> NodeLockKind:
        return NodeLockKind.HAMI

    def manages(self, container: Mapping[str, Any]) -> bool:
        res = container.get("resources")
        if not isinstance(res, Mapping):
            return False
        maps = (res.get("limits"), res.get("requests"))
        return any(isinstance(m, Mapping) and any(n in m for n in self.resources.all) for m in maps)

    def container_request(self, container: Mapping[str, Any], what: str) -> ContainerRequest:
        del what
        if not self.manages(container):
            return EMPTY_REQUEST
        return ContainerRequest(nums=1, type=self.name)

    def mutate_container(self, container: dict[str, Any], where: str) -> bool:
        del where
        return self.manages(container)

    def selectors(self, annotations: Mapping[str, str]) -> Selectors:
        del annotations
        return Selectors()

    def encode_devices(self, devices: tuple[tuple[ContainerDevice, ...], ...]) -> str:
        return encode_pod_devices(devices, FAKE_ALLOCATED)

    def decode_devices(self, value: str) -> tuple[tuple[ContainerDevice, ...], ...]:
        return decode_pod_devices(value, FAKE_ALLOCATED)

    def observe(self, node: NodeView, now_local: datetime, *, reported_before: bool = False) -> Observation:
        del reported_before
        register = node.annotations.get(FAKE_REGISTER)
        if register is None:
            return NotRegistered(Unregistered.ABSENT)
        try:
            devices = tuple(dataclasses.replace(d, vendor=self.name) for d in decode_register(register))
        except DecodeError as e:
            named = DecodeError(FAKE_REGISTER, e.detail, e.part)
            return Invalid(DecodeFailure.REGISTER, FAKE_REGISTER, register, named)
        source = f"status.allocatable[{FAKE_COUNT}]"
        raw = node.allocatable.get(FAKE_COUNT, 0)
        try:
            allocatable = parse_quantity(raw, source)
        except DecodeError as e:
            return Invalid(DecodeFailure.ALLOCATABLE, source, str(raw), e)
        if not devices:
            return NotRegistered(Unregistered.NO_DEVICES, self.handshake)
        write = None
        live = allocatable > 0
        if self.handshake:
            judged = judge_handshake(node.annotations.get(FAKE_HANDSHAKE), now_local, self.handshake_timeout_s)
            write = judged.write
            live = live or judged.state is not HandshakeState.EXPIRED
        if not live:
            reason = Unregistered.HANDSHAKE_TIMEOUT if self.handshake else Unregistered.NO_ALLOCATABLE
            return NotRegistered(reason, self.handshake)
        inventory = NodeInventory(node=node.name, vendor=self.name, devices=devices)
        return Registered(inventory, handshake=write, legacy=self.handshake)


def fake_register(*uuids: str, mem: int = 65536) -> str:
    """The fake vendor's register annotation with one healthy device per ID."""
    items = [
        f'{{"id":"{u}","index":{i},"count":4,"devmem":{mem},"devcore":100,"type":"FAKE-X1",'
        f'"mode":"hami-core","health":true}}'
        for i, u in enumerate(uuids)
    ]
    return "[" + ",".join(items) + "]"
