"""The scheduling decision: which node, which devices for every container, or why no node fits.

``plan`` is pure: it reads a pod's requests and constraints, the candidate nodes' snapshots and the policies, and
returns a ``Decision`` or a ``Failure``. It never reserves anything; the caller commits the decision.

Fast path. A node's score depends only on its usage before the pod (hami-wire §6.2), so the candidates can
be ordered first (binpack: busiest first, spread: idlest first, ties by name) and fitted in that order until
one fits: that node is the one the full evaluation would choose. The preferred node is tried before anything
is sorted. Nodes whose summary proves the pod cannot fit are skipped in O(1) (``prefilter.PodNeeds``), nodes
with too few devices passing Fit's order-free checks in O(devices) (``prefilter.may_fit``). Only when nothing
fits are the skipped nodes evaluated, to give every node its reason. ``exhaustive=True`` evaluates every node and
returns the same answer (property-tested). The order itself (``ranking``) is the node policy's.

The exception: a vendor whose node score depends on the devices the pod gets there. With the optional rules hook
``pod_score(snapshot, devices, node_policy, constraints)`` (HAMi's ``ScoreNode`` of Vastai's die mode, of MetaX,
of Kunlunxin's whole XPUs) its pods are fitted on the nodes that could still win, bounded by the rules'
``pod_score_bound``, and ranked by the node's score plus that term (``_plan_scored``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from heapq import heapify, heappop
from operator import attrgetter

from vgpu_scheduler.shared.domain.context import PodContext, pod_context
from vgpu_scheduler.shared.domain.fit import NodeFit, evaluate_node
from vgpu_scheduler.shared.domain.model import (
    DEFAULT_NVIDIA_CONFIG,
    ContainerRequest,
    DeviceCharge,
    DeviceUsage,
    MigAllocation,
    NodePolicy,
    NvidiaConfig,
    PodConstraints,
    PodDevices,
    PodRequest,
    with_tags,
)
from vgpu_scheduler.shared.domain.prefilter import PodNeeds, may_fit
from vgpu_scheduler.shared.domain.quota import QuotaState
from vgpu_scheduler.shared.domain.ranking import (
    better,
    keep_all,
    passed_over_in_order,
    pod_score,
    pod_score_bounds,
    pod_scored,
    preferred,
    walk,
)
from vgpu_scheduler.shared.domain.reasons import NodeRejection
from vgpu_scheduler.shared.domain.scoring import Policies
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.domain.vendor import NVIDIA_ONLY, RuleSet

_SCORE = attrgetter("score")


@dataclass(frozen=True, slots=True)
class Decision:
    """The chosen node, the devices of every container (init first, empty where none), MIG allocations,
    the collapsed per-device charges the pod adds, and the node's score."""

    node: str
    devices: PodDevices
    mig: tuple[MigAllocation, ...]
    charges: tuple[DeviceCharge, ...]
    score: float
    passed_over: int = 0
    """Candidates the node policy prefers over ``node`` (by score, then name): every one of them does not fit."""


@dataclass(frozen=True, slots=True)
class Failure:
    """No node fits. ``reasons`` maps every candidate node to its ``FailedNodes`` string; ``rejections`` keeps the
    same as data (reason counts, devices considered, the container that failed)."""

    reasons: Mapping[str, str]
    rejections: Mapping[str, NodeRejection] = field(default_factory=dict)


def _decision(snap: NodeSnapshot, fit: NodeFit, passed_over: int = 0) -> Decision:
    return Decision(
        node=snap.name,
        devices=fit.devices,
        mig=fit.mig,
        charges=fit.charges,
        score=snap.summary.score,
        passed_over=passed_over,
    )


def _sets(ctx: PodContext, req: ContainerRequest) -> bool:
    """Whether the request's vendor chooses devices as a set (the choice may depend on device identities)."""
    rules = ctx.rules.get(req.type)
    return not req.empty and rules is not None and rules.selects_sets


