"""Cambricon node registration from node capacity and the ``Model`` label. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from vgpu_scheduler.shared.codec.quantity import parse_quantity
from vgpu_scheduler.shared.domain.model import DeviceInfo
from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.vendors.cambricon.keys import (
    _ID_INFIX,
    _INT64_MAX,
    CARD_CORES,
    DSMLU_PROFILE_KEY,
    MEMORY_UNIT_MIB,
    MLU,
    MODEL_LABEL,
)
from vgpu_scheduler.shared.vendors.capacity import CoreSplit, index_in_id

# ------------------------------------------------------------------------------------------------------------
# Registration
# ------------------------------------------------------------------------------------------------------------


class _BadQuantity(Exception):
    """A capacity quantity that does not decode (internal to :meth:`CambriconVendor.observe_node`)."""

    def __init__(self, source: str, value: str, error: DecodeError) -> None:
        super().__init__(str(error))
        self.source = source
        self.value = value
        self.error = error


def _capacity_int(capacity: Mapping[str, Any], name: str) -> int | None:
    """A whole, non-negative capacity quantity (None when absent); _BadQuantity otherwise."""
    if name not in capacity:
        return None
    raw = capacity[name]
    source = f"status.capacity[{name}]"
    try:
        q = parse_quantity(raw, source)
        if q.denominator != 1 or q < 0 or q > _INT64_MAX:
            raise DecodeError(source, "expected a whole number from 0 to 2^63-1", str(raw))
    except DecodeError as e:
        raise _BadQuantity(source, str(raw), e) from e
    return q.numerator


def card_type(labels: Mapping[str, str]) -> str:
    """The node's card type: the trimmed ``Model`` label when it contains ``MLU`` (any case), else ``MLU``."""
    model = labels.get(MODEL_LABEL, "").strip()
    return model if MLU in model.upper() else MLU


_CARDS: Final = CoreSplit(MLU, _ID_INFIX, MEMORY_UNIT_MIB, CARD_CORES, CARD_CORES, "cambricon capacity", "card")
"""A card per 100 cores, each with 100 cores and 100 slots."""


def devices_from_capacity(
    node: str, cores_total: int, memory_total: int, dev_type: str = MLU
) -> tuple[DeviceInfo, ...]:
    """HAMi's ``GetNodeDevices``: ``ceil(cores_total / 100)`` cards of ``memory_total × 256 × 100 // cores_total``
    MiB each. DecodeError when that memory does not fit in int32 (HAMi would wrap it)."""
    return _CARDS.devices(node, cores_total, memory_total, f"{memory_total} units / {cores_total} cores", dev_type)


def card_index(uuid: str) -> int:
    """The card index HAMi encodes in a device id ``<node>-cambricon-mlu-<index>``; DecodeError otherwise."""
    index = index_in_id(uuid, _ID_INFIX)
    if index is None:
        raise DecodeError(DSMLU_PROFILE_KEY, f"not a Cambricon device id <node>{_ID_INFIX}<index>", uuid)
    return index
