"""The defragmentation planner (``shared/domain/defrag*.py``) on hand-made clusters: who moves, where, and why the
others stay."""

from __future__ import annotations

from dataclasses import replace

from vgpu_scheduler.shared.domain.defrag import ForPod, FreeCards, FreeNodes
from vgpu_scheduler.shared.domain.defragmodel import Cannot, DefragPlan
from vgpu_scheduler.shared.domain.defragwork import (
    BARE_POD,
    DAEMON_SET,
    NOT_NEEDED,
    OPTED_OUT,
    PDB_EXHAUSTED,
    PRIORITY_ABOVE,
)
from vgpu_scheduler.shared.domain.model import NO_CONSTRAINTS, PodRequest
from vgpu_scheduler.shared.domain.plan import Decision, apply_decision, plan
from vgpu_scheduler.shared.domain.preempt import release_charges
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot

from .defragcluster import PLACEMENT, Cluster, small, whole


def for_pod(request: PodRequest, priority: int = 0) -> ForPod:
    return ForPod("default", "waiting", "uid-waiting", request, NO_CONSTRAINTS, priority=priority)


def moved(result: DefragPlan | Cannot) -> list[str]:
    assert isinstance(result, DefragPlan), result
    return sorted(m.name for m in result.moves)


def left(result: DefragPlan | Cannot) -> dict[str, str]:
    return {x.name: x.reason for x in result.left}


def replay(c: Cluster, result: DefragPlan, request: PodRequest | None = None) -> dict[str, NodeSnapshot]:
    """Carry the plan out on the cluster's snapshots as the scheduler would: every move's source released, every
    replacement placed on its destination cards, the target placed; each step must fit on its own."""
    snaps = dict(c.snaps)
    by_uid = {x.uid: x for x in c.candidates}
    for m in result.moves:
        cand = by_uid[m.uid]
        snaps[m.source] = release_charges(snaps[m.source], cand.resident.charges)
    for m in result.moves:
        cand = by_uid[m.uid]
        pin = NO_CONSTRAINTS.__class__(use_uuids=frozenset(m.dest_devices))
        d = plan(cand.request, pin, [snaps[m.dest]], policies=PLACEMENT.policies)
        assert isinstance(d, Decision), f"{m.key} does not fit on its destination {m.dest}"
        snaps[m.dest] = apply_decision(snaps[m.dest], d)
    if request is not None and result.target is not None:
        uuids = frozenset(u for c in result.target.devices for u in c)
        d = plan(
            request, NO_CONSTRAINTS.__class__(use_uuids=uuids), [snaps[result.target.node]], policies=PLACEMENT.policies
        )
        assert isinstance(d, Decision), "the helped pod does not fit on its target"
        snaps[result.target.node] = apply_decision(snaps[result.target.node], d)
    return snaps


def fragmented() -> Cluster:
    """Two nodes of two 8000 MiB cards, every card holding small pods: a: 3 and 1, b: 2 and 2."""
    c = Cluster().node("a").node("b")
    for uid, node, card in [("a0", "a", 0), ("a1", "a", 0), ("a2", "a", 0), ("a3", "a", 1)]:
        c.add(uid, node, small(1000), on=[card])
    for uid, node, card in [("b0", "b", 0), ("b1", "b", 0), ("b2", "b", 1), ("b3", "b", 1)]:
        c.add(uid, node, small(1000), on=[card])
    return c


def test_a_pod_that_fits_needs_no_move() -> None:
    c = fragmented()
    result = c.plan(for_pod(small(2000)))
    assert isinstance(result, DefragPlan) and result.moves == ()
    assert result.target is not None


def test_a_whole_card_is_freed_by_moving_the_single_pod_of_the_emptiest_card() -> None:
    c = fragmented()
    result = c.plan(for_pod(whole()))
    assert moved(result) == ["a3"]
    assert isinstance(result, DefragPlan) and result.target is not None
    assert result.target.node == "a" and result.target.devices == (("GPU-a-1",),)
    m = result.moves[0]
    assert m.source == "a" and m.source_devices == ("GPU-a-1",)
    assert "GPU-a-1" not in m.dest_devices  # never onto the card being freed
    assert m.memory_mib == 1000 and result.memory_moved_mib == 1000
    assert result.freed == (("a", "GPU-a-1"),)
    assert left(result) == {"a0": NOT_NEEDED, "a1": NOT_NEEDED, "a2": NOT_NEEDED}
    replay(c, result, whole())


