"""Iluvatar CoreX GPUs as vendors (HAMi's ``pkg/device/iluvatar``): one vendor per chip, pure.

HAMi's ``iluvatars:`` section is a list of chips; each entry is a vendor of its own whose common word is the
entry's ``commonWord`` (the chart's ``MR-V100``, ``MR-V50``, ``BI-V150``, ``BI-V100``). HAMi schedules them only
with its ``--enable-iluvatar`` flag (off by default): :data:`ENABLE_FLAG` (the catalog's contract).

What an Iluvatar pod and node look like on the wire (docs/vendors/iluvatar.md), for a chip ``<cw>``:

* resources ``iluvatar.ai/<cw>-vgpu`` (count), ``iluvatar.ai/<cw>.vMem`` (memory in **256 MiB units**, fixed)
  and ``iluvatar.ai/<cw>.vCore`` (percent of one card; 0 when not given; above 100 is read as 100);
* registration ``hami.io/node-<cw>-register`` in the **colon format** (``id,count,devmem,devcore,type,numa,
  health[,index,mode]:`` per device), liveness through ``hami.io/node-handshake-<cw>`` as for Hygon;
* pod device lists ``hami.io/<cw>-devices-to-allocate`` and ``hami.io/<cw>-devices-allocated`` (the same value),
  the shared node lock ``hami.io/mutex.lock``;
* selectors ``hami.io/use-<cw>-uuid`` / ``hami.io/no-use-<cw>-uuid`` (exact UUIDs; both lists apply); no type
  selectors (a request takes only devices of its own chip).

Admission (HAMi's ``MutateAdmission``): a container with the count in its limits gets the env variable
``SOL_CONTINER_NAME`` (sic) = its name, and asking for more than one card sets its core limit to 100 per card,
so each card is taken whole. ``Fit`` is the common skeleton: memory in MiB or, when none is asked, the whole card.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from vgpu_scheduler.shared.codec._go import fail, trim_space
from vgpu_scheduler.shared.codec.resources import QuantityKind, container_lists
from vgpu_scheduler.shared.domain.model import ContainerRequest, DeviceInfo
from vgpu_scheduler.shared.errors import ConfigError
from vgpu_scheduler.shared.vendors.base import ResourceNames
from vgpu_scheduler.shared.vendors.capacity import slot_capacity
from vgpu_scheduler.shared.vendors.described import DescribedVendor, ShareRequest, share_resources
from vgpu_scheduler.shared.vendors.description import Description, PodLists, RegisterAnnotation, SelectorKeys
from vgpu_scheduler.shared.vendors.registration import HANDSHAKE_TIMEOUT_S
from vgpu_scheduler.shared.vendors.simple import UuidOnlyRules, decode_colon, encode_colon

SECTION: Final = "iluvatars"
"""The device-config section: a list of chips."""

ENABLE_FLAG: Final[str | None] = "enable-iluvatar"
"""HAMi v2.10 initialises the Iluvatar chips only with its ``--enable-iluvatar`` flag (same name here)."""

MEMORY_UNIT_MIB: Final = 256
"""``iluvatar.ai/<cw>.vMem`` counts 256 MiB units (HAMi multiplies by 256, whatever the config)."""

CONTAINER_ENV: Final = "SOL_CONTINER_NAME"
"""The env variable HAMi's webhook sets to the container's name (misspelt in HAMi, kept for its device plugin)."""

_WHOLE_CARD_CORES = 100


@dataclass(frozen=True, slots=True)
class IluvatarChip:
    """One entry of the ``iluvatars:`` list (HAMi's ``IluvatarConfig``)."""

    common_word: str
    chip_name: str
    resource_count_name: str
    resource_memory_name: str
    resource_core_name: str

    @classmethod
    def default(cls, common_word: str) -> IluvatarChip:
        """The chart's entry for ``common_word`` (names built from it)."""
        base = f"iluvatar.ai/{common_word}"
        return cls(common_word, common_word, f"{base}-vgpu", f"{base}.vMem", f"{base}.vCore")


DEFAULT_CHIPS: tuple[IluvatarChip, ...] = tuple(
    IluvatarChip.default(cw) for cw in ("MR-V100", "MR-V50", "BI-V150", "BI-V100")
)
"""HAMi's built-in and chart defaults (v2.10.0)."""

_KEYS: Mapping[str, str] = {
    "commonWord": "common_word",
    "chipName": "chip_name",
    "resourceCountName": "resource_count_name",
    "resourceMemoryName": "resource_memory_name",
    "resourceCoreName": "resource_core_name",
}


def _chip(entry: object, path: str) -> IluvatarChip:
    if not isinstance(entry, Mapping):
        raise ConfigError(f"{path}: expected a mapping, got {type(entry).__name__}")
    values: dict[str, str] = {}
    for key, value in entry.items():
        field = _KEYS.get(key) if isinstance(key, str) else None
        if field is None:
            raise ConfigError(f"{path}.{key}: unknown key (known: {', '.join(_KEYS)})")
        if not isinstance(value, str):
            raise ConfigError(f"{path}.{key}: expected a string, got {value!r}")
        values[field] = value
    cw = trim_space(values.get("common_word", ""))
    if not cw:
        raise ConfigError(f"{path}.commonWord: missing (the chip's common word, e.g. MR-V100)")
    if any(c in cw for c in ",:;/ "):
        raise ConfigError(f"{path}.commonWord: {cw!r} may not contain ',', ':', ';', '/' or spaces")
    base = IluvatarChip.default(cw)
    if "resource_count_name" in values and not trim_space(values["resource_count_name"]):
        raise ConfigError(f"{path}.resourceCountName: must not be empty (it is how a container asks for cards)")
    return IluvatarChip(
        common_word=cw,
        chip_name=values.get("chip_name", cw),
        resource_count_name=values.get("resource_count_name", base.resource_count_name),
        resource_memory_name=values.get("resource_memory_name", base.resource_memory_name),
        resource_core_name=values.get("resource_core_name", base.resource_core_name),
    )


def parse_config(section: object) -> tuple[IluvatarChip, ...]:
    """The ``iluvatars:`` list (``None``: the chart's four chips). An entry's missing names default to
    ``iluvatar.ai/<commonWord>-vgpu`` / ``.vMem`` / ``.vCore``. ConfigError names the key path."""
    if section is None:
        return DEFAULT_CHIPS
    if not isinstance(section, list):
        raise ConfigError(f"{SECTION}: expected a list of chips, got {type(section).__name__}")
    chips = tuple(_chip(e, f"{SECTION}[{i}]") for i, e in enumerate(section))
    seen: set[str] = set()
    for i, c in enumerate(chips):
        if c.common_word in seen:
            raise ConfigError(f"{SECTION}[{i}].commonWord: {c.common_word!r} is listed twice")
        seen.add(c.common_word)
    return chips


def build(section: object) -> tuple[IluvatarVendor, ...]:
    """One vendor per chip of the ``iluvatars:`` list (``None``: the chart's four chips)."""
    return tuple(IluvatarVendor(c) for c in parse_config(section))


# ------------------------------------------------------------------------------------------------------------
# Fit
# ------------------------------------------------------------------------------------------------------------


IluvatarRules = UuidOnlyRules
"""Iluvatar ``Fit``: the common skeleton; no type selectors, UUID lists both apply (HAMi's ``CheckUUID``)."""


# ------------------------------------------------------------------------------------------------------------
# The vendor
# ------------------------------------------------------------------------------------------------------------


REQUEST: Final = ShareRequest(devices="cards", memory="memory", cores=QuantityKind.PRIORITY, default_cores=0)
"""Each resource from the limits, else the requests; memory × 256 MiB; cores a whole number, 0 when absent (HAMi's
webhook itself writes 100 per card, e.g. 200 for two, which ``Fit`` caps)."""


def describe(common_word: str) -> Description:
    """A chip's wire names, all built from its common word (``hami.io/node-<cw>-register`` …)."""
    return Description(
        common_word,
        IluvatarRules(common_word),
        PodLists(f"hami.io/{common_word}-devices-allocated", f"hami.io/{common_word}-devices-to-allocate"),
        RegisterAnnotation(
            f"hami.io/node-{common_word}-register",
            lambda value: decode_colon(value, f"hami.io/node-{common_word}-register", common_word),
            handshake=f"hami.io/node-handshake-{common_word}",
        ),
        SelectorKeys(f"hami.io/use-{common_word}-uuid", f"hami.io/no-use-{common_word}-uuid"),
    )


@dataclass(frozen=True, slots=True)
class IluvatarVendor(DescribedVendor):
    """One Iluvatar chip (see the module docstring). Registration is colon format only (HAMi's
    ``DecodeNodeDevices``: a JSON value is a DecodeError), observed through the handshake, always."""

    chip: IluvatarChip = dataclasses.field(default_factory=lambda: DEFAULT_CHIPS[0])
    handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S
    description: Description = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "description", describe(self.chip.common_word))

    @property
    def resources(self) -> ResourceNames:
        return share_resources(self.chip, MEMORY_UNIT_MIB)

    def container_request(self, container: Mapping[str, Any], what: str) -> ContainerRequest:
        """HAMi's ``GenerateResourceRequests``, strict (:meth:`~shared.vendors.described.ShareRequest.read`): memory
        × 256 MiB (none: the whole card, 100 %); cores as given (0 when absent; more than 100 is read as 100 by
        ``Fit``, as HAMi caps it). A memory above 2^31-1 MiB, which HAMi drops silently, is refused too."""
        return REQUEST.read(container, what, self.name, self.chip, memory_factor=MEMORY_UNIT_MIB)

    def mutate_container(self, container: dict[str, Any], where: str) -> bool:
        """HAMi's ``MutateAdmission``: only a container with the count in its limits is ours. Its request is
        validated (ResourceRequestError); more than one card sets the core limit to 100 per card; the env variable
        ``SOL_CONTINER_NAME`` is set to the container's name unless present (or the container has no name)."""
        limits, _ = container_lists(container, where)
        if self.chip.resource_count_name not in limits:
            return False
        req = self.container_request(container, where)
        if req.nums > 1 and self.chip.resource_core_name:
            container["resources"]["limits"][self.chip.resource_core_name] = str(req.nums * _WHOLE_CARD_CORES)
        name = container.get("name")
        env = container.get("env")
        if env is not None and not isinstance(env, list):
            fail(f"{where}.env", f"expected a list, got {type(env).__name__}")
        has_env = any(isinstance(e, Mapping) and e.get("name") == CONTAINER_ENV for e in env or ())
        if not has_env and isinstance(name, str) and name:
            container.setdefault("env", []).append({"name": CONTAINER_ENV, "value": name})
        return True

    def node_registration(self, devices: Sequence[DeviceInfo]) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
        """What the chip's device plugin writes on its Node for ``devices``: (annotations, capacity, labels) —
        the 9-field colon register value and the count resource (one per slot)."""
        key = self.register_key or ""
        return {key: encode_colon(devices, key)}, slot_capacity(devices, self.chip.resource_count_name), {}
