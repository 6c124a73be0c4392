"""The scheduling decision: which node, which devices for every container, or why no node fits.

``plan`` is pure: it reads a pod's requests and constraints, the candidate nodes' snapshots and the policies, and
returns a ``Decision`` or a ``Failure``. It never reserves anything; the caller commits the decision.

Fast path. A node's score depends only on its usage before the pod (hami-compat §6.2), so the candidates can
be ordered first (binpack: busiest first, spread: idlest first, ties by name) and fitted in that order until
one fits: that node is the one the full evaluation would choose. Nodes whose summary proves the pod cannot fit
are skipped in O(1). Only when nothing fits are the skipped nodes evaluated, to give every node its reason.
``exhaustive=True`` evaluates every node and must, and does, return the same answer.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from shared.domain.fit import NodeFit, PodContext, evaluate_node, normalize_request
from shared.domain.model import (
    DEFAULT_NVIDIA_CONFIG,
    MEM_PCT_UNSET,
    DeviceCharge,
    DeviceUsage,
    MigAllocation,
    NodePolicy,
    NvidiaConfig,
    PodConstraints,
    PodDevices,
    PodRequest,
    QuotaState,
)
from shared.domain.reasons import NodeRejection
from shared.domain.scoring import Policies, device_sort_key, effective_policy
from shared.domain.snapshot import NodeSnapshot, NodeSummary


@dataclass(frozen=True, slots=True)
class Decision:
    """The chosen node, the devices of every container (init first, empty where none), MIG allocations,
    the collapsed per-device charges the pod adds, and the node's score."""

    node: str
    devices: PodDevices
    mig: tuple[MigAllocation, ...]
    charges: tuple[DeviceCharge, ...]
    score: float


@dataclass(frozen=True, slots=True)
class Failure:
    """No node fits. ``reasons`` maps every candidate node to its ``FailedNodes`` string; ``rejections`` keeps the
    same as data (reason counts, devices considered, the container that failed)."""

    reasons: Mapping[str, str]
    rejections: Mapping[str, NodeRejection] = field(default_factory=dict)


_Need = tuple[int, int, int, int]
"""One container's needs for the hopeless test: (nums, mem MiB or 0, mem % or MEM_PCT_UNSET, cores %)."""


def _needs(ctx: PodContext) -> tuple[_Need, ...]:
    return tuple((r.nums, r.mem_mib, r.mem_pct, r.cores_pct) for r in ctx.requests if not r.empty)


def hopeless(summary: NodeSummary, needs: Sequence[_Need], mutex: bool) -> bool:
    """True when the summary proves some container cannot fit on the node (so the node cannot fit the pod).

    Every test is a necessary condition of NVIDIA ``Fit`` on the node before the pod: each device a container
    takes must be usable and have the room on its own. Later app containers see more usage, never less, so a
    container that cannot fit before the pod cannot fit at all. MIG nodes are never skipped (one GPU may give
    a container several instances).
    """
    if summary.has_mig:
        return False
    for nums, mem_mib, mem_pct, cores in needs:
        if nums > summary.usable_count or cores > summary.max_free_cores:
            return True
        if mem_mib > 0:
            if mem_mib > summary.max_free_mem_mib:
                return True
        elif mem_pct != MEM_PCT_UNSET and mem_pct > summary.max_fit_pct:
            return True
        if cores == 100 and nums > summary.exclusive_ok_count:
            return True
        if cores == 0 and nums > summary.zero_core_ok_count:
            return True
        if mutex and nums > summary.idle_count:
            return True
    return False


def node_order(nodes: Sequence[NodeSnapshot], policy: NodePolicy) -> Iterator[int]:
    """Positions of ``nodes`` in order of preference, produced lazily: binpack highest score first, spread lowest
    first, equal scores by node name (decision 8)."""
    n = len(nodes)
    scores = [s.summary.score for s in nodes]
    order = sorted(range(n), key=scores.__getitem__, reverse=policy is NodePolicy.BINPACK)
    i = 0
    while i < n:
        s = scores[order[i]]
        j = i + 1
        while j < n and scores[order[j]] == s:
            j += 1
        if j == i + 1:
            yield order[i]
        else:
            yield from sorted(order[i:j], key=lambda k: nodes[k].inventory.node)
        i = j


