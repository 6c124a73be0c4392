"""/filter over HTTP with the exact bodies a kube-scheduler sends, against a real Redis and a running replica."""

from __future__ import annotations

import copy

import pytest

from tests.integration.extender.filter_harness import node, running_extender, seed, settings, wire, wire_doc
from vgpu_scheduler.shared.domain.model import DeviceUsage
from vgpu_scheduler.shared.emulator import Emulator
from vgpu_scheduler.shared.k8s import Api
from vgpu_scheduler.shared.store import ClaimRefused, ReservationState, Store

NULL_RESULT_KEYS = ["Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"]


async def test_wire_body_001_schedules_one_gpu_on_the_first_idle_node(store: Store, api: Api) -> None:
    await seed(store)
    async with running_extender(store, api) as ext:
        status, raw = await ext.post("/filter", wire("001-filter.json"))

    assert status == 200
    assert list(raw) == NULL_RESULT_KEYS  # Go field order, every field present
    assert raw == {"Nodes": None, "NodeNames": ["gpu-node-1"], "FailedNodes": None,
                   "FailedAndUnresolvableNodes": None, "Error": ""}  # fmt: skip
    record = await store.reservations.get("84b6aa31-78e6-4344-b242-d2eb58f60cb9")
    assert record is not None
    assert record.state is ReservationState.RESERVED
    alloc = record.allocation
    assert (alloc.namespace, alloc.name, alloc.node) == ("default", "gpu-pod-1", "gpu-node-1")
    # nvidia.com/gpu: 1 without memory: 100 % of one card (HAMi's default), 0 cores; of equal idle cards the
    # last, as HAMi's Fit walks them
    assert [[(d.uuid, d.used_mem_mib, d.used_cores) for d in ctr] for ctr in alloc.devices] == [
        [("GPU-gpu-node-1-3", 16384, 0)]
    ]
    assert await store.usage.node_usage("gpu-node-1") == {
        "GPU-gpu-node-1-3": DeviceUsage(used=1, used_mem_mib=16384, used_cores=0)
    }


async def test_wire_body_003_with_managed_fields_is_accepted(store: Store, api: Api) -> None:
    await seed(store)
    async with running_extender(store, api) as ext:
        answer = await ext.filter(wire("003-filter.json"))
    assert answer["NodeNames"] == ["gpu-node-1"]
    assert answer["Error"] == ""


async def test_wire_body_005_eight_gpus_go_to_the_node_that_has_eight(store: Store, api: Api) -> None:
    await seed(store)
    async with running_extender(store, api) as ext:
        answer = await ext.filter(wire("005-filter.json"))
    assert answer["NodeNames"] == ["gpu-node-2"]
    record = await store.reservations.get("16083488-820d-4c06-8be5-28e3ef56d5f0")
    assert record is not None
    devices = record.allocation.devices
    assert len(devices) == 1 and len(devices[0]) == 8  # "3k" MiB = 3000, 30 % cores on each of 8 cards
    assert {(d.used_mem_mib, d.used_cores) for d in devices[0]} == {(3000, 30)}
    usage = await store.usage.node_usage("gpu-node-2")
    assert set(usage.values()) == {DeviceUsage(used=1, used_mem_mib=3000, used_cores=30)}


async def test_keys_are_matched_case_insensitively(store: Store, api: Api) -> None:
    await seed(store)
    doc = wire_doc("001-filter.json")
    body = {"pod": doc["Pod"], "nodes": None, "NODENAMES": ["gpu-node-2"]}
    async with running_extender(store, api) as ext:
        answer = await ext.filter(body)
    assert answer["NodeNames"] == ["gpu-node-2"]


async def test_a_pod_without_managed_resources_passes_through_unchanged(store: Store, api: Api) -> None:
    await seed(store)
    doc = wire_doc("001-filter.json")
    container = doc["Pod"]["spec"]["containers"][0]
    container["resources"] = {"limits": {"cpu": "1"}, "requests": {"cpu": "1"}}
    doc["NodeNames"] = ["gpu-node-2", "unknown-node", "gpu-node-1"]
    async with running_extender(store, api) as ext:
        answer = await ext.filter(doc)
    assert answer == {"Nodes": None, "NodeNames": ["gpu-node-2", "unknown-node", "gpu-node-1"], "FailedNodes": None,
                      "FailedAndUnresolvableNodes": None, "Error": ""}  # fmt: skip
    assert await store.reservations.node_of(doc["Pod"]["metadata"]["uid"]) is None


