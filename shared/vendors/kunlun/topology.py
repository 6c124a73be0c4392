"""The 8-XPU board's topology (HAMi's ``topo.go``): which XPUs a request takes (:func:`graph_select`) and how a node
scores (:func:`score_node`). Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from vgpu_scheduler.shared.vendors.kunlun.keys import (
    _ODD_ORDER,
    BOARD,
    GROUP_PAIRS,
    INTER_GROUP_PAIRS,
    NAME,
    QUADS,
    WING,
)


def _can_meet(have: Sequence[int], want: Sequence[int]) -> bool:
    """Every index of ``want`` is in ``have`` (HAMi's ``canMeet``)."""
    return set(want) <= set(have)


def _delta(have: Sequence[int], want: Sequence[int]) -> list[int]:
    """``have`` without the indexes of ``want``, in order (HAMi's ``delta``)."""
    drop = set(want)
    return [v for v in have if v not in drop]


def _pick(indexes: Sequence[int], free: Sequence[bool], start: int, nums: int) -> list[int]:
    """The first ``nums`` free XPUs from position ``start`` (HAMi's ``devicepick``; fewer when there are not)."""
    out: list[int] = []
    for pos in range(start, len(indexes)):
        if free[pos]:
            out.append(indexes[pos])
            if len(out) == nums:
                break
    return out


def _interconnect(indexes: Sequence[int], free: Sequence[bool], nums: int) -> list[int]:
    """HAMi's ``interconnect``: 2 XPUs linked across the wings, or a 4-XPU cross-wing group (with 6 free XPUs,
    one that leaves a linked pair free when there is one)."""
    if nums == 2:
        present = [i for i, f in zip(indexes, free, strict=True) if f]
        for a in present:
            for b in present:
                if a != b and any({a, b} == {lw, rw} for lw, rw in INTER_GROUP_PAIRS):
                    return [a, b]
    if nums == 4:
        unused = [i for i, f in zip(indexes, free, strict=True) if f]
        if len(unused) in (4, 5):
            for quad in QUADS:
                if _can_meet(unused, quad):
                    return list(quad)
        if len(unused) == 6:
            found: list[int] = []
            for quad in QUADS:
                if _can_meet(unused, quad):
                    found = list(quad)
                    rest = _delta(unused, quad)
                    if any(_can_meet(rest, pair) for pair in (*INTER_GROUP_PAIRS, *GROUP_PAIRS)):
                        return found
            return found
    return []


def graph_select(board: Sequence[tuple[int, bool]], nums: int) -> list[int]:
    """HAMi's ``graghSelect``: the indexes of the XPUs a request for ``nums`` takes, from ``board`` = every XPU of
    the node as ``(index, free)`` (sorted by index here, whatever order it comes in); ``[]`` when none fits.

    8: the whole board, only when all 8 are free. 1, 2, 4: when a wing (positions 0–3 or 4–7) has enough free
    XPUs, the wing whose free count is tightest (1-XPU requests prefer a wing with 1, then 3, 2, 4 free; others
    the smallest count from ``nums`` up; left before right), its first free XPUs; otherwise along the board's
    interconnect (:func:`_interconnect`). Any other count: ``[]``."""
    ordered = sorted(board, key=lambda b: b[0])
    indexes = [i for i, _ in ordered]
    free = [f for _, f in ordered]
    left = sum(1 for pos, f in enumerate(free) if f and pos < WING)
    right = sum(1 for pos, f in enumerate(free) if f and pos >= WING)
    if nums == BOARD:
        return list(range(BOARD)) if left + right == BOARD else []
    if nums in (1, 2, 4):
        if left >= nums or right >= nums:
            for slots in range(nums, WING + 1):
                want = _ODD_ORDER[slots - 1] if nums % 2 == 1 else slots
                if left == want:
                    return _pick(indexes, free, 0, nums)
                if right == want:
                    return _pick(indexes, free, WING, nums)
        return _interconnect(indexes, free, nums)
    return []


def _count_bubble(indexes: Sequence[int]) -> int:
    """HAMi's ``countbubble``: how fragmented a set of busy XPUs leaves the wings (a full or empty wing: 0 or 1,
    one XPU: 2, else 1, summed over both wings; 1 for none)."""

    left = sum(1 for i in indexes if i < WING)
    return _bubble(left, len(indexes) - left)


def _bubble(left: int, right: int) -> int:
    """:func:`_count_bubble` of ``left`` XPUs in the left wing and ``right`` in the right one."""

    def value(n: int) -> int:
        return 0 if n == WING else 2 if n == 1 else 1

    if left == 0 and right == 0:
        return 1
    return value(left) + value(right)


_STEP_SCORES: Final[Mapping[int, float]] = {-1: 3000.0, 0: 2000.0, 1: 1000.0, 2: 0.0}
_OTHER_STEP_SCORE: Final = 1000.0


def score_fragmentation(previous: Sequence[int], current: Sequence[int]) -> float:
    """HAMi's ``calcscore``: the node score a pod's XPUs (``current`` indexes) get against the node's busy XPUs
    before it (``previous``): 3000 when they fragment the board one step less, 2000 the same, 1000 one step
    more, 0 two steps more (1000 otherwise)."""
    step = _count_bubble(current) - _count_bubble(previous)
    return _STEP_SCORES.get(step, _OTHER_STEP_SCORE)


def score_node(previous: Sequence[tuple[str, int, int]], pod: Sequence[Sequence[tuple[str, int]]]) -> float:
    """HAMi's whole-XPU ``ScoreNode``: ``previous`` = the node's devices as ``(type, index, used)``, ``pod`` = the
    pod's devices per container as ``(type, index)``; 0 when any of them is not a Kunlunxin XPU (the type
    contains ``kunlun``), else :func:`score_fragmentation` of the busy indexes and the pod's. The plan adds it to
    the node's score through :meth:`KunlunRules.pod_score`."""
    prev: list[int] = []
    cur: list[int] = []
    for kind, index, used in previous:
        if NAME not in kind:
            return 0.0
        if used > 0 and index not in prev:
            prev.append(index)
    for ctr in pod:
        for kind, index in ctr:
            if NAME not in kind:
                return 0.0
            if index not in cur:
                cur.append(index)
    return score_fragmentation(prev, cur)
