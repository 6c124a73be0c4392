"""Enflame GCUs as two vendors (HAMi's ``pkg/device/enflame``): whole ``GCU`` cards and DRS-partitioned ``Enflame``
(vGCU) instances. Pure.

What an Enflame pod and node look like on the wire (docs/vendors/enflame.md):

**GCU** (common word ``GCU``): resource ``enflame.com/gcu`` (whole cards); registration from **node capacity**
(``capacity[enflame.com/gcu]`` cards ``<node>-GCU-<i>``, each one slot, 100 "memory" and 100 cores, so a card is
never shared); pod device lists ``hami.io/enflame-gcu-devices-to-allocate`` and ``…-allocated``
(``<id>,GCU,100,100:`` per card); no node lock, no handshake, no UUID selectors.

**vGCU** (common word ``Enflame``, Enflame's DRS hard partitions): a container asks either for a profile size
directly (``enflame.com/drs-gcu: 3`` selects the ``3g.…`` profile) or by memory and cores (``enflame.com/gcu-memory``
in GB, or MiB when larger than twice the biggest profile's GB, and ``enflame.com/gcu-core`` from 1 to 100): the
smallest profile that holds both. One instance per container, on one card. Registration from the node annotation
``enflame.com/gcu-drs-capacity`` (JSON: the cards with their slice capacity, and the profile menu ``"<n>g.<m>gb":
"<profile id>"``): each card ``<node>-enflame-drs-<index>`` has its capacity as slots, the biggest profile's memory,
and 100 cores; a profile of ``n`` slices of ``maxSlice`` takes ``ceil(n × 100 / maxSlice)`` cores and its memory. The
pod's device list only under ``hami.io/enflame-vgpu-devices-allocated``, plus ``enflame.com/gcu-assigned``
(``false``), ``gcu-assigned-time`` (ns), ``gcu-assigned-index`` / ``gcu-assigned-id``, ``gcu-assigned-minor``,
``gcu-request-size`` (slices) and ``assigned-containers`` (JSON by container name: the profile); no node lock, no
handshake; selectors ``enflame.com/use-gpuuuid`` / ``enflame.com/nouse-gpuuuid``.

The registered profile menu is kept on each card as :class:`~shared.domain.model.MigProfile` entries (name
``<profile>=<id>``, memory, cores, ``slice_count`` = slices) and the card's minor in ``DeviceInfo.mode``
(``drs/<minor>``): what ``/bind`` needs to write the profile annotations. Both vendors are on by default, as in HAMi.

The package: :mod:`.keys` (names on the wire, the section), :mod:`.gcu` (whole GCUs), :mod:`.drs` (DRS profiles, the
capacity annotation, the rules), :mod:`.vendor` (the DRS vendor and ``build``). This module re-exports their names."""

from __future__ import annotations

from vgpu_scheduler.shared.vendors.enflame.drs import *  # noqa: F403  (the DRS profiles, re-exported)
from vgpu_scheduler.shared.vendors.enflame.gcu import (
    GCU_RULES,
    GcuVendor,
    gcu_devices,
)
from vgpu_scheduler.shared.vendors.enflame.keys import *  # noqa: F403  (every name on the wire, re-exported)
from vgpu_scheduler.shared.vendors.enflame.keys import ENABLE_FLAG, SECTION
from vgpu_scheduler.shared.vendors.enflame.vendor import (
    VgcuVendor,
    build,
    container_name,
)

__all__ = [
    "ENABLE_FLAG",
    "GCU_RULES",
    "SECTION",
    "GcuVendor",
    "VgcuVendor",
    "build",
    "container_name",
    "gcu_devices",
]
