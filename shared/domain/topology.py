"""Topology-aware device choice for the ``topology-aware`` GPU policy (hami-wire §6.4, §2.3, difference 8).

Pure functions over the fitting candidates of one container request and the node's pair-score table
(``hami.io/node-nvidia-score``, decoded into ``NodeInventory.pair_scores``):

* :func:`select_single` — one card wanted, several fit: take the worst-connected card (lowest summed pair
  score to the other candidates) so well-connected pairs stay free for multi-card pods.
* :func:`select_set` — ``k > 1`` cards wanted: the set with the highest sum of pairwise scores. HAMi enumerates
  all ``C(n, k)`` sets; we return the same set with an exact branch and bound.

Pair score (:func:`pair_score`): ``min(scores[a][b], scores[b][a])`` with a missing entry counting 0. The device
plugin always writes a symmetric table (it scores an asymmetric link 0 itself), where this is exactly HAMi's
``scores[a][b]``. HAMi's own sum reads ``scores[first][second]`` in candidate order, so on a hand-written
asymmetric table its answer depends on device order; taking the weaker direction keeps ours order-independent
and extends the device plugin's "asymmetric counts 0" caution.

Ties are HAMi's (difference 8): the candidates come in the order ``Fit`` found them (its order of preference),
and HAMi keeps the first best it meets. For a single card: the lowest summed score, then the earliest candidate.
For a set: the highest internal score, then the set that comes first when the sets are listed the way HAMi
generates them (lexicographically by candidate position), i.e. the smallest sorted tuple of positions.
``select_set(c, 1, s)`` is ``select_single``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import accumulate

from vgpu_scheduler.shared.domain.model import DeviceInfo

PairScores = Mapping[str, Mapping[str, int]]
"""``scores[uuid_a][uuid_b]``: topology pair score between two GPUs of one node (hami-wire §2.3)."""


def pair_score(a: str, b: str, pair_scores: PairScores) -> int:
    """The score of the unordered pair ``{a, b}``: the weaker of the two directions; missing entries count 0."""
    if a == b:
        return 0
    return min(_directed(pair_scores, a, b), _directed(pair_scores, b, a))


def set_score(devices: Sequence[DeviceInfo], pair_scores: PairScores) -> int:
    """Sum of :func:`pair_score` over every unordered pair of ``devices``: what :func:`select_set` maximises."""
    ids = [d.id for d in devices]
    return sum(pair_score(ids[i], ids[j], pair_scores) for i in range(len(ids)) for j in range(i + 1, len(ids)))


def select_single(candidates: Sequence[DeviceInfo], pair_scores: PairScores) -> DeviceInfo:
    """The worst-connected candidate: lowest summed pair score to the other candidates, then the earliest.

    HAMi's ``computeWorstSingleCard``: a one-card pod takes the card that is least useful to multi-card pods.
    Raises ``ValueError`` on an empty or duplicate-id candidate list.
    """
    if not candidates:
        raise ValueError("select_single: no candidates")
    _check_unique(candidates)
    best: DeviceInfo = candidates[0]
    best_total: int | None = None
    for dev in candidates:
        total = sum(pair_score(dev.id, other.id, pair_scores) for other in candidates if other is not dev)
        if best_total is None or total < best_total:
            best, best_total = dev, total
    return best


def select_set(candidates: Sequence[DeviceInfo], k: int, pair_scores: PairScores) -> tuple[DeviceInfo, ...] | None:
    """The ``k`` candidates with the highest summed pairwise score; on a tie, the earliest positions.

    Returns ``None`` when fewer than ``k`` candidates fit, all of them when exactly ``k`` do. The result keeps
    the order of ``candidates``. Exact: the same set as enumerating every combination in order and keeping the
    first best (HAMi's ``generateCombinations`` and ``computeBestCombination``), found by branch and bound.
    Raises ``ValueError`` when ``k < 1`` or two candidates share an id.
    """
    if k < 1:
        raise ValueError(f"select_set: k must be at least 1, got {k}")
    n = len(candidates)
    if k > n:
        return None
    _check_unique(candidates)
    if k == n:
        return tuple(candidates)
    if k == 1:  # HAMi never compares one-card sets: one card is the worst-connected one
        return (select_single(candidates, pair_scores),)
    ids = [d.id for d in candidates]
    rows = [pair_scores.get(i) or {} for i in ids]
    weights = [[0] * n for _ in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            weights[i][j] = weights[j][i] = min(rows[i].get(ids[j], 0), rows[j].get(ids[i], 0))
    return tuple(candidates[p] for p in best_subset(weights, k))


def best_subset(weights: Sequence[Sequence[int]], k: int, rank: Sequence[int] | None = None) -> tuple[int, ...]:
    """Exact optimum over the positions of a symmetric integer matrix with a zero diagonal.

    Maximises the internal sum ``Σ w[a][b]`` over pairs of the set; on a tie, takes the lexicographically
    smallest sorted tuple of ``rank`` values (default: the position). Returns sorted positions.
    ``1 <= k <= len(weights)`` is the caller's job.

    The two keys are folded into one integer objective ``F(S) = A·internal + lex`` with ``lex = Σ 2^(n−1−rank)``
    (below ``2^n``) and ``A = 2^(n+1)``, so that the internal sum strictly dominates; ``F`` is then unique per
    set, and a branch and bound that prunes when its bound does not beat the incumbent is exact. Bound for a
    partial set ``P`` with ``r`` devices still to pick from the suffix ``R``: the top ``r`` of
    ``A·w(u,P) + (A/2)·(top r−1 of w[u][R]) + c(u)`` over ``u`` in ``R``.
    """
    n = len(weights)
    if rank is None:
        rank = list(range(n))
    deg = [sum(row) for row in weights]
    big_a = 1 << (n + 1)
    half_a = big_a // 2
    node_term = [1 << (n - 1 - rank[v]) for v in range(n)]

    # Static branching order: best-connected first (good incumbents early), preferred devices first on ties.
    order = sorted(range(n), key=lambda v: (-deg[v], rank[v]))
    w_full = [[big_a * weights[order[i]][order[j]] for j in range(n)] for i in range(n)]
    term = [node_term[order[i]] for i in range(n)]

    # top[i][u - i][m]: (A/2) × the sum of the m largest weights from u to the other members of suffix i..n-1,
    # for m < k (a bound never needs more). Each row is sorted once and filtered per suffix.
    by_weight = [
        sorted(((half_a * weights[order[u]][order[v]], v) for v in range(n) if v != u), reverse=True) for u in range(n)
    ]
    top = [
        [list(accumulate([x for x, v in by_weight[u] if v >= i][: k - 1], initial=0)) for u in range(i, n)]
        for i in range(n)
    ]
    # internal[i]: A × the internal sum of the whole suffix i..n-1 (for the "take all that is left" leaf).
    internal = [0] * (n + 1)
    for i in range(n - 1, -1, -1):
        internal[i] = internal[i + 1] + sum(w_full[i][v] for v in range(i + 1, n))

    best_val, best_set = _greedy_incumbent(w_full, term, k)
    chosen: list[int] = []

    def dfs(i: int, r: int, cur: int, attach: list[int]) -> None:
        nonlocal best_val, best_set
        left = n - i
        if left == r:
            val = cur + internal[i] + sum(attach[i:]) + sum(term[i:])
            if val > best_val:
                best_val, best_set = val, (*chosen, *range(i, n))
            return
        if r == 0:
            if cur > best_val:
                best_val, best_set = cur, tuple(chosen)
            return
        if r == 1:  # one more device: no internal pair among the new picks, so the best completion is direct
            u = max(range(i, n), key=lambda v: attach[v] + term[v])
            val = cur + attach[u] + term[u]
            if val > best_val:
                best_val, best_set = val, (*chosen, u)
            return
        gains = [a + t[r - 1] + c for a, t, c in zip(attach[i:], top[i], term[i:], strict=True)]
        gain_i = gains[0]
        gains.sort(reverse=True)
        bound = cur + sum(gains[:r])
        if bound <= best_val:
            return
        # With device i forced in, the bound is at most: the top r-1 gains of the others plus gain_i.
        if bound - gains[r - 1] + gain_i > best_val:
            chosen.append(i)
            dfs(i + 1, r - 1, cur + attach[i] + term[i], [a + x for a, x in zip(attach, w_full[i], strict=True)])
            chosen.pop()
        dfs(i + 1, r, cur, attach)

    dfs(0, k, 0, [0] * n)
    return tuple(sorted(order[i] for i in best_set))


def _greedy_incumbent(w_full: list[list[int]], term: list[int], k: int) -> tuple[int, tuple[int, ...]]:
    """A good first solution (greedy growth, then best-improvement swaps) so the search prunes from the start."""
    n = len(w_full)
    start = max(range(n), key=lambda v: term[v] + max((w_full[v][u] for u in range(n) if u != v), default=0))
    inside = [False] * n
    inside[start] = True
    attach = list(w_full[start])
    for _ in range(k - 1):
        v = max((u for u in range(n) if not inside[u]), key=lambda u: attach[u] + term[u])
        inside[v] = True
        attach = [a + x for a, x in zip(attach, w_full[v], strict=True)]

    def value() -> int:
        members = [v for v in range(n) if inside[v]]
        pairs = sum(w_full[a][b] for i, a in enumerate(members) for b in members[i + 1 :])
        return pairs + sum(term[v] for v in members)

    current = value()
    improved = True
    while improved:
        improved = False
        best_delta, best_swap = 0, (-1, -1)
        for out in range(n):
            if not inside[out]:
                continue
            for into in range(n):
                if inside[into]:
                    continue
                # attach[x] = Σ over members of w_full[x][member]; removing `out` then adding `into`:
                delta = (attach[into] - w_full[into][out] + term[into]) - (attach[out] + term[out])
                if delta > best_delta:
                    best_delta, best_swap = delta, (out, into)
        if best_delta > 0:
            out, into = best_swap
            inside[out], inside[into] = False, True
            attach = [a - x + y for a, x, y in zip(attach, w_full[out], w_full[into], strict=True)]
            current += best_delta
            improved = True
    return current, tuple(v for v in range(n) if inside[v])


def _directed(pair_scores: PairScores, a: str, b: str) -> int:
    row = pair_scores.get(a)
    if row is None:
        return 0
    return row.get(b, 0)


def _check_unique(candidates: Sequence[DeviceInfo]) -> None:
    seen: set[str] = set()
    for d in candidates:
        if d.id in seen:
            raise ValueError(f"duplicate candidate device {d.id!r}")
        seen.add(d.id)