def _decision(snap: NodeSnapshot, fit: NodeFit) -> Decision:
    return Decision(node=snap.name, devices=fit.devices, mig=fit.mig, charges=fit.charges, score=snap.summary.score)


def _empty_decision(snap: NodeSnapshot, pod: PodRequest) -> Decision:
    return Decision(
        node=snap.name, devices=tuple(() for _ in pod.containers), mig=(), charges=(), score=snap.summary.score
    )


def _failure(nodes: Sequence[NodeSnapshot], rejections: Mapping[int, NodeRejection]) -> Failure:
    by_name = {nodes[i].name: rejections[i] for i in sorted(rejections)}
    return Failure(reasons={name: r.text for name, r in by_name.items()}, rejections=by_name)


def plan(
    pod: PodRequest,
    constraints: PodConstraints,
    nodes: Sequence[NodeSnapshot],
    *,
    policies: Policies,
    quota: QuotaState | None = None,
    config: NvidiaConfig = DEFAULT_NVIDIA_CONFIG,
    exhaustive: bool = False,
) -> Decision | Failure:
    """Choose the node and the devices of every container of ``pod``, or say why no candidate fits.

    ``constraints`` are the pod's annotations (policy overrides, weights, type/UUID selectors, numa-bind,
    vgpu-mode); ``quota`` the pod namespace's limits and usage (``None``: no quota). A pod that requests no
    device gets the preferred node and empty device lists (callers normally short-circuit such pods).
    ``exhaustive`` evaluates every node instead of stopping at the first that fits; the answer is the same.
    """
    policy = effective_policy(policies, constraints)
    ctx = PodContext(
        pod=pod,
        requests=tuple(normalize_request(r, config) for r in pod.containers),
        constraints=constraints,
        policy=policy,
        key=device_sort_key(policy),
        config=config,
        quota=quota,
    )
    if not nodes:
        return Failure(reasons={}, rejections={})
    if not pod.any:
        return _empty_decision(nodes[next(node_order(nodes, policy.node))], pod)
    if exhaustive:
        return _plan_exhaustive(ctx, nodes)

    needs = _needs(ctx)
    mutex = policy.mutex
    rejections: dict[int, NodeRejection] = {}
    skipped: list[int] = []
    for idx in node_order(nodes, policy.node):
        snap = nodes[idx]
        if hopeless(snap.summary, needs, mutex):
            skipped.append(idx)
            continue
        result = evaluate_node(ctx, snap)
        if isinstance(result, NodeFit):
            return _decision(snap, result)
        rejections[idx] = result
    for idx in skipped:  # in preference order: were the hopeless test ever unsound, the first fit is still right
        result = evaluate_node(ctx, nodes[idx])
        if isinstance(result, NodeFit):
            return _decision(nodes[idx], result)
        rejections[idx] = result
    return _failure(nodes, rejections)


def _plan_exhaustive(ctx: PodContext, nodes: Sequence[NodeSnapshot]) -> Decision | Failure:
    """Evaluate every node, then take the best that fits by the node policy (the reference for the fast path)."""
    binpack = ctx.policy.node is NodePolicy.BINPACK
    best: tuple[NodeSnapshot, NodeFit] | None = None
    rejections: dict[int, NodeRejection] = {}
    for idx, snap in enumerate(nodes):
        result = evaluate_node(ctx, snap)
        if isinstance(result, NodeRejection):
            rejections[idx] = result
            continue
        if best is None or _better(snap, best[0], binpack):
            best = (snap, result)
    if best is not None:
        return _decision(*best)
    return _failure(nodes, rejections)


def _better(a: NodeSnapshot, b: NodeSnapshot, binpack: bool) -> bool:
    sa, sb = a.summary.score, b.summary.score
    if sa != sb:
        return sa > sb if binpack else sa < sb
    return a.name < b.name


def apply_decision(snapshot: NodeSnapshot, decision: Decision) -> NodeSnapshot:
    """The node's snapshot after the decided pod is placed: each charge added to its device's usage (§5.1 5.2).

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
        )
    return NodeSnapshot(snapshot.inventory, usage)
