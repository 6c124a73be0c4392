"""The operator's view of the core's refusals: a refusal's nearest miss in plain words, and quota headroom. Pure:
it reads what ``plan``/``evaluate_node`` read and what they returned, and never decides anything ``Fit`` did not.

``nearest_miss`` turns a :class:`~shared.domain.reasons.NodeRejection` (which container failed, how many devices
failed each check) into one sentence naming the figure that was missed and the device that came closest, e.g.
``needs 20,000 MiB on one GPU; the most free on gpu-a100-3 is 16,384 MiB on GPU-…2``. The figures are taken
from the node as the failing container saw it (the node before the pod, plus the pod's earlier app containers,
placed by ``evaluate_node`` itself), so they agree with the reason counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from vgpu_scheduler.shared.domain.context import PodContext, pod_context
from vgpu_scheduler.shared.domain.fit import evaluate_node
from vgpu_scheduler.shared.domain.model import (
    DEFAULT_NVIDIA_CONFIG,
    MEM_PCT_UNSET,
    NVIDIA,
    ContainerRequest,
    DeviceInfo,
    DeviceUsage,
    NvidiaConfig,
    PodConstraints,
    PodRequest,
    Reason,
)
from vgpu_scheduler.shared.domain.plan import Decision, apply_decision
from vgpu_scheduler.shared.domain.quota import QuotaState
from vgpu_scheduler.shared.domain.reasons import NodeRejection
from vgpu_scheduler.shared.domain.scoring import Policies
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.domain.vendor import NVIDIA_ONLY, NVIDIA_RULES, DeviceRules, RuleSet

# --------------------------------------------------------------------------------------------
# Quota headroom
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QuotaLeft:
    """What a namespace may still take: ``None`` where it has no limit (memory already scaled by memoryFactor)."""

    mem_mib: int | None
    cores_pct: int | None


def quota_left(quota: QuotaState, memory_factor: int = 1) -> QuotaLeft:
    """The headroom :meth:`QuotaState.admits` checks against (never below 0)."""
    limits = quota.limits
    mem = None if limits.mem_mib is None else max(limits.mem_mib * max(memory_factor, 1) - quota.used_mem_mib, 0)
    cores = None if limits.cores_pct is None else max(limits.cores_pct - quota.used_cores_pct, 0)
    return QuotaLeft(mem_mib=mem, cores_pct=cores)


# --------------------------------------------------------------------------------------------
# Nearest miss
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NearestMiss:
    """One node's refusal in plain words. ``reason`` is the word explained; ``device`` the device that came
    closest (if one did); ``needed``/``available`` the figure missed and the best the node offers, in ``unit``."""

    reason: str
    text: str
    device: str | None = None
    needed: int | None = None
    available: int | None = None
    unit: str = ""

    def to_json(self) -> dict[str, object]:
        return {
            "reason": self.reason,
            "text": self.text,
            "device": self.device,
            "needed": self.needed,
            "available": self.available,
            "unit": self.unit,
        }


_CAPACITY_ORDER: tuple[Reason, ...] = (
    Reason.RESOURCE_QUOTA_NOT_FIT,
    Reason.CARD_INSUFFICIENT_MEMORY,
    Reason.CARD_INSUFFICIENT_CORE,
    Reason.CARD_TIME_SLICING_EXHAUSTED,
    Reason.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT,
    Reason.CARD_COMPUTE_UNITS_EXHAUSTED,
    Reason.CARD_MIG_TOPOLOGY_INFEASIBLE,
    Reason.NUMA_NOT_FIT,
)
"""Reasons a device could get past by having more room; preferred when naming the nearest miss (ties: order)."""
_STATIC_ORDER: tuple[Reason, ...] = (
    Reason.CARD_CORDONED,
    Reason.CARD_NOT_HEALTH,
    Reason.CARD_UNHEALTHY,
    Reason.CARD_TYPE_MISMATCH,
    Reason.CARD_UUID_MISMATCH,
)


def _primary(counts: Mapping[Reason, int]) -> Reason | None:
    """The reason to explain: the most counted capacity reason, else the most counted static one."""
    for order in (_CAPACITY_ORDER, _STATIC_ORDER):
        present = [r for r in order if counts.get(r, 0) > 0]
        if present:
            return max(present, key=lambda r: (counts[r], -order.index(r)))
    return None


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


_NOUNS = {
    NVIDIA: "GPU",
    "AMD": "GPU",
    "DCU": "DCU",
    "MLU": "MLU",
    "AWSNeuron": "Neuron device",
    "kunlun": "XPU",
    "XPU": "XPU",
}


def device_noun(vendor: str) -> str:
    """What one device of ``vendor`` is called in a sentence: ``GPU`` (NVIDIA, AMD), ``DCU``, ``MLU``, ``NPU``
    (Ascend chips, whose common words start with ``Ascend``), else ``device``."""
    if vendor.startswith("Ascend"):
        return "NPU"
    return _NOUNS.get(vendor, "device")


@dataclass(frozen=True, slots=True)
class _View:
    """The node as one container saw it, and that container's (normalized) request."""

    node: str
    devices: tuple[DeviceInfo, ...]
    usages: tuple[DeviceUsage, ...]
    cordoned: frozenset[str]
    req: ContainerRequest
    constraints: PodConstraints
    mutex: bool
    rules: DeviceRules = NVIDIA_RULES

    @property
    def noun(self) -> str:
        """What the vendor's devices are called in a sentence."""
        return device_noun(self.req.type)

    def typed(self) -> list[int]:
        return [p for p, d in enumerate(self.devices) if self.rules.candidate(d, self.req)]

    def eligible(self) -> list[int]:
        """Typed devices that pass the checks that do not depend on room: health, cordon, type, UUID."""
        return [
            p
            for p in self.typed()
            if self.devices[p].health
            and self.devices[p].id not in self.cordoned
            and self.rules.type_ok(self.devices[p], self.req, self.constraints)
            and self.rules.uuid_ok(self.devices[p], self.constraints)
        ]

    def with_slot(self) -> list[int]:
        return [p for p in self.eligible() if self.usages[p].used < self.devices[p].count]

    def memreq(self, p: int) -> int:
        return self.rules.take(self.devices[p], self.req, self.usages[p].used_mem_mib).mem_mib

    def free_mem(self, p: int) -> int:
        return self.devices[p].devmem_mib - self.usages[p].used_mem_mib

    def free_cores(self, p: int) -> int:
        return self.devices[p].devcore - self.usages[p].used_cores


