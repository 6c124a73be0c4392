"""What a run of ``execute_plan`` is told (:class:`ExecuteOptions`) and what it answers (:class:`ExecuteResult`:
the moves made, the failure, the hold, the counts the metrics take), and how many cards a run freed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from vgpu_scheduler.shared.domain.defragmodel import DefragPlan, Move


@dataclass(frozen=True, slots=True)
class ExecuteOptions:
    """``execute``: evict (default: a dry run). ``wave_size``: evictions at once (``--wave-size``).
    ``wave_timeout_s``: how long a wave may take to settle. ``bind_timeout_s``: how long the helped pod is awaited
    bound after the last wave. ``renew_every_s``: how often the hold's reservation is renewed."""

    execute: bool = False
    wave_size: int = 2
    wave_timeout_s: float = 600.0
    bind_timeout_s: float = 120.0
    renew_every_s: float = 30.0

    def __post_init__(self) -> None:
        if self.wave_size < 1:
            raise ValueError(f"--wave-size must be 1 or more, not {self.wave_size}")
        for name in ("wave_timeout_s", "bind_timeout_s", "renew_every_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, not {getattr(self, name)}")


@dataclass
class ExecuteResult:
    """What a run did. ``evicted``: the moves whose pod was evicted; ``settled``: those whose pod is gone and whose
    replacement is bound (``replacements``: ``ns/name on node``). ``failed``/``reason``: the move that failed and
    why (``failed`` None with a ``reason``: the run stopped before any move, e.g. the hold was refused).
    ``hold``: ``none`` (nothing to hold), ``checked`` (dry run: it would be made), ``kept`` (for the waiting pod),
    ``released``; while a plan that frees cards runs, ``held``."""

    executed: bool
    moves: tuple[Move, ...]
    evicted: list[Move] = field(default_factory=list)
    settled: list[Move] = field(default_factory=list)
    replacements: dict[str, str] = field(default_factory=dict)
    failed: Move | None = None
    reason: str = ""
    hold: str = "none"
    target_bound: str | None = None
    """The node the helped pod was seen bound to (None: not seen bound, or no target)."""
    cards_freed: int = 0

    @property
    def ok(self) -> bool:
        return not self.reason

    @property
    def moved(self) -> int:
        return len(self.evicted)

    @property
    def failures(self) -> int:
        return 0 if self.ok else 1

    @property
    def remaining(self) -> list[Move]:
        done = {m.uid for m in self.evicted}
        return [m for m in self.moves if m.uid not in done]

    def to_json(self) -> dict[str, Any]:
        return {
            "executed": self.executed,
            "ok": self.ok,
            "moved": self.moved,
            "settled": [m.key for m in self.settled],
            "replacements": {m.key: self.replacements[m.uid] for m in self.settled if m.uid in self.replacements},
            "failed": None if self.failed is None else self.failed.key,
            "reason": self.reason or None,
            "remaining": [m.key for m in self.remaining],
            "hold": self.hold,
            "target_bound": self.target_bound,
            "cards_freed": self.cards_freed,
        }

    def state_lines(self) -> list[str]:
        """The state reached, for an operator (printed at the end of a run that stopped)."""
        lines = [f"stopped: {self.failed.key}: {self.reason}" if self.failed else f"stopped: {self.reason}"]
        if self.evicted:
            done = [
                m.key + (f" (replacement {self.replacements[m.uid]})" if m.uid in self.replacements else "")
                for m in self.evicted
            ]
            lines.append(f"moved ({len(done)}): {', '.join(done)}")
        rest = [m.key for m in self.remaining if m is not self.failed]
        lines.append(f"not moved ({len(rest)}): {', '.join(rest) if rest else 'none'}")
        if self.hold != "none":
            lines.append(f"hold: {self.hold}")
        return lines


def freed_cards(plan: DefragPlan, moved: Sequence[Move]) -> int:
    """How many of the plan's freed cards every pod planned off them has left (``moved``)."""
    gone = {m.uid for m in moved}
    return sum(
        1
        for node, uuid in plan.freed
        if all(m.uid in gone for m in plan.moves if m.source == node and uuid in m.source_devices)
    )
