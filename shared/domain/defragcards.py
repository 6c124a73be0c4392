"""The defragmentation planner's other goals (pure): make ``N`` cards idle (``--free-cards``), or ``N`` whole nodes
(``--free-nodes``). See :mod:`.defrag` for the shared vocabulary and docs/defrag.md.

A *unit* is what the goal counts: one card, or one node with all its cards. Units already idle count first. The
others are taken cheapest first by :func:`~defragwork.cost_key` of the pods holding them (fewer pods, less memory,
lower priorities), each re-costed when it comes up (an earlier move may have freed part of it, as a pod holding two
cards does, or planted a replacement on it). A unit is freed when every pod holding it may move, releasing them
leaves it idle, and every replacement fits elsewhere with the unit held (and every unit freed before it): the moves
are then kept and the working state goes on from there. A unit that fails is passed over, its pods given their
reason. The search tries the units needed plus ``Search.max_attempts`` more, then says how many it could free.
Because a first choice can cost the later ones, the greedy runs again started from each of the
``Search.restarts`` cheapest units, and the cheapest plan of all is kept, unless the first plan already moves no
more pods and memory than the cheapest units hold (no plan can move less).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from vgpu_scheduler.shared.domain.defragmodel import Cannot, DefragPlan, Left, Move
from vgpu_scheduler.shared.domain.defragwork import (
    NO_DESTINATION,
    PDB_SPENT,
    Candidate,
    FreeCards,
    FreeNodes,
    Placement,
    Search,
    Work,
    cost_key,
    why_unmovable,
)
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot

UNKNOWN_HOLDER = "held by a pod the planner does not see (a reservation not bound yet?)"
LANDED = "a moved pod's replacement is planned on it"


@dataclass(frozen=True, slots=True)
class _Unit:
    node: str
    uuids: tuple[str, ...]


def _units(goal: FreeCards | FreeNodes, snapshots: Sequence[NodeSnapshot]) -> list[_Unit]:
    out: list[_Unit] = []
    for snap in sorted(snapshots, key=lambda s: s.name):
        if goal.nodes is not None and snap.name not in goal.nodes:
            continue
        usable = [d for d in snap.inventory.devices if d.health and d.id not in snap.inventory.cordoned]
        if isinstance(goal, FreeNodes):
            if usable:
                out.append(_Unit(snap.name, tuple(d.id for d in usable)))
            continue
        want = (goal.type or "").upper()
        out += [
            _Unit(snap.name, (d.id,)) for d in usable if not want or want in d.type.upper() or want == d.vendor.upper()
        ]
    return out


def _idle(work: Work, unit: _Unit) -> bool:
    snap = work.snaps[unit.node]
    return all(snap.device_usage(u).used == 0 for u in unit.uuids)


def plan_free(
    goal: FreeCards | FreeNodes,
    snapshots: Sequence[NodeSnapshot],
    candidates: Sequence[Candidate],
    *,
    placement: Placement,
    allowances: Mapping[str, int],
    search: Search,
) -> DefragPlan | Cannot:
    """``FreeCards`` or ``FreeNodes`` (module docstring)."""
    what = "cards" if isinstance(goal, FreeCards) else "nodes"
    if goal.count <= 0:
        return Cannot(f"asked to free {goal.count} {what}: give a positive number")
    units = _units(goal, snapshots)
    if not units:
        return Cannot(f"no {what[:-1]} matches the selection")
    work = Work.of(snapshots)
    idle = [u for u in units if _idle(work, u)][: goal.count]
    if len(idle) == goal.count:
        return DefragPlan((), None, _pairs(idle))
    on: dict[str, list[Candidate]] = {}
    for c in candidates:
        for uuid in c.devices:
            on.setdefault(uuid, []).append(c)
    busy = [u for u in units if u not in idle]
    greedy = _Greedy(goal, what, work, idle, on, placement, allowances, search)
    best = greedy.run(busy, None)
    costs = sorted(cost_key(greedy.holders(u, {})) for u in busy)
    if isinstance(best, DefragPlan) and _plan_key(best)[:2] == _floor(costs, goal.count - len(idle), candidates):
        return best  # as cheap as any plan can be
    # the same greedy started from each of the next cheapest units: a first choice can cost the later ones
    firsts = sorted(busy, key=lambda u: cost_key(greedy.holders(u, {})))[: search.restarts + 1]
    for first in firsts:
        other = greedy.run(busy, first)
        if isinstance(other, DefragPlan) and (not isinstance(best, DefragPlan) or _plan_key(other) < _plan_key(best)):
            best = other
    return best


def _floor(
    costs: Sequence[tuple[int, int, int, tuple[str, ...]]], need: int, candidates: Sequence[Candidate]
) -> tuple[int, int] | None:
    """The fewest moves and least memory any plan freeing ``need`` more units can have when no pod holds two cards
    (then the units' holders are disjoint, and a plan moves at least the holders of the ``need`` cheapest units);
    None when some pod holds several cards."""
    if any(len(c.devices) > 1 for c in candidates):
        return None
    chosen = costs[:need]
    return (sum(c[0] for c in chosen), sum(c[1] for c in chosen))


def _plan_key(p: DefragPlan) -> tuple[int, int, int]:
    return (len(p.moves), p.memory_moved_mib, sum(m.priority for m in p.moves))


@dataclass(frozen=True, slots=True)
class _Greedy:
    """One pass of the greedy of the module docstring: the goal, the state before any move, the units already idle,
    the candidates by card."""

    goal: FreeCards | FreeNodes
    what: str
    base: Work
    idle: Sequence[_Unit]
    on: Mapping[str, Sequence[Candidate]]
    placement: Placement
    allowances: Mapping[str, int]
    search: Search

    def holders(self, unit: _Unit, moved: Mapping[str, Candidate]) -> list[Candidate]:
        seen = {c.uid: c for uuid in unit.uuids for c in self.on.get(uuid, ()) if c.uid not in moved}
        return sorted(seen.values(), key=lambda c: c.resident.key)

    def run(self, busy: Sequence[_Unit], first: _Unit | None) -> DefragPlan | Cannot:
        goal = self.goal
        work = self.base.fork()
        for u in self.idle:
            work.hold(u.node, u.uuids)
        freed = list(self.idle)
        allowed = dict(self.allowances)
        moved: dict[str, Candidate] = {}
        landed: set[str] = set()
        moves: list[Move] = []
        left: dict[str, Left] = {}
        failures: dict[str, str] = {}
        heap = [((0,) if u == first else (1,), cost_key(self.holders(u, moved)), i, u) for i, u in enumerate(busy)]
        heapq.heapify(heap)
        attempts = goal.count - len(freed) + self.search.max_attempts
        while heap and len(freed) < goal.count and attempts > 0:
            rank, key, i, unit = heapq.heappop(heap)
            pods = self.holders(unit, moved)
            now = cost_key(pods)
            if now != key:  # an earlier move changed who holds it: back in line at its new cost
                heapq.heappush(heap, (rank, now, i, unit))
                continue
            attempts -= 1
            name = f"{unit.node}/{','.join(unit.uuids)}"
            why = _verdicts(unit, pods, allowed, landed)
            if isinstance(why, str):
                failures[name] = why
                continue
            blocked = [(c, r) for c, r in why if r is not None]
            if blocked:
                for c, r in blocked:
                    left.setdefault(c.uid, c.left(str(r)))
                failures[name] = f"{blocked[0][0].resident.key}: {blocked[0][1]}"
                continue
            ahead = [
                u
                for _, _, _, u in heapq.nsmallest(goal.count - len(freed) - 1, heap)
                if all(why_unmovable(c, None, allowed) is None for c in self.holders(u, moved))
            ]
            done = _commit(unit, pods, work, self.placement, ahead)
            if isinstance(done, _Failed):
                if done.pod is not None:
                    left.setdefault(done.pod.uid, done.pod.left(f"{NO_DESTINATION}: {done.reason}"))
                failures[name] = done.text
                continue
            work, new_moves = done
            for c in pods:
                moved[c.uid] = c
                left.pop(c.uid, None)
                for b in c.budgets:
                    allowed[b] = allowed.get(b, 0) - 1
            moves += new_moves
            landed.update(u for m in new_moves for u in m.dest_devices)
            freed.append(unit)
        lefts = tuple(sorted(left.values(), key=lambda x: x.key))
        if len(freed) < goal.count:
            example = next(iter(failures.items()), None)
            because = f" (e.g. {example[0]}: {example[1]})" if example else ""
            return Cannot(f"only {len(freed)} of {goal.count} {self.what} can be made idle{because}", lefts)
        return DefragPlan(tuple(moves), None, _pairs(freed), lefts)


def _pairs(units: Sequence[_Unit]) -> tuple[tuple[str, str], ...]:
    return tuple((u.node, uuid) for u in units for uuid in u.uuids)


def _verdicts(
    unit: _Unit, pods: Sequence[Candidate], allowed: Mapping[str, int], landed: set[str]
) -> str | list[tuple[Candidate, str | None]]:
    """Each holder's verdict (None: it may move), or, when every holder may move, why ``unit`` still cannot be
    freed before any fit (a string)."""
    verdicts: list[tuple[Candidate, str | None]] = [(c, why_unmovable(c, None, allowed)) for c in pods]
    if all(v is None for _, v in verdicts) and landed.intersection(unit.uuids):
        return LANDED
    spend = dict(allowed)
    for i, (c, v) in enumerate(verdicts):
        if v is not None:
            continue
        for b in c.budgets:
            spend[b] = spend.get(b, 0) - 1
            if spend[b] < 0:
                verdicts[i] = (c, PDB_SPENT)
    return verdicts


@dataclass(frozen=True, slots=True)
class _Failed:
    """A unit that could not be freed: ``pod`` found no destination (``reason``), or none is named (``text``)."""

    text: str
    pod: Candidate | None = None
    reason: str = ""


def _commit(
    unit: _Unit, pods: Sequence[Candidate], base: Work, placement: Placement, ahead: Sequence[_Unit]
) -> tuple[Work, list[Move]] | _Failed:
    """Release ``pods``, check that the unit is then idle, hold it, fit every replacement: the new working state and
    the moves, or why not. The replacements are first fitted with the ``ahead`` units held too (the cheapest ones
    still to free: a replacement planted there would make them dearer), then, if that fails, without."""
    work = base.fork()
    for c in pods:
        work.release(c.node, [c])
    if not _idle(work, unit):
        return _Failed(UNKNOWN_HOLDER)
    work.hold(unit.node, unit.uuids)
    failed: _Failed | None = None
    for held in (ahead, ()) if ahead else ((),):
        trial = work.fork()
        for u in held:
            trial.hold(u.node, u.uuids)
        moves = trial.move(pods, placement)
        if isinstance(moves, tuple):
            c, reason = moves
            failed = failed or _Failed(f"no destination for {c.resident.key}: {reason}", c, reason)
            continue
        for u in held:
            trial.unhold(u.node, u.uuids)
        return trial, moves
    assert failed is not None
    return failed