def _seen_by(ctx: PodContext, snap: NodeSnapshot, ci: int) -> NodeSnapshot:
    """The node as container ``ci`` saw it: before the pod for an init container; with the pod's earlier app
    containers placed (by ``evaluate_node`` itself) for an app container."""
    pod = ctx.pod
    if ci < pod.init_count:
        return snap
    earlier = tuple(
        c if pod.init_count <= pod.owner(i) < ci else ContainerRequest(nums=0) for i, c in enumerate(ctx.requests)
    )
    if not any(not c.empty for c in earlier):
        return snap
    sub = PodContext(
        pod=PodRequest(containers=earlier, init_count=pod.init_count, owners=pod.owners),
        requests=earlier,
        constraints=ctx.constraints,
        policy=ctx.policy,
        key=ctx.key,
        config=ctx.config,
        quota=None,
        rules=ctx.rules,
    )
    fit = evaluate_node(sub, snap)
    if isinstance(fit, NodeRejection):  # cannot happen: they fitted in the full evaluation
        return snap
    return apply_decision(
        snap, Decision(node=snap.name, devices=fit.devices, mig=fit.mig, charges=fit.charges, score=0)
    )


def _memory(v: _View) -> NearestMiss:
    short = [p for p in v.with_slot() if v.free_mem(p) < v.memreq(p)]
    if not short:
        return _generic(v, Reason.CARD_INSUFFICIENT_MEMORY)
    p = min(short, key=lambda q: (v.memreq(q) - v.free_mem(q), q))
    need, free, uuid = v.memreq(p), max(v.free_mem(p), 0), v.devices[p].id
    each = f"one {v.noun}" if v.req.nums == 1 else f"each of {v.req.nums} {v.noun}s"
    if v.req.mem_mib <= 0 and v.req.mem_pct != MEM_PCT_UNSET:
        text = (
            f"needs {v.req.mem_pct}% of the memory of {each} ({need:,} MiB on {uuid}); "
            f"the closest on {v.node} is {uuid} with {free:,} MiB free"
        )
    else:
        text = f"needs {need:,} MiB on {each}; the most free on {v.node} is {free:,} MiB on {uuid}"
    return NearestMiss(Reason.CARD_INSUFFICIENT_MEMORY.value, text, uuid, need, free, "MiB")


