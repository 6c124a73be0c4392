"""Device and node scores, and the device preference order (hami-wire §6.2, §6.3; differences 7, 8, 15).

Reference numbers come from HAMi's scheduler-policy proposal (``docs/develop/scheduler-policy.md``: GPU 6.75 vs
17.75, node 10 vs 7.5) and the website's ``docs/developers/scheduling.md`` (GPU 7.75 vs 18.75 with the slot term;
weights example GPU A 16 vs 15 and 26 vs 27). Cases marked "derived" were built from docs/hami-wire.md where HAMi's
text could not be found (the node score table 7.0 / 21.0 / 0.0, the device score 16.25, the NUMA GPU-A…D order).
"""

from __future__ import annotations

import pytest

from tests.builders import gpu, inventory, req, snap, use
from vgpu_scheduler.shared.domain.model import DeviceInfo, GpuPolicy, GpuPolicyToken, NodePolicy, ScoringWeights
from vgpu_scheduler.shared.domain.scoring import EffectivePolicy, device_score, device_sort_key
from vgpu_scheduler.shared.domain.snapshot import default_node_score

NO_SLOT = ScoringWeights(slot=0, core=1, memory=1)
DEFAULT = ScoringWeights()


# ---------------------------------------------------------------------------------------------- device score


@pytest.mark.parametrize(
    ("used_cores", "used_mem", "weights", "expected"),
    [
        pytest.param(10, 2000, NO_SLOT, 6.75, id="proposal-gpu1-6.75"),
        pytest.param(70, 6000, NO_SLOT, 17.75, id="proposal-gpu2-17.75"),
        pytest.param(10, 2000, DEFAULT, 7.75, id="website-gpu1-7.75"),
        pytest.param(70, 6000, DEFAULT, 18.75, id="website-gpu2-18.75"),
    ],
)
def test_seed_device_scores(used_cores: int, used_mem: int, weights: ScoringWeights, expected: float) -> None:
    # GPU with 10 slots, 100 cores, 8000 MiB; request: 1 GPU, 20 % cores, 1000 MiB; no slot in use.
    dev = gpu(count=10, mem=8000)
    score = device_score(dev, use(0, used_mem, used_cores), req(1, mem=1000, cores=20), weights)
    assert score == pytest.approx(expected)


@pytest.mark.parametrize(
    ("weights", "score_a", "score_b"),
    [
        pytest.param(ScoringWeights(), 16.0, 15.0, id="default-weights-A16-B15"),
        pytest.param(ScoringWeights(slot=1, core=1, memory=3), 26.0, 27.0, id="memory-3-A26-B27"),
    ],
)
def test_seed_scoring_weights_example(weights: ScoringWeights, score_a: float, score_b: float) -> None:
    # Predicted utilisation after the request (1 vGPU, 40 % memory, 10 % cores):
    # A: slot 0.2, core 0.9, memory 0.5; B: slot 0.8, core 0.1, memory 0.6.
    dev = gpu(count=10, mem=10000)
    request = req(1, pct=40, cores=10)
    assert device_score(dev, use(1, 1000, 80), request, weights) == pytest.approx(score_a)
    assert device_score(dev, use(7, 2000, 0), request, weights) == pytest.approx(score_b)


def test_device_score_16_25_derived() -> None:
    # derived: 10 × ((1+2)/10 + (20+50)/100 + (1000+4000)/8000) = 10 × (0.3 + 0.7 + 0.625) = 16.25
    assert device_score(gpu(count=10, mem=8000), use(2, 4000, 50), req(1, mem=1000, cores=20), DEFAULT) == 16.25


def test_device_score_includes_the_request_decision_7() -> None:
    idle = gpu(count=10, mem=8000)
    assert device_score(idle, use(0), req(1, mem=800, cores=10), DEFAULT) == pytest.approx(10 * (0.1 + 0.1 + 0.1))


def test_device_score_percentage_uses_the_cards_memory() -> None:
    assert device_score(gpu(count=4, mem=10000), use(0), req(2, pct=50), NO_SLOT) == pytest.approx(5.0)


@pytest.mark.parametrize("field", ["count", "core", "mem"])
def test_device_score_is_zero_without_a_denominator(field: str) -> None:
    dev = gpu(**{field: 0})  # type: ignore[arg-type]
    assert device_score(dev, use(1, 100, 10), req(1, mem=100, cores=10), DEFAULT) == 0.0


# ---------------------------------------------------------------------------------------------- node score


def test_seed_node_scores_10_and_7_5() -> None:
    # proposal: node1 ((1+3)/4)×10 = 10, node2 ((1+2)/4)×10 = 7.5 — the slot term of the node score, with the
    # pod's one task counted in. Four 1-slot GPUs without memory or core usage recorded.
    def node(busy: int) -> float:
        s = snap("n", n=4, count=1, usage={i: use(1) for i in range(busy)})
        return default_node_score(s.inventory, s.usages)

    # memory and core terms are 0 here, so the score is exactly the slot term
    assert node(4) == 10.0
    assert node(3) == 7.5


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        pytest.param({0: use(4, 3200, 60)}, 7.0, id="derived-7.0"),
        pytest.param({0: use(7, 5600, 70), 1: use(7, 5600, 70)}, 21.0, id="derived-21.0"),
        pytest.param({}, 0.0, id="derived-idle-0.0"),
    ],
)
def test_node_score_table_derived(usage: dict[int, object], expected: float) -> None:
    # derived: two GPUs of 10 slots, 100 cores, 8000 MiB: 10 × (Σused/20 + Σcores/200 + Σmem/16000)
    s = snap("n", n=2, usage=usage)  # type: ignore[arg-type]
    assert s.summary.score == pytest.approx(expected)


