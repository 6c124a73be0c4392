"""Every vendor module this build knows, by device-config section, and the :class:`Vendors` a config enables.

A vendor is enabled when its section is present in the device config file (``hygon:``, ``cambricon:``, ``amd:``,
``vnpus:``…); NVIDIA always is. Each module exports ``SECTION`` and ``build(section) -> tuple[Vendor, ...]``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from shared.domain.model import NvidiaConfig
from shared.vendors import amd, ascend, cambricon, hygon
from shared.vendors.base import Vendor
from shared.vendors.nvidia import NvidiaVendor
from shared.vendors.registry import Vendors

Builder = Callable[[object], tuple[Vendor, ...]]

BUILDERS: Mapping[str, Builder] = {
    hygon.SECTION: hygon.build,
    cambricon.SECTION: cambricon.build,
    amd.SECTION: amd.build,
    ascend.SECTION: ascend.build,
}
"""Device-config section → the builder of its vendors, in the order vendors are listed (after NVIDIA)."""


def enabled_vendors(nvidia: NvidiaConfig, document: Mapping[str, Any] | None = None) -> Vendors:
    """NVIDIA (with its parsed config) plus every vendor whose section ``document`` has (the parsed device config
    file; None: NVIDIA only). Raises :class:`~shared.errors.ConfigError` naming a bad key."""
    found: list[Vendor] = [NvidiaVendor(nvidia)]
    if document:
        for section, build in BUILDERS.items():
            if section in document:
                found.extend(build(document[section]))
    return Vendors(tuple(found))


NVIDIA_ONLY_VENDORS = Vendors((NvidiaVendor(),))