def _cores(v: _View) -> NearestMiss:
    need = v.req.cores_pct
    short = [p for p in v.with_slot() if v.free_cores(p) < need]
    if not short:
        return _generic(v, Reason.CARD_INSUFFICIENT_CORE)
    p = max(short, key=lambda q: (v.free_cores(q), -q))
    free, uuid = max(v.free_cores(p), 0), v.devices[p].id
    each = f"one {v.noun}" if v.req.nums == 1 else f"each of {v.req.nums} {v.noun}s"
    text = f"needs {need}% of the cores of {each}; the most free on {v.node} is {free}% on {uuid}"
    return NearestMiss(Reason.CARD_INSUFFICIENT_CORE.value, text, uuid, need, free, "%")


def _slots(v: _View) -> NearestMiss:
    full = [p for p in v.eligible() if v.usages[p].used >= v.devices[p].count]
    if not full:
        return _generic(v, Reason.CARD_TIME_SLICING_EXHAUSTED)
    p = full[0]
    dev = v.devices[p]
    text = (
        f"{_plural(len(full), v.noun)} on {v.node} already run as many pods as they may share "
        f"({dev.id}: {v.usages[p].used}/{dev.count})"
    )
    return NearestMiss(Reason.CARD_TIME_SLICING_EXHAUSTED.value, text, dev.id, 1, 0, "slots")


def _exclusive(v: _View) -> NearestMiss:
    busy = [p for p in v.with_slot() if v.usages[p].used > 0]
    if not busy:
        return _generic(v, Reason.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT)
    p = min(busy, key=lambda q: (v.usages[q].used, q))
    why = "the mutex GPU policy" if v.mutex else "a whole card (100% of the cores)"
    text = (
        f"needs an idle {v.noun} for {why}; every candidate {v.noun} on {v.node} holds pods, the least busy is "
        f"{v.devices[p].id} with {_plural(v.usages[p].used, 'pod')}"
    )
    return NearestMiss(
        Reason.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT.value, text, v.devices[p].id, 0, v.usages[p].used, "pods"
    )


def _compute(v: _View) -> NearestMiss:
    full = [p for p in v.with_slot() if v.devices[p].devcore and v.usages[p].used_cores >= v.devices[p].devcore]
    if not full:
        return _generic(v, Reason.CARD_COMPUTE_UNITS_EXHAUSTED)
    dev = v.devices[full[0]]
    text = (
        f"asks for no guaranteed cores, which needs a {v.noun} whose cores are not all allotted; "
        f"{_plural(len(full), v.noun)} on {v.node} have all of them allotted ({dev.id}: "
        f"{v.usages[full[0]].used_cores}/{dev.devcore}%)"
    )
    return NearestMiss(Reason.CARD_COMPUTE_UNITS_EXHAUSTED.value, text, dev.id, 1, 0, "%")


