"""The set of vendors a deployment schedules: built once from the device config, handed to every process.

NVIDIA is always present (HAMi's default); the others are enabled by their section of the device config file
(``hygon:``, ``cambricon:``, ``amd:``, ``vnpus:``…). Lookups by common word, by pod annotation key and by
resource name are precomputed.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from vgpu_scheduler.shared.codec.resources import container_lists
from vgpu_scheduler.shared.domain.model import PodConstraints
from vgpu_scheduler.shared.domain.vendor import DeviceRules, RuleSet
from vgpu_scheduler.shared.vendors.base import Vendor


@dataclass(frozen=True)
class Vendors:
    """An ordered, immutable set of vendors with unique common words (NVIDIA first when present)."""

    all: tuple[Vendor, ...]
    _by_name: Mapping[str, Vendor] = field(init=False, repr=False, compare=False)
    _rules: RuleSet = field(init=False, repr=False, compare=False)
    _names: tuple[tuple[Vendor, frozenset[str]], ...] = field(init=False, repr=False, compare=False)
    constraints_memo: dict[frozenset[tuple[str, str]], PodConstraints] = field(
        init=False, repr=False, compare=False, default_factory=dict
    )
    """Decoded scheduling annotations by annotation set (``vendors.pods.decode_vendor_constraints``): a pure
    function's results, for these vendors."""

    def __post_init__(self) -> None:
        by_name: dict[str, Vendor] = {}
        for v in self.all:
            if v.name in by_name:
                raise ValueError(f"vendor {v.name!r} configured twice")
            by_name[v.name] = v
        rules: dict[str, DeviceRules] = {n: v.rules for n, v in by_name.items()}
        object.__setattr__(self, "_by_name", by_name)
        object.__setattr__(self, "_rules", RuleSet(rules))
        object.__setattr__(self, "_names", tuple((v, v.resources.all) for v in self.all))

    def __iter__(self) -> Iterator[Vendor]:
        return iter(self.all)

    def __len__(self) -> int:
        return len(self.all)

    def get(self, name: str) -> Vendor | None:
        return self._by_name.get(name)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(v.name for v in self.all)

    @property
    def rules(self) -> RuleSet:
        """What the scheduling core needs (``plan(rules=…)``)."""
        return self._rules

    def managing(self, container: Mapping[str, Any], what: str = "container") -> tuple[Vendor, ...]:
        """The vendors whose resources the container names (``Vendor.manages``), in order.

        Every vendor's ``manages`` is "the container names one of ``resources.all``" (the protocol says so and
        tests/unit/vendors/test_manages.py checks it for every family), so the names are read once per vendor
        set and each container costs one set test per vendor, not a ``resources`` built per vendor and call.
        A container of the wrong shape is a DecodeError naming ``what``."""
        limits, requests = container_lists(container, what)
        if not limits and not requests:
            return ()
        named = limits.keys() | requests.keys()
        return tuple(v for v, names in self._names if not names.isdisjoint(named))
