"""plan(): node and device choice for whole pods, HAMi's user stories, init/app containers, MIG, topology."""

from __future__ import annotations

import pytest

from tests.builders import NONE, gpu, pod, req, snap, use
from vgpu_scheduler.shared.domain.model import (
    NO_CONSTRAINTS,
    ContainerDevice,
    DeviceUsage,
    GpuPolicy,
    GpuPolicyToken,
    MigAllocation,
    MigGeometryEntry,
    MigPlacement,
    MigProfile,
    MigTemplate,
    NodePolicy,
    NvidiaConfig,
    PodConstraints,
    PodRequest,
    Reason,
    ScoringWeights,
)
from vgpu_scheduler.shared.domain.plan import Decision, Failure, apply_decision, plan
from vgpu_scheduler.shared.domain.scoring import Policies
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot

BINPACK_GPU = GpuPolicy((GpuPolicyToken.BINPACK,))
SPREAD_GPU = GpuPolicy((GpuPolicyToken.SPREAD,))
TOPOLOGY = GpuPolicy((GpuPolicyToken.TOPOLOGY_AWARE,))
DEFAULTS = Policies()


def decide(
    p: PodRequest,
    nodes: list[NodeSnapshot],
    constraints: PodConstraints = NO_CONSTRAINTS,
    policies: Policies = DEFAULTS,
    config: NvidiaConfig | None = None,
) -> Decision:
    got = plan(p, constraints, nodes, policies=policies, config=config or NvidiaConfig())
    assert isinstance(got, Decision), got
    return got


def place(p: PodRequest, nodes: list[NodeSnapshot], **kw: object) -> tuple[Decision, list[NodeSnapshot]]:
    """Decide, then return the decision and the nodes with its usage applied."""
    d = decide(p, nodes, **kw)  # type: ignore[arg-type]
    return d, [apply_decision(n, d) if n.name == d.node else n for n in nodes]


def uuids(d: Decision, container: int = 0) -> list[str]:
    return [dev.uuid for dev in d.devices[container]]


# ---------------------------------------------------------------------------------------------- seed stories

ONE_GPU = pod(req(1, pct=20, cores=20))


@pytest.mark.parametrize(
    ("node_policy", "pod2_node"),
    [
        pytest.param(NodePolicy.BINPACK, "node1", id="story1-node-binpack"),
        pytest.param(NodePolicy.SPREAD, "node2", id="story2-node-spread"),
    ],
)
def test_seed_stories_node_policy(node_policy: NodePolicy, pod2_node: str) -> None:
    nodes = [snap("node1"), snap("node2")]
    policies = Policies(node=node_policy)
    d1, nodes = place(ONE_GPU, nodes, policies=policies)
    assert d1.node == "node1"  # equal scores: the first name wins (difference 8)
    d2, _ = place(ONE_GPU, nodes, policies=policies)
    assert d2.node == pod2_node


@pytest.mark.parametrize(
    ("gpu_policy", "pod2_gpu"),
    [
        pytest.param(BINPACK_GPU, "GPU-node1-3", id="story3-gpu-binpack"),
        pytest.param(SPREAD_GPU, "GPU-node1-2", id="story4-gpu-spread"),
    ],
)
def test_seed_stories_gpu_policy(gpu_policy: GpuPolicy, pod2_gpu: str) -> None:
    nodes = [snap("node1")]
    policies = Policies(gpu=gpu_policy)
    d1, nodes = place(ONE_GPU, nodes, policies=policies)
    # HAMi's code on an idle node: four equal cards, the last registered first (difference 8), both policies
    assert uuids(d1) == ["GPU-node1-3"]
    d2, _ = place(ONE_GPU, nodes, policies=policies)
    assert uuids(d2) == [pod2_gpu]