def _quota(v: _View, quota: QuotaState | None, namespace: str, config: NvidiaConfig) -> NearestMiss:
    if quota is None or not quota.limited:
        return _generic(v, Reason.RESOURCE_QUOTA_NOT_FIT)
    left = quota_left(quota, config.memory_factor)
    cands = v.with_slot() or v.typed()
    mem_need = v.req.nums * (max(v.memreq(p) for p in cands) if cands else max(v.req.mem_mib, 0))
    cores_need = v.req.nums * v.req.cores_pct
    ns = f"namespace {namespace}" if namespace else "the namespace"
    if left.mem_mib is not None and (left.mem_mib < mem_need or left.cores_pct is None or left.cores_pct >= cores_need):
        text = (
            f"quota: {ns} has {left.mem_mib:,} MiB of {config.resource_memory_name} left; "
            f"this container asks for {mem_need:,} MiB"
        )
        return NearestMiss(Reason.RESOURCE_QUOTA_NOT_FIT.value, text, None, mem_need, left.mem_mib, "MiB")
    assert left.cores_pct is not None
    text = (
        f"quota: {ns} has {left.cores_pct}% of {config.resource_core_name} left; this container asks for {cores_need}%"
    )
    return NearestMiss(Reason.RESOURCE_QUOTA_NOT_FIT.value, text, None, cores_need, left.cores_pct, "%")


def _static(v: _View, reason: Reason) -> NearestMiss:
    typed = [v.devices[p] for p in v.typed()]
    if reason is Reason.CARD_CORDONED:
        ids = [d.id for d in typed if d.id in v.cordoned]
        text = f"{_plural(len(ids), v.noun)} cordoned by hami.io/device-cordon: {', '.join(ids)}"
    elif reason in (Reason.CARD_NOT_HEALTH, Reason.CARD_UNHEALTHY):
        ids = [d.id for d in typed if not d.health]
        text = f"{_plural(len(ids), v.noun)} reported unhealthy by the device plugin: {', '.join(ids)}"
    elif reason is Reason.CARD_TYPE_MISMATCH:
        c = v.constraints
        wants = []
        if c.use_types:
            wants.append(f"a GPU type containing {' or '.join(c.use_types)}")
        if c.nouse_types:
            wants.append(f"no type containing {' or '.join(c.nouse_types)}")
        if c.vgpu_mode is not None:
            wants.append(f"mode {c.vgpu_mode}")
        kinds = sorted({f"{d.type} ({d.mode})" for d in typed})
        text = f"asks for {' and '.join(wants) or 'another GPU type'}; {v.node} has {', '.join(kinds) or 'none'}"
    else:
        c = v.constraints
        use = f"restricted to GPUs {', '.join(sorted(c.use_uuids))} (nvidia.com/use-gpuuuid)"
        nouse = f"excludes GPUs {', '.join(sorted(c.nouse_uuids))} (nvidia.com/nouse-gpuuuid)"
        if c.use_uuids and c.nouse_uuids:
            text = f"{use} and {nouse}; none allowed is on {v.node}"
        elif c.use_uuids:
            text = f"{use}; none is on {v.node}"
        else:
            text = f"{nouse} on {v.node}"
    return NearestMiss(reason.value, text)


def _board(v: _View) -> NearestMiss:
    """A vendor that chooses a container's devices as a set by its board's topology (Kunlunxin) found no set."""
    fits = getattr(v.rules, "device_fits", None)
    free = [
        p
        for p in v.with_slot()
        if fits is None or fits(v.devices[p], v.req, v.usages[p].used, v.usages[p].used_mem_mib)
    ]
    text = (
        f"needs {_plural(v.req.nums, v.noun)} that the board's topology groups (1, 2, 4 or 8 of its {v.noun}s); "
        f"{_plural(len(free), v.noun)} of {v.node} can take this container, in no such group"
    )
    return NearestMiss(Reason.NUMA_NOT_FIT.value, text, None, v.req.nums, len(free), f"{v.noun}s")


def _generic(v: _View, reason: Reason) -> NearestMiss:
    return NearestMiss(reason.value, f"{reason.value} on {v.node}")


