"""Preemption that understands device shares: which lower-priority pods to evict so that a pod fits (pure).

kube-scheduler's own preemption cannot see GPU shares (the device resources are ``ignoredByScheduler``): its dry
run removes the lower-priority pods, finds that its filters pass without them and with them, and proposes no
victim. This module chooses them by our own Fit rules instead (every vendor, memory, cores, slots, exclusivity,
selectors, NUMA, MIG, topology), by running the ordinary :func:`plan` on the node's snapshot with the candidate
victims' charges removed.

* :func:`release_charges` is :func:`plan.apply_decision` backwards: a node's snapshot without some pods' charges.
* :func:`select_victims` picks, on one node, a minimal set of the node's lower-priority pods whose charges once
  freed let the pod fit, as kube-scheduler's ``SelectVictimsOnNode`` does for its own resources: every
  lower-priority pod removed, then each given back (reprieved) while the pod still fits, pods whose eviction would
  violate a PodDisruptionBudget first, each group most important first (higher priority, then started earlier).
  So the victims are the least important pods that must go, and no victim can be given back on its own. A pod
  of equal or higher priority is never a victim. ``required`` victims (those
  kube-scheduler already chose for its own resources) are removed first and always stay in the set.
* :func:`pick_node` chooses among the nodes' victim sets by kube-scheduler's ``pickOneNodeForPreemption`` rules.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from vgpu_scheduler.shared.domain.model import (
    DEFAULT_NVIDIA_CONFIG,
    DeviceCharge,
    DeviceUsage,
    NvidiaConfig,
    PodConstraints,
    PodRequest,
    with_tags,
)
from vgpu_scheduler.shared.domain.plan import Decision, plan
from vgpu_scheduler.shared.domain.scoring import Policies
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.domain.vendor import NVIDIA_ONLY, RuleSet

_PRIORITY_SHIFT = 2**31
"""Added to every priority before summing (kube-scheduler's ``MaxInt32 + 1``): a sum of negative priorities
must not beat fewer pods of the same priority."""


@dataclass(frozen=True, slots=True)
class Resident:
    """A pod on the node that holds devices: what preemption needs of it."""

    uid: str
    namespace: str
    name: str
    priority: int
    start_time: float
    """When it started (``status.startTime``, else its creation), seconds; later = newer = evicted first."""
    charges: tuple[DeviceCharge, ...]
    pdb_violating: bool = False
    """Evicting it would take a PodDisruptionBudget below its minimum (see :func:`pdb_violations`)."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class VictimSet:
    """Evict ``victims`` (most important first, as kube-scheduler lists them) from ``node`` and the pod fits:
    ``decision`` is where, on the snapshot without them."""

    node: str
    victims: tuple[Resident, ...]
    decision: Decision
    pdb_violations: int


@dataclass(frozen=True, slots=True)
class NoVictims:
    """No set of lower-priority pods on ``node`` makes room; ``reason`` says why, for ``explain`` and logs."""

    node: str
    reason: str


NO_LOWER_PRIORITY = "no lower-priority pod holds devices on this node"


def _more_important(a: Resident) -> tuple[int, float, str]:
    """Sort key, most important first: higher priority, then started earlier (kube-scheduler's
    ``MoreImportantPod``), then by UID so that the order is total."""
    return (-a.priority, a.start_time, a.uid)


def eviction_order(residents: Iterable[Resident]) -> list[Resident]:
    """kube-scheduler's eviction order: lowest priority first, then the most recently started."""
    return sorted(residents, key=_more_important, reverse=True)


def release_charges(snapshot: NodeSnapshot, charges: Iterable[DeviceCharge]) -> NodeSnapshot:
    """The node's snapshot after pods holding ``charges`` are gone (the inverse of ``apply_decision``).

    A charge on a device the inventory does not know is ignored (the device left the node: nothing to free).
    Counters never go below zero; a legacy MIG geometry is dropped with its last slot."""
    usage: dict[str, DeviceUsage] = dict(snapshot.usage)
    for charge in charges:
        if snapshot.inventory.device(charge.uuid) is None:
            continue
        u = usage.get(charge.uuid, snapshot.device_usage(charge.uuid))
        placements = list(u.mig_in_use)
        for p in charge.mig_placements:
            if p in placements:
                placements.remove(p)
        slots = set(u.legacy_slots)
        for _g, s in charge.legacy_mig:
            slots.discard(s)
        usage[charge.uuid] = DeviceUsage(
            used=max(0, u.used - max(charge.slots, 1)),
            used_mem_mib=max(0, u.used_mem_mib - charge.mem_mib),
            used_cores=max(0, u.used_cores - charge.cores_pct),
            mig_in_use=tuple(placements),
            legacy_geometry=u.legacy_geometry if slots else None,
            legacy_slots=frozenset(slots),
            tags=with_tags(u.tags, charge, -1),
        )
    return NodeSnapshot(snapshot.inventory, usage)


@dataclass(frozen=True, slots=True)
class _Fitter:
    pod: PodRequest
    constraints: PodConstraints
    policies: Policies
    config: NvidiaConfig
    rules: RuleSet

    def plan(self, snapshot: NodeSnapshot) -> Decision | str:
        result = plan(
            self.pod, self.constraints, [snapshot], policies=self.policies, config=self.config, rules=self.rules
        )
        if isinstance(result, Decision):
            return result
        return result.reasons.get(snapshot.name, "does not fit")


def _charges(pods: Iterable[Resident]) -> list[DeviceCharge]:
    return [c for p in pods for c in p.charges]


def select_victims(
    pod: PodRequest,
    constraints: PodConstraints,
    snapshot: NodeSnapshot,
    residents: Sequence[Resident],
    *,
    priority: int,
    policies: Policies,
    config: NvidiaConfig = DEFAULT_NVIDIA_CONFIG,
    rules: RuleSet = NVIDIA_ONLY,
    required: Collection[str] = (),
) -> VictimSet | NoVictims:
    """The victims to evict from ``snapshot``'s node so that ``pod`` (of ``priority``) fits (module docstring).

    ``residents`` are the pods holding devices on the node (others cannot free anything the pod needs);
    ``required`` names residents that are victims whatever happens (kube-scheduler's own choice). A resident of
    ``priority`` or above is never chosen, nor required. A set is returned only if it is non-empty: when the pod
    fits without evicting anyone, preemption is not the answer (:class:`NoVictims`)."""
    fitter = _Fitter(pod, constraints, policies, config, rules)
    forced = [r for r in residents if r.uid in required and r.priority < priority]
    base = release_charges(snapshot, _charges(forced))
    eligible = [r for r in residents if r.priority < priority and r.uid not in required]
    if not forced:
        alone = fitter.plan(base)
        if isinstance(alone, Decision):
            return NoVictims(snapshot.name, "the pod fits without evicting anyone")
    if not eligible and not forced:
        return NoVictims(snapshot.name, NO_LOWER_PRIORITY)
    every = fitter.plan(release_charges(base, _charges(eligible)))
    if not isinstance(every, Decision):
        return NoVictims(snapshot.name, f"does not fit even with every lower-priority pod evicted: {every}")
    # kube-scheduler's reprieve: with every eligible pod gone the pod fits; give each back, PDB-violating pods
    # first, each group most important first, and keep it given back while the pod still fits
    result: Decision = every
    evicted = list(eligible)
    for resident in sorted(eligible, key=lambda r: (not r.pdb_violating, *_more_important(r))):
        trial = [r for r in evicted if r.uid != resident.uid]
        attempt = fitter.plan(release_charges(base, _charges(trial)))
        if isinstance(attempt, Decision):
            evicted, result = trial, attempt
    victims = tuple(sorted([*forced, *evicted], key=_more_important))
    if not victims:
        return NoVictims(snapshot.name, "the pod fits without evicting anyone")
    return VictimSet(
        node=snapshot.name,
        victims=victims,
        decision=result,
        pdb_violations=sum(1 for v in victims if v.pdb_violating),
    )


def pick_node(sets: Iterable[VictimSet]) -> VictimSet | None:
    """kube-scheduler's ``pickOneNodeForPreemption``: fewest PDB violations, then the lowest highest-priority
    victim, then the smallest sum of priorities, then the fewest victims, then the latest start among the
    highest-priority victims; equal on all of that, the node named first."""

    def key(s: VictimSet) -> tuple[int, int, int, int, float, str]:
        top = max(v.priority for v in s.victims)
        earliest_top = min(v.start_time for v in s.victims if v.priority == top)
        return (
            s.pdb_violations,
            top,
            sum(v.priority + _PRIORITY_SHIFT for v in s.victims),
            len(s.victims),
            -earliest_top,
            s.node,
        )

    return min(sets, key=key, default=None)


@dataclass(frozen=True, slots=True)
class Budget:
    """A PodDisruptionBudget as preemption reads it: its namespace, its selector and how many disruptions it
    still allows (``status.disruptionsAllowed``)."""

    namespace: str
    match_labels: Mapping[str, str]
    match_expressions: tuple[tuple[str, str, tuple[str, ...]], ...]
    """``(key, operator, values)``: ``In``, ``NotIn``, ``Exists``, ``DoesNotExist``."""
    disruptions_allowed: int


def selects(budget: Budget, labels: Mapping[str, str]) -> bool:
    """Whether ``budget``'s selector selects a pod of these ``labels`` (the namespace is the caller's to compare)."""
    if not budget.match_labels and not budget.match_expressions:
        return False  # an empty selector selects nothing in policy/v1's preemption check
    for k, v in budget.match_labels.items():
        if labels.get(k) != v:
            return False
    for k, op, values in budget.match_expressions:
        present = k in labels
        if op == "In" and not (present and labels[k] in values):
            return False
        if op == "NotIn" and present and labels[k] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
    return True


def pdb_violations(pods: Sequence[tuple[str, str, Mapping[str, str]]], budgets: Sequence[Budget]) -> frozenset[str]:
    """Which of ``pods`` (``(uid, namespace, labels)``, in eviction order) would violate a budget if evicted in
    that order: kube-scheduler's ``filterPodsWithPDBViolation``, each budget's allowance spent pod by pod."""
    allowed = [b.disruptions_allowed for b in budgets]
    violating: set[str] = set()
    for uid, namespace, labels in pods:
        hit = False
        for i, b in enumerate(budgets):
            if b.namespace != namespace or not selects(b, labels):
                continue
            allowed[i] -= 1
            if allowed[i] < 0:
                hit = True
        if hit:
            violating.add(uid)
    return frozenset(violating)
