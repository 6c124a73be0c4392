"""``--auto-defrag`` through a real extender replica, the API emulator (which serves ``pods/eviction``) and real
Redis: a pod that fits nowhere only because the free shares are fragmented gets its room by a move the replica
makes by itself, in the background, before anyone is preempted; with no plan, preemption acts; without the flag
nothing moves; SIGTERM stops a run cleanly with its hold released."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.integration.defrag.planbuild import A, B, fragmented, gpu_nodes, place, pod_obj
from tests.integration.extender.filter_harness import running_extender, settings
from tests.waiting import eventually
from vgpu_scheduler.shared.emulator import Emulator, WriteRecord, WriteVerb
from vgpu_scheduler.shared.k8s import Api, KubeClient
from vgpu_scheduler.shared.store import Store

AUTO = settings(auto_defrag=True)


@pytest.fixture
def api(kube: KubeClient) -> Api:
    """The extender's Api with the real clock: a run records several Events on one pod (the package's fixture
    freezes the clock, and the Events' names would collide)."""
    return Api(kube, component="vgpu-scheduler", instance="test-extender")


WHOLE_UID = "uid-whole"


def body(pod: dict[str, Any]) -> dict[str, Any]:
    return {"Pod": pod, "NodeNames": [A, B]}


def names(emulator: Emulator) -> set[str]:
    return {p["metadata"]["name"] for p in emulator.list("Pod")}


@contextmanager
def replica_set(emulator: Emulator, store: Store, *, to: tuple[str, int]) -> Iterator[list[str]]:
    """While open, the ReplicaSet controller, kube-scheduler and the informer as far as a move needs them: each
    evicted pod's record is released and a replacement (a new pod of its owner, 4000 MiB) is bound to ``to``
    (node, card) with its record. Yields the replacements' names."""
    made: list[str] = []
    tasks: set[asyncio.Task[None]] = set()

    async def replace(evicted: dict[str, Any]) -> None:
        await store.reservations.release(evicted["metadata"]["uid"], evicted["spec"]["nodeName"])
        new = f"{evicted['metadata']['name']}-r"
        await place(store, emulator, new, to[0], to[1], 4000)
        made.append(new)

    def on_write(record: WriteRecord) -> None:
        if record.verb is WriteVerb.DELETE and record.resource == "pods":
            task = asyncio.get_running_loop().create_task(replace(record.result))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    emulator.hooks.append(on_write)
    try:
        yield made
    finally:
        emulator.hooks.remove(on_write)


async def test_a_fragmented_cluster_makes_room_by_itself_and_the_pod_gets_the_freed_card(
    store: Store, api: Api, emulator: Emulator
) -> None:
    await fragmented(store, emulator)  # every card holds a pod; a2 alone on A's second card
    whole = emulator.put(pod_obj("whole", 0, whole=True))
    async with running_extender(store, api, extender_settings=AUTO) as r:
        assert r.metric("vgpu_fragmentation_ratio", vendor="NVIDIA", device_type="NVIDIA-Tesla T4") == 1.0
        with replica_set(emulator, store, to=(B, 1)) as made:
            first = await r.filter(body(whole))
            assert not first["NodeNames"], first  # the answer does not wait for the move
            await eventually(lambda: made == ["a2-r"], 20, "a2 replaced")
            # the room is held for the pod: /filter answers it its node once a2's charges are gone
            kept = await r.filter(body(whole))
            assert kept["NodeNames"] == [A], kept
            emulator.patch("Pod", "default", "whole", {"spec": {"nodeName": A}})
            await eventually(lambda: r.metric("vgpu_defrag_attempts_total", outcome="moved") == 1, 20, "moved")
        record = await store.reservations.get(WHOLE_UID)
        assert record is not None and {c.uuid for c in record.allocation.charges} == {f"GPU-{A}-1"}
        assert "a2" not in names(emulator) and {"a0", "a1", "b0", "b1", "b2"} <= names(emulator)
        assert r.metric("vgpu_defrag_moves_planned_total") == 1
        assert r.metric("vgpu_defrag_moves_executed_total") == 1
        assert r.metric("vgpu_defrag_moves_failed_total") == 0
        assert r.metric("vgpu_defrag_cards_freed_total") == 1
        assert r.metric("vgpu_preemption_attempts_total", outcome="preempted") == 0
    moved = [e for e in emulator.list("Event") if e.get("reason") == "DefragMoved"]
    assert [e["involvedObject"]["name"] for e in moved] == ["a2"]
    assert "to make room for pod default/whole" in moved[0]["message"]


