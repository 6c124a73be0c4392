"""Huawei Ascend NPUs (HAMi's ``pkg/device/ascend``): one vendor per chip entry of the device config's ``vnpus:``.

Each entry (``commonWord`` ``Ascend910A``, ``Ascend910B2``, ``Ascend910B3``, ``Ascend910B4``, ``Ascend310P``,
``Ascend910C`` …) is its own vendor with its own keys, all built from the common word ``<cw>``:

* resources ``huawei.com/<chip>`` (count), ``huawei.com/<chip>-memory`` (MiB × ``memoryFactor``) and
  ``huawei.com/<chip>-core`` (named by the config);
* registration ``hami.io/node-register-<cw>`` (the device plugin's JSON device list, with an optional
  ``custominfo.NetworkID`` per NPU) and handshake ``hami.io/node-handshake-<cw>``;
* pod device lists ``hami.io/<cw>-devices-to-allocate`` / ``hami.io/<cw>-devices-allocated`` (the NVIDIA
  ``UUID,Type,mem,cores:`` format) and the plugin's runtime list ``huawei.com/<cw>``
  (:meth:`AscendVendor.runtime_info`);
* UUID selectors ``hami.io/use-<cw>-uuid`` / ``hami.io/no-use-<cw>-uuid``; HAMi's node lock ``hami.io/mutex.lock``.

vNPU templates: a memory request is rounded up to the smallest template that holds it (its memory is what the
device entry records; the template's AI cores are the device plugin's business, the entry records 0 cores); a
request above every template but within ``memoryCapacity`` takes ``memoryAllocatable`` (the whole card); no
memory at all takes 100 % of the card's registered memory. vNPU slices are single-device: several NPUs in one
container are whole cards.

Multi-NPU choice (``DeviceRules.select``): on an ``Ascend910*`` chip whose NPUs all report a ``NetworkID``, the
NPUs are taken from the largest network first; ``Ascend910C`` NPUs come in modules of two (index // 2) and a
multi-NPU request takes whole modules only.

The ``hami-core`` soft split: a container naming ``huawei.com/<chip>-core`` asks for an AI-core percent and its
memory as written (no template); the pod chooses the mode with ``huawei.com/vnpu-mode: hami-core``, a node runs
it when its ``hami-vnpu-core`` annotation says ``"true"`` (else the ``vnpus`` section's ``hamiVnpuCore``), and a
hami-core pod fits only such nodes (``ModeNotFit``). The 910C super-pod placement and eNPU are not implemented
(see docs/vendors/ascend.md).

Pure: no I/O. The NetworkID of each NPU travels in ``NodeInventory.pair_scores`` (see :func:`network_groups`).

The package: :mod:`.config` (the ``vnpus`` section, chips, templates, defaults), :mod:`.requests` (reading a
container's resources), :mod:`.fit` (``AscendRules``), :mod:`.registration` (the node's register annotation and
what the plugin writes), :mod:`.vendor` (``AscendVendor``, tying them together). This module is the family's
catalog entry (``SECTION``, ``ENABLE_FLAG``, ``build``) and re-exports the names other modules use.
"""

from __future__ import annotations

from typing import Final

from vgpu_scheduler.shared.vendors.ascend.config import (
    ASCEND910_PREFIX,
    ASCEND910C,
    DEFAULT_CHIPS,
    NETWORK_ID,
    NPUS_PER_910C_MODULE,
    PREDICATE_TIME,
    SECTION,
    VISIBLE_DEVICES_ENV,
    VNPU_MODE_ANNOTATION,
    VNPU_MODE_HAMI_CORE,
    VNPU_NODE_ANNOTATION,
    ChipConfig,
    Template,
    parse_chips,
)
from vgpu_scheduler.shared.vendors.ascend.fit import AscendRules, network_groups
from vgpu_scheduler.shared.vendors.ascend.registration import (
    RegisteredNpu,
    decode_registration,
    encode_registration,
    format_reported,
    handshake_key,
    node_capacity,
    register_key,
    registration_annotations,
)
from vgpu_scheduler.shared.vendors.ascend.vendor import AscendVendor

__all__ = [
    "ASCEND910C",
    "ASCEND910_PREFIX",
    "DEFAULT_CHIPS",
    "ENABLE_FLAG",
    "NETWORK_ID",
    "NPUS_PER_910C_MODULE",
    "PREDICATE_TIME",
    "SECTION",
    "VISIBLE_DEVICES_ENV",
    "VNPU_MODE_ANNOTATION",
    "VNPU_MODE_HAMI_CORE",
    "VNPU_NODE_ANNOTATION",
    "AscendRules",
    "AscendVendor",
    "ChipConfig",
    "RegisteredNpu",
    "Template",
    "build",
    "decode_registration",
    "encode_registration",
    "format_reported",
    "handshake_key",
    "network_groups",
    "node_capacity",
    "register_key",
    "registration_annotations",
]

ENABLE_FLAG: Final[str | None] = "enable-ascend"
"""Opt-in: HAMi's ``--enable-ascend`` enables the chips (``shared.vendors.catalog``)."""


def build(section: object) -> tuple[AscendVendor, ...]:
    """The Ascend vendors of the ``vnpus`` section, one per chip entry, in order (:func:`.config.parse_chips`:
    ``None``, ``{}`` or a mapping without ``configs`` give the chart's default chips). Raises ConfigError naming
    the key path."""
    return tuple(AscendVendor(c) for c in parse_chips(section))