def test_nothing_movable_says_why_for_each_pod() -> None:
    c = Cluster().node("a")
    c.add("bare", "a", small(1000), on=[0], unmovable=BARE_POD)
    c.add("daemon", "a", small(1000), on=[1], unmovable=DAEMON_SET)
    result = c.plan(for_pod(whole()))
    assert isinstance(result, Cannot)
    assert "may not move" in result.reason
    assert left(result) == {"bare": BARE_POD, "daemon": DAEMON_SET}
    assert result.to_json()["feasible"] is False


def test_a_pdb_that_allows_no_disruption_sends_the_plan_to_another_node() -> None:
    c = Cluster().node("a").node("b")
    c.add("guarded", "a", small(1000), on=[0], budgets=("default/pdb",))
    c.add("a-big", "a", small(7000), on=[1])
    c.add("free-b", "b", small(2000), on=[0])
    c.add("b-big", "b", small(7000), on=[1])
    # with the budget spent, only b's small pod can move (to a's first card, which has room)
    result = c.plan(for_pod(whole()), allowances={"default/pdb": 0})
    assert moved(result) == ["free-b"]
    # with one disruption allowed, the cheaper move (1000 MiB on a) wins
    assert moved(c.plan(for_pod(whole()), allowances={"default/pdb": 1})) == ["guarded"]


def test_a_pdb_left_on_the_target_node_is_named() -> None:
    c = Cluster().node("a", n=3)
    c.add("guarded", "a", small(1000), on=[0], budgets=("default/pdb",))
    c.add("x", "a", small(1000), on=[1])
    c.add("y", "a", small(1000), on=[2])
    c.add("z", "a", small(1000), on=[2])
    result = c.plan(for_pod(whole()), allowances={"default/pdb": 0})
    assert moved(result) == ["x"]
    assert left(result) == {"guarded": PDB_EXHAUSTED, "y": NOT_NEEDED, "z": NOT_NEEDED}


def test_two_pods_of_one_budget_do_not_both_move_when_it_allows_one() -> None:
    c = Cluster().node("a", n=2).node("b", n=2)
    c.add("p1", "a", small(1000), on=[0], budgets=("ns/pdb",))
    c.add("p2", "a", small(1000), on=[0], budgets=("ns/pdb",))
    c.add("a-big", "a", small(7500), on=[1])
    c.add("q1", "b", small(1000), on=[0])
    c.add("q2", "b", small(1000), on=[0])
    c.add("q3", "b", small(1000), on=[0])
    c.add("b-big", "b", small(7500), on=[1])
    # a's card 0 needs both budgeted pods moved: one disruption is not enough, so b's card 0 (three moves) it is
    assert moved(c.plan(for_pod(whole()), allowances={"ns/pdb": 1})) == ["q1", "q2", "q3"]
    assert moved(c.plan(for_pod(whole()), allowances={"ns/pdb": 2})) == ["p1", "p2"]


def test_a_pod_above_the_helped_pods_priority_stays() -> None:
    c = Cluster().node("a").node("b")
    c.add("important", "a", small(1000), on=[0], priority=1000)
    c.add("a-big", "a", small(7500), on=[1])
    c.add("b0", "b", small(1000), on=[0])
    c.add("b1", "b", small(1000), on=[0])
    c.add("b-big", "b", small(7500), on=[1])
    low = c.plan(for_pod(whole(), priority=10))
    assert moved(low) == ["b0", "b1"]
    high = c.plan(for_pod(whole(), priority=1000))  # equal priority: may move
    assert moved(high) == ["important"]


def test_equal_moves_and_memory_prefer_the_lower_priority() -> None:
    c = Cluster().node("a").node("b")
    c.add("hi", "a", small(1000), on=[0], priority=50)
    c.add("a-big", "a", small(5000), on=[1])
    c.add("lo", "b", small(1000), on=[0], priority=5)
    c.add("b-big", "b", small(5000), on=[1])
    assert moved(c.plan(for_pod(whole(), priority=100))) == ["lo"]


def test_opted_out_pods_stay() -> None:
    c = Cluster().node("a")
    c.add("keep", "a", small(1000), on=[0], unmovable=OPTED_OUT)
    c.add("x", "a", small(1000), on=[1])
    c.add("y", "a", small(1000), on=[1])
    result = c.plan(for_pod(whole()))
    assert moved(result) == ["x", "y"]
    assert left(result) == {"keep": OPTED_OUT}


def test_no_destination_for_the_pod_that_would_move() -> None:
    c = Cluster().node("a")
    c.add("big", "a", small(7000), on=[0], unmovable=BARE_POD)
    c.add("mid", "a", small(5000), on=[1])
    result = c.plan(for_pod(whole()))
    assert isinstance(result, Cannot)
    assert result.reason.startswith("no destination for the pods that would have to move (default/mid:")
    assert list(left(result)) == ["mid"] and left(result)["mid"].startswith("no destination")