def test_seed_node_binpack_10_vs_spread_7_5() -> None:
    # node1 has 3 of 4 one-slot GPUs busy, node2 2 of 4: binpack takes node1 (10 after the pod), spread node2
    node1 = snap("node1", count=1, usage={0: use(1), 1: use(1), 2: use(1)})
    node2 = snap("node2", count=1, usage={0: use(1), 1: use(1)})
    p = pod(req(1, mem=1))
    assert decide(p, [node2, node1]).node == "node1"
    assert decide(p, [node1, node2], policies=Policies(node=NodePolicy.SPREAD)).node == "node2"


def test_seed_gpu_binpack_picks_the_busier_gpu_spread_the_idler() -> None:
    # proposal: GPU1 6.75, GPU2 17.75 (core + memory terms only)
    node = snap(n=2, usage={0: use(0, 2000, 10), 1: use(0, 6000, 70)})
    p = pod(req(1, mem=1000, cores=20))
    no_slot = PodConstraints(weights=ScoringWeights(slot=0))
    assert uuids(decide(p, [node], no_slot, Policies(gpu=BINPACK_GPU))) == ["GPU-node1-1"]
    assert uuids(decide(p, [node], no_slot, Policies(gpu=SPREAD_GPU))) == ["GPU-node1-0"]


@pytest.mark.parametrize(
    ("weights", "gpu_policy", "chosen"),
    [
        pytest.param(ScoringWeights(), BINPACK_GPU, "A", id="binpack-default-weights-A"),
        pytest.param(ScoringWeights(1, 1, 3), BINPACK_GPU, "B", id="binpack-memory-weighted-B"),
        pytest.param(ScoringWeights(), SPREAD_GPU, "B", id="spread-default-weights-B"),
        pytest.param(ScoringWeights(1, 1, 3), SPREAD_GPU, "A", id="spread-memory-weighted-A"),
    ],
)
def test_seed_scoring_weights_override(weights: ScoringWeights, gpu_policy: GpuPolicy, chosen: str) -> None:
    node = snap(
        devices=[gpu("A", index=0, mem=10000), gpu("B", index=1, mem=10000)],
        usage={"A": use(1, 1000, 80), "B": use(7, 2000, 0)},
    )
    d = decide(pod(req(1, pct=40, cores=10)), [node], PodConstraints(weights=weights, gpu_policy=gpu_policy))
    assert uuids(d) == [chosen]


# ---------------------------------------------------------------------------------------------- overrides


def test_pod_node_policy_overrides_the_default() -> None:
    busy, idle = snap("a", usage={0: use(1, 100)}), snap("b")
    p = pod(req(1, mem=100))
    assert decide(p, [busy, idle]).node == "a"
    assert decide(p, [busy, idle], PodConstraints(node_policy=NodePolicy.SPREAD)).node == "b"


def test_pod_gpu_policy_overrides_the_default() -> None:
    node = snap(n=2, usage={1: use(1, 100)})
    p = pod(req(1, mem=100))
    assert uuids(decide(p, [node])) == ["GPU-node1-0"]
    assert uuids(decide(p, [node], PodConstraints(gpu_policy=BINPACK_GPU))) == ["GPU-node1-1"]


def test_use_gputype_selects_matching_cards_and_nodes() -> None:
    v100 = snap("a", type="NVIDIA-Tesla V100")
    a100 = snap("b", type="NVIDIA A100-SXM4-80GB")
    d = decide(pod(req(1, mem=100)), [v100, a100], PodConstraints(use_types=("A100",)))
    assert d.node == "b"


def test_use_gpuuuid_pins_the_card() -> None:
    d = decide(pod(req(1, mem=100)), [snap()], PodConstraints(use_uuids=frozenset({"GPU-node1-2"})))
    assert uuids(d) == ["GPU-node1-2"]


