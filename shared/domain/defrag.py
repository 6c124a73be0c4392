"""The defragmentation planner (pure): which pods to move so that a pending pod fits (:class:`ForPod`), or so that
a number of cards (:class:`FreeCards`) or whole nodes (:class:`FreeNodes`) become idle. See docs/defrag.md.

Input: the nodes' snapshots, the :class:`~defragwork.Candidate` pods holding devices on them (with the read side's
verdict on whether each may ever move), the extender's policies and rules, and how many disruptions each
PodDisruptionBudget still allows. Output: a :class:`~defragmodel.DefragPlan` (the moves, each with a destination
the scheduler's own fit accepts, computed together) or a :class:`~defragmodel.Cannot` saying why not. Plans are
ordered by :func:`~defragwork.cost_key`: fewer moves, then less GPU memory moved, then lower priorities.

``ForPod``, the search. The pod is first fitted as it is (a plan with no move when it fits). Otherwise, on each node,
the cheapest set of movable residents whose removal lets the pod fit is found as preemption's ``select_victims``
finds its victims: every movable resident removed, then each given back while the pod still fits, in three orders
(residents of the most crowded cards given back first, the smallest first, the largest first) and the cheapest
result kept. The nodes are taken in the order of a cheap per-card estimate (:func:`_estimate`); the search stops
``Search.max_nodes`` nodes after the first set found, or when the estimate (moves, memory, priorities) reaches the
cheapest set found. The sets
are then tried cheapest first: the residents are released, the pod is fitted on the node and its decision applied
(so no moved pod can land on the cards it takes), each replacement is fitted on the working snapshots
(:meth:`~defragwork.Work.move`); the first set whose replacements all find a destination is the plan. When a
replacement finds none, that node's sets without that pod join the line, and the same set with one more of the
node's pods moved (the cards it leaves may take the pod that found no destination). At most
``Search.max_attempts`` sets are tried. The free-cards and free-nodes goals are :mod:`.defragcards`.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from vgpu_scheduler.shared.domain.context import normalize_request
from vgpu_scheduler.shared.domain.defragcards import plan_free
from vgpu_scheduler.shared.domain.defragmodel import Cannot, DefragPlan, Target
from vgpu_scheduler.shared.domain.defragwork import (
    FILTERED_OUT,
    NO_DESTINATION,
    NOT_NEEDED,
    PDB_SPENT,
    Candidate,
    ForPod,
    FreeCards,
    FreeNodes,
    Goal,
    Placement,
    Search,
    Work,
    charges,
    cost_key,
    why_unmovable,
    within_budgets,
)
from vgpu_scheduler.shared.domain.model import MEM_PCT_UNSET, DeviceInfo, DeviceUsage
from vgpu_scheduler.shared.domain.plan import Decision
from vgpu_scheduler.shared.domain.preempt import release_charges
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot

_NEVER = 10**9
"""An estimate that no set of moves reaches (a card some unmovable pod holds)."""


DEFAULT_SEARCH = Search()


def plan_defrag(
    goal: Goal,
    snapshots: Sequence[NodeSnapshot],
    candidates: Sequence[Candidate],
    *,
    placement: Placement,
    allowances: Mapping[str, int] | None = None,
    search: Search = DEFAULT_SEARCH,
) -> DefragPlan | Cannot:
    """The cheapest plan that reaches ``goal`` (module docstring), or why there is none. ``allowances``: for each
    PodDisruptionBudget a candidate names, the disruptions it still allows (a name missing here allows none)."""
    allowed = dict(allowances or {})
    if isinstance(goal, ForPod):
        return _ForPodSearch(goal, snapshots, candidates, placement, allowed).run(search)
    return plan_free(goal, snapshots, candidates, placement=placement, allowances=allowed, search=search)


# --------------------------------------------------------------------------------------------------------------------
# ForPod
# --------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Option:
    node: str
    moved: tuple[Candidate, ...]

    @property
    def key(self) -> tuple[object, ...]:
        return (*cost_key(self.moved), self.node)


def _cost3(moved: Sequence[Candidate]) -> tuple[int, int, int]:
    """:func:`cost_key` without the names: what :meth:`_ForPodSearch.estimate` guesses."""
    n, mem, priority, _ = cost_key(moved)
    return (n, mem, priority)


class _ForPodSearch:
    """One ``ForPod`` search: the goal, the rules, the candidates by node and their verdicts (module docstring)."""

    def __init__(
        self,
        goal: ForPod,
        snapshots: Sequence[NodeSnapshot],
        candidates: Sequence[Candidate],
        placement: Placement,
        allowances: Mapping[str, int],
    ) -> None:
        self.goal = goal
        self.placement = placement
        self.allowances = allowances
        self.work = Work.of(snapshots)
        self.by_node: dict[str, list[Candidate]] = {}
        for c in candidates:
            if c.node in self.work.snaps:
                self.by_node.setdefault(c.node, []).append(c)
        self.verdict = {c.uid: why_unmovable(c, goal.priority, allowances) for c in candidates}
        self.reasons: dict[str, str] = {}
        """Per node looked at: why no set of moves there makes room."""
        self.no_destination: dict[str, str] = {}
        """Per candidate uid: why a set it belonged to found it no destination."""

    def fit(self, snap: NodeSnapshot) -> Decision | str:
        return Work({snap.name: snap}).fit(
            self.goal.request, self.goal.constraints, self.placement, quota=self.goal.quota
        )

    def target(self, d: Decision) -> Target:
        g = self.goal
        return Target(g.namespace, g.name, g.uid, d.node, tuple(tuple(x.uuid for x in c) for c in d.devices))

    def run(self, search: Search) -> DefragPlan | Cannot:
        g = self.goal
        direct = self.work.fit(g.request, g.constraints, self.placement, self.work.allowed(g.nodes), quota=g.quota)
        if isinstance(direct, Decision):
            return DefragPlan((), self.target(direct), freed=())
        for node in [n for n in self.by_node if g.nodes is not None and n not in g.nodes]:
            self.reasons[node] = FILTERED_OUT
            del self.by_node[node]
        estimates = {n: self.estimate(n) for n in self.by_node}
        order = sorted(estimates, key=lambda n: (estimates[n], n))
        tried: set[tuple[str, frozenset[str]]] = set()
        attempts = search.max_attempts
        tick = itertools.count()  # ties in the heap never compare options
        i = 0
        while i < len(order) and attempts > 0:
            # a batch of nodes, most promising first, until max_nodes of them have a set or the estimate reaches the
            # cheapest set found; then their sets, cheapest first, until one finds destinations
            options: list[tuple[tuple[object, ...], int, _Option]] = []
            fewest: tuple[int, int, int] | None = None
            found_on = 0
            while i < len(order) and found_on < search.max_nodes:
                node = order[i]
                if fewest is not None and estimates[node] >= fewest:
                    break
                i += 1
                sets = self.node_sets(node, frozenset())
                if isinstance(sets, str):
                    self.reasons[node] = sets
                    continue
                found_on += 1
                options += [(o.key, next(tick), o) for o in (_Option(node, m) for m in sets)]
                fewest = min(_cost3(o.moved) for _, _, o in options)
            heapq.heapify(options)
            excluded: dict[str, frozenset[str]] = {}
            while options and attempts > 0:
                _, _, opt = heapq.heappop(options)
                ident = (opt.node, frozenset(c.uid for c in opt.moved))
                if ident in tried:
                    continue
                tried.add(ident)
                attempts -= 1
                result = self.attempt(opt)
                if isinstance(result, DefragPlan):
                    return result
                stuck, why = result
                self.no_destination.setdefault(stuck.uid, why)
                for o in self.alternatives(opt, stuck, excluded):
                    heapq.heappush(options, (o.key, next(tick), o))
        return self.cannot()

    def alternatives(self, opt: _Option, stuck: Candidate, excluded: dict[str, frozenset[str]]) -> list[_Option]:
        """What to try on ``opt``'s node once ``stuck`` found no destination: the node's sets without it, and the
        same set with one more of the node's pods moved (making room for it on the cards they leave)."""
        node = opt.node
        excluded[node] = excluded.get(node, frozenset()) | {stuck.uid}
        without = self.node_sets(node, excluded[node])
        out = [_Option(node, m) for m in without] if not isinstance(without, str) else []
        inside = {c.uid for c in opt.moved}
        for c in self.by_node[node]:
            if c.uid not in inside and self.verdict[c.uid] is None:
                grown = (*opt.moved, c)
                if within_budgets(grown, self.allowances) is None:
                    out.append(_Option(node, grown))
        return out

    def node_sets(self, node: str, excluded: frozenset[str]) -> list[tuple[Candidate, ...]] | str:
        """The cheapest sets of movable residents (but ``excluded``) whose removal lets the pod fit on ``node``, one
        per reprieve order (module docstring), or why none does."""
        snap = self.work.snaps[node]
        residents = self.by_node[node]
        movable = [c for c in residents if self.verdict[c.uid] is None and c.uid not in excluded]
        if not movable:
            return "no pod on the node may move"

        def fits(moved: Sequence[Candidate]) -> bool:
            return isinstance(self.fit(release_charges(snap, charges(moved))), Decision)

        every = self.fit(release_charges(snap, charges(movable)))
        if isinstance(every, str):
            return f"does not fit even with every movable pod moved: {every}"
        crowd = Counter(u for c in residents for u in c.devices)
        orders: tuple[Callable[[Candidate], tuple[object, ...]], ...] = (
            lambda c: (-max(crowd[u] for u in c.devices), -c.memory_mib, -c.resident.priority, c.resident.key),
            lambda c: (c.memory_mib, -c.resident.priority, c.resident.key),
            lambda c: (-c.memory_mib, -c.resident.priority, c.resident.key),
        )
        out: dict[frozenset[str], tuple[Candidate, ...]] = {}
        over: Candidate | None = None
        for key in orders:
            moved = list(movable)
            for c in sorted(movable, key=key):
                trial = [m for m in moved if m is not c]
                if fits(trial):
                    moved = trial
            spent = within_budgets(moved, self.allowances)
            if spent is not None:
                over = spent
                continue
            out.setdefault(frozenset(c.uid for c in moved), tuple(moved))
        if not out:
            assert over is not None
            return f"{over.resident.key}: {PDB_SPENT}"
        return sorted(out.values(), key=cost_key)

    def attempt(self, opt: _Option) -> DefragPlan | tuple[Candidate, str]:
        """Release ``opt``'s residents, fit the pod on its node (held), then every replacement (module docstring).
        The node's other residents are the plan's ``left``, each with why it may not move or ``not needed``."""
        work = self.work.fork()
        before = work.snaps[opt.node]
        work.release(opt.node, opt.moved)
        released = work.snaps[opt.node]
        target = self.fit(released)
        assert isinstance(target, Decision), "a set of moves is kept only when the pod fits without them"
        work.apply(target)
        moves = work.move(opt.moved, self.placement)
        if isinstance(moves, tuple):
            return moves
        freed = tuple(
            (opt.node, d.id)
            for d, was, now in zip(before.inventory.devices, before.usages, released.usages, strict=True)
            if was.used > 0 and now.used == 0
        )
        chosen = {c.uid for c in opt.moved}
        left = tuple(
            c.left(self.verdict[c.uid] or NOT_NEEDED)
            for c in sorted(self.by_node[opt.node], key=lambda c: c.resident.key)
            if c.uid not in chosen
        )
        return DefragPlan(tuple(moves), self.target(target), freed=freed, left=left)

    def cannot(self) -> Cannot:
        """Why no plan: the moved pods found no destination, or every node where moving pods would make room holds
        pods that may not move, or the pod fits nowhere even with every pod moved."""
        everyone = [c for cs in self.by_node.values() for c in cs]
        if self.no_destination:
            stuck = sorted((c for c in everyone if c.uid in self.no_destination), key=lambda c: c.resident.key)
            first = stuck[0]
            return Cannot(
                f"no destination for the pods that would have to move ({first.resident.key}: "
                f"{self.no_destination[first.uid]})",
                tuple(c.left(f"{NO_DESTINATION}: {self.no_destination[c.uid]}") for c in stuck),
            )
        blocking: list[Candidate] = []
        for node, cs in sorted(self.by_node.items()):
            held = [c for c in cs if self.verdict[c.uid] is not None]
            if held and isinstance(self.fit(release_charges(self.work.snaps[node], charges(cs))), Decision):
                blocking += held
        if blocking:
            counts = Counter(str(self.verdict[c.uid]) for c in blocking)
            what = "; ".join(f"{n}× {why}" for why, n in counts.most_common())
            return Cannot(
                f"every node where moving pods would make room holds pods that may not move ({what})",
                tuple(c.left(str(self.verdict[c.uid])) for c in sorted(blocking, key=lambda c: c.resident.key)),
            )
        spent = sorted((n, r) for n, r in self.reasons.items() if PDB_SPENT in r)
        if spent:
            return Cannot(f"moving the pods that would make room would exceed a PodDisruptionBudget ({spent[0][1]})")
        if not self.by_node and FILTERED_OUT in self.reasons.values():
            return Cannot(f"no node the pod may go to holds a pod to move (elsewhere: {FILTERED_OUT})")
        if not self.by_node:
            return Cannot("no pod holds devices on a node where moving it could make room")
        return Cannot(f"the pod fits on no node even with every pod there moved ({self.nowhere()})")

    def nowhere(self) -> str:
        """One node's reason the pod does not fit there even empty of every resident (the first by name)."""
        node = min(self.by_node)
        why = self.fit(release_charges(self.work.snaps[node], charges(self.by_node[node])))
        return f"{node}: {why if isinstance(why, str) else 'fits'}"

    def estimate(self, node: str) -> tuple[int, int, int]:
        """A cheap guess of the cost (moves, memory moved, priorities moved) of making room on ``node``, to take the
        most promising nodes first: per card of the pod's vendor, the fewest movable residents (largest first) whose
        charges free the memory, cores and slot the pod asks of a card (all of them for a whole card), summed over its
        cheapest cards. Not a bound: it ignores NUMA, topology, selectors and pods spanning cards; the search
        decides."""
        need = _need(self.goal, self.placement)
        if need is None:
            return (0, 0, 0)
        vendor, cards, mem_mib, mem_pct, cores = need
        snap = self.work.snaps[node]
        on_card: dict[str, list[_Held]] = {}
        for c in self.by_node[node]:
            for ch in c.resident.charges:
                on_card.setdefault(ch.uuid, []).append(
                    _Held(ch.mem_mib, ch.cores_pct, max(ch.slots, 1), c.resident.priority, self.verdict[c.uid] is None)
                )
        costs = sorted(
            _card_cost(dev, u, sorted(on_card.get(dev.id, ()), reverse=True), mem=(mem_mib, mem_pct), cores=cores)
            for dev, u in zip(snap.inventory.devices, snap.usages, strict=True)
            if dev.vendor == vendor and dev.health and dev.id not in snap.inventory.cordoned
        )
        chosen = costs[: max(cards, 1)]
        if len(chosen) < max(cards, 1):
            return (_NEVER, 0, 0)
        return (min(_NEVER, sum(c[0] for c in chosen)), sum(c[1] for c in chosen), sum(c[2] for c in chosen))


