"""A small cluster for the defragmentation planner's tests: nodes, and pods placed on chosen cards with the real
planner (so every charge is one ``plan`` gives), each recorded as a :class:`Candidate`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from tests.builders import inventory, pod, req
from vgpu_scheduler.shared.domain.defrag import Candidate, Goal, Placement, Search, plan_defrag
from vgpu_scheduler.shared.domain.defragmodel import Cannot, DefragPlan
from vgpu_scheduler.shared.domain.model import NO_CONSTRAINTS, PodConstraints, PodRequest
from vgpu_scheduler.shared.domain.plan import Decision, apply_decision, plan
from vgpu_scheduler.shared.domain.preempt import Resident
from vgpu_scheduler.shared.domain.scoring import Policies
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot

PLACEMENT = Placement(Policies())


def small(mem: int, cores: int = 0, nums: int = 1) -> PodRequest:
    return pod(req(nums, mem=mem, cores=cores))


def whole(nums: int = 1, mem: int = 0) -> PodRequest:
    """A pod asking for ``nums`` whole cards (100 % of the cores; all the memory unless ``mem``)."""
    return pod(req(nums, mem=mem, pct=100 if not mem else 101, cores=100))


class Cluster:
    """Nodes by name, and the candidates placed on them."""

    def __init__(self, nodes: Iterable[NodeSnapshot] = ()) -> None:
        self.snaps: dict[str, NodeSnapshot] = {n.name: n for n in nodes}
        self.candidates: list[Candidate] = []

    def node(self, name: str, n: int = 2, mem: int = 8000) -> Cluster:
        self.snaps[name] = NodeSnapshot(inventory(name, n=n, mem=mem))
        return self

    def add(
        self,
        uid: str,
        node: str,
        request: PodRequest,
        *,
        on: Iterable[int] | None = None,
        priority: int = 0,
        unmovable: str | None = None,
        budgets: tuple[str, ...] = (),
        constraints: PodConstraints = NO_CONSTRAINTS,
    ) -> Candidate:
        """Place ``request`` on ``node`` (on the cards at positions ``on``, else where ``plan`` puts it)."""
        snap = self.snaps[node]
        pin = constraints
        if on is not None:
            pin = PodConstraints(use_uuids=frozenset(snap.inventory.devices[i].id for i in on))
        d = plan(request, pin, [snap], policies=PLACEMENT.policies)
        assert isinstance(d, Decision), f"{uid} does not fit on {node} while building the cluster: {d}"
        self.snaps[node] = apply_decision(snap, d)
        c = Candidate(
            Resident(uid, "default", uid, priority, 0.0, d.charges),
            node,
            request,
            constraints,
            unmovable=unmovable,
            budgets=budgets,
        )
        self.candidates.append(c)
        return c

    def plan(
        self, goal: Goal, allowances: Mapping[str, int] | None = None, search: Search | None = None
    ) -> DefragPlan | Cannot:
        return plan_defrag(
            goal,
            list(self.snaps.values()),
            self.candidates,
            placement=PLACEMENT,
            allowances=allowances,
            search=search or Search(),
        )
