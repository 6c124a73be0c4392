"""Scores and orderings: which device a container prefers, which node a pod prefers (hami-wire §6.2, §6.3).

HAMi sorts devices ascending and walks the sorted list from its end, so its "preferred" device is the last one.
Here the same preference is written directly: ``device_sort_key`` returns a key whose *ascending* order is the
order of preference. Read each case as "HAMi's ascending keys, reversed", e.g. HAMi's binpack sorts by score
ascending, so we prefer score descending. Where every key is equal, HAMi's own tie-break is kept (difference 8):
a chain ends on the device index, taken from the end (highest index first); the other policies have no last key
and keep the order the devices come in, which ``fit`` hands over as HAMi's list walked from its end.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from vgpu_scheduler.shared.domain.model import (
    MEM_PCT_UNSET,
    ContainerRequest,
    DeviceInfo,
    DeviceUsage,
    GpuPolicy,
    GpuPolicyToken,
    NodePolicy,
    PodConstraints,
    ScoringWeights,
)

SPREAD = GpuPolicy((GpuPolicyToken.SPREAD,))
BINPACK = GpuPolicy((GpuPolicyToken.BINPACK,))
_SORT_TOKENS = frozenset({GpuPolicyToken.BINPACK, GpuPolicyToken.SPREAD, GpuPolicyToken.NUMA})


@dataclass(frozen=True, slots=True)
class Policies:
    """Cluster-wide default policies (HAMi's flags): node binpack, GPU spread. A pod's annotations override them."""

    node: NodePolicy = NodePolicy.BINPACK
    gpu: GpuPolicy = SPREAD


@dataclass(frozen=True, slots=True)
class EffectivePolicy:
    """The policies that apply to one pod once its annotations are taken into account."""

    node: NodePolicy
    gpu: GpuPolicy
    numa_bind: bool
    weights: ScoringWeights

    @property
    def mutex(self) -> bool:
        """``mutex`` anywhere in the chain filters out busy devices (§6.4 step 7)."""
        return self.gpu.contains(GpuPolicyToken.MUTEX)

    @property
    def topology(self) -> bool:
        """``topology-aware`` anywhere in the chain collects every fitting device, then selects (§6.4)."""
        return self.gpu.contains(GpuPolicyToken.TOPOLOGY_AWARE)


def effective_policy(policies: Policies, constraints: PodConstraints) -> EffectivePolicy:
    """Apply a pod's overrides (node/GPU policy, weights, numa-bind) to the cluster defaults."""
    return EffectivePolicy(
        node=constraints.node_policy or policies.node,
        gpu=constraints.gpu_policy or policies.gpu,
        numa_bind=constraints.numa_bind,
        weights=constraints.weights,
    )


def score_request_mem_mib(req: ContainerRequest, devmem_mib: int) -> int:
    """The memory a request adds in the device score (§6.3): the percentage of this card when one is set, else MiB."""
    if req.mem_pct not in (0, MEM_PCT_UNSET):
        return devmem_mib * req.mem_pct // 100
    return req.mem_mib


def device_scorer(req: ContainerRequest, weights: ScoringWeights) -> Callable[[DeviceInfo, int, int, int], float]:
    """``score(device, used, used_mem_mib, used_cores)`` for one container's request (see ``device_score``)."""
    ws, wc, wm = weights.slot, weights.core, weights.memory
    nums, cores = req.nums, req.cores_pct

    def score(dev: DeviceInfo, used: int, used_mem_mib: int, used_cores: int) -> float:
        count, devcore, devmem = dev.count, dev.devcore, dev.devmem_mib
        if count == 0 or devcore == 0 or devmem == 0:
            return 0.0
        mem = score_request_mem_mib(req, devmem)
        return 10.0 * (
            ws * (nums + used) / count + wc * (cores + used_cores) / devcore + wm * (mem + used_mem_mib) / devmem
        )

    return score


def device_score(dev: DeviceInfo, usage: DeviceUsage, req: ContainerRequest, weights: ScoringWeights) -> float:
    """A device's score with the container's request added to its usage (§6.3, difference 7).

    ``10 × (wSlot·(nums+Used)/Count + wCore·(cores+Usedcores)/Totalcore + wMem·(mem+Usedmem)/Totalmem)``;
    0 when the device has no slots, cores or memory.
    """
    return device_scorer(req, weights)(dev, usage.used, usage.used_mem_mib, usage.used_cores)


DeviceKey = Callable[[float, DeviceInfo, int], tuple[float, ...]]
"""``key(score, device, used)``: ascending order of the key is the order of preference."""


def _chain_key(tokens: tuple[GpuPolicyToken, ...], numa_bind: bool) -> DeviceKey:
    keys = [t for t in tokens if t in _SORT_TOKENS]
    if numa_bind and (not keys or keys[0] is not GpuPolicyToken.NUMA):
        keys = [GpuPolicyToken.NUMA, *(t for t in keys if t is not GpuPolicyToken.NUMA)]
    if not keys:
        keys = [GpuPolicyToken.SPREAD]

    def key(score: float, dev: DeviceInfo, used: int) -> tuple[float, ...]:
        out: list[float] = []
        for t in keys:
            if t is GpuPolicyToken.BINPACK:
                out.append(-score)  # HAMi: score ascending, taken from the end → highest first
            elif t is GpuPolicyToken.SPREAD:
                out.append(score)  # HAMi: score descending → lowest first
            else:
                out.append(-dev.numa)  # HAMi: NUMA ascending → highest NUMA first
        out.append(-dev.index)  # HAMi: index ascending → highest index first
        return tuple(out)

    return key


def device_sort_key(policy: EffectivePolicy) -> DeviceKey:
    """The device preference for a pod's GPU policy and numa-bind (§6.3 with differences 8 and 15).

    * a chain (``binpack,numa`` …, or exactly ``numa``): the sort keys in the written order, NUMA forced first
      under numa-bind, ``spread`` when the chain has no sort key, then the highest device index;
    * exactly ``mutex``: idle devices first (fewest tasks), then highest NUMA;
    * numa-bind: binpack groups lowest NUMA first with the highest score inside, spread (and anything else)
      groups highest NUMA first with the lowest score inside;
    * otherwise: binpack highest score first, spread (and anything else) lowest score first, NUMA (highest
      first) only breaking ties.

    Apart from a chain's index, equal keys are left in the order the caller sorts (a stable sort), as HAMi's
    sort leaves them (see ``fit``).
    """
    gpu = policy.gpu
    if gpu.is_chain:
        return _chain_key(gpu.tokens, policy.numa_bind)
    binpack = gpu.tokens == (GpuPolicyToken.BINPACK,)
    if gpu.tokens == (GpuPolicyToken.MUTEX,):
        return lambda score, dev, used: (used, -dev.numa)
    if policy.numa_bind:
        if binpack:
            return lambda score, dev, used: (dev.numa, -score)
        return lambda score, dev, used: (-dev.numa, score)
    if binpack:
        return lambda score, dev, used: (-score, -dev.numa)
    return lambda score, dev, used: (score, -dev.numa)
