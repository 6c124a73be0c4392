"""What every defragmentation goal shares (pure): the goals, the candidates, who may move, and the working state of
a plan.

A :class:`Candidate` is a pod holding devices (a :class:`preempt.Resident`) with what its replacement asks for
(its :class:`PodRequest` and :class:`PodConstraints`, as ``/filter`` reads them), whether it can ever move
(``unmovable``: the read side's verdict on its owner, its opt-out annotation) and the PodDisruptionBudgets that
select it. :func:`why_unmovable` adds the rules that depend on the goal: a pod above the helped pod's priority,
and a budget with no disruption left to spend, never move.

:class:`Work` is the nodes' snapshots as the moves chosen so far leave them. A move releases the pod's charges from
its source (:func:`preempt.release_charges`), fits its replacement with the ordinary :func:`plan.plan` on the
working snapshots under the extender's policies and rules, and applies that decision
(:func:`plan.apply_decision`): two moves never count on the same free space, and a card being freed is held
(:meth:`Work.hold`, or the helped pod's own decision applied first) so that no moved pod lands on it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from vgpu_scheduler.shared.domain.defragmodel import Left, Move
from vgpu_scheduler.shared.domain.model import (
    DEFAULT_NVIDIA_CONFIG,
    DeviceCharge,
    NvidiaConfig,
    PodConstraints,
    PodRequest,
)
from vgpu_scheduler.shared.domain.plan import Decision, apply_decision, plan
from vgpu_scheduler.shared.domain.preempt import Resident, release_charges
from vgpu_scheduler.shared.domain.quota import QuotaState
from vgpu_scheduler.shared.domain.scoring import Policies
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.domain.vendor import NVIDIA_ONLY, RuleSet

# Why a candidate was left where it is (``Left.reason``): the read side's verdicts, then the planner's own.
BARE_POD = "not owned by a controller (nothing would recreate it)"
DAEMON_SET = "owned by a DaemonSet (recreated on the same node)"
OPTED_OUT = "opted out (annotation vgpu-scheduler.io/defrag)"
PRIORITY_ABOVE = "priority above the pod's"
PDB_EXHAUSTED = "its PodDisruptionBudget allows no disruption"
PDB_SPENT = "its PodDisruptionBudget allows no further disruption in this plan"
NOT_NEEDED = "not needed"
NO_DESTINATION = "no destination"
NO_NODE_ALLOWED = "no node its node selector allows is schedulable"
FILTERED_OUT = "the pod may not go there (the node is unschedulable, or its node selector does not match)"


@dataclass(frozen=True, slots=True)
class Candidate:
    """A pod holding devices on ``node``, as the planner weighs moving it (module docstring)."""

    resident: Resident
    node: str
    request: PodRequest
    constraints: PodConstraints
    unmovable: str | None = None
    """Why it can never move whatever the goal (``BARE_POD``, ``DAEMON_SET``, ``OPTED_OUT`` …); None: it may."""
    budgets: tuple[str, ...] = ()
    """The PodDisruptionBudgets selecting it (keys of the planner's ``allowances``)."""
    nodes: frozenset[str] | None = None
    """The nodes kube-scheduler's own filters leave its replacement (schedulable, matching its node selector);
    None: every node."""

    @property
    def uid(self) -> str:
        return self.resident.uid

    @property
    def memory_mib(self) -> int:
        return sum(c.mem_mib for c in self.resident.charges)

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(c.uuid for c in self.resident.charges))

    def left(self, reason: str) -> Left:
        return Left(self.resident.namespace, self.resident.name, reason)


@dataclass(frozen=True, slots=True)
class Placement:
    """The extender's policies and rules every fit of a plan runs under (the helped pod's and the replacements')."""

    policies: Policies
    config: NvidiaConfig = DEFAULT_NVIDIA_CONFIG
    rules: RuleSet = NVIDIA_ONLY


