"""/bind over HTTP on a real extender replica: the captured kube-scheduler bodies (filter 001 → bind 002), and bad
input answered with a clear ``Error`` while the process keeps serving."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.integration.extender.bindkit import node_obj
from tests.integration.extender.filter_harness import Replica, running_extender, seed, wire, wire_doc
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.emulator import Emulator
from vgpu_scheduler.shared.k8s import Api
from vgpu_scheduler.shared.store import Store

GOOD = {"PodName": "gpu-pod-1", "PodNamespace": "default", "PodUID": "84b6aa31-78e6-4344-b242-d2eb58f60cb9"}


@pytest.fixture
async def replica(store: Store, api: Api, emulator: Emulator) -> AsyncIterator[Replica]:
    await seed(store)
    for name, n in (("gpu-node-1", 4), ("gpu-node-2", 8)):
        emulator.put(node_obj(name, n=n))
    pod = wire_doc("001-filter.json")["Pod"]
    emulator.put({"apiVersion": "v1", "kind": "Pod", **pod})
    async with running_extender(store, api) as r:
        yield r


async def bind(replica: Replica, body: bytes | str | dict[str, Any]) -> tuple[int, Any]:
    raw = json.dumps(body) if isinstance(body, dict) else body
    return await replica.post("/bind", raw)


async def test_the_captured_filter_then_bind_places_the_pod(replica: Replica, emulator: Emulator) -> None:
    answer = await replica.filter(wire("001-filter.json"))
    assert answer["NodeNames"] == ["gpu-node-1"], answer
    status, result = await bind(replica, wire("002-bind.json"))
    assert (status, result) == (200, {"Error": ""})
    pod = emulator.get("Pod", "default", "gpu-pod-1")
    assert pod is not None and pod["spec"]["nodeName"] == "gpu-node-1"
    assert pod["metadata"]["annotations"][keys.BIND_PHASE] == "allocating"
    node = emulator.get("Node", None, "gpu-node-1")
    assert node is not None and node["metadata"]["annotations"][keys.NODE_LOCK].endswith(",default,gpu-pod-1")
    samples = replica.service.metrics.bind_outcomes.labels("bound")._value.get()
    assert samples == 1
    assert replica.service.metrics.request_duration.labels("bind")._sum.get() > 0


@pytest.mark.parametrize(
    "body, text",
    [
        pytest.param("{not json", "extender binding args: not JSON", id="not-json"),
        pytest.param("[1, 2]", "expected a JSON object, got array", id="array"),
        pytest.param({**GOOD, "Node": 7}, "Node must be a string, got number", id="node-number"),
        pytest.param({**GOOD, "PodUID": None, "Node": "gpu-node-1"}, "missing PodUID", id="uid-null"),
        pytest.param({"PodName": "gpu-pod-1", "Node": "gpu-node-1"}, "missing PodNamespace", id="no-namespace"),
        pytest.param({**GOOD, "Node": "no-such-node"}, "has no device reservation", id="unknown-node-unfiltered"),
        pytest.param(
            {**GOOD, "PodName": "ghost", "PodUID": "0000", "Node": "gpu-node-1"},
            "pod default/ghost not found",
            id="unknown-pod",
        ),
    ],
)
async def test_bad_binding_args_get_a_clear_error_and_the_process_keeps_serving(
    replica: Replica, body: Any, text: str
) -> None:
    status, answer = await bind(replica, body)
    assert status == 200 and isinstance(answer, dict)
    assert text in answer["Error"], answer
    # still serving: the real flow works afterwards
    assert (await replica.filter(wire("001-filter.json")))["NodeNames"] == ["gpu-node-1"]
    assert await bind(replica, wire("002-bind.json")) == (200, {"Error": ""})


async def test_a_pod_reserved_on_one_node_cannot_be_bound_to_an_unknown_one(replica: Replica) -> None:
    await replica.filter(wire("001-filter.json"))
    status, answer = await bind(replica, {**GOOD, "Node": "no-such-node"})
    assert status == 200 and "reserved on node gpu-node-1, not no-such-node" in answer["Error"]


async def test_keys_are_matched_case_insensitively(replica: Replica) -> None:
    await replica.filter(wire("001-filter.json"))
    body = {"podname": "gpu-pod-1", "PODNAMESPACE": "default", "poduid": GOOD["PodUID"], "node": "gpu-node-1"}
    assert await bind(replica, body) == (200, {"Error": ""})


async def test_an_empty_body_is_http_400_and_an_oversized_one_an_error(replica: Replica) -> None:
    assert await replica.post("/bind", b"") == (400, "Please send a request body\n")
    huge = io.BytesIO(json.dumps({**GOOD, "Node": "x" * (1 << 20)}).encode())
    headers = {"Content-Type": "application/json"}
    async with replica.http.post(replica.url + "/bind", data=huge, headers=headers) as r:
        assert r.status == 200
        answer = await r.json()
    assert "larger than 1048576 bytes" in answer["Error"]
    assert replica.service.metrics.bind_outcomes.labels("bad_request")._value.get() == 2