def _empty_decision(snap: NodeSnapshot, pod: PodRequest) -> Decision:
    return Decision(
        node=snap.name,
        devices=tuple(() for _ in range(pod.container_count)),
        mig=(),
        charges=(),
        score=snap.summary.score,
    )


class _Rejections(Mapping[str, NodeRejection]):
    """``name → NodeRejection`` where nodes of one shape share one verdict (named after one of them): each node's
    own copy is made on first access, so a failure over thousands of alike nodes builds none it is not asked for."""

    __slots__ = ("_made", "verdicts")

    def __init__(self, verdicts: dict[str, NodeRejection]) -> None:
        self.verdicts = verdicts
        self._made: dict[str, NodeRejection] = {}

    def __getitem__(self, name: str) -> NodeRejection:
        made = self._made.get(name)
        if made is None:
            v = self.verdicts[name]
            made = (
                v
                if v.node == name
                else NodeRejection(name, v.counts, v.total, v.plain, v.container_index, search_capped=v.search_capped)
            )
            self._made[name] = made
        return made

    def __iter__(self) -> Iterator[str]:
        return iter(self.verdicts)

    def __len__(self) -> int:
        return len(self.verdicts)

    def __repr__(self) -> str:
        return repr(dict(self))


def _verdicts(rejections: Mapping[str, NodeRejection]) -> Mapping[str, NodeRejection]:
    """The shared verdicts behind a failure's ``rejections`` (for merging failures without copying each)."""
    return rejections.verdicts if isinstance(rejections, _Rejections) else rejections


def _failure(nodes: Sequence[NodeSnapshot], rejections: Mapping[int, NodeRejection]) -> Failure:
    by_name = {nodes[i].name: rejections[i] for i in sorted(rejections)}
    texts: dict[int, str] = {}  # nodes of one shape share their verdict: each distinct one is written once
    reasons: dict[str, str] = {}
    for name, r in by_name.items():
        text = texts.get(id(r))
        if text is None:
            text = texts[id(r)] = r.text
        reasons[name] = text
    return Failure(reasons=reasons, rejections=_Rejections(by_name))


