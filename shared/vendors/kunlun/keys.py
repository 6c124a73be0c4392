"""Kunlunxin names on the wire (whole XPUs and vXPUs), the 8-XPU board's constants and the ``kunlun:`` section's names.
Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from vgpu_scheduler.shared.vendors.common import section_key

SECTION: Final = "kunlun"
"""The device-config section that configures both vendors."""

ENABLE_FLAG: Final[str | None] = None
"""HAMi v2.10 initialises both Kunlunxin vendors whatever its device config holds: no flag enables them."""

# ---- whole XPUs (device.go) ----------------------------------------------------------------------------------
NAME: Final = "kunlun"
"""HAMi's common word (and device type) of whole XPUs."""
ALLOCATED_KEY: Final = "hami.io/kunlun-allocated"
DEVICE_IDX_KEY: Final = "BAIDU_COM_DEVICE_IDX"
"""The pod annotation the Kunlunxin device plugin reads the XPUs' indexes from."""
USE_UUID: Final = "baidu.com/use-gpuuuid"
NOUSE_UUID: Final = "baidu.com/nouse-gpuuuid"
XPU_MEMORY_MIB: Final = 98304
"""Every XPU's memory, as HAMi registers it (``KunlunMaxMemory``)."""
XPU_CORES: Final = 100
XPU_SLOTS: Final = 100
_ID_INFIX: Final = "-kunlun-"

# ---- vXPUs (vdevice.go) --------------------------------------------------------------------------------------
VXPU_NAME: Final = "XPU"
"""HAMi's common word of vXPUs."""
VXPU_REGISTER_KEY: Final = "hami.io/node-register-xpu"
VXPU_HANDSHAKE_KEY: Final = "hami.io/node-handshake-xpu"
VXPU_TO_ALLOCATE_KEY: Final = "hami.io/xpu-devices-to-allocate"
VXPU_ALLOCATED_KEY: Final = "hami.io/xpu-devices-allocated"
VXPU_USE_UUID: Final = "hami.io/use-xpu-uuid"
VXPU_NOUSE_UUID: Final = "hami.io/no-use-xpu-uuid"
VXPU_SIZES_MIB: Final = (24576, 49152, XPU_MEMORY_MIB)
"""The memory a vXPU may have: a quarter, a half or the whole XPU (HAMi's ``trimMemory`` templates)."""

# ---- the board's topology (device.go constants) --------------------------------------------------------------
WING: Final = 4
"""XPUs per half-board: positions 0–3 are the left wing, 4–7 the right."""
BOARD: Final = 8
INTER_GROUP_PAIRS: Final = ((0, 4), (1, 5), (2, 6), (3, 7))
"""``InterGroupConnection``: the links between the wings."""
GROUP_PAIRS: Final = ((0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3), (4, 5), (4, 6), (4, 7), (5, 6), (5, 7), (6, 7))
"""``GroupConnection``: the links inside a wing."""
QUADS: Final = ((0, 1, 4, 5), (2, 3, 6, 7), (0, 2, 4, 6), (1, 3, 5, 7), (0, 3, 4, 7), (1, 2, 5, 6))
"""``InterGroupConnection2``: the 4-XPU groups across the wings."""
_ODD_ORDER: Final = (1, 3, 2, 4)
"""The free-XPU counts of a wing a 1-XPU request prefers, in order (HAMi's ``oddorder``)."""


@dataclass(frozen=True, slots=True)
class KunlunConfig:
    """The ``kunlun:`` section (HAMi's ``KunlunConfig``): the whole-XPU count name and the vXPU names."""

    resource_count_name: str = section_key("resourceCountName", "kunlunxin.com/xpu")
    resource_vcount_name: str = section_key("resourceVCountName", "kunlunxin.com/vxpu")
    resource_vmemory_name: str = section_key("resourceVMemoryName", "kunlunxin.com/vxpu-memory")


_REQUIRED: Mapping[str, str] = {
    "resourceVCountName": "it is how a container asks for vXPUs",
    "resourceVMemoryName": "it is how a vXPU's memory is asked",
}