@pytest.mark.parametrize(
    ("use_ids", "nouse_ids", "chosen"),
    [
        pytest.param({2}, {2}, None, id="same-card-on-both"),
        pytest.param({1, 2}, {2, 3}, ["GPU-node1-1"], id="overlapping"),
        pytest.param({2}, {0, 1}, ["GPU-node1-2"], id="disjoint"),
    ],
)
def test_both_uuid_lists_apply(use_ids: set[int], nouse_ids: set[int], chosen: list[str] | None) -> None:
    # HAMi's CheckUUID applies the use list, then the nouse list: a card named in both is never used
    c = PodConstraints(
        use_uuids=frozenset(f"GPU-node1-{i}" for i in use_ids),
        nouse_uuids=frozenset(f"GPU-node1-{i}" for i in nouse_ids),
    )
    got = plan(pod(req(1, mem=100)), c, [snap()], policies=DEFAULTS)
    if chosen is None:
        assert isinstance(got, Failure)
        assert got.reasons["node1"] == "4/4 CardUuidMismatch"
    else:
        assert isinstance(got, Decision)
        assert uuids(got) == chosen


def test_vgpu_mode_selects_mode() -> None:
    devs = [gpu("core", index=0, mode="hami-core"), gpu("mps", index=1, mode="mps")]
    d = decide(pod(req(1, mem=100)), [snap(devices=devs)], PodConstraints(vgpu_mode="mps"))
    assert uuids(d) == ["mps"]


def test_mutex_takes_only_idle_cards() -> None:
    node = snap(n=3, usage={0: use(1, 100), 2: use(1, 100)})
    d = decide(pod(req(1, mem=100)), [node], PodConstraints(gpu_policy=GpuPolicy((GpuPolicyToken.MUTEX,))))
    assert uuids(d) == ["GPU-node1-1"]


# ---------------------------------------------------------------------------------------------- containers


def test_device_list_has_one_entry_per_container_init_first() -> None:
    p = pod(NONE, req(1, mem=3000, cores=30), req(2, mem=5000), init=[NONE])
    d = decide(p, [snap()])
    assert len(d.devices) == 4
    assert d.devices[0] == () and d.devices[1] == ()
    assert [dev.used_mem_mib for dev in d.devices[2]] == [3000]
    assert [dev.used_mem_mib for dev in d.devices[3]] == [5000, 5000]


def test_app_containers_fit_cumulatively() -> None:
    # one card of 8000 MiB: two app containers of 5000 cannot share it
    got = plan(pod(req(1, mem=5000), req(1, mem=5000)), NO_CONSTRAINTS, [snap(n=1)], policies=DEFAULTS)
    assert isinstance(got, Failure)
    assert got.rejections["node1"].container_index == 1
    assert got.reasons["node1"] == "1/1 CardInsufficientMemory"


def test_init_containers_each_see_the_node_before_the_pod() -> None:
    # two init containers of 6000 MiB run one after the other: both fit the same 8000 MiB card
    p = pod(req(1, mem=1000), init=[req(1, mem=6000), req(1, mem=6000)])
    d = decide(p, [snap(n=1)])
    (charge,) = d.charges
    assert (charge.slots, charge.mem_mib) == (1, 6000)


def test_app_container_second_card_under_spread() -> None:
    # app containers are cumulative: under spread the second app container prefers the other card (the first
    # takes the last of two equal cards, as HAMi does)
    d = decide(pod(req(1, mem=1000), req(1, mem=1000)), [snap(n=2)])
    assert uuids(d, 0) == ["GPU-node1-1"] and uuids(d, 1) == ["GPU-node1-0"]


def test_charges_collapse_init_and_app_usage() -> None:
    p = pod(req(1, mem=1000, cores=10), req(1, mem=1000, cores=10), init=[req(1, mem=5000, cores=5)])
    d = decide(p, [snap(n=1)])
    (charge,) = d.charges
    assert (charge.slots, charge.mem_mib, charge.cores_pct) == (2, 5000, 20)