@dataclass(frozen=True, slots=True)
class ForPod:
    """Make room for one pending pod (``--for``): its request and constraints as ``/filter`` reads them, its
    priority (no pod above it moves) and its namespace's quota (None: no quota)."""

    namespace: str
    name: str
    uid: str
    request: PodRequest
    constraints: PodConstraints
    priority: int = 0
    quota: QuotaState | None = None
    nodes: frozenset[str] | None = None
    """The nodes kube-scheduler's own filters leave the pod (None: every node)."""


@dataclass(frozen=True, slots=True)
class FreeCards:
    """Have ``count`` idle cards (already idle ones count), of a device type containing ``type`` (case-insensitive;
    or a vendor's common word such as ``NVIDIA``), on ``nodes`` (None: every node)."""

    count: int
    type: str | None = None
    nodes: frozenset[str] | None = None


@dataclass(frozen=True, slots=True)
class FreeNodes:
    """Have ``count`` nodes whose every card is idle (already idle ones count), among ``nodes`` (None: all)."""

    count: int
    nodes: frozenset[str] | None = None


Goal = ForPod | FreeCards | FreeNodes


@dataclass(frozen=True, slots=True)
class Search:
    """How far the search goes (what keeps a plan on 1,000 nodes × 8 cards well under a second or two)."""

    max_nodes: int = 32
    """``ForPod``: nodes given the full search once a first set of moves is found."""
    max_attempts: int = 64
    """Sets of moves tried (each try fits its pods' replacements): ``ForPod`` in all; free cards/nodes beyond the
    ones asked for."""
    restarts: int = 4
    """Free cards/nodes: the greedy runs again from each of this many cheapest first units."""


def why_unmovable(c: Candidate, priority: int | None, allowances: Mapping[str, int]) -> str | None:
    """Why ``c`` may not move for a pod of ``priority`` (None: no pod, no priority rule), or None when it may."""
    if c.unmovable is not None:
        return c.unmovable
    if priority is not None and c.resident.priority > priority:
        return PRIORITY_ABOVE
    if any(allowances.get(b, 0) <= 0 for b in c.budgets):
        return PDB_EXHAUSTED
    return None


def within_budgets(moved: Iterable[Candidate], allowances: Mapping[str, int]) -> Candidate | None:
    """The first of ``moved`` whose eviction would take a budget below what it allows (None: all fit)."""
    left = dict(allowances)
    for c in moved:
        for b in c.budgets:
            left[b] = left.get(b, 0) - 1
            if left[b] < 0:
                return c
    return None


def cost_key(moved: Sequence[Candidate]) -> tuple[int, int, int, tuple[str, ...]]:
    """The plan order: fewer moves, then less GPU memory moved, then lower priorities moved (their sum), then names
    (so that equal plans come out the same every time)."""
    return (
        len(moved),
        sum(c.memory_mib for c in moved),
        sum(c.resident.priority for c in moved),
        tuple(sorted(c.resident.key for c in moved)),
    )


def charges(moved: Iterable[Candidate]) -> list[DeviceCharge]:
    return [ch for c in moved for ch in c.resident.charges]


def hold_charges(snapshot: NodeSnapshot, uuids: Iterable[str]) -> tuple[DeviceCharge, ...]:
    """Charges that fill the cards ``uuids`` of ``snapshot``'s node (every slot, all memory and cores): what holds a
    card being freed so that no moved pod is placed on it."""
    out = []
    for uuid in uuids:
        dev = snapshot.inventory.device(uuid)
        if dev is not None:
            out.append(
                DeviceCharge(uuid, slots=dev.count, mem_mib=dev.devmem_mib, cores_pct=dev.devcore, exclusive=True)
            )
    return tuple(out)


