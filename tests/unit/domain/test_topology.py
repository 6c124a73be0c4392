"""Topology-aware device choice: HAMi's topology examples and tests, HAMi's tie-break, exactness against brute force."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import builders
from vgpu_scheduler.shared.domain.model import DeviceInfo
from vgpu_scheduler.shared.domain.topology import (
    best_subset,
    pair_score,
    select_set,
    select_single,
    set_score,
)


def gpu(index: int, uuid: str | None = None) -> DeviceInfo:
    return builders.gpu(uuid or f"gpu{index}", index=index, mem=32768)


def symmetric(pairs: Mapping[tuple[str, str], int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (a, b), s in pairs.items():
        out.setdefault(a, {})[b] = s
        out.setdefault(b, {})[a] = s
    return out


def ids(devices: Sequence[DeviceInfo] | None) -> list[str] | None:
    return None if devices is None else [d.id for d in devices]


# HAMi docs/proposals/gpu-topo-policy.md ("GPU topology scheduling strategy"), Node1: the score table of the
# one-card and multi-card examples, written as the device plugin's JSON (the doc quotes the numbers as strings).
SEED: dict[str, dict[str, int]] = {
    "gpu0": {"gpu1": 100, "gpu2": 100, "gpu3": 200},
    "gpu1": {"gpu0": 100, "gpu2": 200, "gpu3": 100},
    "gpu2": {"gpu0": 100, "gpu1": 200, "gpu3": 200},
    "gpu3": {"gpu0": 200, "gpu1": 100, "gpu2": 200},
}
SEED_GPUS = [gpu(i) for i in range(4)]
WALK = SEED_GPUS[::-1]
"""Four idle equal cards as HAMi's ``Fit`` finds them (its sorted list walked from the end): gpu3 first."""


# ---------------------------------------------------------------------------------------------------------------
# HAMi's topology-policy proposal (docs/proposals/gpu-topo-policy.md in HAMi's repository)
# ---------------------------------------------------------------------------------------------------------------


def test_seed_per_card_sums_are_400_400_500_500() -> None:
    sums = [sum(pair_score(d.id, o.id, SEED) for o in SEED_GPUS if o is not d) for d in SEED_GPUS]
    assert sums == [400, 400, 500, 500]


def test_seed_single_card_takes_the_first_worst_connected_card_met() -> None:
    # gpu0 and gpu1 both sum to 400 ("the worst connectivity ... preferred in single-card mode"); HAMi keeps the
    # first it meets in Fit's order: gpu1 when the idle cards are walked from the end.
    assert select_single(WALK, SEED).id == "gpu1"
    assert select_single(SEED_GPUS, SEED).id == "gpu0"
    assert select_single(SEED_GPUS[1:], SEED).id == "gpu1"


def test_seed_three_cards_score_500_and_the_first_set_met_is_gpu1_gpu2_gpu3() -> None:
    by_id = {d.id: d for d in SEED_GPUS}
    a = [by_id["gpu1"], by_id["gpu2"], by_id["gpu3"]]
    b = [by_id["gpu0"], by_id["gpu2"], by_id["gpu3"]]
    # Both sets score 500; HAMi lists (gpu3, gpu2, gpu1) before (gpu3, gpu2, gpu0) and keeps the first.
    assert set_score(a, SEED) == set_score(b, SEED) == 500
    chosen = select_set(WALK, 3, SEED)
    assert ids(chosen) == ["gpu3", "gpu2", "gpu1"]
    assert chosen is not None and set_score(chosen, SEED) == 500


def test_seed_two_cards_take_gpu2_gpu3_as_the_proposal_says() -> None:
    # Three pairs score 200: {0,3}, {1,2}, {2,3}. HAMi meets (gpu3, gpu2) first, the pair the proposal's prose names.
    chosen = select_set(WALK, 2, SEED)
    assert ids(chosen) == ["gpu3", "gpu2"]
    assert chosen is not None and set_score(chosen, SEED) == 200


HAMI_THREE = {
    "gpu0": {"gpu1": 100, "gpu2": 200},
    "gpu1": {"gpu0": 100, "gpu2": 150},
    "gpu2": {"gpu0": 200, "gpu1": 150},
}
"""The three-card table of HAMi's TestComputeWorstSingleCard and TestComputeBestCombination."""


