"""/bind without reading the pod: the filter's hint (the pod's resourceVersion as /filter saw it) guards the
Binding (which carries the pod's annotations) instead. Fewer API calls, and every check the read made still holds:
a pod that changed since the filter makes the Binding conflict, and the bind then reads it and decides as before."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.integration.extender import filter_harness as fh
from tests.integration.extender.bindkit import Harness, allocation, harness, inventory, pod_obj
from tests.integration.extender.test_bind import NODE, args_for
from vgpu_scheduler.services.extender.bind import BindOutcome
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.store import ReservationState

POD_PATH = "/api/v1/namespaces/default/pods/p1"
NODE_PATH = f"/api/v1/nodes/{NODE}"


@pytest.fixture
async def h(redis_url: str) -> AsyncIterator[Harness]:
    async with harness(redis_url) as hh:
        hh.hints = True
        await hh.seed_node(NODE)
        await hh.seed_node("gpu-node-2")
        yield hh


async def _reserved(h: Harness) -> dict[str, Any]:
    pod = h.create_pod(pod_obj("p1"))
    await h.reserve_pod(pod, allocation(pod, NODE, (0, 1000, 10)))
    h.em.requests.clear()
    h.writes.clear()
    return pod


def _calls(h: Harness) -> list[tuple[str, str]]:
    return [(r.method, r.path) for r in h.em.requests]


def _hami(obj: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in (obj["metadata"].get("annotations") or {}).items() if k.startswith("hami.io/")}


async def test_a_hinted_bind_makes_two_calls_and_reads_nothing(h: Harness) -> None:
    pod = await _reserved(h)
    result = await h.binder().bind(args_for(pod))
    assert result.outcome is BindOutcome.BOUND
    assert _calls(h) == [("PATCH", NODE_PATH), ("POST", POD_PATH + "/binding")]
    stored = h.pod("p1")
    assert stored["spec"]["nodeName"] == NODE and _hami(stored)[keys.BIND_PHASE] == "allocating"
    record = await h.store.reservations.get(pod["metadata"]["uid"])
    assert record is not None and record.state is ReservationState.BOUND


async def test_without_a_hint_the_bind_reads_the_pod_first(h: Harness) -> None:
    h.hints = False  # a reservation an older replica made
    pod = await _reserved(h)
    result = await h.binder().bind(args_for(pod))
    assert result.outcome is BindOutcome.BOUND
    assert _calls(h) == [
        ("GET", POD_PATH),
        ("PATCH", NODE_PATH),
        ("POST", POD_PATH + "/binding"),
    ]


async def test_a_stale_hint_conflicts_then_the_bind_reads_the_pod_and_binds(h: Harness) -> None:
    pod = await _reserved(h)
    h.em.patch("Pod", "default", "p1", {"metadata": {"labels": {"team": "a"}}})  # a new resourceVersion
    h.em.requests.clear()
    result = await h.binder().bind(args_for(pod))
    assert result.outcome is BindOutcome.BOUND
    assert _calls(h) == [
        ("PATCH", NODE_PATH),
        ("POST", POD_PATH + "/binding"),  # 409: the hint's resourceVersion is stale
        ("GET", POD_PATH),
        ("POST", POD_PATH + "/binding"),
    ]
    stored = h.pod("p1")
    assert stored["metadata"]["labels"]["team"] == "a"  # the other write survived
    assert _hami(stored)[keys.VGPU_NODE] == NODE


async def test_a_stale_hint_of_a_pod_another_decision_annotated_is_refused_and_undone(h: Harness) -> None:
    pod = await _reserved(h)
    foreign = {keys.VGPU_NODE: "gpu-node-2", keys.DEVICES_ALLOCATED: "GPU-x,NVIDIA,1000,10:;", keys.VGPU_TIME: "1"}
    h.em.patch("Pod", "default", "p1", {"metadata": {"annotations": foreign}})
    result = await h.binder().bind(args_for(pod))
    assert result.outcome is BindOutcome.NOT_OWNER and "another bind's allocation" in result.error
    assert _hami(h.pod("p1")) == foreign  # untouched
    assert "nodeName" not in h.pod("p1")["spec"]
    assert keys.NODE_LOCK not in (h.node(NODE)["metadata"].get("annotations") or {})
    assert await h.store.locks.inspect(NODE) is None
    assert await h.store.reservations.get(pod["metadata"]["uid"]) is None


async def test_a_stale_hint_of_a_pod_bound_here_meanwhile_is_success_and_writes_nothing(h: Harness) -> None:
    pod = await _reserved(h)
    h.em.patch("Pod", "default", "p1", {"spec": {"nodeName": NODE}})
    h.em.requests.clear()
    h.writes.clear()
    result = await h.binder().bind(args_for(pod))
    assert result.outcome is BindOutcome.ALREADY_BOUND and result.error == ""
    assert _calls(h) == [
        ("PATCH", NODE_PATH),
        ("POST", POD_PATH + "/binding"),  # 409: stale; the pod read again is bound here already
        ("GET", POD_PATH),
        ("GET", POD_PATH),  # is its bind settled? (then the lock this bind took goes back)
    ]
    assert [w.resource for w in h.writes] == ["nodes"]  # the lock only: the refused Binding wrote nothing
    assert _hami(h.pod("p1")) == {}


@pytest.mark.parametrize("change", ["delete", "recreate", "terminating", "bound-elsewhere"])
async def test_a_stale_hint_of_a_pod_that_cannot_be_bound_leaves_nothing_behind(h: Harness, change: str) -> None:
    pod = await _reserved(h)
    uid = pod["metadata"]["uid"]
    if change == "delete":
        h.em.delete("Pod", "default", "p1")
    elif change == "recreate":
        h.em.delete("Pod", "default", "p1")
        h.create_pod(pod_obj("p1"))
    elif change == "terminating":
        h.em.patch("Pod", "default", "p1", {"metadata": {"deletionTimestamp": "2027-01-01T00:00:00Z"}})
    else:
        h.em.patch("Pod", "default", "p1", {"spec": {"nodeName": "gpu-node-2"}})
    result = await h.binder().bind(args_for(pod))
    assert result.outcome in (BindOutcome.POD_GONE, BindOutcome.BOUND_ELSEWHERE), result
    live = h.em.get("Pod", "default", "p1")
    assert live is None or _hami(live) == {}  # nothing written to the pod (or to its namesake)
    assert await h.store.reservations.get(uid) is None
    assert await h.store.quota.pod_charges("default") == {}
    assert keys.NODE_LOCK not in (h.node(NODE)["metadata"].get("annotations") or {})
    assert await h.store.locks.inspect(NODE) is None


async def test_filter_then_bind_costs_two_api_calls(h: Harness) -> None:
    """The whole path: /filter stores the hint from the pod kube-scheduler sent; /bind uses it."""
    await fh.seed(h.store, [inventory(NODE)])
    pod = h.create_pod(pod_obj("p1"))
    async with fh.running_extender(h.store, h.api) as ext:
        answer = await ext.filter({"Pod": pod, "NodeNames": [NODE], "Nodes": None})
        assert answer["NodeNames"] == [NODE], answer
        hint = await h.store.client.hget(h.store.keys.bind_hints(NODE), pod["metadata"]["uid"])
        assert hint == f"1|-|{pod['metadata']['resourceVersion']}".encode()
        h.em.requests.clear()
        m = pod["metadata"]
        body = {"PodName": m["name"], "PodNamespace": m["namespace"], "PodUID": m["uid"], "Node": NODE}
        status, bound = await ext.post("/bind", json.dumps(body))
    assert status == 200 and bound == {"Error": ""}
    assert _calls(h) == [("PATCH", NODE_PATH), ("POST", POD_PATH + "/binding")]
    stored = h.pod("p1")
    assert stored["spec"]["nodeName"] == NODE and stored["metadata"]["labels"][keys.VGPU_NODE_LABEL] == NODE
    assert _hami(stored)[keys.VGPU_NODE] == NODE
