"""Kunlunxin registration: whole XPUs from node capacity, vXPUs from HAMi's JSON register annotation, and the vXPU
memory sizes. Pure."""

from __future__ import annotations

from vgpu_scheduler.shared.domain.model import DeviceInfo
from vgpu_scheduler.shared.vendors.capacity import index_in_id
from vgpu_scheduler.shared.vendors.kunlun.keys import (
    _ID_INFIX,
    NAME,
    VXPU_NAME,
    VXPU_REGISTER_KEY,
    VXPU_SIZES_MIB,
    XPU_CORES,
    XPU_MEMORY_MIB,
    XPU_SLOTS,
)
from vgpu_scheduler.shared.vendors.simple import decode_json


def devices_from_capacity(node: str, cards: int) -> tuple[DeviceInfo, ...]:
    """HAMi's whole-XPU ``GetNodeDevices``: ``cards`` XPUs ``<node>-kunlun-<i>``, the first ``cards // 2`` on
    NUMA node 0 and the others on NUMA node 1."""
    return tuple(
        DeviceInfo(
            f"{node}{_ID_INFIX}{i}",
            i,
            XPU_SLOTS,
            XPU_MEMORY_MIB,
            XPU_CORES,
            NAME,
            1 if i >= cards // 2 else 0,
            "",
            True,
            vendor=NAME,
        )
        for i in range(cards)
    )


def xpu_index(uuid: str) -> int | None:
    """The index HAMi encodes in a whole XPU's id ``<node>-kunlun-<i>`` (None for another id)."""
    return index_in_id(uuid, _ID_INFIX)


def decode_vxpu_register(value: str) -> tuple[DeviceInfo, ...]:
    """``hami.io/node-register-xpu`` → the node's XPUs for vXPUs (HAMi's JSON only)."""
    return decode_json(value, VXPU_REGISTER_KEY, VXPU_NAME)


def trim_memory(mib: int) -> int:
    """HAMi's ``trimMemory``: the smallest vXPU size holding ``mib`` (the whole XPU beyond a half)."""
    return next((s for s in VXPU_SIZES_MIB if mib <= s), XPU_MEMORY_MIB)