def test_hami_compute_worst_single_card() -> None:
    # HAMi pkg/device/nvidia/device_test.go TestComputeWorstSingleCard: totals 300, 250, 350, the worst is gpu1.
    scores = HAMI_THREE
    assert select_single([gpu(0), gpu(1), gpu(2)], scores).id == "gpu1"


def test_hami_compute_best_combination() -> None:
    # HAMi pkg/device/nvidia/device_test.go TestComputeBestCombination: [gpu0,gpu2]=200 is the best pair.
    scores = HAMI_THREE
    assert ids(select_set([gpu(0), gpu(1), gpu(2)], 2, scores)) == ["gpu0", "gpu2"]


def test_compat_doc_example_nvlink_pair_and_the_lonely_card() -> None:
    # hami-wire §2.3 example: GPU-a and GPU-b share NVLinks (1260), GPU-c is cross-CPU (20) to both.
    scores = {
        "GPU-a": {"GPU-b": 1260, "GPU-c": 20},
        "GPU-b": {"GPU-a": 1260, "GPU-c": 20},
        "GPU-c": {"GPU-a": 20, "GPU-b": 20},
    }
    devs = [gpu(0, "GPU-a"), gpu(1, "GPU-b"), gpu(2, "GPU-c")]
    assert select_single(devs, scores).id == "GPU-c"
    assert ids(select_set(devs, 2, scores)) == ["GPU-a", "GPU-b"]


def test_two_nvlink_islands_four_cards_take_one_whole_island() -> None:
    islands = [range(0, 4), range(4, 8)]
    pairs: dict[tuple[str, str], int] = {}
    for a, b in itertools.combinations(range(8), 2):
        same = any(a in isl and b in isl for isl in islands)
        pairs[(f"gpu{a}", f"gpu{b}")] = 600 if same else 10
    # Break the symmetry: island two has one doubled link, so it is strictly better for 4 cards.
    pairs[("gpu5", "gpu6")] = 1200
    scores = symmetric(pairs)
    devs = [gpu(i) for i in range(8)]
    assert ids(select_set(devs, 4, scores)) == ["gpu4", "gpu5", "gpu6", "gpu7"]
    # Two cards: the doubled link wins outright.
    assert ids(select_set(devs, 2, scores)) == ["gpu5", "gpu6"]


# ---------------------------------------------------------------------------------------------------------------
# Edges of the contract
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("k", "expected"),
    [
        pytest.param(5, None, id="more-than-candidates-none"),
        pytest.param(4, ["gpu3", "gpu1", "gpu0", "gpu2"], id="exactly-k-all-in-given-order"),
        pytest.param(3, ["gpu3", "gpu1", "gpu2"], id="first-best-set-in-candidate-order"),
    ],
)
def test_set_size_edges(k: int, expected: list[str] | None) -> None:
    devs = [SEED_GPUS[3], SEED_GPUS[1], SEED_GPUS[0], SEED_GPUS[2]]
    assert ids(select_set(devs, k, SEED)) == expected


@pytest.mark.parametrize("k", [0, -1])
def test_set_size_below_one_is_an_error(k: int) -> None:
    with pytest.raises(ValueError, match="k must be at least 1"):
        select_set(SEED_GPUS, k, SEED)


def test_no_candidates_is_an_error_for_a_single_card() -> None:
    with pytest.raises(ValueError, match="no candidates"):
        select_single([], SEED)


@pytest.mark.parametrize("fn", [lambda c: select_single(c, {}), lambda c: select_set(c, 2, {})], ids=["single", "set"])
def test_duplicate_candidates_are_an_error(fn) -> None:
    with pytest.raises(ValueError, match="duplicate candidate device 'gpu1'"):
        fn([gpu(0), gpu(1), gpu(1, "gpu1")])


@pytest.mark.parametrize(
    ("scores", "expected"),
    [
        pytest.param({"a": {"b": 300}, "b": {"a": 300}}, 300, id="symmetric"),
        pytest.param({"a": {"b": 300}, "b": {"a": 100}}, 100, id="asymmetric-takes-the-weaker-direction"),
        pytest.param({"a": {"b": 300}}, 0, id="one-direction-missing-counts-0"),
        pytest.param({}, 0, id="no-table-counts-0"),
        pytest.param({"a": {"c": 5}, "b": {}}, 0, id="missing-pair-counts-0"),
    ],
)
def test_pair_score(scores: dict[str, dict[str, int]], expected: int) -> None:
    assert pair_score("a", "b", scores) == pair_score("b", "a", scores) == expected