def plan(
    pod: PodRequest,
    constraints: PodConstraints,
    nodes: Sequence[NodeSnapshot],
    *,
    policies: Policies,
    quota: QuotaState | None = None,
    config: NvidiaConfig = DEFAULT_NVIDIA_CONFIG,
    exhaustive: bool = False,
    busy: AbstractSet[str] = frozenset(),
    none_fit: bool = False,
    rules: RuleSet = NVIDIA_ONLY,
) -> Decision | Failure:
    """Choose the node and the devices of every container of ``pod``, or say why no candidate fits.

    ``constraints`` are the pod's annotations (policy overrides, weights, type/UUID selectors, numa-bind,
    vgpu-mode); ``quota`` the pod namespace's limits and usage (``None``: no quota). A pod that requests no
    device gets the preferred node and empty device lists (callers normally short-circuit such pods).
    ``exhaustive`` evaluates every node instead of stopping at the first that fits; the answer is the same.

    ``busy`` names nodes with a bind in flight. HAMi's device plugin finds the pod it allocates through the node
    lock, so a node takes one bind at a time; a busy node is chosen only when no other candidate fits (the node
    policy orders each group). The reasons of a failure do not depend on it.

    ``none_fit``: the caller walked every candidate with :func:`plan_ranked` and none fits, so only the reasons
    remain to be found (the answer is the same; a node that fits after all is still found).
    """
    if busy and not busy.isdisjoint(s.name for s in nodes):
        tiers = ([s for s in nodes if s.name not in busy], [s for s in nodes if s.name in busy])
        return plan_tiers(
            pod,
            constraints,
            tiers,
            policies=policies,
            quota=quota,
            config=config,
            exhaustive=exhaustive,
            none_fit=none_fit,
            rules=rules,
        )
    ctx = pod_context(pod, constraints, policies, quota, config, rules)
    policy = ctx.policy
    if not nodes:
        return Failure(reasons={}, rejections={})
    binpack = policy.node is NodePolicy.BINPACK
    scores = list(map(_SCORE, nodes))
    if not pod.any:
        return _empty_decision(nodes[preferred(nodes, scores, binpack)], pod)
    if pod_scored(ctx):
        return _plan_scored(ctx, nodes)
    if exhaustive:
        return _plan_exhaustive(ctx, nodes)

    rejections: dict[int, NodeRejection] = {}
    if not none_fit:
        viable = PodNeeds.of(ctx.requests, policy.mutex).predicate()
        # 1. the preferred node overall: most pods fit there, for one pass over the scores
        first = preferred(nodes, scores, binpack)
        if viable(nodes[first].summary) and may_fit(ctx, nodes[first]):
            result = evaluate_node(ctx, nodes[first])
            if isinstance(result, NodeFit):
                return _decision(nodes[first], result)
            rejections[first] = result
        # 2. the others in order of preference, skipping in O(1) those whose summary proves they cannot fit, and
        # in O(devices) those with too few devices that pass Fit's order-free checks
        order = sorted(range(len(nodes)), key=scores.__getitem__, reverse=binpack)
        for idx in walk(nodes, scores, order, viable):
            if idx in rejections or idx == first or not may_fit(ctx, nodes[idx]):
                continue
            result = evaluate_node(ctx, nodes[idx])
            if isinstance(result, NodeFit):
                return _decision(nodes[idx], result, passed_over_in_order(nodes, scores, order, idx))
            rejections[idx] = result
    # 3. nothing fits: give the skipped nodes their reasons too. Nodes of one shape (devices and usage alike but
    # for names and UUIDs) get one evaluation when UUIDs cannot matter (no UUID selector, no topology policy).
    share = not (
        constraints.use_uuids
        or constraints.nouse_uuids
        or policy.topology
        or any(sel.use_uuids or sel.nouse_uuids for sel in constraints.vendor_selectors.values())
        or any(_sets(ctx, r) for r in ctx.requests)
    )
    verdicts: dict[str, NodeRejection] = {}
    for idx, snap in enumerate(nodes):
        if idx in rejections:
            continue
        same = verdicts.get(snap.shape) if share else None
        if same is not None:
            rejections[idx] = same  # named after the first node of the shape: _Rejections gives each its own
            continue
        result = evaluate_node(ctx, snap)
        if isinstance(result, NodeFit):
            return _first_fit_in_order(ctx, nodes, scores, binpack, rejections)
        rejections[idx] = result
        if share:
            verdicts[snap.shape] = result
    return _failure(nodes, rejections)


def _first_fit_in_order(
    ctx: PodContext,
    nodes: Sequence[NodeSnapshot],
    scores: list[float],
    binpack: bool,
    rejections: dict[int, NodeRejection],
) -> Decision | Failure:
    """The walk of step 3 in order of preference, for when a node skipped by its summary fits after all (the
    summaries are sound, so this is a safety net): the first node that fits is the right answer."""
    order = sorted(range(len(nodes)), key=scores.__getitem__, reverse=binpack)
    for idx in walk(nodes, scores, order, keep_all):
        if idx in rejections:
            continue
        result = evaluate_node(ctx, nodes[idx])
        if isinstance(result, NodeFit):
            return _decision(nodes[idx], result, passed_over_in_order(nodes, scores, order, idx))
        rejections[idx] = result
    return _failure(nodes, rejections)


def rank_key(policy: NodePolicy) -> Callable[[NodeSnapshot], tuple[float, str]]:
    """The order ``plan`` prefers nodes in under node ``policy``: binpack busiest first, spread idlest first, equal
    scores by name. A caller that keeps its nodes sorted by this key can use :func:`plan_ranked`."""
    if policy is NodePolicy.BINPACK:
        return lambda snap: (-snap.score, snap.name)
    return lambda snap: (snap.score, snap.name)


