"""AMD GPUs as a vendor (HAMi's ``pkg/device/amd``): common word ``AMD``, pure.

What an AMD pod and node look like on the wire (docs/vendors/amd.md):

* resources ``amd.com/gpu`` (count), ``amd.com/gpumem`` (MiB) and ``amd.com/gpucores`` (percent of one card's
  compute units), renamed by the ``amd:`` section of the device config; count and memory are read from the
  container's **limits only**, cores from the limits, else the requests;
* registration ``hami.io/node-amd-register`` as a **JSON** array of devices (HAMi's ``UnMarshalNodeDevices``),
  no handshake: live while ``allocatable[amd.com/gpu] > 0``;
* pod device lists ``hami.io/amd-devices-to-allocate`` and ``hami.io/amd-devices-allocated`` (the same value,
  ``UUID,Type,mem,cores:`` per device, ``;`` per container), the shared node lock ``hami.io/mutex.lock``;
* selectors ``amd.com/use-gputype`` / ``amd.com/nouse-gputype`` and ``amd.com/use-gpu-uuid`` /
  ``amd.com/nouse-gpu-uuid``.

``Fit`` differs from the common skeleton in what a device gives (:class:`AmdRules`): no memory asked means the
whole card's memory; the core percentage becomes compute units of *that* card (``devcore × pct / 100``, at least
1, at most ``devcore``); a request for the whole card's memory with no core percentage takes every unit.
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
from vgpu_scheduler.shared.codec.register import decode_register, encode_register_json, is_json
from vgpu_scheduler.shared.codec.resources import (
    QuantityKind,
    RequestReader,
    ResourceRequestError,
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
    Reason,
    Selectors,
)
from vgpu_scheduler.shared.domain.vendor import BasicRules, DeviceRules, Take
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
    DecodeFailure,
    Invalid,
    NodeView,
    NotRegistered,
    Observation,
    Registered,
    Unregistered,
)

SECTION: Final = "amd"
"""The device-config section that configures the vendor (on by default; the section overrides HAMi's defaults)."""

ENABLE_FLAG: Final[str | None] = None
"""On by default, as HAMi initialises it (``shared.vendors.catalog``)."""

NAME: Final = "AMD"
"""HAMi's common word: the ``type`` of AMD requests, ``DeviceInfo.vendor``."""

REGISTER_KEY: Final = "hami.io/node-amd-register"
TO_ALLOCATE_KEY: Final = "hami.io/amd-devices-to-allocate"
ALLOCATED_KEY: Final = "hami.io/amd-devices-allocated"
USE_TYPE: Final = "amd.com/use-gputype"
NOUSE_TYPE: Final = "amd.com/nouse-gputype"
USE_UUID: Final = "amd.com/use-gpu-uuid"
NOUSE_UUID: Final = "amd.com/nouse-gpu-uuid"

_DEFAULT_CORES = 100
"""HAMi's core percentage when ``amd.com/gpucores`` is not given: every compute unit of each card."""


@dataclass(frozen=True, slots=True)
class AmdConfig:
    """The ``amd:`` section (HAMi's ``AMDConfig``), with the chart's values as defaults."""

    resource_count_name: str = "amd.com/gpu"
    resource_memory_name: str = "amd.com/gpumem"
    resource_core_name: str = "amd.com/gpucores"


_KEYS: Mapping[str, str] = {
    "resourceCountName": "resource_count_name",
    "resourceMemoryName": "resource_memory_name",
    "resourceCoreName": "resource_core_name",
}


def parse_config(section: object) -> AmdConfig:
    """Validate the ``amd:`` section; absent keys keep the defaults. ConfigError names the key path."""
    return AmdConfig(**names_section(section, SECTION, _KEYS, unit="AMD GPUs"))


def build(section: object) -> tuple[AmdVendor, ...]:
    """The vendor the ``amd:`` section configures (``None`` or ``{}``: the defaults)."""
    return (AmdVendor(parse_config(section)),)


# ------------------------------------------------------------------------------------------------------------
# Fit
# ------------------------------------------------------------------------------------------------------------


def amd_memory(req: ContainerRequest, dev: DeviceInfo) -> int:
    """The memory a request takes on ``dev``: as asked, or the whole card when none is asked."""
    if req.mem_mib <= 0 and dev.devmem_mib > 0:
        return dev.devmem_mib
    return max(req.mem_mib, 0)


def amd_cores(req: ContainerRequest, dev: DeviceInfo, mem_mib: int) -> int | None:
    """The compute units a request takes on ``dev`` (None: the card has none to give a positive percentage)."""
    if req.cores_pct > 0:
        if dev.devcore <= 0:
            return None
        return min(max(dev.devcore * req.cores_pct // 100, 1), dev.devcore)
    if dev.devmem_mib > 0 and mem_mib >= dev.devmem_mib:
        return dev.devcore
    return 0


@dataclass(frozen=True, slots=True)
class AmdRules(BasicRules):
    """AMD ``Fit`` (HAMi v2.10.0): the skeleton's checks with AMD's memory and compute-unit arithmetic."""

    name: str = NAME

    def uuid_ok(self, dev: DeviceInfo, constraints: PodConstraints) -> bool:
        return uuid_selectors_ok(dev, constraints.selectors(self.name))

    def entry_type(self, dev: DeviceInfo) -> str:
        """HAMi writes the card's registered product type in the pod's device entry (the common word when the
        registration has none): ``ContainerDevice.shown_type``."""
        return dev.type if dev.type and dev.type != NAME else ""

    def take(self, dev: DeviceInfo, req: ContainerRequest, used_mem_mib: int) -> Take:
        mem = amd_memory(req, dev)
        cores = amd_cores(req, dev, mem)
        if cores is None:
            # HAMi checks memory first: a card short of memory is refused for that, not for its cores.
            reason = None if dev.devmem_mib - used_mem_mib < mem else Reason.CARD_INSUFFICIENT_CORE
            return Take(mem, 0, reason)
        return Take(mem, cores)


AMD_RULES: DeviceRules = AmdRules()


# ------------------------------------------------------------------------------------------------------------
# The vendor
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AmdVendor:
    """AMD GPUs (see the module docstring)."""

    config: AmdConfig = dataclasses.field(default_factory=AmdConfig)

    @property
    def name(self) -> str:
        return NAME

    @property
    def resources(self) -> ResourceNames:
        c = self.config
        return ResourceNames(
            count=c.resource_count_name, memory=c.resource_memory_name or None, cores=c.resource_core_name or None
        )

    @property
    def rules(self) -> DeviceRules:
        return AMD_RULES

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
        return None

    @property
    def node_lock(self) -> NodeLockKind:
        return NodeLockKind.HAMI

    # ---- requests ----------------------------------------------------------------------------------------------

    def manages(self, container: Mapping[str, Any]) -> bool:
        return names_any(container, self.resources.all)

    def container_request(self, container: Mapping[str, Any], what: str) -> ContainerRequest:
        """HAMi's ``GenerateResourceRequests`` for AMD, strict (see docs/vendors/amd.md).

        Count and memory from the limits only, cores from the limits else the requests (1..100, default 100).
        No memory means the whole card (``mem_pct`` 100). Memory or cores without the count, a count of 0 with
        memory, a core percentage of 0 and any bad quantity are a ResourceRequestError.
        """
        c = self.config
        limits, requests = container_lists(container, what)
        none: Mapping[str, Any] = {}
        r = RequestReader(
            reader_config(c.resource_count_name, c.resource_memory_name, c.resource_core_name),
            container_label(container, what),
        )
        n = r.read(limits, none, c.resource_count_name, QuantityKind.COUNT)
        mem = r.read(limits, none, c.resource_memory_name, QuantityKind.MEMORY) if c.resource_memory_name else None
        core = r.read(limits, requests, c.resource_core_name, QuantityKind.PERCENT) if c.resource_core_name else None
        if core == 0:
            r.problem(f"{c.resource_core_name} is a percentage of one GPU's compute units: write 1 to 100, not 0")
        for name in (c.resource_count_name, c.resource_memory_name):
            if name and name not in limits and name in requests:
                r.problem(f"{name} is read from the limits only: move it to resources.limits")
        if r.problems:
            raise ResourceRequestError(r.problems)
        if not raw_value(limits, none, c.resource_count_name)[0]:
            shares = [
                x for x in (c.resource_memory_name, c.resource_core_name) if x and raw_value(limits, requests, x)[0]
            ]
            if not shares:
                return EMPTY_REQUEST
            r.problem(f"{shares[0]} needs {c.resource_count_name}, the number of GPUs: add {c.resource_count_name}: 1")
            raise ResourceRequestError(r.problems)
        if not n:
            if mem:
                r.problem(
                    f"{c.resource_count_name} is 0 but {c.resource_memory_name} asks for GPU memory: set "
                    f"{c.resource_count_name} to the number of GPUs (e.g. 1) or remove {c.resource_memory_name}"
                )
                raise ResourceRequestError(r.problems)
            return EMPTY_REQUEST
        mem_mib = mem or 0
        return ContainerRequest(
            nums=n,
            mem_mib=mem_mib,
            mem_pct=100 if mem_mib == 0 else MEM_PCT_UNSET,
            cores_pct=_DEFAULT_CORES if core is None else core,
            type=NAME,
        )

    def mutate_container(self, container: dict[str, Any], where: str) -> bool:
        """HAMi's ``MutateAdmission``: no edit; True when the count, memory or core resource is in the limits.

        HAMi also refuses a core limit outside 1..100 here; :meth:`container_request` reports that (with every
        other problem) where the webhook validates the pod."""
        limits, _ = container_lists(container, where)
        return any(n in limits for n in self.resources.all)

    def selectors(self, annotations: Mapping[str, str]) -> Selectors:
        return decode_selectors(annotations, USE_TYPE, NOUSE_TYPE, USE_UUID, NOUSE_UUID)

    # ---- registration ------------------------------------------------------------------------------------------

    def observe(self, node: NodeView, now_local: datetime, *, reported_before: bool = False) -> Observation:
        """Registration + HAMi's ``CheckHealth`` for AMD. The order of the checks, each ending the observation:

        1. no ``hami.io/node-amd-register`` → not registered (``absent``);
        2. the value is not a JSON array of devices → invalid (``register``);
        3. ``allocatable[<resourceCountName>]`` is not a quantity → invalid (``allocatable``);
        4. no device → not registered (``no_devices``);
        5. no handshake: live while allocatable > 0 (else ``no_allocatable``).
        """
        del now_local, reported_before  # no handshake
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
            return NotRegistered(Unregistered.NO_DEVICES)
        if allocatable <= 0:
            return NotRegistered(Unregistered.NO_ALLOCATABLE)
        ids = {d.id for d in devices}
        cordoned = frozenset(u for u in decode_cordon(a.get(keys.DEVICE_CORDON, "")) if u in ids)
        return Registered(NodeInventory(node=node.name, vendor=NAME, devices=devices, cordoned=cordoned))

    # ---- pod device lists --------------------------------------------------------------------------------------

    def encode_devices(self, devices: tuple[tuple[ContainerDevice, ...], ...]) -> str:
        return encode_pod_devices(devices, ALLOCATED_KEY)

    def decode_devices(self, value: str) -> tuple[tuple[ContainerDevice, ...], ...]:
        """The entries' written type (the product type) is kept as ``shown_type``; ``type`` is ``AMD``, the
        vendor every process keys on."""
        return tuple(
            tuple(d if d.type == NAME else dataclasses.replace(d, type=NAME, shown_type=d.type) for d in container)
            for container in decode_pod_devices(value, ALLOCATED_KEY)
        )


def decode_devices_register(value: str) -> tuple[DeviceInfo, ...]:
    """``hami.io/node-amd-register`` → the node's GPUs (``vendor`` = ``AMD``). JSON only, as HAMi's
    ``UnMarshalNodeDevices`` (unknown keys such as ``devicevendor`` or ``custominfo`` ignored)."""
    if not is_json(value):
        fail(REGISTER_KEY, "expected a JSON array of devices", value)
    try:
        devices = decode_register(value)
    except DecodeError as e:
        raise rekey(e, REGISTER_KEY) from e
    return tuple(dataclasses.replace(d, vendor=NAME) for d in devices)


def registration_annotations(devices: Sequence[DeviceInfo]) -> dict[str, str]:
    """What HAMi's AMD registration writes on a Node: the JSON register value."""
    return {REGISTER_KEY: encode_register_json(tuple(devices))}


def node_capacity(devices: Sequence[DeviceInfo], config: AmdConfig | None = None) -> dict[str, str]:
    """The count resource the AMD device plugin advertises: one per slot (the sum of the devices' ``count``)."""
    name = (config or AmdConfig()).resource_count_name
    return {name: str(sum(max(d.count, 0) for d in devices))}