def test_whole_card_charge_is_exclusive() -> None:
    d = decide(pod(req(1, cores=100)), [snap(n=1)])
    (charge,) = d.charges
    assert charge.exclusive and charge.mem_mib == 8000


def test_pod_without_requests_gets_the_preferred_node_and_empty_lists() -> None:
    d = decide(pod(NONE, NONE), [snap("b"), snap("a")])
    assert (d.node, d.devices, d.charges) == ("a", ((), ()), ())


def test_no_candidate_nodes_is_an_empty_failure() -> None:
    assert plan(pod(req(1)), NO_CONSTRAINTS, [], policies=DEFAULTS) == Failure(reasons={}, rejections={})


# ---------------------------------------------------------------------------------------------- failures


def test_failure_lists_every_node_with_its_reason() -> None:
    nodes = [
        snap("full", n=2, usage={0: use(10), 1: use(10)}),
        snap("small", n=1),
        snap("sick", n=2, health=False),
    ]
    got = plan(pod(req(2, mem=100)), NO_CONSTRAINTS, nodes, policies=DEFAULTS)
    assert isinstance(got, Failure)
    assert got.reasons == {
        "full": "2/2 CardTimeSlicingExhausted",
        "small": "NodeInsufficientDevice",
        "sick": "2/2 CardNotHealth",
    }
    assert got.rejections["sick"].counts == {Reason.CARD_NOT_HEALTH: 2}
    assert got.rejections["sick"].total == 2


def test_exhaustive_gives_the_same_answer() -> None:
    nodes = [snap("a", usage={0: use(3, 4000, 50)}), snap("b", usage={1: use(1, 1000)}), snap("c", n=1)]
    for p in (pod(req(1, mem=2000)), pod(req(4, mem=7000)), pod(req(9))):
        for node_policy in NodePolicy:
            policies = Policies(node=node_policy)
            fast = plan(p, NO_CONSTRAINTS, nodes, policies=policies)
            full = plan(p, NO_CONSTRAINTS, nodes, policies=policies, exhaustive=True)
            assert fast == full


# ---------------------------------------------------------------------------------------------- MIG

PROFILES = (
    MigProfile("1g.5gb", 4864, 15, 1, tuple(MigPlacement(s, 1) for s in range(7))),
    MigProfile("3g.20gb", 19968, 43, 3, (MigPlacement(0, 4), MigPlacement(4, 4))),
)


def mig_node(name: str = "node1", **kw: object) -> NodeSnapshot:
    return snap(name, devices=[gpu("GPU-mig", count=7, mem=40960, mode="mig", mig_profiles=PROFILES)], **kw)  # type: ignore[arg-type]


def test_dynamic_mig_allocation_and_device_entry() -> None:
    d = decide(pod(NONE, req(1, mem=10000)), [mig_node()])
    assert d.devices[1] == (ContainerDevice("GPU-mig", 19968, 43),)
    # 3g placements are tried from the highest start (§7.1)
    assert d.mig == (MigAllocation(1, 0, "GPU-mig", "3g.20gb", MigPlacement(4, 4)),)
    (charge,) = d.charges
    assert charge.mig_placements == (MigPlacement(4, 4),)


def test_mig_gpu_gives_one_container_several_instances() -> None:
    d = decide(pod(req(3, mem=4000)), [mig_node()])
    assert uuids(d) == ["GPU-mig"] * 3
    assert [m.placement.start for m in d.mig] == [6, 5, 4]  # 1g placements are tried from the highest start
    assert [m.device_index for m in d.mig] == [0, 1, 2]


def test_mig_placements_are_distinct_across_containers_and_with_usage() -> None:
    node = mig_node(usage={"GPU-mig": use(1, 4864, 15, mig=[MigPlacement(6, 1)])})
    d = decide(pod(req(1, mem=4000), req(1, mem=4000), init=[req(1, mem=4000)]), [node])
    starts = [m.placement.start for m in d.mig]
    assert starts == [5, 4, 3]
    after = apply_decision(node, d)
    assert sorted(p.start for p in after.device_usage("GPU-mig").mig_in_use) == [3, 4, 5, 6]


