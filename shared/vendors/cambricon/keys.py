"""Cambricon MLU's names on the wire: common word, resource names, pod and node annotation keys, units. Pure."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Final

from vgpu_scheduler.shared.vendors.base import NodeLockKind

MLU: Final = "MLU"
"""HAMi's common word and device type of Cambricon MLUs."""

SECTION: Final = "cambricon"
"""The device-config section that configures Cambricon (on by default; the section overrides HAMi's defaults)."""


MEMORY_UNIT_MIB: Final = 256
"""One ``cambricon.com/mlu.smlu.vmemory`` unit (HAMi's ``MemoryFactor``)."""

CARD_CORES: Final = 100
"""``capacity[vcore]`` per card; also each card's ``devcore`` and ``count`` (slots)."""

DEFAULT_COUNT_NAME: Final = "cambricon.com/vmlu"
DEFAULT_MEMORY_NAME: Final = "cambricon.com/mlu.smlu.vmemory"
DEFAULT_CORE_NAME: Final = "cambricon.com/mlu.smlu.vcore"

TO_ALLOCATE_KEY: Final = "hami.io/cambricon-mlu-devices-to-allocate"
ALLOCATED_KEY: Final = "hami.io/cambricon-mlu-devices-allocated"
USE_TYPE_KEY: Final = "cambricon.com/use-mlutype"
NOUSE_TYPE_KEY: Final = "cambricon.com/nouse-mlutype"
USE_UUID_KEY: Final = "cambricon.com/use-gpuuuid"
NOUSE_UUID_KEY: Final = "cambricon.com/nouse-gpuuuid"
DSMLU_PROFILE_KEY: Final = "CAMBRICON_DSMLU_PROFILE"
"""Pod annotation ``<card index>_<cores>_<memory in 256 MiB units>`` of the pod's first MLU."""
DSMLU_ASSIGNED_KEY: Final = "CAMBRICON_DSMLU_ASSIGNED"
DSMLU_ASSIGNED_LEGACY_KEY: Final = "CAMBRICON_DSMLU_ASSIGHED"
"""The same flag as Cambricon's device plugin spells it (sic): HAMi's scheduler has written both spellings over
its releases and the plugin reads this one, so a bind writes both."""
"""Pod annotation the scheduler sets to ``false``; the device plugin flips it once the profile is applied."""
MODEL_LABEL: Final = "Model"
"""Node label with the card model (published by the Cambricon device plugin with ``--node-label``)."""
DEVICE_CORDON_KEY: Final = "hami.io/device-cordon"

LOCK_KEY: Final = NodeLockKind.CAMBRICON.value
"""``cambricon.com/dsmlu.lock``: the node lock, an RFC 3339 time."""
LOCK_EXPIRY: Final = timedelta(minutes=2)
"""A lock older than this (strictly) may be taken over."""

_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1
_MIB = 2**20
_BINARY_SUFFIX = re.compile(r"(?P<mantissa>.*?)(?P<suffix>[KMGTPE]i)\Z")
_ID_INFIX = "-cambricon-mlu-"
