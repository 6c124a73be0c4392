"""Namespace quota limits from ResourceQuotas (hami-wire §8). Pure: no I/O.

Honoured keys: ``spec.hard["limits.<memory resource>"]`` and ``spec.hard["limits.<core resource>"]`` of every
enabled vendor, with its resource names (NVIDIA: the device config's, HAMi defaults ``nvidia.com/gpumem`` /
``nvidia.com/gpucores``; Hygon ``hygon.com/dcumem`` / ``dcucores``; Cambricon ``cambricon.com/mlu.smlu.vmemory`` /
``.vcore`` …). NVIDIA's values are kept *raw* — ``memoryFactor`` is applied where limits are checked, never here;
another vendor's memory limit is scaled here, once, by its memory unit (Cambricon: 256 MiB), to MiB. An explicit
``0`` blocks; a missing key means no limit. Several ResourceQuotas in one namespace: the smallest value of each key
wins (the API server enforces every ResourceQuota of a namespace, so the tightest one is the effective limit).
A value that is not a non-negative integer quantity is ignored (no limit from that entry) and reported.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec.quantity import parse_quantity, whole_int64
from vgpu_scheduler.shared.domain.model import NVIDIA, NvidiaConfig
from vgpu_scheduler.shared.domain.quota import QuotaLimits, VendorLimits, quota_limits
from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.vendors.base import Vendor


@dataclass(frozen=True, slots=True)
class QuotaReading:
    """One ResourceQuota's honoured limits and the entries that could not be read."""

    limits: QuotaLimits
    problems: tuple[DecodeError, ...] = ()


def _limit(hard: Mapping[str, Any], key: str, problems: list[DecodeError]) -> int | None:
    if key not in hard:
        return None
    raw = hard[key]
    what = f"spec.hard[{key}]"
    try:
        value = whole_int64(parse_quantity(raw, what))
    except DecodeError as e:
        problems.append(e)
        return None
    if value is None or value < 0:
        problems.append(DecodeError(what, "expected a non-negative integer quantity", str(raw)))
        return None
    return value


VENDOR_MEM_LIMIT_MAX_MIB = 2**53
"""Another vendor's memory limit in MiB is capped here (exact in the store scripts' doubles; 8 EiB is no limit)."""


def _scaled(value: int | None, unit: int) -> int | None:
    return None if value is None else min(value * max(unit, 1), VENDOR_MEM_LIMIT_MAX_MIB)


def read_quota(quota: Mapping[str, Any], cfg: NvidiaConfig, vendors: Iterable[Vendor] = ()) -> QuotaReading:
    """The honoured limits of one ResourceQuota's JSON (``spec.hard``).

    NVIDIA's from the device config's names (raw); every other vendor of ``vendors`` from its own resource names,
    its memory limit × its memory unit (MiB). A vendor without a memory or core resource has no such limit.
    """
    spec = quota.get("spec")
    hard = spec.get("hard") if isinstance(spec, Mapping) else None
    if not isinstance(hard, Mapping):
        return QuotaReading(QuotaLimits())
    problems: list[DecodeError] = []
    mem = _limit(hard, keys.QUOTA_LIMITS_PREFIX + cfg.resource_memory_name, problems)
    cores = _limit(hard, keys.QUOTA_LIMITS_PREFIX + cfg.resource_core_name, problems)
    others: dict[str, VendorLimits] = {}
    for v in vendors:
        if v.name == NVIDIA:
            continue
        names = v.resources
        vmem = _limit(hard, keys.QUOTA_LIMITS_PREFIX + names.memory, problems) if names.memory else None
        vcores = _limit(hard, keys.QUOTA_LIMITS_PREFIX + names.cores, problems) if names.cores else None
        others[v.name] = VendorLimits(_scaled(vmem, names.memory_unit_mib), vcores)
    return QuotaReading(quota_limits(VendorLimits(mem, cores), others), tuple(problems))


def _min(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


def _min_limits(a: VendorLimits, b: VendorLimits) -> VendorLimits:
    return VendorLimits(_min(a.mem_mib, b.mem_mib), _min(a.cores_pct, b.cores_pct))


def combine(limits: Iterable[QuotaLimits]) -> QuotaLimits:
    """The effective limits of a namespace with several ResourceQuotas: the minimum per key (per vendor)."""
    nvidia = VendorLimits()
    others: dict[str, VendorLimits] = {}
    for lim in limits:
        nvidia = _min_limits(nvidia, lim.of(NVIDIA))
        for word, v in lim.others:
            others[word] = _min_limits(others.get(word, VendorLimits()), v)
    return quota_limits(nvidia, others)


def namespace_limits(
    quotas: Iterable[Mapping[str, Any]], cfg: NvidiaConfig, vendors: Iterable[Vendor] = ()
) -> dict[str, QuotaLimits]:
    """Effective limits per namespace from a list of ResourceQuotas (every namespace that has one appears)."""
    vendors = tuple(vendors)
    by_ns: dict[str, list[QuotaLimits]] = {}
    for q in quotas:
        meta = q.get("metadata")
        ns = meta.get("namespace") if isinstance(meta, Mapping) else None
        if not isinstance(ns, str) or not ns:
            continue
        by_ns.setdefault(ns, []).append(read_quota(q, cfg, vendors).limits)
    return {ns: combine(lims) for ns, lims in by_ns.items()}


def limited_namespaces(limits: Mapping[str, QuotaLimits]) -> int:
    """How many namespaces have at least one limit, of any vendor (the ``vgpu_informer_quota_namespaces`` gauge)."""
    return sum(1 for lim in limits.values() if lim.limited)
