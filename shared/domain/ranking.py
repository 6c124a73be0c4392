"""The order ``plan`` tries nodes in, and the score terms that can change it.

The node policy prefers nodes by their score before the pod (binpack: highest first, spread: lowest first),
equal scores by name: ``preferred`` finds the first, ``walk`` yields the rest lazily in that order (passing over
the nodes a summary test rejects), ``passed_over_in_order`` counts the nodes ranked before the one chosen, and
``better`` compares two nodes the same way. A vendor whose node score depends on the devices the pod gets there
(the optional rules hook ``pod_score``) adds ``pod_score`` to the node's score, bounded beforehand by
``pod_score_bounds``; ``pod_scored`` says whether a pod has such a vendor.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from itertools import compress
from operator import attrgetter

from vgpu_scheduler.shared.domain.context import PodContext
from vgpu_scheduler.shared.domain.fit import NodeFit
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot, NodeSummary

_SUMMARY = attrgetter("summary")


def keep_all(summary: NodeSummary) -> bool:
    del summary
    return True


def preferred(nodes: Sequence[NodeSnapshot], scores: list[float], binpack: bool) -> int:
    """Position of the node the policy prefers most: highest (binpack) or lowest (spread) score, then first name."""
    best = max(scores) if binpack else min(scores)
    if scores.count(best) == 1:
        return scores.index(best)
    ties = [i for i, x in enumerate(scores) if x == best]
    names = [nodes[i].name for i in ties]
    return ties[names.index(min(names))]


def walk(
    nodes: Sequence[NodeSnapshot], scores: list[float], order: list[int], keep: Callable[[NodeSummary], bool]
) -> Iterator[int]:
    """The positions in ``order`` (sorted by score) whose summary ``keep`` accepts, equal scores by node name.

    Lazy, and a node that ``keep`` rejects costs one call (the iteration itself runs in C). A run of equal
    scores is sorted by name only when it holds a node that is kept.
    """
    n = len(order)
    kept = compress(range(n), map(keep, map(_SUMMARY, map(nodes.__getitem__, order))))
    done = 0  # positions of `order` below this were yielded as part of a run
    for k in kept:
        if k < done:
            continue
        s = scores[order[k]]
        j = k + 1
        while j < n and scores[order[j]] == s:
            j += 1
        if j == k + 1:
            yield order[k]
        else:
            run = order[k:j]
            yield from _by_name(nodes, list(compress(run, map(keep, map(_SUMMARY, map(nodes.__getitem__, run))))))
        done = j


def _by_name(nodes: Sequence[NodeSnapshot], run: list[int]) -> Iterator[int]:
    """A run of equal-score positions by node name, lazily: the first name costs one pass, the rest a sort."""
    if len(run) < 2:
        yield from run
        return
    first = min(run, key=lambda g: nodes[g].name)
    yield first
    run.remove(first)
    yield from sorted(run, key=lambda g: nodes[g].name)


def passed_over_in_order(nodes: Sequence[NodeSnapshot], scores: list[float], order: list[int], idx: int) -> int:
    """How many nodes the walk ranks before ``idx``: higher-preference scores, then equal scores with smaller
    names. ``list.index`` runs in C, so this costs little next to the walk that found ``idx``."""
    pos = order.index(idx)
    s = scores[idx]
    start, end = pos, pos + 1
    while start > 0 and scores[order[start - 1]] == s:
        start -= 1
    while end < len(order) and scores[order[end]] == s:
        end += 1
    name = nodes[idx].name
    return start + sum(1 for j in range(start, end) if nodes[order[j]].name < name)


def _better_score(a: tuple[float, str], b: tuple[float, str], binpack: bool) -> bool:
    if a[0] != b[0]:
        return a[0] > b[0] if binpack else a[0] < b[0]
    return a[1] < b[1]


def better(a: NodeSnapshot, b: NodeSnapshot, binpack: bool) -> bool:
    return _better_score((a.summary.score, a.name), (b.summary.score, b.name), binpack)


def pod_scored(ctx: PodContext) -> bool:
    """Whether a vendor of the pod's requests adds a node score that depends on the devices the pod gets there
    (the optional rules hook ``pod_score``, HAMi's ``ScoreNode`` of Vastai's die mode, of MetaX, of Kunlunxin's
    whole XPUs): the node order is then known only after the nodes that could win are fitted."""
    return any(getattr(ctx.rules.get(r.type), "pod_score", None) is not None for r in ctx.requests if not r.empty)


def pod_score(ctx: PodContext, snap: NodeSnapshot, fit: NodeFit) -> float:
    """The vendors' ``pod_score`` terms for the devices ``fit`` gives the pod on ``snap`` (each vendor sees its own
    devices, one entry per container)."""
    total = 0.0
    for name in sorted({d.type for ctr in fit.devices for d in ctr}):
        hook = getattr(ctx.rules.get(name), "pod_score", None)
        if hook is not None:
            mine = tuple(tuple(d for d in ctr if d.type == name) for ctr in fit.devices)
            total += hook(snap, mine, ctx.policy.node, ctx.constraints)
    return total


def pod_score_bounds(ctx: PodContext, nodes: Sequence[NodeSnapshot]) -> list[float]:
    """For every node, the most the pod's ``pod_score`` terms can move it ahead under the node policy: the sum
    over its vendors of each one's ``pod_score_bound`` there (binpack ranks the highest total first, so a term
    moves a node ahead by its value; spread the lowest, so by its negation). A bound may be negative (the term
    surely moves the node back); infinite when a vendor with ``pod_score`` gives no bound."""
    hooks = []
    for name in sorted({r.type for r in ctx.requests if not r.empty}):
        rules = ctx.rules.get(name)
        if getattr(rules, "pod_score", None) is None:
            continue
        bound = getattr(rules, "pod_score_bound", None)
        if bound is None:
            return [float("inf")] * len(nodes)
        hooks.append(bound)
    policy, requests, constraints = ctx.policy.node, ctx.requests, ctx.constraints
    if len(hooks) == 1:  # the usual case: one such vendor
        (hook,) = hooks
        return [hook(snap, requests, policy, constraints) for snap in nodes]
    return [sum(h(snap, requests, policy, constraints) for h in hooks) for snap in nodes]