class Work:
    """The nodes' snapshots as the moves chosen so far leave them (module docstring). Cheap to fork: a failed
    attempt is dropped by keeping the fork it started from."""

    __slots__ = ("snaps",)

    def __init__(self, snaps: Mapping[str, NodeSnapshot]) -> None:
        self.snaps = dict(snaps)

    @classmethod
    def of(cls, snapshots: Iterable[NodeSnapshot]) -> Work:
        return cls({s.name: s for s in snapshots})

    def fork(self) -> Work:
        return Work(self.snaps)

    def release(self, node: str, moved: Iterable[Candidate]) -> None:
        self.snaps[node] = release_charges(self.snaps[node], charges(moved))

    def apply(self, decision: Decision) -> None:
        self.snaps[decision.node] = apply_decision(self.snaps[decision.node], decision)

    def hold(self, node: str, uuids: Iterable[str]) -> None:
        """Fill the cards ``uuids`` of ``node`` (:func:`hold_charges`)."""
        snap = self.snaps[node]
        held = hold_charges(snap, uuids)
        self.apply(Decision(node=node, devices=(), mig=(), charges=held, score=snap.score))

    def allowed(self, nodes: frozenset[str] | None) -> list[str] | None:
        """The working nodes among ``nodes`` (None: every node), in the working order."""
        return None if nodes is None else [n for n in self.snaps if n in nodes]

    def unhold(self, node: str, uuids: Iterable[str]) -> None:
        """Undo :meth:`hold`."""
        snap = self.snaps[node]
        self.snaps[node] = release_charges(snap, hold_charges(snap, uuids))

    def fit(
        self,
        request: PodRequest,
        constraints: PodConstraints,
        placement: Placement,
        nodes: Sequence[str] | None = None,
        quota: QuotaState | None = None,
    ) -> Decision | str:
        """Where ``request`` goes now (``plan`` on the working snapshots, or on ``nodes`` only), or why nowhere."""
        snaps = list(self.snaps.values()) if nodes is None else [self.snaps[n] for n in nodes]
        if not snaps:
            return NO_NODE_ALLOWED
        result = plan(
            request,
            constraints,
            snaps,
            policies=placement.policies,
            config=placement.config,
            rules=placement.rules,
            quota=quota,
        )
        if isinstance(result, Decision):
            return result
        if len(snaps) == 1:
            return result.reasons.get(snaps[0].name, "does not fit")
        return "fits on no node"

    def move(self, moved: Sequence[Candidate], placement: Placement) -> list[Move] | tuple[Candidate, str]:
        """Fit the replacement of every pod of ``moved`` (already released from their sources, their cards held),
        each decision applied before the next fit: the largest first, and when one finds no destination, the
        smallest first. The moves, or the first pod without a destination (largest first) and why."""
        first = sorted(moved, key=lambda c: (-c.memory_mib, c.resident.key))
        result = self.fork().place(first, placement)
        if isinstance(result, tuple) and len(first) > 1:
            second = self.fork().place(first[::-1], placement)
            if isinstance(second, list):
                result = second
        if isinstance(result, list):
            for m in result:
                self.apply(m.decision)
            return [m.move for m in result]
        return result

    def place(self, order: Sequence[Candidate], placement: Placement) -> list[Placed] | tuple[Candidate, str]:
        """Fit the replacements in ``order``, each decision applied before the next; the first failure stops."""
        out: list[Placed] = []
        for c in order:
            d = self.fit(c.request, c.constraints, placement, self.allowed(c.nodes))
            if isinstance(d, str):
                return c, d
            self.apply(d)
            out.append(Placed(move_of(c, d), d))
        return out


@dataclass(frozen=True, slots=True)
class Placed:
    """A move and the decision that placed its replacement."""

    move: Move
    decision: Decision


def move_of(c: Candidate, decision: Decision) -> Move:
    r = c.resident
    return Move(
        namespace=r.namespace,
        name=r.name,
        uid=r.uid,
        priority=r.priority,
        source=c.node,
        source_devices=c.devices,
        dest=decision.node,
        dest_devices=tuple(dict.fromkeys(ch.uuid for ch in decision.charges)),
        memory_mib=c.memory_mib,
    )
