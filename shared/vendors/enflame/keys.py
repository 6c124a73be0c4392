"""Enflame names on the wire (whole GCUs and DRS instances) and the ``enflame:`` section's names. Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from vgpu_scheduler.shared.errors import ConfigError
from vgpu_scheduler.shared.vendors.common import names_section, section_key, section_keys

SECTION: Final = "enflame"
ENABLE_FLAG: Final[str | None] = None
"""HAMi v2.10 initialises both Enflame vendors whatever its device config holds."""

GCU: Final = "GCU"
"""Common word of whole GCU cards."""
VGCU: Final = "Enflame"
"""Common word of DRS instances (HAMi's ``EnflameVGCUDevice``)."""

GCU_TO_ALLOCATE_KEY: Final = "hami.io/enflame-gcu-devices-to-allocate"
GCU_ALLOCATED_KEY: Final = "hami.io/enflame-gcu-devices-allocated"
VGCU_ALLOCATED_KEY: Final = "hami.io/enflame-vgpu-devices-allocated"
DRS_CAPACITY_KEY: Final = "enflame.com/gcu-drs-capacity"
USE_UUID: Final = "enflame.com/use-gpuuuid"
NOUSE_UUID: Final = "enflame.com/nouse-gpuuuid"
REQUEST_SIZE_KEY: Final = "enflame.com/gcu-request-size"
ASSIGNED_KEY: Final = "enflame.com/gcu-assigned"
ASSIGNED_ID_KEY: Final = "enflame.com/gcu-assigned-id"
ASSIGNED_INDEX_KEY: Final = "enflame.com/gcu-assigned-index"
ASSIGNED_MINOR_KEY: Final = "enflame.com/gcu-assigned-minor"
ASSIGNED_TIME_KEY: Final = "enflame.com/gcu-assigned-time"
ASSIGNED_CONTAINERS_KEY: Final = "assigned-containers"

GCU_SHARE: Final = 100
"""A GCU card's "memory" and cores as HAMi registers them, and what a request takes of each: the whole card."""
_GCU_INFIX: Final = f"-{GCU}-"
_DRS_INFIX: Final = "-enflame-drs-"
_MINOR_PREFIX: Final = "drs/"
_INT_RE: Final = re.compile(r"[+-]?[0-9]+\Z")


@dataclass(frozen=True, slots=True)
class EnflameConfig:
    """The ``enflame:`` section (HAMi's ``EnflameConfig``, defaults of ``InitDefaultDevices``)."""

    resource_name_gcu: str = section_key("resourceNameGCU", "enflame.com/gcu")
    resource_name_drs_gcu: str = section_key("resourceNameDRSGCU", "enflame.com/drs-gcu")
    resource_name_gcu_memory: str = section_key("resourceNameGCUMemory", "enflame.com/gcu-memory")
    resource_name_gcu_core: str = section_key("resourceNameGCUCore", "enflame.com/gcu-core")
    resource_name_vgcu: str = section_key("resourceNameVGCU", "")
    """The legacy shared-GCU count name: used as the DRS name when ``resourceNameDRSGCU`` is not given."""
    resource_name_vgcu_percentage: str = section_key("resourceNameVGCUPercentage", "")
    """The legacy shared-GCU percentage name: accepted, unused (as in HAMi v2.10)."""


def parse_config(section: object) -> EnflameConfig:
    """Validate the ``enflame:`` section. As HAMi's ``InitEnflameDevice``: a blank DRS name falls back to the legacy
    ``resourceNameVGCU``, then to ``enflame.com/drs-gcu``; blank memory and core names to their defaults. A blank
    ``resourceNameGCU`` is refused (no container could ask for cards). ConfigError names the key path."""
    values = names_section(section, SECTION, section_keys(EnflameConfig), unit="GCUs")
    base = EnflameConfig()
    if "resource_name_gcu" in values and not values["resource_name_gcu"].strip():
        raise ConfigError(f"{SECTION}.resourceNameGCU: must not be empty (it is how a container asks for GCUs)")
    drs = values.get("resource_name_drs_gcu", "").strip() or values.get("resource_name_vgcu", "").strip()
    values["resource_name_drs_gcu"] = drs or base.resource_name_drs_gcu
    for field in ("resource_name_gcu_memory", "resource_name_gcu_core"):
        if not values.get(field, "").strip():
            values[field] = getattr(base, field)
    return EnflameConfig(**values)
