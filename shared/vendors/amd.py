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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from vgpu_scheduler.shared.codec.register import encode_register_json
from vgpu_scheduler.shared.codec.resources import QuantityKind, container_lists
from vgpu_scheduler.shared.domain.model import ContainerDevice, ContainerRequest, DeviceInfo, PodConstraints, Reason
from vgpu_scheduler.shared.domain.vendor import BasicRules, DeviceRules, Take, selectors_uuid_ok
from vgpu_scheduler.shared.vendors.capacity import slot_capacity
from vgpu_scheduler.shared.vendors.described import DescribedVendor, ShareConfig, ShareRequest, ShareVendor
from vgpu_scheduler.shared.vendors.description import Description, Liveness, PodLists, RegisterAnnotation, SelectorKeys
from vgpu_scheduler.shared.vendors.simple import decode_json

SECTION: Final = "amd"
"""The device-config section that configures the vendor (on by default; the section overrides HAMi's defaults)."""

ENABLE_FLAG: Final[str | None] = None
"""On by default, as HAMi initialises it (``shared.vendors.catalog``)."""

NAME: Final = "AMD"
"""HAMi's common word: the ``type`` of AMD requests, ``DeviceInfo.vendor``."""

REGISTER_KEY: Final = "hami.io/node-amd-register"


DEFAULT_CONFIG: Final = ShareConfig("amd.com/gpu", "amd.com/gpumem", "amd.com/gpucores")
"""HAMi's defaults of the ``amd:`` section."""


def parse_config(section: object) -> ShareConfig:
    """Validate the ``amd:`` section; absent keys keep the defaults. ConfigError names the key path."""
    return DEFAULT_CONFIG.parse(section, SECTION, unit="AMD GPUs")


def build(section: object) -> tuple[AmdVendor, ...]:
    """The vendor the ``amd:`` section configures (``None`` or ``{}``: the defaults)."""
    return (AmdVendor(parse_config(section)),)


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
        return selectors_uuid_ok(dev, constraints.selectors(self.name))

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


def decode_devices_register(value: str) -> tuple[DeviceInfo, ...]:
    """``hami.io/node-amd-register`` → the node's GPUs (``vendor`` = ``AMD``). JSON only, as HAMi's
    ``UnMarshalNodeDevices`` (unknown keys such as ``devicevendor`` or ``custominfo`` ignored)."""
    return decode_json(value, REGISTER_KEY, NAME)


DESCRIPTION: Final = Description(
    NAME,
    AMD_RULES,
    PodLists("hami.io/amd-devices-allocated", "hami.io/amd-devices-to-allocate"),
    RegisterAnnotation(REGISTER_KEY, decode_devices_register, liveness=Liveness.ALLOCATABLE),
    SelectorKeys(
        "amd.com/use-gpu-uuid",
        "amd.com/nouse-gpu-uuid",
        use_type="amd.com/use-gputype",
        nouse_type="amd.com/nouse-gputype",
    ),
)
"""No handshake: a registered node is live while ``allocatable[amd.com/gpu] > 0``."""

REQUEST: Final = ShareRequest(
    devices="GPUs",
    memory="GPU memory",
    limits_only=True,
    cores=QuantityKind.PERCENT,
    zero_cores="{name} is a percentage of one GPU's compute units: write 1 to 100, not 0",
)
"""Count and memory from the limits only, cores from the limits else the requests (1..100, default 100)."""


@dataclass(frozen=True, slots=True)
class AmdVendor(ShareVendor):
    """AMD GPUs (see the module docstring); requests as :data:`REQUEST` says."""

    description = DESCRIPTION
    share_request = REQUEST
    config: ShareConfig = DEFAULT_CONFIG

    def mutate_container(self, container: dict[str, Any], where: str) -> bool:
        """HAMi's ``MutateAdmission``: no edit; True when the count, memory or core resource is in the limits.

        HAMi also refuses a core limit outside 1..100 here; :meth:`container_request` reports that (with every
        other problem) where the webhook validates the pod."""
        limits, _ = container_lists(container, where)
        return any(n in limits for n in self.resources.all)

    def decode_devices(self, value: str) -> tuple[tuple[ContainerDevice, ...], ...]:
        """The entries' written type (the product type) is kept as ``shown_type``; ``type`` is ``AMD``, the
        vendor every process keys on."""
        return tuple(
            tuple(d if d.type == NAME else dataclasses.replace(d, type=NAME, shown_type=d.type) for d in container)
            for container in DescribedVendor.decode_devices(self, value)
        )


def registration_annotations(devices: Sequence[DeviceInfo]) -> dict[str, str]:
    """What HAMi's AMD registration writes on a Node: the JSON register value."""
    return {REGISTER_KEY: encode_register_json(tuple(devices))}


def node_capacity(devices: Sequence[DeviceInfo], config: ShareConfig | None = None) -> dict[str, str]:
    """The count resource the AMD device plugin advertises: one per slot (the sum of the devices' ``count``)."""
    return slot_capacity(devices, (config or DEFAULT_CONFIG).resource_count_name)
