"""The defragmentation planner against the exact minimum: on many small random clusters (seeded), every set of
moves is tried by exhaustive search, smallest first, and the planner's number of moves is compared with the fewest
that work.

The exhaustive search looks at the same plans the planner does (pods moved from the node the helped pod then goes
to; for free cards, the pods holding the cards freed), checks each with the same rules (the helped pod fits, the
replacements fit one by one on the working snapshots with the freed cards held, budgets are not overspent) and
keeps the smallest that works; the replacements are placed as the planner places them (largest first, then smallest
first: trying every order is factorial). So the comparison measures the search for sets of moves, not a different
model of the cluster.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

from vgpu_scheduler.shared.domain.defrag import Candidate, ForPod, FreeCards, FreeNodes
from vgpu_scheduler.shared.domain.defragmodel import Cannot, DefragPlan
from vgpu_scheduler.shared.domain.defragwork import BARE_POD, Work, why_unmovable, within_budgets
from vgpu_scheduler.shared.domain.model import NO_CONSTRAINTS, GpuPolicy, GpuPolicyToken, PodRequest
from vgpu_scheduler.shared.domain.plan import Decision, apply_decision, plan
from vgpu_scheduler.shared.domain.preempt import Resident
from vgpu_scheduler.shared.domain.scoring import Policies

from .defragcluster import PLACEMENT, Cluster, small, whole

SPREAD = Policies(gpu=GpuPolicy((GpuPolicyToken.SPREAD,)))
GOALS: tuple[PodRequest, ...] = (whole(), whole(nums=2), small(6000), small(7000, cores=60), small(5000, nums=2))
PRIORITY = 50


def random_cluster(rng: random.Random, nodes: tuple[int, int] = (2, 3)) -> Cluster:
    """2–3 nodes of 2–4 cards (8000 MiB), 6–18 small pods spread over them; some bare, some of high priority,
    some under a budget that allows one disruption."""
    c = Cluster()
    for i in range(rng.randint(*nodes)):
        c.node(f"n{i}", n=rng.randint(2, 4))
    for j in range(rng.randint(6, 18)):
        node = rng.choice(sorted(c.snaps))
        request = small(rng.choice((1000, 2000, 3000, 4000)), cores=rng.choice((0, 10, 25, 50)))
        d = plan(request, NO_CONSTRAINTS, [c.snaps[node]], policies=SPREAD)
        if not isinstance(d, Decision):
            continue
        c.snaps[node] = apply_decision(c.snaps[node], d)
        roll = rng.random()
        c.candidates.append(
            Candidate(
                Resident(f"p{j}", "default", f"p{j}", rng.choice((0, 10, 100)), 0.0, d.charges),
                node,
                request,
                NO_CONSTRAINTS,
                unmovable=BARE_POD if roll < 0.12 else None,
                budgets=("default/pdb",) if 0.12 <= roll < 0.3 else (),
            )
        )
    return c


ALLOWANCES = {"default/pdb": 1}


def fewest_for_pod(c: Cluster, goal: ForPod) -> int | None:
    """The fewest moves that make room for ``goal`` on some node (exhaustive), or None when none does."""
    best: int | None = None
    base = Work.of(c.snaps.values())
    if isinstance(base.fit(goal.request, goal.constraints, PLACEMENT), Decision):
        return 0
    for node in sorted(c.snaps):
        movable = [x for x in c.candidates if x.node == node and why_unmovable(x, goal.priority, ALLOWANCES) is None]
        for k in range(1, len(movable) + 1):
            if best is not None and k >= best:
                break
            if any(_works_for_pod(base, node, s, goal) for s in combinations(movable, k)):
                best = k
                break
    return best


def _works_for_pod(base: Work, node: str, moved: Sequence[Candidate], goal: ForPod) -> bool:
    if within_budgets(moved, ALLOWANCES) is not None:
        return False
    work = base.fork()
    work.release(node, moved)
    target = work.fit(goal.request, goal.constraints, PLACEMENT, nodes=[node])
    if not isinstance(target, Decision):
        return False
    work.apply(target)
    return replacements_fit(work, moved)


def replacements_fit(work: Work, moved: Sequence[Candidate]) -> bool:
    return isinstance(work.fork().move(moved, PLACEMENT), list)


Unit = tuple[str, tuple[str, ...]]
"""A node and cards of it that must all be idle: one card (free cards) or every card of a node (free nodes)."""


def cards_of(c: Cluster) -> list[Unit]:
    return [(n, (d.id,)) for n in sorted(c.snaps) for d in c.snaps[n].inventory.devices]


def nodes_of(c: Cluster) -> list[Unit]:
    return [(n, tuple(d.id for d in c.snaps[n].inventory.devices)) for n in sorted(c.snaps)]


def fewest_to_idle(c: Cluster, units: list[Unit], count: int) -> int | None:
    """The fewest moves that leave ``count`` of ``units`` idle (exhaustive), or None."""
    base = Work.of(c.snaps.values())

    def idle(unit: Unit) -> bool:
        return all(base.snaps[unit[0]].device_usage(u).used == 0 for u in unit[1])

    ready = [u for u in units if idle(u)]
    need = count - len(ready)
    if need <= 0:
        return 0
    best: int | None = None
    for chosen in combinations([u for u in units if u not in ready], need):
        pods = {x.uid: x for x in c.candidates for n, uuids in chosen if x.node == n and set(uuids) & set(x.devices)}
        moved = sorted(pods.values(), key=lambda x: x.uid)
        if best is not None and len(moved) >= best:
            continue
        if any(why_unmovable(x, None, ALLOWANCES) is not None for x in moved):
            continue
        if within_budgets(moved, ALLOWANCES) is not None:
            continue
        work = base.fork()
        for x in moved:
            work.release(x.node, [x])
        if any(work.snaps[n].device_usage(u).used for n, uuids in chosen for u in uuids):
            continue
        for n, uuids in [*ready, *chosen]:
            work.hold(n, uuids)
        if replacements_fit(work, moved):
            best = len(moved)
    return best


@dataclass
class Tally:
    """The planner against the exhaustive minimum over many cases."""

    cases: int = 0
    needed: int = 0
    equal: int = 0
    worse: int = 0
    missed: int = 0

    def add(self, exact: int | None, result: DefragPlan | Cannot) -> None:
        if exact is None:
            assert not isinstance(result, DefragPlan), "the planner found a plan the exhaustive search did not"
            return
        self.cases += 1
        self.needed += exact > 0
        if not isinstance(result, DefragPlan):
            self.missed += 1
            return
        assert len(result.moves) >= exact
        self.equal += len(result.moves) == exact
        self.worse += len(result.moves) > exact

    def __str__(self) -> str:
        return (
            f"{self.cases} feasible ({self.needed} need moves), {self.equal} at the minimum, {self.worse} above, "
            f"{self.missed} missed"
        )


def test_for_pod_moves_match_the_exhaustive_minimum() -> None:
    rng = random.Random(20261202)
    tally = Tally()
    for _ in range(300):
        c = random_cluster(rng)
        goal = ForPod("default", "w", "uid-w", rng.choice(GOALS), NO_CONSTRAINTS, priority=PRIORITY)
        tally.add(fewest_for_pod(c, goal), c.plan(goal, allowances=ALLOWANCES))
    print(f"for-pod: {tally}")
    assert tally.needed >= 80
    assert tally.missed == 0
    assert tally.equal >= 0.97 * tally.cases


def test_free_cards_moves_match_the_exhaustive_minimum() -> None:
    rng = random.Random(7)
    tally = Tally()
    for _ in range(200):
        c = random_cluster(rng)
        count = rng.randint(1, 3)
        tally.add(fewest_to_idle(c, cards_of(c), count), c.plan(FreeCards(count), allowances=ALLOWANCES))
    print(f"free-cards: {tally}")
    assert tally.needed >= 80
    assert tally.missed <= 0.02 * tally.cases
    assert tally.equal >= 0.95 * tally.cases


def test_free_nodes_moves_match_the_exhaustive_minimum() -> None:
    rng = random.Random(11)
    tally = Tally()
    for _ in range(200):
        c = random_cluster(rng, nodes=(3, 4))
        count = rng.randint(1, 2)
        tally.add(fewest_to_idle(c, nodes_of(c), count), c.plan(FreeNodes(count), allowances=ALLOWANCES))
    print(f"free-nodes: {tally}")
    assert tally.needed >= 80
    # a miss: freeing two nodes one after the other packs their replacements onto a third node's cards in another
    # order than all at once, and the last ones no longer fit (the exhaustive search places them all together)
    assert tally.missed <= 0.03 * tally.cases
    assert tally.equal >= 0.95 * tally.cases
