"""The text form of a defragmentation plan (``defrag plan``'s default output; ``-o json`` prints ``to_json``).

One line per move (the pod, from its node and cards, to its destination's, the GPU memory it holds), the target
(``--for``) or the idle cards that reach the goal, the totals, then one ``left:`` line per candidate not moved and
why. A plan that leaves many pods lists the first :data:`LEFT_LINES` and counts the rest (``-o json`` lists them
all). No plan: ``cannot: <reason>`` and the ``left:`` lines.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from vgpu_scheduler.services.defrag.planning import PlanOutcome
from vgpu_scheduler.shared.domain.defragmodel import Cannot, Left, Move

LEFT_LINES = 20


def _cards(devices: Iterable[str]) -> str:
    return "[" + ", ".join(devices) + "]"


def move_line(m: Move) -> str:
    return (
        f"move {m.key}  {m.source} {_cards(m.source_devices)} -> {m.dest} {_cards(m.dest_devices)}  "
        f"{m.memory_mib} MiB  (priority {m.priority})"
    )


def _left_lines(left: Sequence[Left]) -> list[str]:
    lines = [f"left: {x.key}: {x.reason}" for x in left[:LEFT_LINES]]
    if len(left) > LEFT_LINES:
        lines.append(f"left: ... and {len(left) - LEFT_LINES} more (-o json lists them all)")
    return lines


def render_text(outcome: PlanOutcome) -> str:
    result = outcome.result
    if isinstance(result, Cannot):
        return "\n".join([f"cannot: {result.reason}", *_left_lines(result.left)])
    lines = [f"plan for {outcome.ask.label}:"]
    lines += [move_line(m) for m in result.moves]
    if result.target is not None:
        t = result.target
        devices = ", ".join(_cards(c) for c in t.devices if c)
        lines.append(f"target: {t.namespace}/{t.name} on {t.node} {devices}".rstrip())
    if result.target is None:
        by_node: dict[str, list[str]] = {}
        for node, uuid in result.freed:
            by_node.setdefault(node, []).append(uuid)
        freed = "; ".join(f"{node} {_cards(uuids)}" for node, uuids in by_node.items())
        lines.append(f"idle: {len(result.freed)} card{'s' if len(result.freed) != 1 else ''}: {freed or '-'}")
    n = len(result.moves)
    if n:
        lines.append(f"total: {n} move{'s' if n != 1 else ''}, {result.memory_moved_mib} MiB of GPU memory moved")
    else:
        lines.append("total: nothing to move")
    return "\n".join(lines + _left_lines(result.left))
