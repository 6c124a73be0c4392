"""Namespace quotas (hami-wire §8): a ResourceQuota's limits per vendor, the usage charged against them, and the
check ``Fit`` and the webhook make (``QuotaState.admits``).

NVIDIA's limits and usage are the plain fields; every other vendor's are kept by its common word
(``is_quota_word``), memory in MiB. ``allocation.Allocation`` says what one pod charges.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from vgpu_scheduler.shared.domain.model import NVIDIA

_QUOTA_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def is_quota_word(word: str) -> bool:
    """Whether ``word`` can key a vendor's quota (a vendor's common word: letters, digits, ``._-``)."""
    return _QUOTA_WORD.fullmatch(word) is not None


@dataclass(frozen=True, slots=True)
class VendorLimits:
    """One vendor's limits: ``limits.<memory resource>`` × the vendor's memory unit (MiB, scaled once when the
    ResourceQuota is read) and ``limits.<core resource>`` (%); ``None`` means no limit, ``0`` blocks."""

    mem_mib: int | None = None
    cores_pct: int | None = None

    @property
    def limited(self) -> bool:
        return self.mem_mib is not None or self.cores_pct is not None


@dataclass(frozen=True, slots=True)
class QuotaUse:
    """Memory (MiB) and cores (%) charged to one vendor's quota."""

    mem_mib: int = 0
    cores_pct: int = 0


QuotaUses = tuple[tuple[str, QuotaUse], ...]
"""Per-vendor charges or usage other than NVIDIA's, sorted by common word."""


@dataclass(frozen=True, slots=True)
class QuotaLimits:
    """One namespace's honoured hard limits (hami-wire §8); ``None`` means no limit, ``0`` blocks.

    ``mem_mib`` / ``cores_pct`` are NVIDIA's: the ResourceQuota's raw ``limits.nvidia.com/gpumem`` /
    ``limits.nvidia.com/gpucores``; every check scales the memory limit by ``memoryFactor`` at check time, like the
    requests are scaled. ``others`` holds every other vendor's limits by common word (sorted; only vendors with a
    limit), memory already in MiB (the informer scales by that vendor's memory unit when it reads the quota).
    """

    mem_mib: int | None = None
    cores_pct: int | None = None
    others: tuple[tuple[str, VendorLimits], ...] = ()

    @property
    def limited(self) -> bool:
        return self.mem_mib is not None or self.cores_pct is not None or any(v.limited for _, v in self.others)

    def of(self, vendor: str) -> VendorLimits:
        """The limits of one vendor (NVIDIA's from the NVIDIA fields: raw, not scaled)."""
        if vendor == NVIDIA:
            return VendorLimits(self.mem_mib, self.cores_pct)
        return dict(self.others).get(vendor, VendorLimits())


def quota_limits(nvidia: VendorLimits, others: Mapping[str, VendorLimits]) -> QuotaLimits:
    """A ``QuotaLimits`` in canonical form (others sorted, vendors without a limit dropped)."""
    kept = tuple((w, v) for w, v in sorted(others.items()) if v.limited and w != NVIDIA)
    return QuotaLimits(mem_mib=nvidia.mem_mib, cores_pct=nvidia.cores_pct, others=kept)


@dataclass(frozen=True, slots=True)
class QuotaState:
    """A namespace's limits and its current usage (memory MiB and cores % summed over its allocations).

    ``used_mem_mib`` / ``used_cores_pct`` are NVIDIA's; ``used_others`` every other vendor's by common word.
    """

    limits: QuotaLimits = QuotaLimits()
    used_mem_mib: int = 0
    used_cores_pct: int = 0
    used_others: QuotaUses = ()

    @property
    def limited(self) -> bool:
        """Whether the namespace has any limit to check (any vendor's)."""
        return self.limits.limited

    def for_vendor(self, vendor: str) -> QuotaState:
        """One vendor's limits and usage in the NVIDIA fields: what :meth:`admits` checks for that vendor."""
        if vendor == NVIDIA:
            if not self.limits.others and not self.used_others:
                return self
            return QuotaState(
                QuotaLimits(self.limits.mem_mib, self.limits.cores_pct), self.used_mem_mib, self.used_cores_pct
            )
        lim = self.limits.of(vendor)
        use = dict(self.used_others).get(vendor, QuotaUse())
        return QuotaState(QuotaLimits(lim.mem_mib, lim.cores_pct), use.mem_mib, use.cores_pct)

    def admits(self, mem_mib: int, cores_pct: int, memory_factor: int) -> bool:
        """``used + demand <= limit`` for NVIDIA's memory and cores (hami-wire §8): ``None`` is no limit, ``0``
        blocks. Another vendor's check is ``for_vendor(word).admits(…, 1)`` (its limit is in MiB already).

        The memory limit is scaled by ``memoryFactor`` (at least 1), like the requests are. The webhook's
        pre-check and Fit's per-device check both ask this.
        """
        mem_limit, cores_limit = self.limits.mem_mib, self.limits.cores_pct
        if mem_limit is not None and self.used_mem_mib + mem_mib > mem_limit * max(memory_factor, 1):
            return False
        return cores_limit is None or self.used_cores_pct + cores_pct <= cores_limit
