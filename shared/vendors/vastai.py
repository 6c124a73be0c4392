"""Vastai accelerators as a vendor (HAMi's ``pkg/device/vastai``): common word ``Vastai``, pure.

What a Vastai pod and node look like on the wire (docs/vendors/vastai.md):

* one resource, ``vastaitech.com/va`` (the number of devices; renamed by the ``vastai:`` section's
  ``resourceCountName``); a device is handed out by slot, with no memory or core share;
* registration ``hami.io/node-va-register`` in HAMi's JSON (every device's core total read as 100), liveness
  through the ``hami.io/node-handshake-va`` handshake. A plugin in **die mode** registers every die of a card as a
  device with ``custominfo: {"DeviceStrategy": "die", "AIC": "<card>"}``; we keep that as the device's mode
  ``die:<card>``;
* pod device lists ``hami.io/Vastai-devices-to-allocate`` and ``hami.io/Vastai-devices-allocated`` (the same value:
  ``UUID,Vastai,0,0:`` per device, ``;`` per container), the shared node lock ``hami.io/mutex.lock``;
* selectors ``vastaitech.com/use-gpuuuid`` / ``vastaitech.com/nouse-gpuuuid`` (both apply).

In die mode a request for several dies takes them from as few cards as it can: the cards with the most free dies
first (HAMi's ``computeBestCombination``), and nodes are ranked with HAMi's die-mode ``ScoreNode`` added
(:func:`die_score`: nodes where each container's dies share a card first). On by default, as in HAMi
(:data:`ENABLE_FLAG` is None).
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from vgpu_scheduler.shared.codec._go import fail, loads
from vgpu_scheduler.shared.codec.register import encode_register_json
from vgpu_scheduler.shared.domain.model import (
    ContainerDevice,
    ContainerRequest,
    DeviceInfo,
    NodeInventory,
    NodePolicy,
    PodConstraints,
    PodDevices,
)
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.domain.vendor import DeviceRules
from vgpu_scheduler.shared.vendors.description import Description, PodLists, RegisterAnnotation, SelectorKeys
from vgpu_scheduler.shared.vendors.simple import SlotOnlyRules, decode_json
from vgpu_scheduler.shared.vendors.slotonly import SlotOnlyVendor, build_slot_only

SECTION: Final = "vastai"
"""The device-config section that configures the vendor."""

ENABLE_FLAG: Final[str | None] = None
"""HAMi v2.10 initialises Vastai whatever its device config holds: no flag enables it."""

NAME: Final = "Vastai"
REGISTER_KEY: Final = "hami.io/node-va-register"
CARD_CORES: Final = 100
DIE_MODE: Final = "die"
"""``custominfo.DeviceStrategy`` of a plugin that registers dies; the device's mode is ``die:<AIC>``."""


DEFAULT_COUNT_NAME: Final = "vastaitech.com/va"
"""HAMi's default ``resourceCountName``, the only key of the ``vastai:`` section."""


def build(section: object) -> tuple[SlotOnlyVendor, ...]:
    """The vendor the ``vastai:`` section configures (``None`` or ``{}``: HAMi's default)."""
    return build_slot_only(
        section, DESCRIPTION, registration_value, key=SECTION, default_count=DEFAULT_COUNT_NAME, unit="devices"
    )


# ------------------------------------------------------------------------------------------------------------
# Die mode
# ------------------------------------------------------------------------------------------------------------


def card_of(dev: DeviceInfo) -> str | None:
    """The card (``AIC``) of a die registered in die mode; None for a device that is not a die."""
    prefix = DIE_MODE + ":"
    return dev.mode[len(prefix) :] if dev.mode.startswith(prefix) else None


def best_combination(candidates: Sequence[DeviceInfo], nums: int) -> list[DeviceInfo]:
    """HAMi's ``computeBestCombination``: group the dies by card (in the order the cards first appear), take
    the cards with the most candidate dies first (a stable sort, so equal cards keep that order), and take dies
    in order until ``nums``. Fewer than ``nums`` when there are not enough."""
    groups: dict[str, list[DeviceInfo]] = {}
    for d in candidates:
        card = card_of(d)
        if card is not None:
            groups.setdefault(card, []).append(d)
    out: list[DeviceInfo] = []
    for dies in sorted(groups.values(), key=len, reverse=True):
        for d in dies:
            out.append(d)
            if len(out) == nums:
                return out
    return out


def die_score(inventory: NodeInventory, devices: Sequence[Sequence[ContainerDevice]]) -> float:
    """HAMi's Vastai ``ScoreNode``: for every container with devices, the share of its dies that sit on its
    most-used card (1.0 when all on one card, 0.5 for two dies on two cards), summed; 0 when a device the pod got is
    not a die of ``inventory``."""
    card_by_id = {d.id: card_of(d) for d in inventory.devices if d.vendor == NAME}
    score = 0.0
    for ctr in devices:
        if not ctr:
            continue
        counts: Counter[str] = Counter()
        for d in ctr:
            card = card_by_id.get(d.uuid)
            if card is None:
                return 0.0
            counts[card] += 1
        score += max(counts.values()) / sum(counts.values())
    return score