def test_without_scores_everything_ties_and_the_first_candidates_win() -> None:
    devs = [gpu(i) for i in (7, 3, 5, 1, 6)]
    assert select_single(devs, {}).id == "gpu7"
    assert ids(select_set(devs, 3, {})) == ["gpu7", "gpu3", "gpu5"]


# ---------------------------------------------------------------------------------------------------------------
# Exactness: branch and bound == HAMi's enumeration (every combination in order, the first best kept)
# ---------------------------------------------------------------------------------------------------------------


def brute_force(devices: Sequence[DeviceInfo], k: int, scores: Mapping[str, Mapping[str, int]]) -> list[str]:
    if k == 1:  # HAMi's computeWorstSingleCard: the first lowest sum to the other candidates
        sums = [sum(pair_score(d.id, o.id, scores) for o in devices if o is not d) for d in devices]
        return [devices[sums.index(min(sums))].id]
    best: tuple[int, list[str]] | None = None
    for combo in itertools.combinations(devices, k):  # HAMi's generateCombinations order
        total = set_score(combo, scores)
        if best is None or total > best[0]:
            best = (total, [d.id for d in combo])
    assert best is not None
    return best[1]


@st.composite
def topologies(draw: st.DrawFn, max_n: int = 12) -> tuple[list[DeviceInfo], int, dict[str, dict[str, int]]]:
    n = draw(st.integers(min_value=1, max_value=max_n))
    k = draw(st.integers(min_value=1, max_value=n))
    indices = draw(st.permutations(range(n)))
    devs = [gpu(i) for i in indices]
    # Few distinct levels make ties common (real tables look like this); wide ranges exercise the bound.
    levels = draw(st.sampled_from([(0,), (0, 100), (10, 20, 30, 40, 50, 60, 100, 200), tuple(range(0, 1801, 10))]))
    scores: dict[str, dict[str, int]] = {}
    for a, b in itertools.combinations(devs, 2):
        s = draw(st.sampled_from(levels))
        asym = draw(st.sampled_from([None, None, None, *levels]))  # now and then a different reverse direction
        scores.setdefault(a.id, {})[b.id] = s
        scores.setdefault(b.id, {})[a.id] = s if asym is None else asym
    return devs, k, scores


@settings(max_examples=300, deadline=None)
@given(topologies())
def test_branch_and_bound_equals_brute_force(case: tuple[list[DeviceInfo], int, dict[str, dict[str, int]]]) -> None:
    devs, k, scores = case
    got = select_set(devs, k, scores)
    assert got is not None
    assert [d.id for d in got] == brute_force(devs, k, scores)


@settings(max_examples=150, deadline=None)
@given(topologies())
def test_one_card_set_is_the_single_card_choice(case: tuple[list[DeviceInfo], int, dict[str, dict[str, int]]]) -> None:
    devs, _, scores = case
    assert ids(select_set(devs, 1, scores)) == [select_single(devs, scores).id]


@settings(max_examples=100, deadline=None)
@given(topologies(max_n=9))
def test_result_depends_on_candidate_positions_not_on_device_indices(
    case: tuple[list[DeviceInfo], int, dict[str, dict[str, int]]],
) -> None:
    devs, k, scores = case
    renumbered = [replace(d, index=len(devs) - i) for i, d in enumerate(devs)]
    assert ids(select_set(devs, k, scores)) == ids(select_set(renumbered, k, scores))
    assert select_single(devs, scores).id == select_single(renumbered, scores).id


def test_best_subset_on_a_raw_matrix_with_default_ranks() -> None:
    w = [[0, 5, 1, 1], [5, 0, 1, 1], [1, 1, 0, 5], [1, 1, 5, 0]]
    # {0,1} and {2,3} both score 5: positions decide.
    assert best_subset(w, 2) == (0, 1)
    assert best_subset(w, 2, rank=[3, 2, 1, 0]) == (2, 3)
