"""Hygon DCU as a vendor (HAMi's ``pkg/device/hygon``): common word ``DCU``, pure.

What a DCU pod and node look like on the wire (docs/vendors/hygon.md):

* resources ``hygon.com/dcunum`` (count), ``hygon.com/dcumem`` (memory, units of ``memoryFactor`` MiB) and
  ``hygon.com/dcucores`` (percent of one card), renamed by the ``hygon:`` section of the device config;
* registration ``hami.io/node-dcu-register`` in the **colon format** only (``id,count,devmem,devcore,type,numa,
  health[,index,mode]:`` per device, HAMi's ``DecodeNodeDevices``), liveness through the
  ``hami.io/node-handshake-dcu`` handshake (a ``Requesting_`` past 60 s falls back to ``allocatable > 0``);
* pod device lists ``hami.io/dcu-devices-to-allocate`` and ``hami.io/dcu-devices-allocated`` (the same value:
  ``UUID,DCU,mem,cores:`` per device, ``;`` per container), the shared node lock ``hami.io/mutex.lock``;
* selectors ``hygon.com/use-dcutype`` / ``hygon.com/nouse-dcutype`` (upper-cased substrings of the device type)
  and ``hygon.com/use-gpuuuid`` / ``hygon.com/nouse-gpuuuid`` (exact UUIDs; both lists apply).

``Fit`` is the common skeleton unchanged: memory in MiB or, when none is asked, the whole card (100 %); cores as
asked, 100 when not given; a 100-core request wants the card to itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec._go import fail
from vgpu_scheduler.shared.codec.poddevices import decode_pod_devices, encode_pod_devices
from vgpu_scheduler.shared.codec.quantity import parse_quantity
from vgpu_scheduler.shared.codec.register import decode_register, encode_register_colon, is_json
from vgpu_scheduler.shared.codec.resources import (
    QuantityKind,
    RequestReader,
    ResourceRequestError,
    capped_cores_warning,
    container_label,
    container_lists,
    names_any,
    raw_value,
)
from vgpu_scheduler.shared.codec.selectors import decode_cordon
from vgpu_scheduler.shared.domain.model import (
    EMPTY_REQUEST,
    MEM_PCT_UNSET,
    ContainerDevice,
    ContainerRequest,
    DeviceInfo,
    NodeInventory,
    PodConstraints,
    Selectors,
)
from vgpu_scheduler.shared.domain.vendor import BasicRules, DeviceRules
from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.vendors.base import NodeLockKind, ResourceNames
from vgpu_scheduler.shared.vendors.common import (
    decode_selectors,
    names_section,
    reader_config,
    rekey,
    uuid_selectors_ok,
)
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

SECTION: Final = "hygon"
"""The device-config section that configures the vendor (on by default; the section overrides HAMi's defaults)."""

ENABLE_FLAG: Final[str | None] = None
"""On by default, as HAMi initialises it (``shared.vendors.catalog``)."""

NAME: Final = "DCU"
"""HAMi's common word: the ``type`` of DCU requests and pod device entries, ``DeviceInfo.vendor``."""

REGISTER_KEY: Final = "hami.io/node-dcu-register"
HANDSHAKE_KEY: Final = "hami.io/node-handshake-dcu"
TO_ALLOCATE_KEY: Final = "hami.io/dcu-devices-to-allocate"
ALLOCATED_KEY: Final = "hami.io/dcu-devices-allocated"
USE_TYPE: Final = "hygon.com/use-dcutype"
NOUSE_TYPE: Final = "hygon.com/nouse-dcutype"
USE_UUID: Final = "hygon.com/use-gpuuuid"
NOUSE_UUID: Final = "hygon.com/nouse-gpuuuid"

_DEFAULT_CORES = 100
"""HAMi's core request when ``hygon.com/dcucores`` is not given: the whole card's compute."""


@dataclass(frozen=True, slots=True)
class HygonConfig:
    """The ``hygon:`` section (HAMi's ``HygonConfig``), with HAMi's defaults (its ``--dcu-*`` flags and chart)."""

    resource_count_name: str = "hygon.com/dcunum"
    resource_memory_name: str = "hygon.com/dcumem"
    resource_core_name: str = "hygon.com/dcucores"
    memory_factor: int = 1
    """``hygon.com/dcumem`` is in units of this many MiB (HAMi scales only when it is above 1)."""


_KEYS: Mapping[str, str] = {
    "resourceCountName": "resource_count_name",
    "resourceMemoryName": "resource_memory_name",
    "resourceCoreName": "resource_core_name",
    "memoryFactor": "memory_factor",
}


def parse_config(section: object) -> HygonConfig:
    """Validate the ``hygon:`` section; absent keys keep HAMi's defaults. ConfigError names the key path."""
    values = names_section(section, SECTION, _KEYS, ints={"memory_factor": 2**31 - 1}, unit="DCUs")
    if "memory_factor" in values:
        values["memory_factor"] = max(values["memory_factor"], 1)  # HAMi scales only above 1
    return HygonConfig(**values)


def build(section: object) -> tuple[HygonVendor, ...]:
    """The vendor the ``hygon:`` section configures (``None`` or ``{}``: HAMi's defaults)."""
    return (HygonVendor(parse_config(section)),)


# ------------------------------------------------------------------------------------------------------------
# Fit
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DcuRules(BasicRules):
    """DCU ``Fit``: the common skeleton; only the UUID check differs (both lists apply, as in HAMi)."""

    name: str = NAME

    def uuid_ok(self, dev: DeviceInfo, constraints: PodConstraints) -> bool:
        return uuid_selectors_ok(dev, constraints.selectors(self.name))


DCU_RULES: DeviceRules = DcuRules()


# ------------------------------------------------------------------------------------------------------------
# Selectors
# ------------------------------------------------------------------------------------------------------------


# ------------------------------------------------------------------------------------------------------------
# The vendor
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HygonVendor:
    """Hygon DCU (see the module docstring)."""

    config: HygonConfig = dataclasses.field(default_factory=HygonConfig)
    handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S

    @property
    def name(self) -> str:
        return NAME

    @property
    def resources(self) -> ResourceNames:
        c = self.config
        return ResourceNames(
            count=c.resource_count_name,
            memory=c.resource_memory_name or None,
            cores=c.resource_core_name or None,
            memory_unit_mib=c.memory_factor,
        )

    @property
    def rules(self) -> DeviceRules:
        return DCU_RULES

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

    # ---- requests ----------------------------------------------------------------------------------------------

    def manages(self, container: Mapping[str, Any]) -> bool:
        return names_any(container, self.resources.all)

    def container_request(self, container: Mapping[str, Any], what: str) -> ContainerRequest:
        """HAMi's ``GenerateResourceRequests`` for DCUs, strict (see docs/vendors/hygon.md).

        Each resource is read from the limits, else the requests. Memory × ``memoryFactor``; no memory means the
        whole card (100 %); cores default to 100. A memory or core resource without the count, a count of 0 with
        memory, and any bad quantity are a ResourceRequestError.
        """
        c = self.config
        limits, requests = container_lists(container, what)
        r = RequestReader(
            reader_config(c.resource_count_name, c.resource_memory_name, c.resource_core_name, c.memory_factor),
            container_label(container, what),
        )
        n = r.read(limits, requests, c.resource_count_name, QuantityKind.COUNT)
        mem = r.read(limits, requests, c.resource_memory_name, QuantityKind.MEMORY) if c.resource_memory_name else None
        core = r.read(limits, requests, c.resource_core_name, QuantityKind.CORES) if c.resource_core_name else None
        if r.problems:
            raise ResourceRequestError(r.problems)
        if not raw_value(limits, requests, c.resource_count_name)[0]:
            shares = [
                x for x in (c.resource_memory_name, c.resource_core_name) if x and raw_value(limits, requests, x)[0]
            ]
            if not shares:
                return EMPTY_REQUEST
            r.problem(f"{shares[0]} needs {c.resource_count_name}, the number of DCUs: add {c.resource_count_name}: 1")
            raise ResourceRequestError(r.problems)
        if not n:
            if mem:
                r.problem(
                    f"{c.resource_count_name} is 0 but {c.resource_memory_name} asks for DCU memory: set "
                    f"{c.resource_count_name} to the number of DCUs (e.g. 1) or remove {c.resource_memory_name}"
                )
                raise ResourceRequestError(r.problems)
            return EMPTY_REQUEST
        mem_mib = (mem or 0) * c.memory_factor
        return ContainerRequest(
            nums=n,
            mem_mib=mem_mib,
            mem_pct=100 if mem_mib == 0 else MEM_PCT_UNSET,
            cores_pct=_DEFAULT_CORES if core is None else core,
            type=NAME,
        )

    def mutate_container(self, container: dict[str, Any], where: str) -> bool:
        """HAMi's ``MutateAdmission``: no edit; True when the count resource is in the container's limits."""
        limits, _ = container_lists(container, where)
        return self.config.resource_count_name in limits

    def admission_warnings(self, container: Mapping[str, Any], where: str) -> tuple[str, ...]:
        """A core percentage above 100 is scheduled as 100 (HAMi's ``Fit`` caps it without a word)."""
        warning = capped_cores_warning(container, self.config.resource_core_name, where, "DCU")
        return (warning,) if warning else ()

    def selectors(self, annotations: Mapping[str, str]) -> Selectors:
        return decode_selectors(annotations, USE_TYPE, NOUSE_TYPE, USE_UUID, NOUSE_UUID)

    # ---- registration ------------------------------------------------------------------------------------------

    def observe(self, node: NodeView, now_local: datetime, *, reported_before: bool = False) -> Observation:
        """Registration + HAMi's ``CheckHealth`` for DCUs. The order of the checks, each ending the observation:

        1. no ``hami.io/node-dcu-register`` → not registered (``absent``);
        2. the value is JSON, or not the 7/9-field colon format → invalid (``register``);
        3. ``allocatable[<resourceCountName>]`` is not a quantity → invalid (``allocatable``);
        4. no device → not registered (``no_devices``);
        5. the handshake, always (DCU plugins speak it): live while our ``Requesting_`` is fresh or being
           answered; once it expired, live only while allocatable > 0 (else ``handshake_timeout``).
        """
        del reported_before  # DCU always speaks the handshake
        a = node.annotations
        register = a.get(REGISTER_KEY)
        if register is None:
            return NotRegistered(Unregistered.ABSENT)
        try:
            devices = decode_devices_register(register)
        except DecodeError as e:
            return Invalid(DecodeFailure.REGISTER, REGISTER_KEY, register, e)
        count_name = self.config.resource_count_name
        source = f"status.allocatable[{count_name}]"
        raw = node.allocatable.get(count_name, 0)
        try:
            allocatable = parse_quantity(raw, source)
        except DecodeError as e:
            return Invalid(DecodeFailure.ALLOCATABLE, source, str(raw), e)
        if not devices:
            return NotRegistered(Unregistered.NO_DEVICES, legacy=True)
        judged = judge_handshake(a.get(HANDSHAKE_KEY), now_local, self.handshake_timeout_s)
        if judged.state is HandshakeState.EXPIRED and allocatable <= 0:
            return NotRegistered(Unregistered.HANDSHAKE_TIMEOUT, legacy=True)
        ids = {d.id for d in devices}
        cordoned = frozenset(u for u in decode_cordon(a.get(keys.DEVICE_CORDON, "")) if u in ids)
        inventory = NodeInventory(node=node.name, vendor=NAME, devices=devices, cordoned=cordoned)
        return Registered(inventory, handshake=judged.write, legacy=True, reporter=judged.reporter)

    # ---- pod device lists --------------------------------------------------------------------------------------

    def encode_devices(self, devices: tuple[tuple[ContainerDevice, ...], ...]) -> str:
        return encode_pod_devices(devices, ALLOCATED_KEY)

    def decode_devices(self, value: str) -> tuple[tuple[ContainerDevice, ...], ...]:
        return decode_pod_devices(value, ALLOCATED_KEY)


def decode_devices_register(value: str) -> tuple[DeviceInfo, ...]:
    """``hami.io/node-dcu-register`` → the node's DCUs (``vendor`` = ``DCU``). Colon format only, as HAMi's
    ``DecodeNodeDevices``: a JSON value is a DecodeError."""
    if is_json(value):
        fail(
            REGISTER_KEY,
            "expected the colon format (id,count,devmem,devcore,type,numa,health[,index,mode]:), got JSON",
            value,
        )
    try:
        devices = decode_register(value)
    except DecodeError as e:
        raise rekey(e, REGISTER_KEY) from e
    return tuple(dataclasses.replace(d, vendor=NAME) for d in devices)


def registration_annotations(devices: Sequence[DeviceInfo]) -> dict[str, str]:
    """What a DCU device plugin writes on its Node: the 9-field colon register value (the handshake answer is the
    plugin's own business and not included)."""
    try:
        return {REGISTER_KEY: encode_register_colon(tuple(devices), 9)}
    except DecodeError as e:
        raise rekey(e, REGISTER_KEY) from e


def node_capacity(devices: Sequence[DeviceInfo], config: HygonConfig | None = None) -> dict[str, str]:
    """The count resource a DCU device plugin advertises: one per slot (the sum of the devices' ``count``)."""
    name = (config or HygonConfig()).resource_count_name
    return {name: str(sum(max(d.count, 0) for d in devices))}