@dataclass(frozen=True, slots=True)
class VastaiRules(SlotOnlyRules):
    """Vastai ``Fit``: by slot (type, UUID, time slices, ``mutex``), every passing device is a candidate and the
    set is chosen at the end: in die mode (the node's first Vastai device is a die) several dies come from as
    few cards as possible; otherwise the first ``nums`` candidates in preference order."""

    @property
    def selects_sets(self) -> bool:
        return True

    def mutex_group(self, dev: DeviceInfo) -> str | None:
        """Under ``mutex`` a die is busy when any die of its card is in use (HAMi's die-mode mutex)."""
        return card_of(dev)

    def select(
        self, candidates: Sequence[DeviceInfo], nums: int, inventory: NodeInventory
    ) -> Sequence[DeviceInfo] | None:
        if len(candidates) < nums:
            return None
        first = next((d for d in inventory.devices if d.vendor == self.name), None)
        if first is None or card_of(first) is None or nums == 1:
            return candidates[:nums]
        chosen = best_combination(candidates, nums)
        return chosen if len(chosen) == nums else None

    def pod_score(
        self, snap: NodeSnapshot, devices: PodDevices, policy: NodePolicy, constraints: PodConstraints
    ) -> float:
        """The node score term of the dies the pod gets here (:func:`die_score`), so nodes where each container
        stays on one card rank first: added under binpack (HAMi), subtracted under spread (HAMi adds it there too,
        which ranks the nodes that split the dies first; docs/differences.md §24)."""
        del constraints
        score = die_score(snap.inventory, devices)
        return score if policy is NodePolicy.BINPACK else -score

    def pod_score_bound(
        self, snap: NodeSnapshot, requests: Sequence[ContainerRequest], policy: NodePolicy, constraints: PodConstraints
    ) -> float:
        """At most 1 per container asking for Vastai devices on a node with dies; 0 on a node without (its devices
        score 0), so plain Vastai pods stop at the first node that fits, as before."""
        del policy, constraints
        first = next((d for d in snap.inventory.devices if d.vendor == NAME), None)
        if first is None or card_of(first) is None:  # not in die mode (HAMi's isDieMode: the first device)
            return 0.0
        return float(sum(1 for r in requests if r.type == NAME and not r.empty))


VASTAI_RULES: DeviceRules = VastaiRules(NAME)


def decode_devices_register(value: str) -> tuple[DeviceInfo, ...]:
    """``hami.io/node-va-register`` → the node's devices (JSON only, core total 100). A device whose
    ``custominfo.DeviceStrategy`` is ``die`` gets the mode ``die:<AIC>``; a die without a string ``AIC`` is a
    DecodeError (it could not be grouped with its card)."""
    devices = decode_json(value, REGISTER_KEY, NAME, devcore=CARD_CORES)
    items = loads(value, REGISTER_KEY)
    out: list[DeviceInfo] = []
    for i, (dev, item) in enumerate(zip(devices, items, strict=True)):
        info = item.get("custominfo") if isinstance(item, Mapping) else None
        if isinstance(info, Mapping) and info.get("DeviceStrategy") == DIE_MODE:
            card = info.get("AIC")
            if not isinstance(card, str) or not card or any(c in card for c in ",:;"):
                fail(f"{REGISTER_KEY}[{i}].custominfo.AIC", "a die needs the string AIC of its card", value)
            out.append(dataclasses.replace(dev, mode=f"{DIE_MODE}:{card}"))
        else:
            out.append(dev)
    return tuple(out)


def registration_value(devices: Sequence[DeviceInfo]) -> str:
    """The JSON register value of ``devices`` as the Vastai plugin writes it: a die (mode ``die:<AIC>``) is
    written with ``custominfo`` and no mode."""
    plain = tuple(dataclasses.replace(d, mode="") if card_of(d) is not None else d for d in devices)
    items: list[dict[str, Any]] = json.loads(encode_register_json(plain))
    for item, d in zip(items, devices, strict=True):
        card = card_of(d)
        if card is not None:
            item["custominfo"] = {"DeviceStrategy": DIE_MODE, "AIC": card}
    return json.dumps(items, separators=(",", ":"))


DESCRIPTION: Final = Description(
    NAME,
    VASTAI_RULES,
    PodLists("hami.io/Vastai-devices-allocated", "hami.io/Vastai-devices-to-allocate"),
    RegisterAnnotation(REGISTER_KEY, decode_devices_register, handshake="hami.io/node-handshake-va"),
    SelectorKeys("vastaitech.com/use-gpuuuid", "vastaitech.com/nouse-gpuuuid"),
)
"""Vastai's wire names and ``Fit`` (with die mode) (dies with their ``custominfo``); the vendor
itself is :class:`~shared.vendors.slotonly.SlotOnlyVendor`."""
