"""/filter when the webhook was bypassed: a pod whose GPU request is invalid as written is refused on every
candidate with the message saying what to write instead (never passed through to a node without the GPU), in
both request forms, with an info log line, a Warning event, a metric, and nothing reserved."""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest

from tests.integration.extender.filter_harness import node, node_object, running_extender, seed, wire_doc
from vgpu_scheduler.shared.k8s import Api
from vgpu_scheduler.shared.protocol.events import EventReason, EventType
from vgpu_scheduler.shared.store import Store

GPU, MEM, PCT, CORES = "nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpucores"


def _pod_body(limits: dict[str, Any]) -> dict[str, Any]:
    body = copy.deepcopy(wire_doc("001-filter.json"))
    container = body["Pod"]["spec"]["containers"][0]
    container["resources"] = {"limits": limits, "requests": dict(limits)}
    return body


# Every bad form of every managed resource, as kube-scheduler would send it when no webhook ran.
BAD = [
    pytest.param(
        {GPU: "1", MEM: "20Gi"},
        'nvidia.com/gpumem is in MiB: "20Gi" would be 21474836480 MiB; did you mean 20480?',
        id="mem-20Gi",
    ),
    pytest.param({GPU: "1", MEM: "-100"}, 'nvidia.com/gpumem cannot be negative: got "-100"', id="mem-negative"),
    pytest.param(
        {GPU: "1", MEM: "100.5"},
        'nvidia.com/gpumem is a whole number of MiB: "100.5" is 100.5; did you mean 101?',
        id="mem-fraction",
    ),
    pytest.param({GPU: "1", MEM: "3G"}, '"3G" would be 3000000000 MiB; did you mean 2861?', id="mem-beyond-int32"),
    pytest.param({GPU: "-1"}, 'nvidia.com/gpu cannot be negative: got "-1"', id="count-negative"),
    pytest.param({GPU: "500m"}, 'nvidia.com/gpu counts whole GPUs: "500m" is 0.5', id="count-fraction"),
    pytest.param(
        {GPU: "1Ki"},
        'nvidia.com/gpu counts GPUs and takes no unit: "1Ki" would be 1024 GPUs; did you mean 1?',
        id="count-unit",
    ),
    pytest.param({GPU: "3000000000"}, "is too large (at most 2147483647)", id="count-huge"),
    pytest.param({GPU: "lots"}, 'nvidia.com/gpu: "lots" is not a number', id="count-not-a-number"),
    pytest.param(
        {GPU: "1", PCT: "150"},
        'nvidia.com/gpumem-percentage is a percentage of one GPU: "150" is more than 100',
        id="pct-over-100",
    ),
    pytest.param({GPU: "1", PCT: "-5"}, "nvidia.com/gpumem-percentage cannot be negative", id="pct-negative"),
    pytest.param({GPU: "1", CORES: "-5"}, "nvidia.com/gpucores cannot be negative", id="cores-negative"),
    pytest.param({GPU: "1", CORES: "50.5"}, '"50.5" is 50.5; did you mean 51?', id="cores-fraction"),
    pytest.param(
        {GPU: "1", CORES: "2Gi"}, "nvidia.com/gpucores is a percentage of one GPU and takes no unit", id="cores-unit"
    ),
    pytest.param(
        {GPU: "0", MEM: "1000"},
        "nvidia.com/gpu is 0 but nvidia.com/gpumem asks for GPU memory",
        id="memory-on-zero-gpus",
    ),
]


@pytest.mark.parametrize(("limits", "message"), BAD)
async def test_every_candidate_is_refused_with_what_to_write(
    store: Store, api: Api, limits: dict[str, Any], message: str, caplog: pytest.LogCaptureFixture
) -> None:
    await seed(store)
    body = _pod_body(limits)
    with caplog.at_level(logging.INFO, logger="vgpu_scheduler.services.extender.filter"):
        async with running_extender(store, api) as ext:
            answer = await ext.filter(body)
            events = await ext.flushed_events()
            outcomes = ext.metric("vgpu_filter_outcomes_total", outcome="invalid_request")
    expected = f'container "main": {message}' if message.startswith("nvidia.com") else None
    assert answer["Error"] == "" and answer["NodeNames"] is None
    assert set(answer["FailedAndUnresolvableNodes"]) == {"gpu-node-1", "gpu-node-2"}, (
        "every candidate carries the reason"
    )
    for text in answer["FailedAndUnresolvableNodes"].values():
        assert message in text
        assert text.startswith('container "main": ')
        if expected is not None:
            assert text.startswith(expected)
    assert outcomes == 1
    assert await store.reservations.list_all() == {}
    [(_, event)] = events
    assert (event.type, event.reason) == (EventType.WARNING, EventReason.FILTERING_FAILED)
    assert message in event.message
    refused = [r for r in caplog.records if r.getMessage() == "pod refused: invalid GPU request"]
    assert len(refused) == 1 and refused[0].levelno == logging.INFO
    assert message in refused[0].__dict__["error"]


async def test_full_nodes_form_is_refused_on_every_node_too(store: Store, api: Api) -> None:
    await seed(store, [])
    pod = _pod_body({GPU: "1", MEM: "20Gi"})["Pod"]
    body = {"Pod": pod, "Nodes": {"metadata": {}, "items": [node_object(node("a", 8)), node_object(node("b", 8))]}}
    async with running_extender(store, api) as ext:
        answer = await ext.filter(body)
    assert answer["Nodes"] is None and answer["Error"] == ""
    assert answer["FailedAndUnresolvableNodes"] == dict.fromkeys(
        ["a", "b"],
        'container "main": nvidia.com/gpumem is in MiB: "20Gi" would be 21474836480 MiB; did you mean 20480?',
    )


async def test_a_valid_pod_still_schedules_after_a_refusal(store: Store, api: Api) -> None:
    await seed(store)
    async with running_extender(store, api) as ext:
        refused = await ext.filter(_pod_body({GPU: "-1"}))
        placed = await ext.filter(_pod_body({GPU: "1", MEM: "1000"}))
    assert refused["FailedAndUnresolvableNodes"] and not refused["NodeNames"]
    assert len(placed["NodeNames"]) == 1 and placed["Error"] == ""


async def test_a_pod_without_gpu_resources_still_passes_through(store: Store, api: Api) -> None:
    await seed(store)
    async with running_extender(store, api) as ext:
        answer = await ext.filter(_pod_body({"cpu": "1"}))
    assert answer["NodeNames"] == ["gpu-node-2", "gpu-node-1"] and answer["FailedNodes"] is None
