"""A small non-NVIDIA vendor for tests of the vendor plumbing (requests, selectors, annotations, locks).

``FakeVendor("DCU")`` behaves like a simple HAMi vendor: resources ``<prefix>/num``, ``<prefix>/mem`` (MiB) and
``<prefix>/cores``; memory 0 means the whole card (100 %); the device list is NVIDIA's format with the vendor's
own keys ``hami.io/<lower>-devices-to-allocate`` / ``-allocated``; selectors ``<prefix>/use-uuid`` /
``<prefix>/nouse-uuid``; the node lock is configurable. ``mutate_container`` sets env ``<NAME>_VISIBLE=1`` on a
container asking for it (a visible edit for webhook tests).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from vgpu_scheduler.shared.codec.poddevices import decode_pod_devices, encode_pod_devices
from vgpu_scheduler.shared.codec.quantity import parse_quantity
from vgpu_scheduler.shared.codec.register import decode_register, encode_register_json
from vgpu_scheduler.shared.codec.resources import ResourceRequestError
from vgpu_scheduler.shared.codec.selectors import decode_uuid_list
from vgpu_scheduler.shared.domain.model import (
    EMPTY_REQUEST,
    MEM_PCT_UNSET,
    ContainerDevice,
    ContainerRequest,
    DeviceInfo,
    NodeInventory,
    Selectors,
)
from vgpu_scheduler.shared.domain.vendor import BasicRules, DeviceRules
from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.vendors.base import NodeLockKind, ResourceNames
from vgpu_scheduler.shared.vendors.registration import (
    DecodeFailure,
    Invalid,
    NodeView,
    NotRegistered,
    Observation,
    Registered,
    Unregistered,
)


@dataclass(frozen=True, slots=True)
class FakeVendor:
    """A test vendor named ``name`` (its common word) with resources under ``prefix`` (default ``<lower>.com``)."""

    vendor_name: str = "DCU"
    lock: NodeLockKind = NodeLockKind.HAMI
    prefix: str = ""
    has_to_allocate: bool = True

    @property
    def name(self) -> str:
        return self.vendor_name

    @property
    def _prefix(self) -> str:
        return self.prefix or f"{self.vendor_name.lower()}.com"

    @property
    def resources(self) -> ResourceNames:
        p = self._prefix
        return ResourceNames(count=f"{p}/num", memory=f"{p}/mem", cores=f"{p}/cores")

    @property
    def rules(self) -> DeviceRules:
        return BasicRules(self.vendor_name)

    @property
    def to_allocate_key(self) -> str | None:
        return f"hami.io/{self.vendor_name.lower()}-devices-to-allocate" if self.has_to_allocate else None

    @property
    def allocated_key(self) -> str:
        return f"hami.io/{self.vendor_name.lower()}-devices-allocated"

    @property
    def register_key(self) -> str | None:
        return f"hami.io/node-{self.vendor_name.lower()}-register"

    @property
    def handshake_key(self) -> str | None:
        return None

    @property
    def node_lock(self) -> NodeLockKind:
        return self.lock

    def _maps(self, container: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
        res = container.get("resources") or {}
        return res.get("limits") or {}, res.get("requests") or {}

    def manages(self, container: Mapping[str, Any]) -> bool:
        limits, requests = self._maps(container)
        return any(n in limits or n in requests for n in self.resources.all)

    def container_request(self, container: Mapping[str, Any], what: str) -> ContainerRequest:
        limits, requests = self._maps(container)
        values: dict[str, int] = {}
        problems: list[str] = []
        for name in sorted(self.resources.all):
            raw = limits.get(name, requests.get(name))
            if raw is None:
                continue
            try:
                q = parse_quantity(raw, name)
            except DecodeError:
                problems.append(f"{what}: {name}: {raw!r} is not a number")
                continue
            if q < 0 or q.denominator != 1:
                problems.append(f"{what}: {name}: {raw!r} must be a whole number")
                continue
            values[name] = q.numerator
        if problems:
            raise ResourceRequestError(problems)
        r = self.resources
        n = values.get(r.count, 0)
        if n == 0:
            return EMPTY_REQUEST
        mem = values.get(r.memory or "", 0)
        return ContainerRequest(
            nums=n,
            mem_mib=mem,
            mem_pct=MEM_PCT_UNSET if mem else 100,
            cores_pct=values.get(r.cores or "", 0),
            type=self.vendor_name,
        )

    def mutate_container(self, container: dict[str, Any], where: str) -> bool:
        del where
        if not self.manages(container):
            return False
        container.setdefault("env", []).append({"name": f"{self.vendor_name}_VISIBLE", "value": "1"})
        return True

    def selectors(self, annotations: Mapping[str, str]) -> Selectors:
        use = annotations.get(f"{self._prefix}/use-uuid")
        nouse = annotations.get(f"{self._prefix}/nouse-uuid")
        return Selectors(
            use_uuids=decode_uuid_list(use) if use is not None else frozenset(),
            nouse_uuids=decode_uuid_list(nouse) if nouse is not None else frozenset(),
        )

    def observe(self, node: NodeView, now_local: datetime, *, reported_before: bool = False) -> Observation:
        """Registered from ``register_key`` in NVIDIA's register format (the devices get this vendor)."""
        del now_local, reported_before
        key = self.register_key
        value = node.annotations.get(key) if key else None
        if value is None:
            return NotRegistered(Unregistered.ABSENT)
        try:
            devices = decode_register(value)
        except DecodeError as e:
            return Invalid(DecodeFailure.REGISTER, str(key), value, e)
        if not devices:
            return NotRegistered(Unregistered.NO_DEVICES)
        mine = tuple(replace(d, vendor=self.vendor_name) for d in devices)
        return Registered(NodeInventory(node=node.name, vendor=self.vendor_name, devices=mine))

    def encode_devices(self, devices: tuple[tuple[ContainerDevice, ...], ...]) -> str:
        return encode_pod_devices(devices)

    def decode_devices(self, value: str) -> tuple[tuple[ContainerDevice, ...], ...]:
        return decode_pod_devices(value)


def fake_devices(
    node: str, vendor: str = "DCU", n: int = 2, mem: int = 16000, count: int = 4
) -> tuple[DeviceInfo, ...]:
    """``n`` devices of ``vendor`` named ``<vendor>-<node>-<i>`` (type = the common word)."""
    return tuple(
        DeviceInfo(
            id=f"{vendor}-{node}-{i}",
            index=i,
            count=count,
            devmem_mib=mem,
            devcore=100,
            type=vendor,
            numa=0,
            mode="hami-core",
            health=True,
            vendor=vendor,
        )
        for i in range(n)
    )


def mixed_inventory(node: str, nvidia: tuple[DeviceInfo, ...], other: tuple[DeviceInfo, ...]) -> NodeInventory:
    """One node carrying NVIDIA devices and another vendor's."""
    return NodeInventory(node=node, vendor="NVIDIA", devices=(*nvidia, *other))


def register_annotation(vendor: FakeVendor, devices: tuple[DeviceInfo, ...]) -> dict[str, str]:
    """What the vendor's device plugin would write on the Node (the inverse of ``observe``)."""
    key = vendor.register_key
    assert key is not None
    return {key: encode_register_json(devices)}
