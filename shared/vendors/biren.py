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

from collections.abc import Sequence
from typing import Final

from vgpu_scheduler.shared.codec.register import encode_register_json
from vgpu_scheduler.shared.domain.model import DeviceInfo
from vgpu_scheduler.shared.domain.vendor import DeviceRules
from vgpu_scheduler.shared.vendors.description import Description, PodLists, RegisterAnnotation, SelectorKeys
from vgpu_scheduler.shared.vendors.simple import SlotOnlyRules, decode_json
from vgpu_scheduler.shared.vendors.slotonly import SlotOnlyVendor, build_slot_only

SECTION: Final = "biren"
"""The device-config section that configures the vendor."""

ENABLE_FLAG: Final[str | None] = None
"""HAMi v2.10 initialises Biren whatever its device config holds: no flag enables it."""

NAME: Final = "Biren"
"""HAMi's common word: the ``type`` of Biren requests and pod device entries, ``DeviceInfo.vendor``."""

REGISTER_KEY: Final = "hami.io/node-biren-register"
CARD_CORES: Final = 100
"""HAMi sets every registered card's core total to 100 ("only for calscore use")."""


DEFAULT_COUNT_NAME: Final = "birentech.com/gpu"
"""HAMi's default ``resourceCountName``, the only key of the ``biren:`` section."""


def build(section: object) -> tuple[SlotOnlyVendor, ...]:
    """The vendor the ``biren:`` section configures (``None`` or ``{}``: HAMi's default)."""
    return build_slot_only(
        section, DESCRIPTION, registration_value, key=SECTION, default_count=DEFAULT_COUNT_NAME, unit="cards"
    )


BIREN_RULES: DeviceRules = SlotOnlyRules(NAME)
"""Biren ``Fit``: type, UUID, time slices (and the core's health, cordon and ``mutex``); no memory, no cores."""


def decode_devices_register(value: str) -> tuple[DeviceInfo, ...]:
    """``hami.io/node-biren-register`` → the node's cards (JSON only, core total 100)."""
    return decode_json(value, REGISTER_KEY, NAME, devcore=CARD_CORES)


def registration_value(devices: Sequence[DeviceInfo]) -> str:
    """The JSON register value of ``devices`` as the Biren plugin writes it."""
    return encode_register_json(tuple(devices))


DESCRIPTION: Final = Description(
    NAME,
    BIREN_RULES,
    PodLists("hami.io/Biren-devices-allocated", "hami.io/Biren-devices-to-allocate"),
    RegisterAnnotation(REGISTER_KEY, decode_devices_register, handshake="hami.io/node-handshake-biren"),
    SelectorKeys("birentech.com/use-gpuuuid", "birentech.com/nouse-gpuuuid"),
)
"""Biren's wire names and ``Fit``; the vendor is :class:`~shared.vendors.slotonly.SlotOnlyVendor`."""
