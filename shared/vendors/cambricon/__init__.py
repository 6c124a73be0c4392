"""Cambricon MLU (common word ``MLU``): HAMi's ``pkg/device/cambricon`` as a pure vendor (docs/vendors/cambricon.md).

Everything the scheduler needs to know about Cambricon's dynamic-SMLU sharing:

* **Resources** (device config section ``cambricon:``): ``cambricon.com/vmlu`` (count),
  ``cambricon.com/mlu.smlu.vmemory`` (memory, one unit = 256 MiB), ``cambricon.com/mlu.smlu.vcore`` (percent of
  one card, default 100 = the whole card).
* **Registration from node capacity**, no annotation and no handshake: ``capacity[vcore]`` counts hundredths of
  cards, so the node has ``ceil(vcore / 100)`` cards named ``<node>-cambricon-mlu-<i>``, each with
  ``capacity[vmemory] × 256 × 100 // capacity[vcore]`` MiB, 100 cores and 100 slots. The type is the node label
  ``Model`` when it contains ``MLU`` (the device plugin's ``--node-label``), else ``MLU``.
* **Pod annotations**: ``hami.io/cambricon-mlu-devices-to-allocate`` / ``-allocated`` (the common
  ``UUID,Type,mem,cores:`` list), plus ``CAMBRICON_DSMLU_ASSIGNED=false`` and
  ``CAMBRICON_DSMLU_PROFILE=<index>_<cores>_<memory units>`` (:func:`extra_annotations`).
* **Node lock**: its own node annotation ``cambricon.com/dsmlu.lock`` holding only an RFC 3339 time, taken for
  pods that ask for MLUs, stale after two minutes (:func:`lock_annotation`, :func:`lock_state`).
* **Selectors**: ``cambricon.com/use-mlutype`` / ``nouse-mlutype`` (types, upper-cased substrings of the card's
  model) and ``cambricon.com/use-gpuuuid`` / ``nouse-gpuuuid`` (exact device ids).

Pure: no I/O. Facts from HAMi's ``pkg/device/cambricon/device.go`` and ``pkg/device/devices.go`` at commit
ad358d3a (the v2.10 line, with device cordon) and the expected values of its ``device_test.go`` /
``device_cordon_test.go``.

The package: :mod:`.keys` (names on the wire), :mod:`.lock` (``cambricon.com/dsmlu.lock``), :mod:`.requests`
(reading a container's resources), :mod:`.fit` (``CambriconRules``), :mod:`.registration` (cards from node
capacity), :mod:`.vendor` (``CambriconVendor`` and what the plugin writes). This module is the family's catalog
entry (``SECTION``, ``ENABLE_FLAG``, ``build``) and re-exports the names other modules use.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from vgpu_scheduler.shared.errors import ConfigError
from vgpu_scheduler.shared.vendors.base import Vendor
from vgpu_scheduler.shared.vendors.cambricon.fit import (
    RULES,
    CambriconRules,
)
from vgpu_scheduler.shared.vendors.cambricon.keys import *  # noqa: F403  (every name on the wire, re-exported)
from vgpu_scheduler.shared.vendors.cambricon.keys import SECTION
from vgpu_scheduler.shared.vendors.cambricon.lock import (
    LockState,
    lock_annotation,
    lock_state,
    lock_time,
)
from vgpu_scheduler.shared.vendors.cambricon.registration import (
    card_index,
    card_type,
    devices_from_capacity,
)
from vgpu_scheduler.shared.vendors.cambricon.vendor import (
    DEFAULT_VENDOR,
    CambriconVendor,
    extra_annotations,
    node_capacity,
    node_labels,
    registration_annotations,
)

__all__ = [
    "DEFAULT_VENDOR",
    "ENABLE_FLAG",
    "RULES",
    "SECTION",
    "CambriconRules",
    "CambriconVendor",
    "LockState",
    "build",
    "card_index",
    "card_type",
    "devices_from_capacity",
    "extra_annotations",
    "lock_annotation",
    "lock_state",
    "lock_time",
    "node_capacity",
    "node_labels",
    "registration_annotations",
]

ENABLE_FLAG: Final[str | None] = None
"""On by default, as HAMi initialises it (``shared.vendors.catalog``)."""


# ------------------------------------------------------------------------------------------------------------
# Device config
# ------------------------------------------------------------------------------------------------------------

_CONFIG_KEYS: Final = {
    "resourceCountName": "count_name",
    "resourceMemoryName": "memory_name",
    "resourceCoreName": "core_name",
}


def build(section: object) -> tuple[Vendor, ...]:
    """The vendor of a ``cambricon:`` section (``None`` / ``{}``: HAMi's default names).

    ``resourceCountName``, ``resourceMemoryName`` and ``resourceCoreName`` must be non-empty strings (an empty
    value keeps the default); other keys are ignored, as HAMi ignores them. ConfigError names the key path.
    """
    if section is None:
        return (DEFAULT_VENDOR,)
    if not isinstance(section, Mapping):
        raise ConfigError(f"{SECTION}: expected a mapping, got {type(section).__name__}")
    given: dict[str, str] = {}
    for key, attr in _CONFIG_KEYS.items():
        value = section.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise ConfigError(f"{SECTION}.{key}: expected a string, got {value!r}")
        if not value.strip():
            raise ConfigError(f"{SECTION}.{key}: expected a resource name, got an empty string")
        given[attr] = value
    names = [given.get(a, getattr(DEFAULT_VENDOR, a)) for a in _CONFIG_KEYS.values()]
    if len(set(names)) != len(names):
        raise ConfigError(f"{SECTION}: the count, memory and core resource names must differ, got {names}")
    return (CambriconVendor(**given),)
