"""What one ``plan`` call evaluates every node with: the pod's requests completed the way HAMi completes them
(``normalize_request``, the memory default), its effective policies and the namespace quota (``PodContext``).

``pod_context`` builds it once per pod; ``fit.evaluate_node`` and ``prefilter.may_fit`` read it for each node.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vgpu_scheduler.shared.domain.model import (
    MEM_PCT_UNSET,
    NVIDIA,
    ContainerRequest,
    NvidiaConfig,
    PodConstraints,
    PodRequest,
)
from vgpu_scheduler.shared.domain.quota import QuotaState
from vgpu_scheduler.shared.domain.scoring import DeviceKey, EffectivePolicy, Policies, device_sort_key, effective_policy
from vgpu_scheduler.shared.domain.vendor import NVIDIA_ONLY, RuleSet


def default_memory(mem_mib: int, mem_pct: int, config: NvidiaConfig) -> tuple[int, int]:
    """HAMi's memory default (§1.2): no memory and no percentage means ``defaultMemory`` MiB, or 100 % of the card
    when that default is 0. Returns ``(mem_mib, mem_pct)``; the request parser and :func:`normalize_request` share it.
    """
    if mem_mib == 0 and mem_pct == MEM_PCT_UNSET:
        if config.default_memory != 0:
            return config.default_memory, mem_pct
        return mem_mib, 100
    return mem_mib, mem_pct


def normalize_request(req: ContainerRequest, config: NvidiaConfig, rules: RuleSet = NVIDIA_ONLY) -> ContainerRequest:
    """Complete a request the way HAMi's request parsing and ``Fit`` step 8 would (§1.2, §6.4).

    NVIDIA: the memory default (:func:`default_memory`) fills in what is missing; cores above 100 are clamped to
    100. Other vendors: their own ``normalize``. A request that already went through the parser is unchanged.
    """
    if req.type != NVIDIA and not req.empty:
        vendor = rules.get(req.type)
        return vendor.normalize(req) if vendor is not None else req
    mem_mib, mem_pct = default_memory(req.mem_mib, req.mem_pct, config)
    cores = min(req.cores_pct, 100)
    if (mem_mib, mem_pct, cores) == (req.mem_mib, req.mem_pct, req.cores_pct):
        return req
    return ContainerRequest(nums=req.nums, mem_mib=mem_mib, mem_pct=mem_pct, cores_pct=cores, type=req.type)


@dataclass(frozen=True, slots=True)
class PodContext:
    """What every node evaluation of one ``plan`` call shares: the pod, its policies and the namespace quota."""

    pod: PodRequest
    requests: tuple[ContainerRequest, ...]
    """The pod's requests after ``normalize_request``."""
    constraints: PodConstraints
    policy: EffectivePolicy
    key: DeviceKey
    config: NvidiaConfig
    quota: QuotaState | None
    rules: RuleSet = NVIDIA_ONLY
    """Every vendor's ``Fit`` hooks, by common word (``shared.domain.vendor``)."""
    uniform_types: frozenset[str] = field(init=False)
    """The pod's vendors whose devices are shared only by tasks of one size (``uniform_share``)."""
    charge_terms: Mapping[str, Any] = field(init=False)
    """The pod's vendors' optional ``charge_terms`` hooks (tags and the reserve's sharing rule), by common word."""

    def __post_init__(self) -> None:
        # found once per pod, not once per node fitted
        rules = [(r.type, self.rules.get(r.type)) for r in self.requests]
        object.__setattr__(
            self, "uniform_types", frozenset(t for t, rule in rules if getattr(rule, "uniform_share", False))
        )
        hooks = {t: getattr(rule, "charge_terms", None) for t, rule in rules}
        object.__setattr__(self, "charge_terms", {t: h for t, h in hooks.items() if h is not None})

    @property
    def quota_active(self) -> bool:
        return self.quota is not None and self.quota.limited


def pod_context(  # noqa: PLR0917
    pod: PodRequest,
    constraints: PodConstraints,
    policies: Policies,
    quota: QuotaState | None,
    config: NvidiaConfig,
    rules: RuleSet = NVIDIA_ONLY,
) -> PodContext:
    """The context of one pod: the effective policy (the pod's annotations over ``policies``) and the normalized
    requests."""
    policy = effective_policy(policies, constraints)
    return PodContext(
        pod=pod,
        requests=tuple(normalize_request(r, config, rules) for r in pod.containers),
        constraints=constraints,
        policy=policy,
        key=device_sort_key(policy),
        config=config,
        quota=quota,
        rules=rules,
    )
