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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from vgpu_scheduler.shared.codec.resources import capped_cores_warning, container_lists
from vgpu_scheduler.shared.domain.model import DeviceInfo, PodConstraints
from vgpu_scheduler.shared.domain.vendor import BasicRules, DeviceRules, selectors_uuid_ok
from vgpu_scheduler.shared.vendors.capacity import slot_capacity
from vgpu_scheduler.shared.vendors.described import DescribedVendor, ShareConfig, ShareRequest, ShareVendor
from vgpu_scheduler.shared.vendors.description import Description, PodLists, RegisterAnnotation, SelectorKeys
from vgpu_scheduler.shared.vendors.simple import decode_colon, encode_colon

SECTION: Final = "hygon"
"""The device-config section that configures the vendor (on by default; the section overrides HAMi's defaults)."""

ENABLE_FLAG: Final[str | None] = None
"""On by default, as HAMi initialises it (``shared.vendors.catalog``)."""

NAME: Final = "DCU"
"""HAMi's common word: the ``type`` of DCU requests and pod device entries, ``DeviceInfo.vendor``."""

REGISTER_KEY: Final = "hami.io/node-dcu-register"


DEFAULT_CONFIG: Final = ShareConfig("hygon.com/dcunum", "hygon.com/dcumem", "hygon.com/dcucores")
"""HAMi's defaults of the ``hygon:`` section."""


def parse_config(section: object) -> ShareConfig:
    """Validate the ``hygon:`` section; absent keys keep HAMi's defaults. ConfigError names the key path."""
    return DEFAULT_CONFIG.parse(section, SECTION, unit="DCUs", memory_factor=True)


def build(section: object) -> tuple[HygonVendor, ...]:
    """The vendor the ``hygon:`` section configures (``None`` or ``{}``: HAMi's defaults)."""
    return (HygonVendor(parse_config(section)),)


@dataclass(frozen=True, slots=True)
class DcuRules(BasicRules):
    """DCU ``Fit``: the common skeleton; only the UUID check differs (both lists apply, as in HAMi)."""

    name: str = NAME

    def uuid_ok(self, dev: DeviceInfo, constraints: PodConstraints) -> bool:
        return selectors_uuid_ok(dev, constraints.selectors(self.name))


DCU_RULES: DeviceRules = DcuRules()


def decode_devices_register(value: str) -> tuple[DeviceInfo, ...]:
    """``hami.io/node-dcu-register`` → the node's DCUs (``vendor`` = ``DCU``). Colon format only, as HAMi's
    ``DecodeNodeDevices``: a JSON value is a DecodeError."""
    return decode_colon(value, REGISTER_KEY, NAME)


DESCRIPTION: Final = Description(
    NAME,
    DCU_RULES,
    PodLists("hami.io/dcu-devices-allocated", "hami.io/dcu-devices-to-allocate"),
    RegisterAnnotation(REGISTER_KEY, decode_devices_register, handshake="hami.io/node-handshake-dcu"),
    SelectorKeys(
        "hygon.com/use-gpuuuid",
        "hygon.com/nouse-gpuuuid",
        use_type="hygon.com/use-dcutype",
        nouse_type="hygon.com/nouse-dcutype",
    ),
)
"""DCU registration (colon format) is observed through the handshake, always (DCU plugins speak it): live while
our ``Requesting_`` is fresh or being answered; once it expired, live only while allocatable > 0."""

REQUEST: Final = ShareRequest(devices="DCUs", memory="DCU memory")
"""Each resource from the limits, else the requests; cores above 100 read as 100, default 100."""


@dataclass(frozen=True, slots=True)
class HygonVendor(ShareVendor):
    """Hygon DCU (see the module docstring); requests as :data:`REQUEST` says, memory × ``memoryFactor``."""

    description = DESCRIPTION
    share_request = REQUEST
    config: ShareConfig = DEFAULT_CONFIG
    handshake_timeout_s: float = DescribedVendor.handshake_timeout_s

    def mutate_container(self, container: dict[str, Any], where: str) -> bool:
        """HAMi's ``MutateAdmission``: no edit; True when the count resource is in the container's limits."""
        limits, _ = container_lists(container, where)
        return self.config.resource_count_name in limits

    def admission_warnings(self, container: Mapping[str, Any], where: str) -> tuple[str, ...]:
        """A core percentage above 100 is scheduled as 100 (HAMi's ``Fit`` caps it without a word)."""
        warning = capped_cores_warning(container, self.config.resource_core_name, where, "DCU")
        return (warning,) if warning else ()


def registration_annotations(devices: Sequence[DeviceInfo]) -> dict[str, str]:
    """What a DCU device plugin writes on its Node: the 9-field colon register value (the handshake answer is the
    plugin's own business and not included)."""
    return {REGISTER_KEY: encode_colon(devices, REGISTER_KEY)}


def node_capacity(devices: Sequence[DeviceInfo], config: ShareConfig | None = None) -> dict[str, str]:
    """The count resource a DCU device plugin advertises: one per slot (the sum of the devices' ``count``)."""
    return slot_capacity(devices, (config or DEFAULT_CONFIG).resource_count_name)