def nearest_miss(
    pod: PodRequest,
    constraints: PodConstraints,
    snapshot: NodeSnapshot,
    rejection: NodeRejection,
    *,
    policies: Policies,
    quota: QuotaState | None = None,
    config: NvidiaConfig = DEFAULT_NVIDIA_CONFIG,
    namespace: str = "",
    rules: RuleSet = NVIDIA_ONLY,
) -> NearestMiss:
    """One sentence saying how close ``pod`` came on ``snapshot``'s node, given the ``rejection`` that ``plan``
    returned for that node with the same arguments (see the module docstring)."""
    ctx = pod_context(pod, constraints, policies, quota, config, rules)
    requests = ctx.requests
    ci = rejection.container_index
    ei = rejection.entry_index if rejection.entry_index is not None else ci
    if ci is None or ei is None or not 0 <= ei < len(requests) or requests[ei].empty:
        return NearestMiss(rejection.text, f"{rejection.text} on {snapshot.name}")
    seen = _seen_by(ctx, snapshot, ci)
    vendor = rules.get(requests[ei].type)
    if vendor is None:
        return NearestMiss(rejection.text, f"{rejection.text} on {snapshot.name}")
    v = _View(
        node=snapshot.name,
        devices=seen.inventory.devices,
        usages=seen.usages,
        cordoned=seen.inventory.cordoned,
        req=requests[ei],
        constraints=constraints,
        mutex=ctx.policy.mutex,
        rules=vendor,
    )
    if rejection.plain is Reason.NODE_INSUFFICIENT_DEVICE:
        have = len(v.typed())
        text = f"needs {_plural(v.req.nums, v.noun)} in one container; {v.node} has {have}"
        return NearestMiss(Reason.NODE_INSUFFICIENT_DEVICE.value, text, None, v.req.nums, have, f"{v.noun}s")
    if rejection.plain is not None:
        return NearestMiss(rejection.plain.value, f"{rejection.plain.value} on {v.node}")
    counts = rejection.counts
    partial = counts.get(Reason.ALLOCATED_CARDS_INSUFFICIENT_REQUEST, 0)
    primary = _primary(counts)
    detail = _explain(v, primary, quota, namespace, config) if primary is not None else None
    if partial:
        head = f"needs {_plural(v.req.nums, v.noun)}; {partial} on {v.node} can take this container"
        if Reason.NUMA_NOT_FIT in counts and constraints.numa_bind:
            head += " on one NUMA node"
        text = head if detail is None else f"{head}; {detail.text}"
        device = None if detail is None else detail.device
        unit = f"{v.noun}s"
        return NearestMiss(Reason.ALLOCATED_CARDS_INSUFFICIENT_REQUEST.value, text, device, v.req.nums, partial, unit)
    return detail or NearestMiss(rejection.text, f"{rejection.text} on {v.node}")


def _explain(v: _View, reason: Reason, quota: QuotaState | None, namespace: str, config: NvidiaConfig) -> NearestMiss:
    own = getattr(v.rules, "nearest_miss", None)  # optional: the vendor's own words (Neuron's core masks and runs)
    if own is not None:
        candidates = [(v.devices[p], v.usages[p]) for p in v.with_slot()]
        got: NearestMiss | None = own(reason, v.node, candidates, v.req)
        if got is not None:
            return got
    if reason is Reason.CARD_INSUFFICIENT_MEMORY:
        return _memory(v)
    if reason is Reason.CARD_INSUFFICIENT_CORE:
        return _cores(v)
    if reason is Reason.CARD_TIME_SLICING_EXHAUSTED:
        return _slots(v)
    if reason is Reason.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT:
        return _exclusive(v)
    if reason is Reason.CARD_COMPUTE_UNITS_EXHAUSTED:
        return _compute(v)
    if reason is Reason.RESOURCE_QUOTA_NOT_FIT:
        return _quota(v, quota, namespace, config)
    if reason is Reason.CARD_MIG_TOPOLOGY_INFEASIBLE:
        need = max((v.memreq(p) for p in v.eligible()), default=v.req.mem_mib)
        text = f"no free MIG instance with {need:,} MiB on the MIG GPUs of {v.node}"
        return NearestMiss(reason.value, text, None, need, None, "MiB")
    if reason is Reason.NUMA_NOT_FIT and getattr(v.rules, "set_miss_reason", None) is reason:
        return _board(v)
    if reason is Reason.NUMA_NOT_FIT:
        text = (
            f"needs {_plural(v.req.nums, v.noun)} on one NUMA node (nvidia.com/numa-bind); "
            f"no NUMA node of {v.node} has that many with room"
        )
        return NearestMiss(reason.value, text, None, v.req.nums, None, f"{v.noun}s")
    return _static(v, reason)
