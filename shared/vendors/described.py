"""A vendor as a description: the wire names of one device family and the parts every family reads the same way
from them, written once. Pure.

A family module states its :class:`Description`: common word, ``Fit`` rules, the pod's device lists
(:class:`PodLists`), the node's register annotation with its codec, handshake and liveness
(:class:`RegisterAnnotation`), the selector annotations (:class:`SelectorKeys`) and the node lock. Its vendor class
inherits :class:`DescribedVendor`, which answers the :class:`~shared.vendors.base.Vendor` property block,
``manages``, ``selectors``, the pod device lists and ``observe`` from it. What a family really does its own way
(Ascend's templates, MetaX sGPU's QoS, a topology, MIG…) it writes as methods of its class, overriding these.
:meth:`ShareRequest.read` is the request reading of the families that ask with a count, a memory and a core
resource (Hygon, AMD, Iluvatar, Moore Threads): its :class:`ShareRequest` says where they differ,
:class:`ShareConfig` is their device-config section. docs/adding-a-vendor.md walks through a new family.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Protocol

from vgpu_scheduler.shared.codec.poddevices import decode_pod_devices, encode_pod_devices
from vgpu_scheduler.shared.codec.resources import (
    QuantityKind,
    ResourceRequestError,
    names_any,
    raw_value,
)
from vgpu_scheduler.shared.domain.model import (
    EMPTY_REQUEST,
    MEM_PCT_UNSET,
    NO_SELECTORS,
    ContainerDevice,
    ContainerRequest,
    NodeInventory,
    Selectors,
)
from vgpu_scheduler.shared.domain.vendor import DeviceRules
from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.vendors import registration as reg
from vgpu_scheduler.shared.vendors.base import NodeLockKind, ResourceNames
from vgpu_scheduler.shared.vendors.capacity import cordoned_ids
from vgpu_scheduler.shared.vendors.common import decode_selectors, names_section, read_container
from vgpu_scheduler.shared.vendors.description import Description, Liveness
from vgpu_scheduler.shared.vendors.registration import HANDSHAKE_TIMEOUT_S, NodeView, Observation
from vgpu_scheduler.shared.vendors.simple import uuid_selectors


class DescribedVendor:
    """The parts of a :class:`~shared.vendors.base.Vendor` its :attr:`description` answers. A subclass (a frozen
    dataclass) sets ``description`` (a class attribute, or a field where one class serves several families) and
    ``resources``; it overrides what its family does its own way."""

    __slots__ = ()
    description: Description
    handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S

    @property
    def resources(self) -> ResourceNames:
        raise NotImplementedError

    @property
    def name(self) -> str:
        return self.description.name

    @property
    def rules(self) -> DeviceRules:
        return self.description.rules

    @property
    def to_allocate_key(self) -> str | None:
        return self.description.pods.to_allocate

    @property
    def allocated_key(self) -> str:
        return self.description.pods.allocated

    @property
    def register_key(self) -> str | None:
        register = self.description.register
        return None if register is None else register.key

    @property
    def handshake_key(self) -> str | None:
        register = self.description.register
        return None if register is None else register.handshake

    @property
    def node_lock(self) -> NodeLockKind:
        return self.description.node_lock

    @property
    def use_uuid_key(self) -> str:
        keys = self.description.selectors
        return "" if keys is None else keys.use_uuid

    @property
    def no_use_uuid_key(self) -> str:
        keys = self.description.selectors
        return "" if keys is None else keys.nouse_uuid

    def manages(self, container: Mapping[str, Any]) -> bool:
        return names_any(container, self.resources.all)

    def selectors(self, annotations: Mapping[str, str]) -> Selectors:
        keys = self.description.selectors
        if keys is None:
            return NO_SELECTORS  # HAMi's checkUUID of the family is always true
        if keys.use_type is None or keys.nouse_type is None:
            return uuid_selectors(annotations, keys.use_uuid, keys.nouse_uuid)
        return decode_selectors(annotations, keys.use_type, keys.nouse_type, keys.use_uuid, keys.nouse_uuid)

    def observe(self, node: NodeView, now_local: datetime, *, reported_before: bool = False) -> Observation:
        """Registration and liveness as :func:`observe_described` says (the family's plugin always or never speaks
        the handshake, whatever it did before)."""
        del reported_before
        return observe_described(node, now_local, self.description, self.resources.count, self.handshake_timeout_s)

    def encode_devices(self, devices: tuple[tuple[ContainerDevice, ...], ...]) -> str:
        pods = self.description.pods
        return encode_pod_devices(devices, pods.list_key or pods.allocated)

    def decode_devices(self, value: str) -> tuple[tuple[ContainerDevice, ...], ...]:
        pods = self.description.pods
        return decode_pod_devices(value, pods.list_key or pods.allocated)


def observe_described(
    node: NodeView, now_local: datetime, d: Description, count_name: str, timeout_s: float = HANDSHAKE_TIMEOUT_S
) -> Observation:
    """Registration + HAMi's ``CheckHealth`` from a register annotation, in this order, each ending the observation:

    1. no register annotation → not registered (``absent``);
    2. the register annotation's ``decode`` refuses it → invalid (``register``);
    3. (not :attr:`Liveness.LISTED`) ``allocatable[count_name]`` is not a quantity → invalid (``allocatable``);
    4. no device → not registered (``no_devices``);
    5. :attr:`Liveness.HANDSHAKE`: live while our ``Requesting_`` is fresh or answered, once it expired only while
       allocatable > 0 (else ``handshake_timeout``); :attr:`Liveness.ALLOCATABLE`: live while allocatable > 0 (else
       ``no_allocatable``).

    Cordoned devices come from ``hami.io/device-cordon``."""
    annotation = d.register
    if annotation is None or annotation.decode is None:
        raise ValueError(f"vendor {d.name!r} has no register annotation to observe")
    key = annotation.key
    register = node.annotations.get(key)
    if register is None:
        return reg.NotRegistered(reg.Unregistered.ABSENT)
    try:
        devices = annotation.decode(register)
    except DecodeError as e:
        return reg.Invalid(reg.DecodeFailure.REGISTER, key, register, e)
    if annotation.liveness is Liveness.LISTED:
        if not devices:
            return reg.NotRegistered(reg.Unregistered.NO_DEVICES)
        return reg.Registered(NodeInventory(node.name, d.name, devices, cordoned=cordoned_ids(node, devices)))
    allocatable = reg.allocatable_quantity(node.allocatable, count_name)
    if isinstance(allocatable, reg.Invalid):
        return allocatable
    legacy = annotation.liveness is Liveness.HANDSHAKE
    if not devices:
        return reg.NotRegistered(reg.Unregistered.NO_DEVICES, legacy=legacy)
    if not legacy:
        if allocatable <= 0:
            return reg.NotRegistered(reg.Unregistered.NO_ALLOCATABLE)
        return reg.Registered(NodeInventory(node.name, d.name, devices, cordoned=cordoned_ids(node, devices)))
    judged = reg.judge_handshake(node.annotations.get(annotation.handshake or ""), now_local, timeout_s)
    if judged.state is reg.HandshakeState.EXPIRED and allocatable <= 0:
        return reg.NotRegistered(reg.Unregistered.HANDSHAKE_TIMEOUT, legacy=True)
    inventory = NodeInventory(node.name, d.name, devices, cordoned=cordoned_ids(node, devices))
    return reg.Registered(inventory, handshake=judged.write, legacy=True, reporter=judged.reporter)


_NO_RESOURCES: Mapping[str, Any] = {}


@dataclass(frozen=True, slots=True)
class ShareRequest:
    """How a family that asks with a count, a memory and a core resource reads them (:meth:`ShareRequest.read`).

    ``devices`` and ``memory`` name the devices and their memory in messages (``DCUs``, ``DCU memory``).
    ``limits_only``: count and memory are read from the limits only (a value in the requests alone is refused);
    cores always from the limits, else the requests. ``cores``: :attr:`QuantityKind.CORES` (above 100 read as
    100), :attr:`QuantityKind.PERCENT` (0..100) or :attr:`QuantityKind.PRIORITY` (any whole number);
    ``zero_cores``, when set, is the refusal of a core value of 0 (``{name}`` is the core resource).
    ``zero_count_hint``: the refusal of a count of 0 with memory says what to write instead. ``check(n, memory,
    memory_name)`` returns a further refusal of a valid count and memory (Moore Threads' sGPU sizes) or None.
    ``per_device``: memory and cores are the container's total, divided by the count (integer division)."""

    devices: str
    memory: str
    limits_only: bool = False
    cores: QuantityKind = QuantityKind.CORES
    zero_cores: str | None = None
    default_cores: int = 100
    zero_count_hint: bool = True
    check: Callable[[int, int | None, str], str | None] | None = None
    per_device: bool = False

    def read(
        self, container: Mapping[str, Any], what: str, name: str, names: ShareNames, *, memory_factor: int = 1
    ) -> ContainerRequest:
        """HAMi's ``GenerateResourceRequests`` of a count + memory + cores family (common word ``name``, resource
        ``names``), strict. Memory × ``memory_factor``; no memory means the whole device (100 %); cores default to
        ``default_cores``. A memory or core resource without the count, a count of 0 with memory, and any bad
        quantity are a ResourceRequestError."""
        count, memory, cores = names.resource_count_name, names.resource_memory_name, names.resource_core_name
        limits, requests, r = read_container(container, what, count, memory, cores, memory_factor=memory_factor)
        counted = _NO_RESOURCES if self.limits_only else requests
        n = r.read(limits, counted, count, QuantityKind.COUNT)
        mem = r.read(limits, counted, memory, QuantityKind.MEMORY) if memory else None
        core = r.read(limits, requests, cores, self.cores) if cores else None
        if core == 0 and self.zero_cores is not None:
            r.problem(self.zero_cores.format(name=cores))
        if self.limits_only:
            for x in (count, memory):
                if x and x not in limits and x in requests:
                    r.problem(f"{x} is read from the limits only: move it to resources.limits")
        if r.problems:
            raise ResourceRequestError(r.problems)
        if not raw_value(limits, counted, count)[0]:
            shares = [x for x in (memory, cores) if x and raw_value(limits, requests, x)[0]]
            if not shares:
                return EMPTY_REQUEST
            r.problem(f"{shares[0]} needs {count}, the number of {self.devices}: add {count}: 1")
            raise ResourceRequestError(r.problems)
        if not n:
            if mem:
                hint = f": set {count} to the number of {self.devices} (e.g. 1) or remove {memory}"
                r.problem(f"{count} is 0 but {memory} asks for {self.memory}" + (hint if self.zero_count_hint else ""))
                raise ResourceRequestError(r.problems)
            return EMPTY_REQUEST
        if self.check is not None and (refusal := self.check(n, mem, memory)) is not None:
            r.problem(refusal)
            raise ResourceRequestError(r.problems)
        mem_mib = (mem or 0) * memory_factor
        cores_pct = self.default_cores if core is None else core
        share = n if self.per_device else 1
        return ContainerRequest(
            nums=n,
            mem_mib=mem_mib // share,
            mem_pct=100 if mem_mib == 0 else MEM_PCT_UNSET,
            cores_pct=cores_pct // share,
            type=name,
        )


@dataclass(frozen=True, slots=True)
class ShareConfig:
    """The device-config section of a count + memory + cores family (HAMi's ``HygonConfig``, ``AMDConfig``,
    ``MthreadsConfig``): its resource names and, where HAMi reads one, ``memoryFactor``."""

    resource_count_name: str
    resource_memory_name: str
    resource_core_name: str
    memory_factor: int = 1
    """The memory resource is in units of this many MiB (HAMi scales only when it is above 1)."""

    def parse(
        self,
        section: object,
        key: str,
        *,
        unit: str,
        memory_factor: bool = False,
        required: Mapping[str, str] | None = None,
    ) -> ShareConfig:
        """The ``key:`` section validated (:func:`~shared.vendors.common.names_section`); absent keys keep
        these values. ``memory_factor``: the section may hold ``memoryFactor`` (read as at least 1). ConfigError names
        the key path."""
        keys = {**_SHARE_KEYS, "memoryFactor": "memory_factor"} if memory_factor else _SHARE_KEYS
        ints = {"memory_factor": 2**31 - 1} if memory_factor else None
        values = names_section(section, key, keys, ints=ints, unit=unit, required=required)
        if "memory_factor" in values:
            values["memory_factor"] = max(values["memory_factor"], 1)  # HAMi scales only above 1
        return dataclasses.replace(self, **values)


_SHARE_KEYS: Mapping[str, str] = {
    "resourceCountName": "resource_count_name",
    "resourceMemoryName": "resource_memory_name",
    "resourceCoreName": "resource_core_name",
}


class ShareNames(Protocol):
    """The resource names a count + memory + cores family's config holds (HAMi's ``resourceCountName``…)."""

    @property
    def resource_count_name(self) -> str: ...

    @property
    def resource_memory_name(self) -> str: ...

    @property
    def resource_core_name(self) -> str: ...


def share_resources(
    c: ShareNames, memory_unit_mib: int = 1, *, memory_percentage: str | None = None, extra: tuple[str, ...] = ()
) -> ResourceNames:
    """The :class:`~shared.vendors.base.ResourceNames` of a count + memory + cores config (a blank memory or core
    name: the family has none); ``memory_unit_mib`` is one memory unit's worth."""
    return ResourceNames(
        count=c.resource_count_name,
        memory=c.resource_memory_name or None,
        cores=c.resource_core_name or None,
        memory_percentage=memory_percentage,
        memory_unit_mib=memory_unit_mib,
        extra=extra,
    )


@dataclass(frozen=True, slots=True)
class ShareVendor(DescribedVendor):
    """A family that asks with a count, a memory and a core resource (Hygon, AMD, Moore Threads): its resource names
    come from its device-config section (:attr:`config`, memory in units of ``config.memory_factor`` MiB) and its
    request is read by :meth:`ShareRequest.read` as its :attr:`share_request` says. A subclass sets
    ``description``, ``share_request`` and the default ``config``."""

    share_request: ClassVar[ShareRequest]
    config: ShareConfig

    @property
    def resources(self) -> ResourceNames:
        return share_resources(self.config, self.config.memory_factor)

    def container_request(self, container: Mapping[str, Any], what: str) -> ContainerRequest:
        """HAMi's ``GenerateResourceRequests`` of the family, strict (:meth:`ShareRequest.read`)."""
        c = self.config
        return self.share_request.read(container, what, self.name, c, memory_factor=c.memory_factor)