def test_mig_container_cannot_take_more_instances_than_slots() -> None:
    node = mig_node(usage={"GPU-mig": use(5, 0, 0)})
    got = plan(pod(req(3, mem=4000)), NO_CONSTRAINTS, [node], policies=DEFAULTS)
    assert isinstance(got, Failure)
    assert got.rejections["node1"].counts == {
        Reason.CARD_TIME_SLICING_EXHAUSTED: 1,
        Reason.ALLOCATED_CARDS_INSUFFICIENT_REQUEST: 2,
    }


A100_GEOMETRIES = MigGeometryEntry(
    models=("A100",),
    geometries=(
        (MigTemplate("1g.5gb", 5120, 14, 7),),
        (MigTemplate("1g.5gb", 5120, 14, 1), MigTemplate("2g.10gb", 10240, 28, 3)),
        (MigTemplate("3g.20gb", 20480, 42, 2),),
        (MigTemplate("7g.40gb", 40960, 100, 1),),
    ),
)


def test_legacy_mig_template_choice() -> None:
    node = snap(devices=[gpu("GPU-leg", type="NVIDIA A100-PCIE-40GB", count=7, mem=40960, mode="mig")])
    config = NvidiaConfig(known_mig_geometries=(A100_GEOMETRIES,))
    d = decide(pod(req(2, mem=8000)), [node], config=config)
    assert [(e.legacy_mig, e.used_mem_mib, e.used_cores) for e in d.devices[0]] == [
        ((1, 1), 10240, 28),
        ((1, 2), 10240, 28),
    ]
    after = apply_decision(node, d).device_usage("GPU-leg")
    assert (after.legacy_geometry, after.legacy_slots) == (1, frozenset({1, 2}))


# ---------------------------------------------------------------------------------------------- topology

PAIRS = {
    "g0": {"g1": 100, "g2": 20, "g3": 20},
    "g1": {"g0": 100, "g2": 20, "g3": 20},
    "g2": {"g0": 20, "g1": 20, "g3": 600},
    "g3": {"g0": 20, "g1": 20, "g2": 600},
}


def topo_node(**kw: object) -> NodeSnapshot:
    devs = [gpu(f"g{i}", index=i) for i in range(4)]
    return snap(devices=devs, pair_scores=PAIRS, **kw)  # type: ignore[arg-type]


def test_topology_aware_pair_takes_the_best_connected_set() -> None:
    d = decide(pod(req(2, mem=100)), [topo_node()], PodConstraints(gpu_policy=TOPOLOGY))
    assert sorted(uuids(d)) == ["g2", "g3"]


def test_topology_aware_single_takes_the_worst_connected_card() -> None:
    # g0 and g1 both sum 140; HAMi's Fit meets g3, g2, g1, g0 and keeps the first lowest: g1
    d = decide(pod(req(1, mem=100)), [topo_node()], PodConstraints(gpu_policy=TOPOLOGY))
    assert uuids(d) == ["g1"]


def test_topology_aware_exactly_enough_candidates_are_taken() -> None:
    node = topo_node(usage={"g2": use(10), "g3": use(10)})
    d = decide(pod(req(2, mem=100)), [node], PodConstraints(gpu_policy=TOPOLOGY))
    assert sorted(uuids(d)) == ["g0", "g1"]


def test_topology_aware_too_few_candidates_fails_with_partial_count() -> None:
    node = topo_node(usage={"g1": use(10), "g2": use(10), "g3": use(10)})
    got = plan(pod(req(2, mem=100)), PodConstraints(gpu_policy=TOPOLOGY), [node], policies=DEFAULTS)
    assert isinstance(got, Failure)
    assert got.reasons["node1"] == "1/4 AllocatedCardsInsufficientRequest, 3/4 CardTimeSlicingExhausted"