def plan_ranked(
    pod: PodRequest,
    constraints: PodConstraints,
    ranked: Iterable[NodeSnapshot],
    *,
    policies: Policies,
    quota: QuotaState | None = None,
    config: NvidiaConfig = DEFAULT_NVIDIA_CONFIG,
    rules: RuleSet = NVIDIA_ONLY,
) -> Decision | None:
    """``plan``'s fast path over candidates given in order of preference (sorted by :func:`rank_key` of the pod's
    effective node policy, each node once): the decision ``plan`` takes, found by walking only as far as the first
    node that fits; None when none fits (``plan`` then says why, node by node). ``ranked`` is consumed lazily, so a
    caller that keeps its nodes sorted pays for the nodes walked, not for all of them."""
    ctx = pod_context(pod, constraints, policies, quota, config, rules)
    policy = ctx.policy
    if not pod.any:
        first = next(iter(ranked), None)
        return None if first is None else _empty_decision(first, pod)
    if pod_scored(ctx):  # the node's score depends on the devices the pod gets: the bounded walk
        scored = _plan_scored(ctx, list(ranked))
        return scored if isinstance(scored, Decision) else None
    viable = PodNeeds.of(ctx.requests, policy.mutex).predicate()
    for position, snap in enumerate(ranked):
        if viable(snap.summary) and may_fit(ctx, snap):
            result = evaluate_node(ctx, snap)
            if isinstance(result, NodeFit):
                return _decision(snap, result, position)
    return None


def plan_tiers(
    pod: PodRequest,
    constraints: PodConstraints,
    tiers: Sequence[Sequence[NodeSnapshot]],
    *,
    policies: Policies,
    quota: QuotaState | None = None,
    config: NvidiaConfig = DEFAULT_NVIDIA_CONFIG,
    exhaustive: bool = False,
    none_fit: bool = False,
    rules: RuleSet = NVIDIA_ONLY,
) -> Decision | Failure:
    """``plan`` over each tier of candidates in turn: the first tier where a node fits decides (the node policy
    orders each tier); when none fits, the failure holds every candidate's reason. ``plan(busy=…)`` is the tiers
    (nodes without a bind in flight, then the others); a caller that already has them split calls this."""
    reasons: dict[str, str] = {}
    verdicts: dict[str, NodeRejection] = {}
    passed = 0
    for tier in tiers:
        result = plan(
            pod,
            constraints,
            tier,
            policies=policies,
            quota=quota,
            config=config,
            exhaustive=exhaustive,
            none_fit=none_fit,
            rules=rules,
        )
        if isinstance(result, Decision):
            return replace(result, passed_over=result.passed_over + passed) if passed else result
        reasons.update(result.reasons)
        verdicts.update(_verdicts(result.rejections))
        passed += len(tier)
    return Failure(reasons=reasons, rejections=_Rejections(verdicts))


def _plan_exhaustive(ctx: PodContext, nodes: Sequence[NodeSnapshot]) -> Decision | Failure:
    """Evaluate every node, then take the best that fits by the node policy (the reference for the fast path)."""
    binpack = ctx.policy.node is NodePolicy.BINPACK
    rejections: dict[int, NodeRejection] = {}
    best: tuple[NodeSnapshot, NodeFit] | None = None
    for idx, snap in enumerate(nodes):
        result = evaluate_node(ctx, snap)
        if isinstance(result, NodeRejection):
            rejections[idx] = result
        elif best is None or better(snap, best[0], binpack):
            best = (snap, result)
    if best is None:
        return _failure(nodes, rejections)
    winner, fit = best
    return _decision(winner, fit, sum(1 for snap in nodes if better(snap, winner, binpack)))


