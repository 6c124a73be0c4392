"""Kunlunxin XPUs as vendors (HAMi's ``pkg/device/kunlun``): whole XPUs (common word ``kunlun``) and vXPUs
(common word ``XPU``), both configured by the ``kunlun:`` section, pure.

What a Kunlunxin pod and node look like on the wire (docs/vendors/kunlunxin.md):

* **whole XPUs** (``device.go``): one resource, ``kunlunxin.com/xpu`` (the number of XPUs; the section's
  ``resourceCountName``). Registration from **node capacity**: ``capacity[kunlunxin.com/xpu]`` XPUs
  ``<node>-kunlun-<i>``, type ``kunlun``, 98304 MiB, 100 cores, 100 slots, the first half on NUMA node 0 and the
  rest on NUMA node 1; no handshake (HAMi's ``CheckHealth`` always says healthy). An XPU is taken whole (its
  memory and cores in the pod's entry) and only when idle. Pod annotations ``hami.io/kunlun-allocated`` (no
  to-allocate list) and ``BAIDU_COM_DEVICE_IDX`` (the XPUs' indexes, ``,`` within a container, ``;`` between
  containers); **no node lock**; UUID selectors ``baidu.com/use-gpuuuid`` / ``nouse-gpuuuid`` and
  ``hami.io/use-xpu-uuid`` / ``no-use-xpu-uuid`` (both pairs apply).
* **vXPUs** (``vdevice.go``): ``kunlunxin.com/vxpu`` (count) and ``kunlunxin.com/vxpu-memory`` (MiB, rounded up to
  a quarter, a half or the whole 98304 MiB XPU: 24576, 49152, 98304; cores are the same share: 25, 50, 100; no
  memory: the whole XPU). Registration ``hami.io/node-register-xpu`` (HAMi's JSON), liveness through the
  ``hami.io/node-handshake-xpu`` handshake. An XPU already shared takes only vXPUs of the size it holds.
  Pod device lists ``hami.io/xpu-devices-to-allocate`` = ``hami.io/xpu-devices-allocated``, the shared node lock
  ``hami.io/mutex.lock``, selectors ``hami.io/use-xpu-uuid`` / ``hami.io/no-use-xpu-uuid``.

Both choose the XPUs of a request by the 8-XPU board's topology (HAMi's ``graghSelect``, :func:`graph_select`):
1, 2, 4 or 8 XPUs only, from the half-board (wing) whose free XPUs fit the request most tightly, else along the
board's interconnect; any other count never fits. A refusal with no device-level reason is ``NumaNotFit``.
On by default, as in HAMi (:data:`ENABLE_FLAG` is None).

The package: :mod:`.keys` (names on the wire and the board's constants), :mod:`.topology` (HAMi's ``topo.go``),
:mod:`.fit` (the rules), :mod:`.registration` (devices from capacity and the register annotation), :mod:`.vendor`
(the two vendors and ``build``). This module re-exports their names."""

from __future__ import annotations

from vgpu_scheduler.shared.vendors.kunlun.fit import (
    KUNLUN_RULES,
    VXPU_RULES,
    BoardRules,
    KunlunRules,
    VxpuRules,
    score_range,
)
from vgpu_scheduler.shared.vendors.kunlun.keys import *  # noqa: F403  (every name on the wire, re-exported)
from vgpu_scheduler.shared.vendors.kunlun.keys import ENABLE_FLAG, SECTION
from vgpu_scheduler.shared.vendors.kunlun.registration import (
    decode_vxpu_register,
    devices_from_capacity,
    trim_memory,
    xpu_index,
)
from vgpu_scheduler.shared.vendors.kunlun.topology import (
    graph_select,
    score_fragmentation,
    score_node,
)
from vgpu_scheduler.shared.vendors.kunlun.vendor import (
    KunlunVendor,
    KunlunVxpuVendor,
    build,
    parse_config,
)

__all__ = [
    "ENABLE_FLAG",
    "KUNLUN_RULES",
    "SECTION",
    "VXPU_RULES",
    "BoardRules",
    "KunlunRules",
    "KunlunVendor",
    "KunlunVxpuVendor",
    "VxpuRules",
    "build",
    "decode_vxpu_register",
    "devices_from_capacity",
    "graph_select",
    "parse_config",
    "score_fragmentation",
    "score_node",
    "score_range",
    "trim_memory",
    "xpu_index",
]
