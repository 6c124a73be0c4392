"""What a defragmentation plan is: the moves, what they make room for, and why the pods not chosen were left.

The one vocabulary shared by the planner (``shared/domain/defrag*``), the ``vgpu-scheduler defrag`` command, its
executor and ``simulate``. Pure data: no rule lives here.

A *move* evicts one pod whose controller recreates it; the plan names a destination for the replacement that the
scheduler's own fit and policies accept, computed together with every other move (two moves never count on the
same free space). A *goal* is either one pending pod (``--for``) or a number of idle cards or nodes
(``--free-cards`` / ``--free-nodes``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

OPT_OUT_ANNOTATION = "vgpu-scheduler.io/defrag"
"""A pod annotated ``vgpu-scheduler.io/defrag: "false"`` (or ``"never"``) is never moved."""


@dataclass(frozen=True, slots=True)
class Move:
    """Evict ``namespace/name`` from ``source`` (the devices it holds there); its replacement fits on ``dest``'s
    ``dest_devices``."""

    namespace: str
    name: str
    uid: str
    priority: int
    source: str
    source_devices: tuple[str, ...]
    dest: str
    dest_devices: tuple[str, ...]
    memory_mib: int
    """GPU memory the pod holds (what moving it costs)."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def to_json(self) -> dict[str, Any]:
        return {
            "pod": self.key,
            "uid": self.uid,
            "priority": self.priority,
            "from": {"node": self.source, "devices": list(self.source_devices)},
            "to": {"node": self.dest, "devices": list(self.dest_devices)},
            "memory_mib": self.memory_mib,
        }


@dataclass(frozen=True, slots=True)
class Left:
    """A candidate pod the plan did not move, and why (``not owned by a controller``, ``opted out``, ``priority
    above the pod's``, ``its PodDisruptionBudget allows no disruption``, ``no destination``, ``not needed``)."""

    namespace: str
    name: str
    reason: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def to_json(self) -> dict[str, str]:
        return {"pod": self.key, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class Target:
    """Where the helped pod fits once the moves are made (``--for``): its node and devices, one tuple per
    container (init first)."""

    namespace: str
    name: str
    uid: str
    node: str
    devices: tuple[tuple[str, ...], ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "pod": f"{self.namespace}/{self.name}",
            "uid": self.uid,
            "node": self.node,
            "devices": [list(c) for c in self.devices],
        }


@dataclass(frozen=True, slots=True)
class DefragPlan:
    """Moves in the order to make them; ``target`` for ``--for``; ``freed`` the ``(node, device uuid)`` cards the
    moves leave idle (for ``--free-cards`` / ``--free-nodes``: the goal; for ``--for``: informative)."""

    moves: tuple[Move, ...]
    target: Target | None
    freed: tuple[tuple[str, str], ...]
    left: tuple[Left, ...] = ()

    @property
    def memory_moved_mib(self) -> int:
        return sum(m.memory_mib for m in self.moves)

    def to_json(self) -> dict[str, Any]:
        return {
            "feasible": True,
            "moves": [m.to_json() for m in self.moves],
            "target": None if self.target is None else self.target.to_json(),
            "freed": [{"node": n, "device": u} for n, u in self.freed],
            "memory_moved_mib": self.memory_moved_mib,
            "left": [x.to_json() for x in self.left],
        }


@dataclass(frozen=True, slots=True)
class Cannot:
    """No plan: ``reason`` says why in one line (``cannot: ...`` is printed before it); ``left`` the candidates
    considered and why each could not help."""

    reason: str
    left: tuple[Left, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"feasible": False, "reason": self.reason, "left": [x.to_json() for x in self.left]}