# ---------------------------------------------------------------------------------------------- apply


def test_apply_decision_adds_charges() -> None:
    node = snap(n=2, usage={0: use(1, 1000, 10)})
    d = decide(pod(req(2, mem=2000, cores=20)), [node])
    after = apply_decision(node, d)
    assert after.device_usage("GPU-node1-0") == use(2, 3000, 30)
    assert after.device_usage("GPU-node1-1") == use(1, 2000, 20)
    assert after.summary.score > node.summary.score


def test_apply_decision_rejects_another_nodes_decision() -> None:
    d = decide(pod(req(1, mem=100)), [snap("a")])
    with pytest.raises(ValueError, match="node 'a'"):
        apply_decision(snap("b"), d)


def test_many_equal_nodes_choose_the_first_name() -> None:
    # 300 identical idle nodes given in reverse name order, the busiest 280 of another kind full: spread and
    # binpack both end on a run of equal scores that must be ordered by name
    idle = [snap(f"idle-{k:03d}", n=1) for k in reversed(range(300))]
    full = [snap(f"full-{k:03d}", n=1, usage={0: use(10, 8000, 100)}) for k in range(280)]
    p = pod(req(1, mem=100))
    assert decide(p, full + idle).node == "idle-000"
    assert decide(p, full + idle, policies=Policies(node=NodePolicy.SPREAD)).node == "idle-000"


@pytest.mark.parametrize("exhaustive", [False, True], ids=["fast", "exhaustive"])
def test_passed_over_counts_the_preferred_nodes_that_do_not_fit(exhaustive: bool) -> None:
    # binpack prefers the busiest node: busy-a and busy-b (equal scores) cannot take a whole card, idle can
    busy: dict[int | str, DeviceUsage] = {i: use(1, mem=1000, cores=10) for i in range(4)}
    nodes = [snap("idle"), snap("busy-b", usage=busy), snap("busy-a", usage=busy)]
    whole = pod(req(1, cores=100))
    d = plan(whole, NO_CONSTRAINTS, nodes, policies=Policies(), exhaustive=exhaustive)
    assert isinstance(d, Decision)
    assert (d.node, d.passed_over) == ("idle", 2)
    d = plan(pod(req(1, mem=100)), NO_CONSTRAINTS, nodes, policies=Policies(), exhaustive=exhaustive)
    assert isinstance(d, Decision)
    assert (d.node, d.passed_over) == ("busy-a", 0)  # the preferred node fits: nothing passed over


def test_an_app_container_meets_equal_cards_in_the_order_the_previous_one_sorted_them() -> None:
    # HAMi sorts one list in place per app container (stable up to 12 devices) and Fit walks it from the end, so a
    # tie in the second container keeps the first container's order, not the registration order.
    # binpack; the first container (2000 MiB) scores a 5.75, b 4.5 and takes c (one slot, the highest score);
    # the second (4000 MiB) scores a and b 7 each and c is full: a comes first, though b has the higher index.
    devs = [gpu("a", index=0, mem=16000), gpu("b", index=1, mem=8000), gpu("c", index=2, count=1, mem=32000)]
    node = snap(devices=devs, usage={"a": use(1, 4000), "b": use(1, 0)})
    d = decide(pod(req(1, mem=2000), req(1, mem=4000)), [node], policies=Policies(gpu=BINPACK_GPU))
    assert uuids(d, 0) == ["c"] and uuids(d, 1) == ["a"]
    # the same tie met first (c full beforehand): the registration order walked from the end, b before a
    full = snap(devices=devs, usage={"a": use(1, 4000), "b": use(1, 0), "c": use(1, 2000)})
    d = decide(pod(req(1, mem=4000)), [full], policies=Policies(gpu=BINPACK_GPU))
    assert uuids(d) == ["b"]