def _plan_scored(ctx: PodContext, nodes: Sequence[NodeSnapshot]) -> Decision | Failure:
    """Take the best node that fits by its score plus the vendors' ``pod_score`` (HAMi adds ``ScoreNode`` to the
    node's score before the node policy orders them: binpack the highest, spread the lowest; equal totals by name).
    The decision's score is that total (HAMi's ``OverrideScore``).

    Each node's best possible rank is its own score moved ahead by the most its terms can move it (its bound, from
    :func:`pod_score_bounds`). The nodes are fitted in the order of that best possible rank (then name); once a
    node's cannot beat the best total found, neither can any node after it, and the walk stops. Nodes whose
    summary or the order-free checks prove hopeless are passed over (the usual walk's tests) and evaluated only
    when no other node fits, to give every node its reason. With bounds of 0 (terms that are all 0 here) this is
    the usual walk: it stops at the first node that fits, after the nodes of the same score named before it."""
    binpack = ctx.policy.node is NodePolicy.BINPACK
    sign = -1.0 if binpack else 1.0  # rank keys: smaller is better
    bounds = pod_score_bounds(ctx, nodes)
    scores = list(map(_SCORE, nodes))
    reach = [sign * score - b for score, b in zip(scores, bounds, strict=True)]
    # the walk takes the nodes in order of their best rank, popped from a heap: it costs the nodes walked, not a sort
    heap = [(r, snap.name, i) for i, (r, snap) in enumerate(zip(reach, nodes, strict=True))]
    heapify(heap)
    order = (heappop(heap)[2] for _ in range(len(heap)))
    viable = PodNeeds.of(ctx.requests, ctx.policy.mutex).predicate()
    rejections: dict[int, NodeRejection] = {}
    later: list[int] = []
    fitted: set[int] = set()
    best: tuple[tuple[float, str], int, NodeFit] | None = None
    for rounds in (order, later):
        for idx in rounds if rounds is order else list(rounds):
            snap = nodes[idx]
            if best is not None and (reach[idx], snap.name) > best[0]:
                break  # this node at its best cannot beat the best found, nor can the nodes after it
            if rounds is order and not (viable(snap.summary) and may_fit(ctx, snap)):
                later.append(idx)
                continue
            result = evaluate_node(ctx, snap)
            if isinstance(result, NodeRejection):
                rejections[idx] = result
                continue
            fitted.add(idx)
            rank = (sign * (snap.summary.score + pod_score(ctx, snap, result)), snap.name)
            if best is None or rank < best[0]:
                best = (rank, idx, result)
        if best is not None:
            break
    if best is None:
        return _failure(nodes, rejections)
    (key, _), idx, fit = best
    winner = nodes[idx]
    # the nodes their own score prefers that do not fit: those walked and refused, and those the walk stopped
    # before that the summary or the order-free checks prove hopeless
    hopeless = rejections.keys() | set(later)
    ws, wn = scores[idx], winner.name
    preferred = [i for i, s in enumerate(scores) if (s > ws if binpack else s < ws) or (s == ws and nodes[i].name < wn)]
    passed = sum(
        1
        for i in preferred
        if i in hopeless or (i not in fitted and not (viable(nodes[i].summary) and may_fit(ctx, nodes[i])))
    )
    return replace(_decision(winner, fit, passed), score=sign * key)


def apply_decision(snapshot: NodeSnapshot, decision: Decision) -> NodeSnapshot:
    """The node's snapshot after the decided pod is placed: each charge added to its device's usage (§5.1 step 5.2).

    ``used += max(slots, 1)``, memory and cores add up, MIG placements and legacy slots join the device's.
    """
    if decision.node != snapshot.name:
        raise ValueError(f"decision for node {decision.node!r} applied to snapshot of {snapshot.name!r}")
    usage = dict(snapshot.usage)
    for charge in decision.charges:
        if snapshot.inventory.device(charge.uuid) is None:
            raise ValueError(f"decision charges device {charge.uuid!r} unknown on node {snapshot.name!r}")
        u = snapshot.device_usage(charge.uuid)
        geometry = u.legacy_geometry
        slots = set(u.legacy_slots)
        for g, s in charge.legacy_mig:
            geometry = g
            slots.add(s)
        usage[charge.uuid] = DeviceUsage(
            used=u.used + max(charge.slots, 1),
            used_mem_mib=u.used_mem_mib + charge.mem_mib,
            used_cores=u.used_cores + charge.cores_pct,
            mig_in_use=u.mig_in_use + charge.mig_placements,
            legacy_geometry=geometry,
            legacy_slots=frozenset(slots),
            tags=with_tags(u.tags, charge, 1),
        )
    return NodeSnapshot(snapshot.inventory, usage)