async def test_filter_makes_no_api_server_write(store: Store, api: Api, emulator: Emulator) -> None:
    await seed(store)
    writes: list[object] = []
    emulator.hooks.append(writes.append)
    too_big = wire_doc("005-filter.json")
    too_big["Pod"]["metadata"]["uid"] = "too-big"
    too_big["Pod"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "9"
    async with running_extender(store, api) as ext:
        assert (await ext.filter(wire("001-filter.json")))["NodeNames"] == ["gpu-node-1"]
        failed = await ext.filter(too_big)
        assert failed["FailedAndUnresolvableNodes"] == {
            "gpu-node-1": "NodeInsufficientDevice",
            "gpu-node-2": "NodeInsufficientDevice",
        }
        assert [e.message for _, e in await ext.flushed_events()] == [
            "find fit node(gpu-node-1), 0 nodes not fit, 1 nodes fit(gpu-node-1:0.00)",
            "2 nodes NodeInsufficientDevice(gpu-node-1,gpu-node-2)",
            "no available node, 2 nodes do not meet",
        ]
    assert writes == []  # the failure's events went to the sink (recorded here), not to the API server


async def test_refiltering_the_same_pod_is_idempotent(store: Store, api: Api) -> None:
    await seed(store)
    async with running_extender(store, api) as ext:
        first = await ext.filter(wire("005-filter.json"))
        second = await ext.filter(wire("005-filter.json"))
    assert first["NodeNames"] == second["NodeNames"] == ["gpu-node-2"]
    usage = await store.usage.node_usage("gpu-node-2")
    assert set(usage.values()) == {DeviceUsage(used=1, used_mem_mib=3000, used_cores=30)}  # counted once


async def test_refilter_drops_the_previous_reservation_before_planning(store: Store, api: Api) -> None:
    """A pod re-filtered with candidates that exclude its reserved node moves: the old reservation is released,
    not counted twice."""
    await seed(store, [node("gpu-node-1", 1, count=1), node("gpu-node-2", 1, count=1)])
    body = wire_doc("001-filter.json")
    async with running_extender(store, api) as ext:
        assert (await ext.filter(body))["NodeNames"] == ["gpu-node-1"]
        moved = copy.deepcopy(body)
        moved["NodeNames"] = ["gpu-node-2"]
        assert (await ext.filter(moved))["NodeNames"] == ["gpu-node-2"]
        assert await store.usage.node_usage("gpu-node-1") == {}
        # and back: gpu-node-1's single slot is free again because the first reservation was dropped
        back = copy.deepcopy(body)
        back["NodeNames"] = ["gpu-node-1"]
        assert (await ext.filter(back))["NodeNames"] == ["gpu-node-1"]
    assert await store.usage.node_usage("gpu-node-2") == {}
    assert await store.reservations.node_of(body["Pod"]["metadata"]["uid"]) == "gpu-node-1"


async def test_refilter_keeps_the_node_the_pod_already_holds(store: Store, api: Api) -> None:
    """A duplicate filter (second scheduler, retry) answers the node already chosen: nothing re-planned or moved,
    even when the policy would now prefer another node."""
    await seed(store, [node("gpu-node-1", 2), node("gpu-node-2", 2)])
    body = wire_doc("001-filter.json")
    uid = body["Pod"]["metadata"]["uid"]
    async with running_extender(store, api) as ext:
        first = (await ext.filter(body))["NodeNames"]
        assert first is not None and len(first) == 1
        before = await store.reservations.get(uid)
        reordered = copy.deepcopy(body)
        reordered["NodeNames"] = list(reversed(body["NodeNames"]))
        assert (await ext.filter(reordered))["NodeNames"] == first
        assert (await ext.filter(body))["NodeNames"] == first
    after = await store.reservations.get(uid)
    # the same record; only its clock was restarted by the answers that kept it (docs/gangs.md)
    assert after is not None and before is not None
    assert (after.allocation, after.state) == (before.allocation, before.state)
    assert after.reserved_at_ms >= before.reserved_at_ms
    usage = await store.usage.node_usage(first[0])
    assert [u.used for u in usage.values()] == [1]


async def test_refilter_never_moves_devices_a_bind_owns(store: Store, api: Api) -> None:
    """A record a bind has claimed (or bound, or the informer confirmed) stays where it is: a filter whose
    candidates exclude its node answers an Error and releases nothing."""
    await seed(store, [node("gpu-node-1", 1, count=1), node("gpu-node-2", 1, count=1)])
    body = wire_doc("001-filter.json")
    uid = body["Pod"]["metadata"]["uid"]
    async with running_extender(store, api) as ext:
        assert (await ext.filter(body))["NodeNames"] == ["gpu-node-1"]
        claimed = await store.reservations.claim(uid, "gpu-node-1", "bind-a", 60)
        assert not isinstance(claimed, ClaimRefused)
        moved = copy.deepcopy(body)
        moved["NodeNames"] = ["gpu-node-2"]
        answer = await ext.filter(moved)
        assert answer["NodeNames"] is None
        assert "already holds devices on node gpu-node-1 (binding)" in answer["Error"]
        # the claimed node is still a fine answer for a duplicate whose candidates include it
        assert (await ext.filter(body))["NodeNames"] == ["gpu-node-1"]
    record = await store.reservations.get(uid)
    assert record is not None and record.state is ReservationState.BINDING
    assert await store.usage.node_usage("gpu-node-2") == {}
    assert [u.used for u in (await store.usage.node_usage("gpu-node-1")).values()] == [1]


N1, N2 = "gpu-node-1", "gpu-node-2"


@pytest.mark.parametrize(
    "bind_aware, per_node, nodes, third_event",
    [
        # one bind per node: consecutive pods alternate, the node with a pending bind is passed over
        (True, 1, [N1, N2, N1, N2], "find fit node(gpu-node-1), 0 nodes not fit"),
        # the default (4 binds per node): two pending binds do not make gpu-node-1 busy, binpack fills it first
        (True, 4, [N1, N1, N2, N2], "find fit node(gpu-node-2), 1 nodes not fit"),
        # the node policy alone (HAMi)
        (False, 1, [N1, N1, N2, N2], "find fit node(gpu-node-2), 1 nodes not fit"),
    ],
    ids=["one-bind-per-node", "bind-aware-default", "policy-only"],
)
async def test_consecutive_pods_fill_the_cluster_then_fail_with_every_reason(
    store: Store, api: Api, bind_aware: bool, per_node: int, nodes: list[str], third_event: str
) -> None:
    """Whole-card pods: one per GPU until none is left; the next one gets every candidate with its reason."""
    await seed(store, [node("gpu-node-1", 2), node("gpu-node-2", 2)])
    base = wire_doc("001-filter.json")
    base["Pod"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpucores"] = "100"
    placed = []
    tuned = settings(bind_aware_placement=bind_aware, max_binds_per_node=per_node)
    async with running_extender(store, api, extender_settings=tuned) as ext:
        for i in range(5):
            body = copy.deepcopy(base)
            body["Pod"]["metadata"]["uid"] = f"uid-{i}"
            body["Pod"]["metadata"]["name"] = f"pod-{i}"
            placed.append(await ext.filter(body))
        events = await ext.flushed_events()
        again = await ext.filter(body)  # kube-scheduler retries the pod: same answer, no second batch of events
        assert again == placed[4]
        assert await ext.flushed_events() == events
    assert [a["NodeNames"] for a in placed[:4]] == [[n] for n in nodes]
    last = placed[4]
    assert last["NodeNames"] is None and last["Error"] == ""
    assert last["FailedAndUnresolvableNodes"] == {
        "gpu-node-1": "2/2 CardInsufficientMemory",
        "gpu-node-2": "2/2 CardInsufficientMemory",
    }
    placed_events = [(p["metadata"]["name"], e.reason.value, e.message) for p, e in events[:4]]
    assert [e[:2] for e in placed_events] == [(f"pod-{i}", "FilteringSucceed") for i in range(4)]
    assert placed_events[2][2].startswith(third_event)
    assert [(e.type.value, e.reason.value, e.message) for _, e in events[4:]] == [
        ("Warning", "FilteringFailed", "2 nodes CardInsufficientMemory(gpu-node-1,gpu-node-2)"),
        ("Warning", "FilteringFailed", "no available node, 2 nodes do not meet"),
    ]
    assert all(p["metadata"]["name"] == "pod-4" for p, _ in events[4:])


async def test_slow_lock_cycles_lower_the_binds_per_node_limit(store: Store, api: Api) -> None:
    """The default allows 4 binds in flight per node (binpack fills gpu-node-1 first); once node locks are measured
    to be held for longer than half a bind's lock wait, the limit is 1 and consecutive pods alternate, as with
    ``--max-binds-per-node=1``. The gauge shows the limit."""
    await seed(store, [node(N1, 2), node(N2, 2)])
    base = wire_doc("001-filter.json")
    base["Pod"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpucores"] = "100"
    async with running_extender(store, api) as ext:
        svc = ext.service
        assert svc.bind_limit.value == 4 and svc.cache.binds_per_node == 4
        svc.bind_limit.observe_cycle(3.0)  # the default --bind-timeout leaves a lock wait of 3 s
        assert svc.cache.binds_per_node == 1
        assert svc.metrics.binds_per_node_limit._value.get() == 1
        placed = []
        for i in range(4):
            body = copy.deepcopy(base)
            body["Pod"]["metadata"]["uid"] = f"uid-{i}"
            body["Pod"]["metadata"]["name"] = f"pod-{i}"
            placed.append((await ext.filter(body))["NodeNames"])
    assert placed == [[N1], [N2], [N1], [N2]]


async def test_unknown_candidates_are_unregistered_and_do_not_block_a_fit(store: Store, api: Api) -> None:
    await seed(store)
    body = wire_doc("001-filter.json")
    body["NodeNames"] = ["ghost", "gpu-node-2"]
    async with running_extender(store, api) as ext:
        assert (await ext.filter(body))["NodeNames"] == ["gpu-node-2"]
        body["Pod"]["metadata"]["uid"] = "other"
        body["NodeNames"] = ["ghost", "phantom"]
        answer = await ext.filter(body)
    assert answer["FailedAndUnresolvableNodes"] == {"ghost": "node unregistered", "phantom": "node unregistered"}
    assert answer["Error"] == ""