def test_node_score_is_zero_when_a_total_is_zero() -> None:
    s = snap("n", n=2, core=0, usage={0: use(1, 100, 0)})
    assert s.summary.score == 0.0


def test_node_score_counts_every_device_even_unhealthy() -> None:
    devs = [gpu("a", index=0, health=False), gpu("b", index=1)]
    s = snap("n", devs, usage={"a": use(10, 8000, 100)})
    assert s.summary.score == pytest.approx(10 * (10 / 20 + 100 / 200 + 8000 / 16000))


# ---------------------------------------------------------------------------------------------- device order


def policy(*tokens: GpuPolicyToken, numa_bind: bool = False) -> EffectivePolicy:
    return EffectivePolicy(NodePolicy.BINPACK, GpuPolicy(tokens), numa_bind, ScoringWeights())


B, S, N, M, T = (
    GpuPolicyToken.BINPACK,
    GpuPolicyToken.SPREAD,
    GpuPolicyToken.NUMA,
    GpuPolicyToken.MUTEX,
    GpuPolicyToken.TOPOLOGY_AWARE,
)

# derived NUMA example: GPU-A and GPU-B on NUMA 0, GPU-C and GPU-D on NUMA 1; scores A 2, B 8, C 4, D 6
NUMA_DEVICES = {
    "A": (gpu("GPU-A", index=0, numa=0), 2.0, 0),
    "B": (gpu("GPU-B", index=1, numa=0), 8.0, 3),
    "C": (gpu("GPU-C", index=2, numa=1), 4.0, 1),
    "D": (gpu("GPU-D", index=3, numa=1), 6.0, 2),
}


def ordered(p: EffectivePolicy, devices: dict[str, tuple[DeviceInfo, float, int]] = NUMA_DEVICES) -> str:
    """The devices (given in registration order) as ``fit`` sorts them: HAMi's list walked from its end."""
    key = device_sort_key(p)
    walk = list(devices)[::-1]
    return "".join(sorted(walk, key=lambda name: key(devices[name][1], devices[name][0], devices[name][2])))


@pytest.mark.parametrize(
    ("p", "expected"),
    [
        pytest.param(policy(B), "BDCA", id="binpack-score-first"),
        pytest.param(policy(S), "ACDB", id="spread-score-first"),
        pytest.param(policy(T), "ACDB", id="topology-aware-orders-like-spread"),
        pytest.param(policy(B, numa_bind=True), "BADC", id="numa-bind-binpack-lowest-numa-group-busiest-first"),
        pytest.param(policy(S, numa_bind=True), "CDAB", id="numa-bind-spread-highest-numa-group-idlest-first"),
        pytest.param(policy(M), "ACDB", id="mutex-fewest-tasks-first"),
        pytest.param(policy(N), "DCBA", id="chain-numa-alone-highest-numa-then-highest-index"),
        pytest.param(policy(B, N), "BDCA", id="chain-binpack-numa"),
        pytest.param(policy(N, B), "DCBA", id="chain-numa-binpack-highest-numa-first"),
        pytest.param(policy(N, S), "CDAB", id="chain-numa-spread"),
        pytest.param(policy(B, N, numa_bind=True), "DCBA", id="chain-numa-forced-first-by-numa-bind"),
        pytest.param(policy(M, T), "ACDB", id="chain-without-sort-key-falls-back-to-spread"),
        pytest.param(policy(M, B), "BDCA", id="chain-mutex-binpack-sorts-by-binpack"),
    ],
)
def test_device_order(p: EffectivePolicy, expected: str) -> None:
    assert ordered(p) == expected


def test_numa_breaks_score_ties_highest_numa_first_then_highest_index() -> None:
    # HAMi gpu_policy.go: score first, NUMA ascending on a tie (#1806), walked from the end; equal NUMA keeps the
    # registration order, so the later card comes first
    devices = {
        "a": (gpu("a", index=0, numa=0), 5.0, 0),
        "b": (gpu("b", index=1, numa=1), 5.0, 0),
        "c": (gpu("c", index=2, numa=1), 5.0, 0),
    }
    assert ordered(policy(B), devices) == "cba"
    assert ordered(policy(S), devices) == "cba"


def test_equal_devices_prefer_the_highest_index_as_hami_does() -> None:
    # Difference 8: HAMi's sort keeps equal devices in registration order (a chain ends on the index, ascending)
    # and Fit walks the list from its end, so the last registered of equal cards comes first, for every policy.
    devices = {name: (gpu(name, index=i), 1.0, 0) for i, name in enumerate("wxyz")}
    for p in (policy(B), policy(S), policy(M), policy(B, N), policy(N), policy(S, numa_bind=True)):
        assert ordered(p, devices) == "zyxw"


def test_a_chain_breaks_full_ties_on_the_index_whatever_the_input_order() -> None:
    # HAMi's lessByChain ends on Device.Index ascending; the other policies keep the order they are given.
    devices = {name: (gpu(name, index=i), 1.0, 0) for i, name in enumerate("wxyz")}
    key = device_sort_key(policy(B, N))
    assert "".join(sorted("wxyz", key=lambda n: key(1.0, devices[n][0], 0))) == "zyxw"
    key = device_sort_key(policy(B))
    assert "".join(sorted("wxyz", key=lambda n: key(1.0, devices[n][0], 0))) == "wxyz"


def test_inventory_builder_defaults() -> None:
    inv = inventory("n", n=2)
    assert [d.id for d in inv.devices] == ["GPU-n-0", "GPU-n-1"]
