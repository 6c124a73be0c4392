"""Victim selection for device-aware preemption (``shared/domain/preempt.py``): examples and properties."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import gpu, inventory, pod, req
from vgpu_scheduler.shared.domain.model import (
    MEM_PCT_UNSET,
    NO_CONSTRAINTS,
    NVIDIA,
    ZERO_USAGE,
    ContainerRequest,
    DeviceInfo,
    MigPlacement,
    MigProfile,
    NodeInventory,
    PodRequest,
)
from vgpu_scheduler.shared.domain.plan import Decision, apply_decision, plan
from vgpu_scheduler.shared.domain.preempt import (
    NO_LOWER_PRIORITY,
    Budget,
    NoVictims,
    Resident,
    VictimSet,
    eviction_order,
    pdb_violations,
    pick_node,
    release_charges,
    select_victims,
)
from vgpu_scheduler.shared.domain.scoring import Policies
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.domain.vendor import NVIDIA_ONLY, NVIDIA_RULES, RuleSet
from vgpu_scheduler.shared.vendors import hygon

POLICIES = Policies()


def place(node: NodeSnapshot, pods: list[tuple[str, int, float, PodRequest]]) -> tuple[NodeSnapshot, list[Resident]]:
    """Place ``(uid, priority, start, request)`` pods one by one with the real planner; the node and residents."""
    residents: list[Resident] = []
    for uid, priority, start, request in pods:
        d = plan(request, NO_CONSTRAINTS, [node], policies=POLICIES)
        assert isinstance(d, Decision), f"{uid} does not fit while building the node"
        node = apply_decision(node, d)
        residents.append(Resident(uid, "default", uid, priority, start, d.charges))
    return node, residents


def fits(request: PodRequest, node: NodeSnapshot) -> bool:
    return isinstance(plan(request, NO_CONSTRAINTS, [node], policies=POLICIES), Decision)


def whole_gpus(n: int) -> PodRequest:
    return pod(req(n, mem=8000, cores=100))


def test_two_full_gpus_evict_exactly_the_two_pods_holding_them() -> None:
    node = NodeSnapshot(inventory("n1", n=4))
    node, residents = place(node, [(f"low-{i}", 0, float(i), whole_gpus(1)) for i in range(4)])
    result = select_victims(whole_gpus(2), NO_CONSTRAINTS, node, residents, priority=1000, policies=POLICIES)
    assert isinstance(result, VictimSet)
    # lowest priority first, then the newest: low-3 and low-2 go
    assert sorted(v.uid for v in result.victims) == ["low-2", "low-3"]
    freed = {c.uuid for v in result.victims for c in v.charges}
    assert {c.uuid for c in result.decision.charges} == freed
    assert result.pdb_violations == 0


def test_cores_bind_so_the_victims_free_cores_too() -> None:
    # memory is plentiful (each low pod holds 1000 of 8000 MiB) but every card's cores are allocated
    node = NodeSnapshot(inventory("n1", n=2))
    lows = [(f"low-{i}", 0, float(i), pod(req(1, mem=1000, cores=50))) for i in range(4)]
    node, residents = place(node, lows)
    assert all(u.used_cores == 100 for u in node.usages)
    preemptor = pod(req(1, mem=2000, cores=60))
    result = select_victims(preemptor, NO_CONSTRAINTS, node, residents, priority=10, policies=POLICIES)
    assert isinstance(result, VictimSet)
    # 60 cores need both 50-core pods of one card gone; one card is enough
    assert len(result.victims) == 2
    assert len({c.uuid for v in result.victims for c in v.charges}) == 1


def test_never_a_pod_of_equal_or_higher_priority() -> None:
    node = NodeSnapshot(inventory("n1", n=2))
    node, residents = place(node, [("same", 100, 0.0, whole_gpus(1)), ("higher", 200, 1.0, whole_gpus(1))])
    result = select_victims(whole_gpus(1), NO_CONSTRAINTS, node, residents, priority=100, policies=POLICIES)
    assert result == NoVictims("n1", NO_LOWER_PRIORITY)


def test_no_set_when_even_every_lower_pod_is_not_enough() -> None:
    node = NodeSnapshot(inventory("n1", n=2))
    node, residents = place(node, [("low", 0, 0.0, whole_gpus(1)), ("high", 500, 1.0, whole_gpus(1))])
    result = select_victims(whole_gpus(2), NO_CONSTRAINTS, node, residents, priority=100, policies=POLICIES)
    assert isinstance(result, NoVictims)
    assert "even with every lower-priority pod evicted" in result.reason


def test_fits_already_is_not_a_preemption() -> None:
    node = NodeSnapshot(inventory("n1", n=2))
    node, residents = place(node, [("low", 0, 0.0, whole_gpus(1))])
    result = select_victims(whole_gpus(1), NO_CONSTRAINTS, node, residents, priority=100, policies=POLICIES)
    assert isinstance(result, NoVictims)


def test_lowest_priority_goes_first_then_the_newest() -> None:
    node = NodeSnapshot(inventory("n1", n=3))
    node, residents = place(
        node, [("old-low", 0, 1.0, whole_gpus(1)), ("mid", 5, 0.0, whole_gpus(1)), ("new-low", 0, 2.0, whole_gpus(1))]
    )
    assert [r.uid for r in eviction_order(residents)] == ["new-low", "old-low", "mid"]
    result = select_victims(whole_gpus(1), NO_CONSTRAINTS, node, residents, priority=10, policies=POLICIES)
    assert isinstance(result, VictimSet)
    assert [v.uid for v in result.victims] == ["new-low"]


def test_a_pdb_protected_pod_is_reprieved_when_another_will_do() -> None:
    node = NodeSnapshot(inventory("n1", n=2))
    node, residents = place(node, [("a", 0, 0.0, whole_gpus(1)), ("b", 0, 1.0, whole_gpus(1))])
    # b is the newer one (evicted first), but evicting it violates a budget: a goes instead
    residents = [replace(r, pdb_violating=r.uid == "b") for r in residents]
    result = select_victims(whole_gpus(1), NO_CONSTRAINTS, node, residents, priority=10, policies=POLICIES)
    assert isinstance(result, VictimSet)
    assert [v.uid for v in result.victims] == ["a"]
    assert result.pdb_violations == 0
    # both protected: the violation is reported
    residents = [replace(r, pdb_violating=True) for r in residents]
    result = select_victims(whole_gpus(1), NO_CONSTRAINTS, node, residents, priority=10, policies=POLICIES)
    assert isinstance(result, VictimSet)
    assert result.pdb_violations == 1


def test_required_victims_stay_and_only_the_missing_devices_are_added() -> None:
    node = NodeSnapshot(inventory("n1", n=3))
    node, residents = place(node, [(f"low-{i}", 0, float(i), whole_gpus(1)) for i in range(3)])
    result = select_victims(
        whole_gpus(2), NO_CONSTRAINTS, node, residents, priority=10, policies=POLICIES, required={"low-0"}
    )
    assert isinstance(result, VictimSet)
    assert sorted(v.uid for v in result.victims) == ["low-0", "low-2"]


def test_pick_node_prefers_fewer_violations_then_lower_priorities() -> None:
    node = NodeSnapshot(inventory("n1", n=1))
    d = plan(whole_gpus(1), NO_CONSTRAINTS, [node], policies=POLICIES)
    assert isinstance(d, Decision)

    def vs(name: str, prios: list[int], violations: int = 0) -> VictimSet:
        victims = tuple(Resident(f"{name}-{i}", "ns", "p", p, 0.0, ()) for i, p in enumerate(prios))
        return VictimSet(name, victims, d, violations)

    assert pick_node([vs("a", [5], 1), vs("b", [9])]) == vs("b", [9])
    assert pick_node([vs("a", [5]), vs("b", [9])]) == vs("a", [5])
    assert pick_node([vs("a", [5, 5]), vs("b", [5])]) == vs("b", [5])
    assert pick_node([]) is None


def test_pdb_allowance_is_spent_pod_by_pod() -> None:
    budget = Budget("ns", {"app": "web"}, (), disruptions_allowed=1)
    pods = [("p1", "ns", {"app": "web"}), ("p2", "ns", {"app": "web"}), ("p3", "other", {"app": "web"})]
    assert pdb_violations(pods, [budget]) == {"p2"}
    expr = Budget("ns", {}, (("tier", "In", ("a", "b")),), disruptions_allowed=0)
    assert pdb_violations([("x", "ns", {"tier": "a"}), ("y", "ns", {"tier": "c"})], [expr]) == {"x"}


# ---- properties ---------------------------------------------------------------------------------------------------

small_pods = st.tuples(
    st.integers(0, 3),  # priority
    st.integers(1, 2),  # GPUs
    st.sampled_from([1000, 2000, 4000, 8000]),  # MiB each
    st.sampled_from([0, 25, 50, 100]),  # cores each
)


@settings(max_examples=150, deadline=None)
@given(
    residents=st.lists(small_pods, min_size=1, max_size=10),
    preemptor=small_pods,
    gpus=st.integers(1, 4),
)
def test_victim_sets_are_lower_priority_sufficient_minimal_and_priority_ordered(
    residents: list[tuple[int, int, int, int]], preemptor: tuple[int, int, int, int], gpus: int
) -> None:
    node = NodeSnapshot(inventory("n1", n=gpus))
    placed: list[Resident] = []
    for i, (prio, n, mem, cores) in enumerate(residents):
        request = pod(req(n, mem=mem, cores=cores))
        d = plan(request, NO_CONSTRAINTS, [node], policies=POLICIES)
        if isinstance(d, Decision):
            node = apply_decision(node, d)
            placed.append(Resident(f"p{i}", "ns", f"p{i}", prio, float(i), d.charges))
    _, n, mem, cores = preemptor
    request = pod(req(n, mem=mem, cores=cores))
    priority = 2
    result = select_victims(request, NO_CONSTRAINTS, node, placed, priority=priority, policies=POLICIES)
    lower = [r for r in placed if r.priority < priority]
    without_lower = release_charges(node, [c for r in lower for c in r.charges])
    if isinstance(result, NoVictims):
        # no set exists: the pod fits already, or not even with every lower-priority pod gone
        assert fits(request, node) or not fits(request, without_lower)
        return
    victims = {v.uid for v in result.victims}
    assert all(v.priority < priority for v in result.victims)
    # sufficient: the decision is a fit on the node without them
    freed = release_charges(node, [c for v in result.victims for c in v.charges])
    assert fits(request, freed)
    assert not fits(request, node)
    # minimal: giving back any one victim leaves the pod without room
    for v in result.victims:
        rest = [c for w in result.victims if w.uid != v.uid for c in w.charges]
        assert not fits(request, release_charges(node, rest))
    # priority order: the most important lower-priority pod goes only if nothing else can make room
    top = min(lower, key=lambda r: (-r.priority, r.start_time, r.uid))
    if top.uid in victims:
        assert not fits(request, release_charges(node, [c for r in lower if r.uid != top.uid for c in r.charges]))
    # listed most important first, as kube-scheduler lists victims
    assert [v.uid for v in result.victims] == [v.uid for v in reversed(eviction_order(result.victims))]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 2), st.sampled_from([500, 3000]), st.sampled_from([0, 30])), max_size=8))
def test_release_charges_undoes_apply_decision(pods: list[tuple[int, int, int]]) -> None:
    node = NodeSnapshot(inventory("n1", n=3))
    decisions = []
    for n, mem, cores in pods:
        d = plan(pod(req(n, mem=mem, cores=cores)), NO_CONSTRAINTS, [node], policies=POLICIES)
        if isinstance(d, Decision):
            node = apply_decision(node, d)
            decisions.append(d)
    empty = release_charges(node, [c for d in decisions for c in d.charges])
    assert all(u == ZERO_USAGE for u in empty.usages)


# ---- other vendors and MIG: the same selection, by their own Fit rules ---------------------------------------------


def _place_with(
    node: NodeSnapshot, pods: list[tuple[str, int, PodRequest]], rules: RuleSet
) -> tuple[NodeSnapshot, list[Resident]]:
    residents = []
    for i, (uid, prio, request) in enumerate(pods):
        d = plan(request, NO_CONSTRAINTS, [node], policies=POLICIES, rules=rules)
        assert isinstance(d, Decision), uid
        node = apply_decision(node, d)
        residents.append(Resident(uid, "ns", uid, prio, float(i), d.charges))
    return node, residents


def test_a_dcu_pod_preempts_by_the_dcu_rules() -> None:
    rules = RuleSet({NVIDIA: NVIDIA_RULES, hygon.NAME: hygon.DCU_RULES})
    devices = tuple(DeviceInfo(f"dcu-{i}", i, 4, 16384, 100, "DCU", 0, "", True, vendor=hygon.NAME) for i in range(2))
    node = NodeSnapshot(NodeInventory("n1", hygon.NAME, devices), {})

    def dcu(mem: int, cores: int) -> PodRequest:
        return PodRequest((ContainerRequest(1, mem, MEM_PCT_UNSET, cores, type=hygon.NAME),), 0)

    node, residents = _place_with(node, [("a", 0, dcu(12000, 40)), ("b", 0, dcu(12000, 40))], rules)
    result = select_victims(dcu(10000, 40), NO_CONSTRAINTS, node, residents, priority=9, policies=POLICIES, rules=rules)
    assert isinstance(result, VictimSet)
    assert [v.uid for v in result.victims] == ["b"]
    assert {c.uuid for c in result.decision.charges} == {c.uuid for c in result.victims[0].charges}


def test_a_mig_pod_preempts_the_instance_whose_slices_it_needs() -> None:
    profiles = (
        MigProfile("1g.5gb", 4864, 15, 1, tuple(MigPlacement(s, 1) for s in range(7))),
        MigProfile("7g.40gb", 40960, 100, 7, (MigPlacement(0, 8),)),
    )
    card = gpu("GPU-mig", count=7, mem=40960, mode="mig", mig_profiles=profiles)
    node = NodeSnapshot(inventory("n1", [card]))
    small = pod(req(1, mem=4000))
    node, residents = _place_with(node, [(f"s{i}", 0, small) for i in range(7)], NVIDIA_ONLY)
    # a 1g instance is needed: one small pod goes (the newest), not all seven
    result = select_victims(small, NO_CONSTRAINTS, node, residents, priority=5, policies=POLICIES)
    assert isinstance(result, VictimSet)
    assert [v.uid for v in result.victims] == ["s6"]
    # the whole card is needed: every instance goes
    whole = select_victims(pod(req(1, mem=40000)), NO_CONSTRAINTS, node, residents, priority=5, policies=POLICIES)
    assert isinstance(whole, VictimSet) and len(whole.victims) == 7
