"""``execute_plan`` against the API emulator (which serves ``pods/eviction`` and honours PodDisruptionBudgets) and
real Redis: a fragmented cluster of two nodes with two cards each, a shared pod on every card, and a pending pod
asking for a whole card. The plans are written by hand (the planner has its own tests)."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.integration.defrag.cluster import NS, PLACEMENT, Cluster, gpu_pod
from vgpu_scheduler.shared.defrag.execute import ExecuteOptions, ExecuteResult, execute_plan
from vgpu_scheduler.shared.domain.defragmodel import DefragPlan
from vgpu_scheduler.shared.emulator import Emulator
from vgpu_scheduler.shared.k8s import Api
from vgpu_scheduler.shared.store import ReserveConflict, Store

RUN = ExecuteOptions(execute=True, wave_timeout_s=30, bind_timeout_s=30)


async def fragmented(cluster: Cluster) -> tuple[dict[str, Any], DefragPlan]:
    """Four shared pods, one per card; the plan moves ``a`` off GPU-n1-0 to GPU-n2-0 for pod ``big``."""
    await cluster.nodes("n1", "n2")
    a = await cluster.running("a", "n1", "GPU-n1-0")
    await cluster.running("b", "n1", "GPU-n1-1")
    await cluster.running("c", "n2", "GPU-n2-0")
    await cluster.running("d", "n2", "GPU-n2-1")
    big = cluster.pending()
    return big, cluster.plan([a], [("n2", "GPU-n2-0")], big, "n1", "GPU-n1-0")


async def run(
    plan: DefragPlan, api: Api, store: Store, options: ExecuteOptions = RUN, **kw: Any
) -> tuple[ExecuteResult, list[str]]:
    lines: list[str] = []
    result = await execute_plan(
        plan, api=api, store=store, placement=PLACEMENT, options=options, out=lines.append, **kw
    )
    return result, lines


def events(emulator: Emulator, reason: str) -> dict[str, str]:
    return {e["involvedObject"]["name"]: e["message"] for e in emulator.list("Event") if e.get("reason") == reason}


def budget(app: str, allowed: int) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": app, "namespace": NS},
        "spec": {"selector": {"matchLabels": {"app": app}}, "maxUnavailable": 0},
        "status": {"disruptionsAllowed": allowed, "observedGeneration": 1, "desiredHealthy": 1, "currentHealthy": 1},
    }


async def test_a_plan_is_carried_out_the_pod_binds_on_its_cards_and_every_moved_pod_is_replaced(
    cluster: Cluster, api: Api, store: Store, emulator: Emulator
) -> None:
    big, plan = await fragmented(cluster)
    with cluster.actors(bind_target="big"):
        result, lines = await run(plan, api, store)
        await cluster.settle()
    assert result.ok, lines
    assert (result.moved, result.failures, result.cards_freed) == (1, 0, 1)
    assert result.replacements == {"uid-a": "default/a-r on n2"}
    assert result.target_bound == "n1" and result.hold == "kept"
    record = await store.reservations.get(big["metadata"]["uid"])
    assert record is not None and record.allocation.node == "n1"
    assert {c.uuid for c in record.allocation.charges} == {"GPU-n1-0"}
    assert lines == [
        "holding node n1's cards GPU-n1-0 for pod default/big",
        "[1/1] evicted default/a from n1 (GPU-n1-0)",
        "[1/1] default/a is gone; its replacement default/a-r on n2 is bound",
        "pod default/big is bound on node n1",
    ]
    moved = events(emulator, "DefragMoved")
    assert list(moved) == ["a"] and "to make room for pod default/big on node n1 (GPU-n1-0)" in moved["a"]
    assert "Moving 1 pod(s) (default/a)" in events(emulator, "DefragMakingRoom")["big"]


async def test_waves_wait_for_the_replacements_before_the_next_eviction(
    cluster: Cluster, api: Api, store: Store
) -> None:
    await cluster.nodes("n1", "n2")
    a = await cluster.running("a", "n1", "GPU-n1-0")
    b = await cluster.running("b", "n1", "GPU-n1-1")
    big = cluster.pending()
    plan = cluster.plan([a, b], [("n2", "GPU-n2-0"), ("n2", "GPU-n2-1")], big, "n1", "GPU-n1-0")
    with cluster.actors():
        result, lines = await run(plan, api, store, ExecuteOptions(execute=True, wave_size=1, bind_timeout_s=0.05))
    assert result.ok and result.moved == 2, lines
    assert lines[1:5] == [
        "[1/2] evicted default/a from n1 (GPU-n1-0)",
        "[1/2] default/a is gone; its replacement default/a-r on n2 is bound",
        "[2/2] evicted default/b from n1 (GPU-n1-1)",
        "[2/2] default/b is gone; its replacement default/b-r on n2 is bound",
    ]
    assert "is not bound yet" in lines[-1]  # nothing binds it here; the moves succeeded all the same


async def test_a_dry_run_evicts_nothing_and_holds_nothing(
    cluster: Cluster, api: Api, store: Store, emulator: Emulator
) -> None:
    big, plan = await fragmented(cluster)
    result, lines = await run(plan, api, store, ExecuteOptions())
    assert result.ok and not result.executed and result.moved == 0 and result.hold == "checked"
    assert emulator.get("Pod", NS, "a") is not None
    assert await store.reservations.get(big["metadata"]["uid"]) is None
    assert lines[1:] == [
        "would hold node n1's cards GPU-n1-0 for pod default/big before the first eviction",
        "wave 1:",
        "  [1/1] would evict default/a from n1 (GPU-n1-0, 4000 MiB); its replacement fits on n2 (GPU-n2-0)",
    ]


async def test_a_budget_that_forbids_the_move_stops_before_anything_and_the_hold_is_released(
    cluster: Cluster, api: Api, store: Store, emulator: Emulator
) -> None:
    big, plan = await fragmented(cluster)
    emulator.put(budget("web", 0))
    with cluster.actors():
        result, lines = await run(plan, api, store)
    assert not result.ok and result.failed is not None and result.failed.name == "a"
    assert (result.moved, result.failures, result.cards_freed, result.hold) == (0, 1, 0, "released")
    assert "its PodDisruptionBudget refuses the eviction" in result.reason
    assert "The disruption budget web needs 1 healthy pods" in result.reason
    assert emulator.get("Pod", NS, "a") is not None
    assert await store.reservations.get(big["metadata"]["uid"]) is None
    assert lines[-3:] == [f"stopped: default/a: {result.reason}", "not moved (0): none", "hold: released"]
    assert "Making room for this pod stopped" in events(emulator, "DefragFailed")["big"]


async def test_a_failure_after_the_room_is_free_keeps_the_hold(
    cluster: Cluster, api: Api, store: Store, emulator: Emulator
) -> None:
    await cluster.nodes("n1", "n2")
    a = await cluster.running("a", "n1", "GPU-n1-0")
    c = await cluster.running("c", "n2", "GPU-n2-0")
    emulator.patch("Pod", NS, "c", {"metadata": {"labels": {"app": "db"}}})
    emulator.put(budget("db", 0))
    big = cluster.pending()
    plan = cluster.plan([a, c], [("n2", "GPU-n2-1"), ("n2", "GPU-n2-1")], big, "n1", "GPU-n1-0")
    with cluster.actors():
        result, lines = await run(plan, api, store, ExecuteOptions(execute=True, wave_size=1))
    assert result.failed is not None and result.failed.name == "c", lines
    assert (result.moved, result.cards_freed, result.hold) == (1, 1, "kept")
    assert lines[-3:-1] == ["moved (1): default/a (replacement default/a-r on n2)", "not moved (0): none"]
    record = await store.reservations.get(big["metadata"]["uid"])
    assert record is not None and record.allocation.node == "n1"


async def test_a_plan_whose_moves_do_not_make_room_is_refused_before_any_eviction(
    cluster: Cluster, api: Api, store: Store, emulator: Emulator
) -> None:
    await cluster.nodes("n1", "n2")
    await cluster.running("a", "n1", "GPU-n1-0")
    b = await cluster.running("b", "n1", "GPU-n1-1")
    big = cluster.pending()
    plan = cluster.plan([b], [("n2", "GPU-n2-0")], big, "n1", "GPU-n1-0")  # b does not hold GPU-n1-0
    result, lines = await run(plan, api, store)
    assert result.failed is None and result.moved == 0
    assert result.reason.startswith("pod default/big does not fit on node n1's cards GPU-n1-0 once moved:")
    assert lines[0] == f"cannot: {result.reason}"
    assert emulator.get("Pod", NS, "b") is not None
    assert await store.reservations.get(big["metadata"]["uid"]) is None


async def test_a_pod_re_created_since_the_plan_is_not_evicted(
    cluster: Cluster, api: Api, store: Store, emulator: Emulator
) -> None:
    big, plan = await fragmented(cluster)
    emulator.delete("Pod", NS, "a")
    recreated = gpu_pod("a", mem=4000, node_name="n1")
    recreated["metadata"]["uid"] = "uid-a2"
    emulator.put(recreated)
    result, _ = await run(plan, api, store)
    assert result.failed is not None and "re-created since the plan" in result.reason
    assert result.hold == "released" and await store.reservations.get(big["metadata"]["uid"]) is None


async def test_the_stop_event_ends_the_run_cleanly(cluster: Cluster, api: Api, store: Store) -> None:
    big, plan = await fragmented(cluster)
    stop = asyncio.Event()
    stop.set()
    result, lines = await run(plan, api, store, stop=stop)
    assert result.reason == "stop requested (SIGTERM)" and result.moved == 0
    assert result.hold == "released" and await store.reservations.get(big["metadata"]["uid"]) is None
    assert lines[-1] == "hold: released"


async def test_a_wave_that_does_not_settle_fails_and_releases_a_hold_still_waiting(
    cluster: Cluster, api: Api, store: Store
) -> None:
    big, plan = await fragmented(cluster)  # no actors: nobody replaces the evicted pod or releases its charges
    result, _ = await run(plan, api, store, ExecuteOptions(execute=True, wave_timeout_s=0.2))
    assert result.failed is not None and result.failed.name == "a" and result.moved == 1
    assert (
        "did not settle within 0.2s" in result.reason
        and "no replacement of default/a (ReplicaSet web)" in result.reason
    )
    assert result.hold == "released" and await store.reservations.get(big["metadata"]["uid"]) is None


async def test_a_cancelled_run_leaves_no_hold_behind(
    cluster: Cluster, api: Api, store: Store, emulator: Emulator
) -> None:
    big, plan = await fragmented(cluster)
    lines: list[str] = []
    task = asyncio.create_task(
        execute_plan(plan, api=api, store=store, placement=PLACEMENT, options=RUN, out=lines.append)
    )
    await emulator.wait_for(lambda: emulator.get("Pod", NS, "a") is None)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    else:
        raise AssertionError("the cancellation was swallowed")
    assert await store.reservations.get(big["metadata"]["uid"]) is None
    assert "stopped: cancelled" in lines and "hold: released" in lines


async def test_a_plan_that_frees_cards_holds_them_while_it_runs_then_lets_them_go(
    cluster: Cluster, api: Api, store: Store, emulator: Emulator
) -> None:
    _, with_target = await fragmented(cluster)
    plan = DefragPlan(moves=with_target.moves, target=None, freed=(("n1", "GPU-n1-0"),))
    cluster.probe = ("n1", "GPU-n1-0")
    with cluster.actors():
        result, lines = await run(plan, api, store)
        await cluster.settle()
    assert result.ok and (result.moved, result.cards_freed, result.hold) == (1, 1, "released"), lines
    (probe,) = cluster.probes  # taken once a moved pod had left the card, while the run held it
    assert isinstance(probe, ReserveConflict) and probe.device == "GPU-n1-0"
    assert lines[0] == "holding node n1's cards GPU-n1-0 while the moves are made"
    assert lines[-1] == "released the hold of the 1 freed card(s)"
    assert [r.allocation.name for r in await store.reservations.list_by_node("n1")] == ["b"]
    assert "to free cards n1/GPU-n1-0" in events(emulator, "DefragMoved")["a"]


async def test_a_plan_that_frees_cards_still_held_by_a_pod_it_does_not_move_is_refused(
    cluster: Cluster, api: Api, store: Store, emulator: Emulator
) -> None:
    _, with_target = await fragmented(cluster)
    plan = DefragPlan(moves=with_target.moves, target=None, freed=(("n1", "GPU-n1-0"), ("n1", "GPU-n1-1")))
    result, lines = await run(plan, api, store)
    assert result.moved == 0, lines
    assert result.reason.startswith("a hold of the cards to free does not fit on node n1's cards GPU-n1-0, GPU-n1-1")
    assert emulator.get("Pod", NS, "a") is not None
    assert [r.allocation.name for r in await store.reservations.list_by_node("n1")] == ["a", "b"]


async def test_sigterm_while_a_wave_waits_stops_with_the_state_reached(
    cluster: Cluster, api: Api, store: Store, emulator: Emulator
) -> None:
    big, plan = await fragmented(cluster)  # no actors: the wave waits for a replacement that never comes
    stop = asyncio.Event()
    emulator.hooks.append(lambda record: stop.set() if record.subresource == "eviction" else None)
    result, lines = await run(plan, api, store, stop=stop)
    assert result.reason == "stop requested (SIGTERM)" and [m.name for m in result.evicted] == ["a"]
    assert lines[-4:] == [
        "stopped: stop requested (SIGTERM)",
        "moved (1): default/a",
        "not moved (0): none",
        "hold: released",
    ]
    assert await store.reservations.get(big["metadata"]["uid"]) is None  # a still holds its charges: no room yet