def test_the_pod_fits_nowhere_even_with_everyone_moved() -> None:
    c = Cluster().node("a")
    c.add("x", "a", small(1000), on=[0])
    result = c.plan(for_pod(whole(nums=3)))
    assert isinstance(result, Cannot)
    assert result.reason.startswith("the pod fits on no node even with every pod there moved (a:")


def test_a_priority_above_the_pods_is_a_reason_in_cannot() -> None:
    c = Cluster().node("a", n=1).node("b", n=1)
    c.add("x", "a", small(1000), priority=100)
    c.add("y", "b", small(1000), priority=100)
    result = c.plan(for_pod(whole(), priority=1))
    assert isinstance(result, Cannot)
    assert "2× " + PRIORITY_ABOVE in result.reason
    assert left(result) == {"x": PRIORITY_ABOVE, "y": PRIORITY_ABOVE}


def test_two_whole_cards_on_one_node() -> None:
    c = Cluster().node("a", n=4).node("b", n=4)
    for i in range(4):  # a: one pod per card; b: two per card
        c.add(f"a{i}", "a", small(2000), on=[i])
        c.add(f"b{i}x", "b", small(1000), on=[i])
        c.add(f"b{i}y", "b", small(1000), on=[i])
    result = c.plan(for_pod(whole(nums=2)))
    assert isinstance(result, DefragPlan) and result.target is not None
    assert len(result.moves) == 2 and {m.source for m in result.moves} == {"a"}
    assert result.target.node == "a" and len(result.target.devices[0]) == 2
    taken = set(result.target.devices[0])
    assert {m.source_devices[0] for m in result.moves} == taken
    assert all(not taken & set(m.dest_devices) for m in result.moves)
    replay(c, result, whole(nums=2))


def test_a_40_gib_pod_goes_to_the_node_of_40_gib_cards() -> None:
    c = Cluster().node("small", n=2, mem=24576).node("large", n=2, mem=40960)
    c.add("s0", "small", small(1000), on=[0])
    c.add("s1", "small", small(1000), on=[1])
    c.add("l0", "large", small(1000), on=[0])
    c.add("l1x", "large", small(1000), on=[1])
    c.add("l1y", "large", small(1000), on=[1])
    result = c.plan(for_pod(small(40960)))
    assert isinstance(result, DefragPlan) and result.target is not None
    assert result.target.node == "large" and moved(result) == ["l0"]
    replay(c, result, small(40960))


def test_two_moved_pods_do_not_count_on_the_same_free_space() -> None:
    def cluster(room: int) -> Cluster:
        c = Cluster().node("a", n=1).node("b", n=1)
        c.add("p1", "a", small(3000))
        c.add("p2", "a", small(3000))
        c.add("b-used", "b", small(8000 - room), unmovable=BARE_POD)
        return c

    # b has room for one of them only: no plan
    tight = cluster(5000).plan(for_pod(whole()))
    assert isinstance(tight, Cannot) and tight.reason.startswith("no destination")
    # with room for both, both go to b, and b is not over-committed
    roomy = cluster(6000)
    result = roomy.plan(for_pod(whole()))
    assert moved(result) == ["p1", "p2"]
    assert isinstance(result, DefragPlan) and {m.dest for m in result.moves} == {"b"}
    snaps = replay(roomy, result, whole())
    assert snaps["b"].usages[0].used_mem_mib == 8000


def test_free_cards_frees_the_cheapest_cards_and_counts_idle_ones() -> None:
    c = fragmented().node("c", n=2)
    c.add("c0", "c", small(1000), on=[0])
    c.add("c1", "c", small(6000), on=[1])
    # nothing is idle: the two single-pod cards are freed (a's second, c's first), each pod moving to a card that
    # stays in use
    result = c.plan(FreeCards(2))
    assert moved(result) == ["a3", "c0"]
    assert isinstance(result, DefragPlan) and result.target is None
    assert sorted(result.freed) == [("a", "GPU-a-1"), ("c", "GPU-c-0")]
    freed = set(result.freed)
    assert all((m.dest, d) not in freed for m in result.moves for d in m.dest_devices)
    replay(c, result)
    # an idle card counts: one move fewer
    c.node("d", n=1)
    result = c.plan(FreeCards(2))
    assert moved(result) == ["a3"]
    assert isinstance(result, DefragPlan) and ("d", "GPU-d-0") in result.freed


def test_free_cards_of_a_type_and_on_given_nodes() -> None:
    c = fragmented()
    assert isinstance(c.plan(FreeCards(1, type="a100")), Cannot)
    result = c.plan(FreeCards(1, type="v100", nodes=frozenset({"b"})))
    assert isinstance(result, DefragPlan)
    assert [n for n, _ in result.freed] == ["b"] and len(result.moves) == 2