async def test_with_no_plan_preemption_acts(store: Store, api: Api, emulator: Emulator) -> None:
    await gpu_nodes(store, emulator, A, gpus=1)
    await place(store, emulator, "bare", A, 0, 4000, kind=None)  # nothing recreates it: no plan
    high = emulator.put(pod_obj("high", 0, whole=True, priority=1000))
    async with running_extender(store, api, extender_settings=AUTO) as r:
        assert not (await r.filter({"Pod": high, "NodeNames": [A]}))["NodeNames"]
        await eventually(lambda: r.metric("vgpu_preemption_attempts_total", outcome="preempted") == 1, 10, "")
        assert r.metric("vgpu_defrag_attempts_total", outcome="no_plan") == 1
        assert r.metric("vgpu_defrag_moves_planned_total") == 0
    assert "bare" not in names(emulator)


async def test_without_the_flag_a_fragmented_cluster_stays_as_it_is(store: Store, api: Api, emulator: Emulator) -> None:
    await fragmented(store, emulator)
    whole = emulator.put(pod_obj("whole", 0, whole=True))
    async with running_extender(store, api) as r:
        assert not (await r.filter(body(whole)))["NodeNames"]
        assert r.service.autodefrag is None
        await r.service.preemptor.idle()
    assert {"a0", "a1", "a2", "b0", "b1", "b2"} <= names(emulator)
    assert await store.reservations.get(WHOLE_UID) is None


async def test_stopping_the_replica_stops_a_run_cleanly_and_releases_its_hold(
    store: Store, api: Api, emulator: Emulator
) -> None:
    await fragmented(store, emulator)
    whole = emulator.put(pod_obj("whole", 0, whole=True))
    async with running_extender(store, api, extender_settings=AUTO) as r:
        await r.filter(body(whole))
        await emulator.wait_for(lambda: "a2" not in names(emulator), timeout_s=20)
        assert await store.reservations.get(WHOLE_UID) is not None  # held while the wave waits
        assert r.service.autodefrag is not None
    # the replica stopped (SIGTERM): the run ended at once; nobody released a2 (no informer): the hold goes
    assert r.metric("vgpu_defrag_attempts_total", outcome="failed") == 1
    assert r.metric("vgpu_defrag_moves_executed_total") == 1
    assert await store.reservations.get(WHOLE_UID) is None
    failed = [e for e in emulator.list("Event") if e.get("reason") == "DefragFailed"]
    assert [e["involvedObject"]["name"] for e in failed] == ["whole"] and "stop requested" in failed[0]["message"]


async def test_another_replica_acting_for_the_pod_or_a_spent_budget_moves_nothing_and_kills_nobody(
    store: Store, api: Api, emulator: Emulator
) -> None:
    await fragmented(store, emulator)
    high = emulator.put(pod_obj("high", 0, whole=True, priority=1000))  # it may preempt: it is not let to
    await store.reservations.begin_preemption("uid-high", "other-replica", 60)
    limited = settings(auto_defrag=True, defrag_moves_per_minute=1)
    async with running_extender(store, api, extender_settings=limited) as r:
        defrag = r.service.autodefrag
        assert defrag is not None
        await r.filter(body(high))
        await defrag.idle()
        assert r.metric("vgpu_defrag_attempts_total", outcome="elsewhere") == 1
        assert defrag.budget.admit(["gpu-node-x"]) is None  # this minute's move is spent
        other = emulator.put(pod_obj("other", 0, whole=True, priority=1000))
        await r.filter(body(other))
        await defrag.idle()
        assert r.metric("vgpu_defrag_attempts_total", outcome="rate_limited") == 1
        await r.service.preemptor.idle()
        assert r.metric("vgpu_defrag_moves_planned_total") == 0
        assert r.metric("vgpu_preemption_attempts_total", outcome="preempted") == 0
    assert {"a0", "a1", "a2", "b0", "b1", "b2"} <= names(emulator)
    assert await store.reservations.get("uid-high") is None and await store.reservations.get("uid-other") is None
