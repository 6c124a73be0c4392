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

Equal cards are not tried one by one: ``twins`` puts a node's cards in classes of interchangeable ones (the same
device apart from its UUID and index, the same usage, not named by a selector; plain NVIDIA requests without
``topology-aware``), and a try that differs from one already made only by a renaming of twins is skipped.

Bounds: for a plain NVIDIA pod the search first adds up what the app containers need at least (cards, memory,
cores: each card the cheapest the node has for the request) against what the node's cards have free; more than
that and no assignment exists, without a walk (``over_capacity``). Then it walks the failing entry with the
earlier entries left out (they only add usage); if that entry does not fit alone, no assignment exists and the
refusal stands at once. After that it makes at most ``WALK_LIMIT`` walks per node evaluation in all. Past the
bound the greedy refusal stands, marked ``search_capped`` so the caller can count it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from vgpu_scheduler.shared.domain.context import PodContext
from vgpu_scheduler.shared.domain.model import NVIDIA, DeviceMode
from vgpu_scheduler.shared.domain.reasons import NodeRejection
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot

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


def twins(ctx: PodContext, snap: NodeSnapshot) -> tuple[int, ...]:
    """Per inventory position, a class number: cards of one class are interchangeable for this pod on this node.

    Only plain NVIDIA pods (every request NVIDIA's, no ``topology-aware``, whose pair scores name cards) group
    cards; a card in MIG mode or named by a UUID selector is always alone in its class. The NUMA node counts only
    under ``numa-bind``: otherwise it orders the cards but decides nothing about whether they fit.
    """
    devices = snap.inventory.devices
    if not _plain(ctx):
        return tuple(range(len(devices)))
    c = ctx.constraints
    named = c.use_uuids | c.nouse_uuids
    for sel in c.vendor_selectors.values():
        named |= sel.use_uuids | sel.nouse_uuids
    numa = ctx.policy.numa_bind
    cordoned = snap.inventory.cordoned
    classes: dict[Hashable, int] = {}
    out: list[int] = []
    for pos, (dev, usage) in enumerate(zip(devices, snap.usages, strict=True)):
        alone = dev.mode == DeviceMode.MIG.value or dev.id in named
        shape = replace(dev, id="", index=0, numa=dev.numa if numa else 0)
        key: Hashable = ("alone", pos) if alone else (shape, usage, dev.id in cordoned)
        out.append(classes.setdefault(key, len(classes)))
    return tuple(out)


def _plain(ctx: PodContext) -> bool:
    """Every request NVIDIA's and no ``topology-aware``: the per-card checks alone decide (``twins``)."""
    return not ctx.policy.topology and all(r.empty or r.type == NVIDIA for r in ctx.requests)


def over_capacity(ctx: PodContext, snap: NodeSnapshot) -> bool:
    """Whether a plain NVIDIA pod's app containers together need more cards, memory or cores than the node's
    usable cards have free (each card at the least the request takes on any of them): then no assignment exists.

    False when unsure (other vendors, MIG cards, a ``take`` that refuses every card)."""
    rules = ctx.rules.get(NVIDIA)
    if rules is None or not _plain(ctx):
        return False
    pod = ctx.pod
    cordoned = snap.inventory.cordoned
    usable = [
        (d, u)
        for d, u in zip(snap.inventory.devices, snap.usages, strict=True)
        if d.vendor == NVIDIA and d.health and d.id not in cordoned
    ]
    if any(d.mode == DeviceMode.MIG.value for d, _ in usable):
        return False
    need_cards = need_mem = need_cores = 0
    for ei, req in enumerate(ctx.requests):
        if req.empty or pod.is_init(pod.owner(ei)):
            continue
        takes = [t for d, _ in usable if (t := rules.take(d, req, 0)).reason is None]
        if not takes or not all(t.cores_checked for t in takes):
            return False
        need_cards += req.nums
        need_mem += req.nums * min(t.mem_mib for t in takes)
        need_cores += req.nums * min(t.cores for t in takes)
    free_cards = sum(max(0, d.count - u.used) for d, u in usable)
    free_mem = sum(max(0, d.devmem_mib - u.used_mem_mib) for d, u in usable)
    free_cores = sum(max(0, d.devcore - u.used_cores) for d, u in usable)
    return need_cards > free_cards or need_mem > free_mem or need_cores > free_cores


def search_node(
    ctx: PodContext, snap: NodeSnapshot, refusal: NodeRejection, stuck: Stuck, walk: Callable[[Bans], _Fit | Stuck]
) -> _Fit | NodeRejection:
    """:func:`search` on one node, with its ``twins``; nothing when the refusal does not depend on the earlier
    entries' cards (a node-level reason: the node has fewer cards than the entry asks) or :func:`over_capacity`
    proves it."""
    if refusal.plain is not None or over_capacity(ctx, snap):
        return refusal
    return search(refusal, stuck, walk, twins(ctx, snap))


def _canonical(
    classes: Sequence[int], prefix: Sequence[tuple[int, tuple[int, ...]]], entry: int, ban: frozenset[int]
) -> tuple[object, ...]:
    """A try up to renaming twins: the earlier entries' cards, each named (class, order of first use), and the
    entry's bans (named cards by name, the others by class)."""
    names: dict[int, tuple[int, int]] = {}
    used: dict[int, int] = {}
    rows = []
    for e, taken in prefix:
        row = []
        for pos in taken:
            name = names.get(pos)
            if name is None:
                cls = classes[pos]
                name = names[pos] = (cls, used.get(cls, 0))
                used[cls] = name[1] + 1
            row.append(name)
        rows.append((e, tuple(row)))
    named = tuple(sorted(names[p] for p in ban if p in names))
    others = tuple(sorted(classes[p] for p in ban if p not in names))
    return (tuple(rows), entry, named, others)


def search(
    refusal: NodeRejection,
    stuck: Stuck,
    walk: Callable[[Bans], _Fit | Stuck],
    classes: Sequence[int] | None = None,
    limit: int | None = None,
) -> _Fit | NodeRejection:
    """Another assignment of the pod on the node, or the greedy's ``refusal`` (``stuck``: where it stopped).

    ``walk(bans)`` is the greedy walk steered by ``bans``: the fit, or where it stuck. ``classes``: ``twins`` of
    the node (None: every card its own). ``limit``: at most so many walks (default ``WALK_LIMIT``).
    """
    limit = WALK_LIMIT if limit is None else limit
    own = range(1 << 30)
    cls: Sequence[int] = own if classes is None else classes
    alone: set[int] = set()  # entries known to fit with the entries before them left out
    tried: set[tuple[object, ...]] = set()  # (earlier entries' cards, entry, its bans) up to twins: one walk each
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
                key = _canonical(cls, at.picked[:depth], entry, child[entry])
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