def test_free_cards_already_idle() -> None:
    c = Cluster().node("a")
    c.add("x", "a", small(1000), on=[0])
    result = c.plan(FreeCards(1))
    assert isinstance(result, DefragPlan) and result.moves == () and result.freed == (("a", "GPU-a-1"),)


def test_free_cards_cannot_say_how_many() -> None:
    c = Cluster().node("a")
    c.add("x", "a", small(5000), on=[0])
    c.add("y", "a", small(5000), on=[1])
    result = c.plan(FreeCards(1))
    assert isinstance(result, Cannot)
    assert result.reason.startswith("only 0 of 1 cards can be made idle")


def test_free_nodes_moves_every_pod_of_the_cheapest_node() -> None:
    c = fragmented().node("c", n=2)
    c.add("c0", "c", small(1000), on=[0])
    result = c.plan(FreeNodes(1))
    assert moved(result) == ["c0"]
    assert isinstance(result, DefragPlan) and result.freed == (("c", "GPU-c-0"), ("c", "GPU-c-1"))
    assert all(m.dest != "c" for m in result.moves)


def test_json_shapes() -> None:
    result = fragmented().plan(for_pod(whole()))
    assert isinstance(result, DefragPlan)
    out = result.to_json()
    assert out["feasible"] is True
    assert out["moves"][0]["pod"] == "default/a3" and out["moves"][0]["from"] == {"node": "a", "devices": ["GPU-a-1"]}
    assert out["target"]["node"] == "a" and out["memory_moved_mib"] == 1000


def test_a_pod_holding_two_cards_frees_both_with_one_move() -> None:
    c = Cluster().node("a", n=2).node("b", n=2)
    c.add("pair", "a", small(1000, nums=2))  # one pod on both of a's cards
    c.add("b0", "b", small(1000), on=[0])
    c.add("b1", "b", small(1000), on=[1])
    result = c.plan(FreeCards(2))
    assert moved(result) == ["pair"]
    assert isinstance(result, DefragPlan) and sorted(result.freed) == [("a", "GPU-a-0"), ("a", "GPU-a-1")]
    assert sorted(result.moves[0].source_devices) == ["GPU-a-0", "GPU-a-1"] and result.moves[0].dest == "b"


def test_free_nodes_counts_an_idle_node_and_skips_unmovable_ones() -> None:
    c = Cluster().node("a").node("b").node("c")
    c.add("a0", "a", small(1000), on=[0], unmovable=BARE_POD)
    c.add("b0", "b", small(1000), on=[0])
    c.add("b1", "b", small(1000), on=[1])
    result = c.plan(FreeNodes(2))
    assert moved(result) == ["b0", "b1"]
    assert isinstance(result, DefragPlan) and {n for n, _ in result.freed} == {"b", "c"}
    assert left(result) == {"a0": BARE_POD}
    assert all(m.dest == "a" for m in result.moves)


def test_replacements_and_the_pod_go_only_where_kube_scheduler_lets_them() -> None:
    c = Cluster().node("a").node("b").node("c")
    c.add("x", "a", small(1000), on=[0])
    c.add("a-big", "a", small(7000), on=[1], unmovable=BARE_POD)
    c.add("b0", "b", small(7000), on=[0], unmovable=BARE_POD)
    c.add("b1", "b", small(7000), on=[1], unmovable=BARE_POD)
    c.add("c0", "c", small(1000), on=[0])
    c.add("c-big", "c", small(7000), on=[1], unmovable=BARE_POD)
    # x may only go to b, which has 1000 MiB free per card: it fits there
    c.candidates = [replace(x, nodes=frozenset({"b"})) if x.resident.name == "x" else x for x in c.candidates]
    result = c.plan(for_pod(whole()))
    assert isinstance(result, DefragPlan) and result.moves[0].name == "x" and result.moves[0].dest == "b"
    # the pod may only go to c: c0 moves instead
    goal = replace(for_pod(whole()), nodes=frozenset({"c"}))
    result = c.plan(goal)
    assert isinstance(result, DefragPlan) and result.target is not None and result.target.node == "c"
    assert [m.name for m in result.moves] == ["c0"]
    # x may go nowhere: no destination
    c.candidates = [replace(x, nodes=frozenset()) if x.resident.name == "x" else x for x in c.candidates]
    result = c.plan(replace(for_pod(whole()), nodes=frozenset({"a"})))
    assert isinstance(result, Cannot) and "no node its node selector allows is schedulable" in result.reason