def _need(goal: ForPod, placement: Placement) -> tuple[str, int, int, int, int] | None:
    """The pod's largest per-card need: ``(vendor, cards, mem_mib, mem_pct, cores_pct)`` (None: it asks nothing)."""
    reqs = [normalize_request(r, placement.config, placement.rules) for r in goal.request.containers if not r.empty]
    if not reqs:
        return None
    r = max(reqs, key=lambda r: (r.nums, r.mem_mib, r.mem_pct if r.mem_pct != MEM_PCT_UNSET else 0, r.cores_pct))
    return (r.type, r.nums, r.mem_mib, r.mem_pct if r.mem_pct != MEM_PCT_UNSET else 0, r.cores_pct)


class _Held(NamedTuple):
    """One resident's charge on a card, as the estimate weighs it (sorted: largest memory first)."""

    mem: int
    cores: int
    slots: int
    priority: int
    movable: bool


def _card_cost(
    dev: DeviceInfo, u: DeviceUsage, held: Sequence[_Held], *, mem: tuple[int, int], cores: int
) -> tuple[int, int, int]:
    """The estimate on one card (``held`` largest first; ``mem`` the pod's MiB or percentage per card)."""
    if dev.devcore > 0 and cores >= dev.devcore:  # a whole card: every pod on it moves
        whole = all(h.movable for h in held) and u.used <= sum(h.slots for h in held)
        return (len(held), sum(h.mem for h in held), sum(h.priority for h in held)) if whole else (_NEVER, 0, 0)
    want_mem = mem[0] if mem[0] > 0 else dev.devmem_mib * mem[1] // 100
    free_mem, free_cores, free_slots = dev.devmem_mib - u.used_mem_mib, dev.devcore - u.used_cores, dev.count - u.used
    n = moved_mem = moved_priority = 0
    for h in held:
        if free_mem >= want_mem and free_cores >= cores and free_slots >= 1:
            break
        if h.movable:
            free_mem, free_cores, free_slots = free_mem + h.mem, free_cores + h.cores, free_slots + h.slots
            n, moved_mem, moved_priority = n + 1, moved_mem + h.mem, moved_priority + h.priority
    enough = free_mem >= want_mem and free_cores >= cores and free_slots >= 1
    return (n, moved_mem, moved_priority) if enough else (_NEVER, 0, 0)


__all__ = ["Candidate", "ForPod", "FreeCards", "FreeNodes", "Goal", "Placement", "Search", "plan_defrag"]
