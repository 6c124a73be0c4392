"""The bounded search for another assignment of a pod's cards when the greedy walk refuses it on a node.

``fit`` chooses cards entry by entry (a container, or a container's request of one vendor): an earlier entry
can take the only card a later one could use. Container A asks one card, B two cards with 32 GiB and 50 % cores
each; the node has an idle T4 and V100-32GB cards, one partly used: the greedy gives A a V100 and B no longer
fits; A on the T4 fits the pod. ``search`` looks for such an assignment when, and only when, the greedy walk
failed after placing some entry; the greedy's placement is kept whenever it succeeds, and its refusal (its
reasons) stands when the search finds nothing.

The search never judges a card itself: each try is the very same greedy walk (``fit``'s per-card checks:
memory, cores, exclusivity and mutex, type and UUID selectors, NUMA binding, MIG, quota, the vendor's take),
steered by *bans*, per entry the cards it may not take. A walk that stops at entry ``k`` branches, latest
entry first, on each card an earlier entry took: that entry is walked again without the card, the entries after
it start over. Every set of cards an entry can take, given the entries before it, is reached this way (a set
other than the one taken misses one of its cards), so with per-card checks the search is exhaustive.

Bounds: the search first walks the failing entry with the earlier entries left out; if it does not fit alone no
assignment exists and the refusal stands at once (the usual case of a full node costs one more walk). After
that it makes at most ``WALK_LIMIT`` walks per node evaluation. Past the bound the greedy refusal stands,
marked ``search_capped`` so the caller can count it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TypeVar

from vgpu_scheduler.shared.domain.reasons import NodeRejection

WALK_LIMIT = 16
"""Greedy walks (each fits every entry once) one node evaluation may spend searching."""

Bans = Mapping[int, frozenset[int] | None]
"""Per request entry, the inventory positions it may not take; None leaves the entry out of the walk."""


@dataclass(frozen=True, slots=True)
class Stuck:
    """Where a greedy walk stopped: the entry that did not fit and, in order, each entry placed before it."""

    failed: int
    picked: tuple[tuple[int, tuple[int, ...]], ...]
    """``(entry, positions taken)`` for each entry the walk placed."""


_Fit = TypeVar("_Fit")


def search(
    refusal: NodeRejection,
    stuck: Stuck,
    walk: Callable[[Bans], _Fit | Stuck],
    limit: int | None = None,
) -> _Fit | NodeRejection:
    """Another assignment of the pod on the node, or the greedy's ``refusal`` (``stuck``: where it stopped).

    ``walk(bans)`` is the greedy walk steered by ``bans``: the fit, or where it stuck. ``limit``: at most so many
    walks (default ``WALK_LIMIT``).
    """
    limit = WALK_LIMIT if limit is None else limit
    alone: set[int] = set()  # entries known to fit with the entries before them left out
    tried: set[tuple[object, ...]] = set()  # (cards the earlier entries took, entry, its bans): one walk each
    stack: list[dict[int, frozenset[int]]] = []
    walks = 0

    def fits_alone(at: Stuck) -> bool | None:
        nonlocal walks
        if at.failed in alone:
            return True
        if walks >= limit:
            return None
        walks += 1
        got = walk(dict.fromkeys((e for e, _ in at.picked), None))
        if isinstance(got, Stuck) and got.failed == at.failed:
            return False
        alone.add(at.failed)
        return True

    def branch(bans: dict[int, frozenset[int]], at: Stuck) -> None:
        # pushed earliest entry first, so that the latest entry's alternatives are walked first
        earlier: set[int] = set()
        for depth, (entry, taken) in enumerate(at.picked):
            kept = {e: b for e, b in bans.items() if e in earlier}
            earlier.add(entry)
            for pos in reversed(taken):
                child = {**kept, entry: bans.get(entry, frozenset()) | {pos}}
                key = (at.picked[:depth], entry, child[entry])
                if key not in tried:
                    tried.add(key)
                    stack.append(child)

    at = stuck
    bans: dict[int, frozenset[int]] = {}
    while True:
        ok = fits_alone(at)
        if ok is None:
            return replace(refusal, search_capped=True)
        if not ok:
            return refusal  # no assignment places this entry, whatever the others take
        branch(bans, at)
        if not stack:
            return refusal
        if walks >= limit:
            return replace(refusal, search_capped=True)
        bans = stack.pop()
        walks += 1
        got = walk(bans)
        if not isinstance(got, Stuck):
            return got
        at = got
