"""Namespace quota limits from ResourceQuotas (hami-wire §8). Pure: no I/O.

Honoured keys: ``spec.hard["limits.<memory resource>"]`` and ``spec.hard["limits.<core resource>"]`` with the
resource names of the device config (HAMi defaults ``nvidia.com/gpumem`` / ``nvidia.com/gpucores``). Values
are kept *raw* — ``memoryFactor`` is applied where limits are checked, never here. An explicit ``0`` blocks; a
missing key means no limit. Several ResourceQuotas in one namespace: the smallest value of each key wins (the
API server enforces every ResourceQuota of a namespace, so the tightest one is the effective limit).
A value that is not a non-negative integer quantity is ignored (no limit from that entry) and reported.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from shared.codec import annotations as keys
from shared.codec.quantity import parse_quantity, whole_int64
from shared.domain.model import NvidiaConfig, QuotaLimits
from shared.errors import DecodeError


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


def read_quota(quota: Mapping[str, Any], cfg: NvidiaConfig) -> QuotaReading:
    """The honoured limits of one ResourceQuota's JSON (``spec.hard``)."""
    spec = quota.get("spec")
    hard = spec.get("hard") if isinstance(spec, Mapping) else None
    if not isinstance(hard, Mapping):
        return QuotaReading(QuotaLimits())
    problems: list[DecodeError] = []
    mem = _limit(hard, keys.QUOTA_LIMITS_PREFIX + cfg.resource_memory_name, problems)
    cores = _limit(hard, keys.QUOTA_LIMITS_PREFIX + cfg.resource_core_name, problems)
    return QuotaReading(QuotaLimits(mem_mib=mem, cores_pct=cores), tuple(problems))


def _min(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


def combine(limits: Iterable[QuotaLimits]) -> QuotaLimits:
    """The effective limits of a namespace with several ResourceQuotas: the minimum per key."""
    out = QuotaLimits()
    for lim in limits:
        out = QuotaLimits(mem_mib=_min(out.mem_mib, lim.mem_mib), cores_pct=_min(out.cores_pct, lim.cores_pct))
    return out


def namespace_limits(quotas: Iterable[Mapping[str, Any]], cfg: NvidiaConfig) -> dict[str, QuotaLimits]:
    """Effective limits per namespace from a list of ResourceQuotas (every namespace that has one appears)."""
    by_ns: dict[str, list[QuotaLimits]] = {}
    for q in quotas:
        meta = q.get("metadata")
        ns = meta.get("namespace") if isinstance(meta, Mapping) else None
        if not isinstance(ns, str) or not ns:
            continue
        by_ns.setdefault(ns, []).append(read_quota(q, cfg).limits)
    return {ns: combine(lims) for ns, lims in by_ns.items()}


def limited_namespaces(limits: Mapping[str, QuotaLimits]) -> int:
    """How many namespaces have at least one limit (the ``vgpu_informer_quota_namespaces`` gauge)."""
    return sum(1 for lim in limits.values() if lim.mem_mib is not None or lim.cores_pct is not None)
