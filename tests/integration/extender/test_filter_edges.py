"""/filter edges: full Nodes (autoscaler simulation), not-ready answers, bad input, /healthz /readyz /metrics,
the SIGTERM drain and TLS."""

from __future__ import annotations

import asyncio
import json
import shutil
import ssl
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.extender.filter_harness import (
    node,
    node_object,
    patched,
    running_extender,
    seed,
    settings,
    wire,
    wire_doc,
)
from tests.waiting import eventually
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.domain.quota import QuotaLimits
from vgpu_scheduler.shared.k8s import Api
from vgpu_scheduler.shared.store import Reservations, Store, connect

# ---- full Nodes: evaluated from annotations, nothing reserved -------------------------------------------------


def nodes_body(*objects: dict[str, Any], pod: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "Pod": pod or wire_doc("005-filter.json")["Pod"],
        "Nodes": {"metadata": {}, "items": list(objects)},
        "NodeNames": None,
    }


async def test_full_nodes_answer_the_best_node_and_the_failed_ones_and_reserve_nothing(store: Store, api: Api) -> None:
    await seed(store, [])  # the store knows no node at all: only the request's annotations count
    small, big, bare = node_object(node("small", 4)), node_object(node("big", 8)), node_object(node("bare", 8))
    del bare["metadata"]["annotations"][keys.NODE_NVIDIA_REGISTER]
    async with running_extender(store, api) as ext:
        answer = await ext.filter(nodes_body(small, big, bare))
    assert answer["NodeNames"] is None and answer["Error"] == ""
    assert answer["Nodes"] == {"metadata": {}, "items": [big]}
    assert answer["FailedNodes"] == {"small": "NodeInsufficientDevice", "bare": "node unregistered"}
    assert await store.reservations.node_of("16083488-820d-4c06-8be5-28e3ef56d5f0") is None
    assert await store.reservations.list_all() == {}


async def test_full_nodes_ignore_the_usage_in_redis(store: Store, api: Api) -> None:
    """Simulation uses zero usage (HAMi): a node full in Redis is still a candidate there."""
    await seed(store, [node("n1", 8, count=1)])
    eight = wire_doc("005-filter.json")
    eight["NodeNames"] = ["n1"]
    async with running_extender(store, api) as ext:
        assert (await ext.filter(eight))["NodeNames"] == ["n1"]  # every slot of n1 is now taken
        full = await ext.filter(nodes_body(node_object(node("n1", 8, count=1))))
    assert [n["metadata"]["name"] for n in full["Nodes"]["items"]] == ["n1"]


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        pytest.param(lambda o: o["status"]["allocatable"].update({"nvidia.com/gpu": "0"}), "node unregistered",
                     id="no-allocatable-gpus"),
        pytest.param(lambda o: o["metadata"]["annotations"].update({keys.NODE_NVIDIA_REGISTER: "[{"}),
                     "node unregistered", id="malformed-register"),
        pytest.param(lambda o: o["metadata"]["annotations"].update({keys.NODE_NVIDIA_SCORE: "{nope"}),
                     "node unregistered", id="malformed-topology"),
        pytest.param(lambda o: o["metadata"]["annotations"].update(
            {keys.DEVICE_CORDON: ",".join(f"GPU-n1-{i}" for i in range(8))}), "8/8 CardCordoned", id="all-cordoned"),
    ],
)  # fmt: skip
async def test_full_nodes_that_cannot_take_the_pod(store: Store, api: Api, mutate: Any, reason: str) -> None:
    await seed(store, [])
    obj = node_object(node("n1", 8))
    mutate(obj)
    async with running_extender(store, api) as ext:
        answer = await ext.filter(nodes_body(obj))
    assert answer["Nodes"] is None
    assert answer["FailedNodes"] == {"n1": reason}


# ---- not ready: an Error, never a guess ---------------------------------------------------------------------------


async def test_missing_sync_markers_make_filter_answer_not_ready(store: Store, api: Api) -> None:
    await seed(store, synced=False)
    async with running_extender(store, api, wait_ready=False) as ext:
        await ext.service.cache.loaded.wait()
        answer = await ext.filter(wire("001-filter.json"))
        status, text = await ext.get("/readyz")
    assert answer["Error"] == "extender not ready: store not synced yet (missing: allocations, inventory, quotas)"
    assert answer["NodeNames"] is None and answer["FailedNodes"] is None
    assert (status, text) == (503, "store not synced yet (missing: allocations, inventory, quotas)\n")


async def test_a_flushed_store_answers_not_ready_until_everything_is_back(store: Store, api: Api) -> None:
    await seed(store)
    async with running_extender(store, api) as ext:
        assert (await ext.filter(wire("001-filter.json")))["NodeNames"] == ["gpu-node-1"]
        await store.client.flushall()
        cache = ext.service.cache
        await cache.wait_until(lambda: cache.not_ready_reason() is not None, timeout_s=10)
        refused = await ext.filter(wire("003-filter.json"))
        assert refused["Error"].startswith("extender not ready: ")
        assert (await ext.get("/readyz"))[0] == 503
        await seed(store)  # registrar and informer rebuild the store and mark it synced again
        await cache.wait_until(lambda: cache.not_ready_reason() is None, timeout_s=10)
        again = await ext.filter(wire("003-filter.json"))
        assert (await ext.get("/readyz"))[0] == 200
    assert again["NodeNames"] == ["gpu-node-1"]
    assert ext.service.cache.stats.full_loads >= 2


async def test_redis_down_answers_not_ready(api: Api) -> None:
    dead = Store.create(connect("redis://127.0.0.1:1/0"), prefix="x")
    try:
        async with running_extender(dead, api, wait_ready=False) as ext:
            answer = await ext.filter(wire("001-filter.json"))
            ready = await ext.get("/readyz")
            health = await ext.get("/healthz")
    finally:
        await dead.aclose()
    assert answer["Error"].startswith("extender not ready: ")
    assert ready[0] == 503
    assert health == (200, "ok\n")


async def _filter_connection(ext: Any) -> tuple[dict[str, Any], str | None]:
    """POST /filter; the answer and its ``Connection`` header."""
    headers = {"Content-Type": "application/json"}
    async with ext.http.post(ext.url + "/filter", data=wire("001-filter.json"), headers=headers) as r:
        return await r.json(), r.headers.get("Connection")


async def test_a_not_ready_answer_closes_its_connection(store: Store, api: Api) -> None:
    """kube-scheduler keeps its connection to the extenders' Service open: a replica that cannot serve closes it
    after its "not ready" answer, so the next call may reach another replica (the chaos run found a replica cut off
    from Redis failing every pod for the whole cut while two others could serve); a ready answer keeps it."""
    dead = Store.create(connect("redis://127.0.0.1:1/0"), prefix="x")
    try:
        async with running_extender(dead, api, wait_ready=False) as ext:
            refused, closed = await _filter_connection(ext)
    finally:
        await dead.aclose()
    await seed(store)
    async with running_extender(store, api) as ext:
        answer, kept = await _filter_connection(ext)
    assert refused["Error"].startswith("extender not ready: ") and closed == "close"
    assert answer["NodeNames"] == ["gpu-node-1"] and kept is None


async def test_a_store_failure_mid_request_is_an_error_answer(store: Store, api: Api) -> None:
    await seed(store)

    class Broken:
        def __init__(self, inner: Reservations) -> None:
            self.inner = inner

        async def reserve(self, *_: Any, **__: Any) -> Any:
            from vgpu_scheduler.shared.errors import TransientError

            raise TransientError("redis unavailable during reserve allocation: connection reset")

        reserve_fresh = reserve

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

    async with running_extender(patched(store, reservations=Broken(store.reservations)), api) as ext:
        answer = await ext.filter(wire("001-filter.json"))
    assert answer["Error"] == "extender not ready: redis unavailable during reserve allocation: connection reset"


# ---- bad input: a clear Error, and the process keeps serving -----------------------------------------------------


def _pod_with(**annotations: str) -> dict[str, Any]:
    body = wire_doc("001-filter.json")
    body["Pod"]["metadata"]["annotations"] = annotations
    return body


def _body(*, metadata: Any = ..., spec: Any = ..., annotations: Any = ...) -> bytes:
    """The captured 001 body with one part of the pod replaced (``...``: unchanged)."""
    body = wire_doc("001-filter.json")
    pod = body["Pod"]
    if metadata is not ...:
        pod["metadata"] = metadata
    if spec is not ...:
        pod["spec"] = spec
    if annotations is not ...:
        pod["metadata"]["annotations"] = annotations
    return json.dumps(body).encode()


BAD_BODIES = [
    pytest.param(b"{not json", "extender args: not JSON", id="malformed-json"),
    pytest.param(b"[1,2]", "extender args: expected a JSON object, got array", id="array"),
    pytest.param(b'{"NodeNames":["a"]}', "extender args missing pod", id="no-pod"),
    pytest.param(json.dumps({"Pod": 5}).encode(), "extender args: Pod must be an object, got number", id="pod-number"),
    pytest.param(json.dumps({"Pod": wire_doc("001-filter.json")["Pod"], "NodeNames": "gpu-node-1"}).encode(),
                 "extender args: NodeNames must be an array of strings, got string", id="names-string"),
    pytest.param(json.dumps({"Pod": wire_doc("001-filter.json")["Pod"], "NodeNames": ["a", 7]}).encode(),
                 "extender args: NodeNames[1] must be a string, got number", id="name-number"),
    pytest.param(json.dumps({"Pod": wire_doc("001-filter.json")["Pod"]}).encode(),
                 "extender args: neither NodeNames nor Nodes given", id="no-candidates"),
    pytest.param(json.dumps(_pod_with(**{keys.DEVICE_SCORING_WEIGHTS: "slot=x"})).encode(),
                 "hami.io/device-scoring-weights", id="bad-weights"),
    pytest.param(json.dumps(_pod_with(**{keys.GPU_SCHEDULER_POLICY: "fastest"})).encode(),
                 "hami.io/gpu-scheduler-policy: unknown GPU scheduler policy token 'fastest'", id="bad-policy"),
    pytest.param(_body(metadata=None), "extender args: Pod.metadata.uid is missing", id="metadata-null"),
    pytest.param(_body(spec=None), "pod.spec: pod has no spec", id="no-spec"),
    pytest.param(_body(spec={"containers": {"a": 1}}), "spec.containers: expected a list, got dict",
                 id="containers-not-list"),
    pytest.param(json.dumps({"Pod": wire_doc("001-filter.json")["Pod"], "Nodes": {"items": [{"metadata": {}}]}})
                 .encode(), "node: metadata.name must be a string", id="node-without-name"),
    pytest.param(_body(annotations=[1]), "extender args: Pod.metadata.annotations must be an object",
                 id="annotations-not-object"),
    pytest.param(json.dumps(_pod_with(**{keys.NODE_SCHEDULER_POLICY: "random"})).encode(),
                 "hami.io/node-scheduler-policy: unknown node scheduler policy 'random'", id="bad-node-policy"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "error"), BAD_BODIES)
async def test_bad_input_is_a_clear_error_and_the_process_keeps_serving(
    store: Store, api: Api, body: bytes, error: str
) -> None:
    await seed(store)
    async with running_extender(store, api) as ext:
        status, answer = await ext.post("/filter", body)
        after = await ext.filter(wire("001-filter.json"))
    assert status == 200
    assert answer["NodeNames"] is None and answer["FailedNodes"] is None
    assert answer["Error"].startswith(error), answer["Error"]
    assert after["NodeNames"] == ["gpu-node-1"]


async def test_a_body_over_one_mebibyte_is_refused_and_the_process_keeps_serving(store: Store, api: Api) -> None:
    await seed(store)
    body = wire_doc("001-filter.json")
    body["NodeNames"] = [f"node-{i:07d}" for i in range(80_000)]  # ~1.2 MiB of names
    raw = json.dumps(body).encode()
    assert len(raw) > 1 << 20
    async with running_extender(store, api) as ext:
        status, answer = await ext.post("/filter", raw)
        after = await ext.filter(wire("001-filter.json"))
    assert status == 200
    assert answer["Error"] == "extender args: request body exceeds 1048576 bytes"
    assert after["NodeNames"] == ["gpu-node-1"]


async def test_an_empty_body_is_http_400_as_in_hami(store: Store, api: Api) -> None:
    await seed(store)
    async with running_extender(store, api) as ext:
        assert await ext.post("/filter", b"") == (400, "Please send a request body\n")


async def test_a_pod_without_uid_cannot_be_reserved(store: Store, api: Api) -> None:
    await seed(store)
    body = wire_doc("001-filter.json")
    del body["Pod"]["metadata"]["uid"]
    async with running_extender(store, api) as ext:
        answer = await ext.filter(body)
    assert answer["Error"] == "extender args: Pod.metadata.uid is missing"


# ---- ops endpoints -------------------------------------------------------------------------------------------------


async def test_metrics_expose_the_allocation_gauges_and_the_filter_counters(store: Store, api: Api) -> None:
    await seed(store)
    await store.quota.set_limits("default", QuotaLimits(mem_mib=50_000, cores_pct=400))
    async with running_extender(store, api) as ext:
        await ext.filter(wire("005-filter.json"))
        status, text = await ext.get("/metrics")
    assert status == 200
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    families = {}
    for family in text_string_to_metric_families(text):
        families[family.name] = family
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value

    def value(name: str, **labels: str) -> float:
        return samples[(name, frozenset(labels.items()))]

    dev = {"node": "gpu-node-2", "device_uuid": "GPU-gpu-node-2-3", "device_index": "3", "zone": "vGPU"}
    t4 = {"device_type": "NVIDIA-Tesla T4", "vendor": "NVIDIA"}
    assert value("hami_gpu_memory_limit_bytes", **dev, **t4) == 16384 * 1048576
    assert value("hami_gpu_core_limit_ratio", **dev, **t4) == 100
    assert value("hami_gpu_memory_allocated_bytes", **dev, **t4, device_cores="30") == 3000 * 1048576
    assert value("hami_gpu_shared_count", **dev, **t4) == 1
    assert value("hami_gpu_core_allocated_ratio", **dev, **t4) == 30
    assert value("hami_node_gpu_overview", **dev, **t4, device_cores="30", device_memory_limit="16384") == (
        3000 * 1048576
    )
    assert value("hami_node_gpu_memory_allocated_ratio", **dev, **t4) == 3000 / 16384
    idle = {"node": "gpu-node-1", "device_uuid": "GPU-gpu-node-1-0", "device_index": "0", "zone": "vGPU"}
    assert value("hami_gpu_shared_count", **idle, **t4) == 0
    quota = {"namespace": "default", "zone": "vGPU"}
    assert value("hami_resource_quota_used", **quota, quota_name="nvidia.com/gpumem", limit="50000") == 24000
    assert value("hami_resource_quota_used", **quota, quota_name="nvidia.com/gpucores", limit="400") == 240
    assert value("hami_resource_quota_limit", **quota, quota_name="nvidia.com/gpumem") == 50000
    assert value("vgpu_filter_outcomes_total", outcome="scheduled") == 1
    assert value("vgpu_extender_snapshot_nodes") == 2
    assert value("vgpu_extender_request_duration_seconds_count", verb="filter") == 1
    for name in ("vgpu_reservation_conflicts", "vgpu_reservation_retries", "vgpu_filter_reasons",
                 "vgpu_bind_outcomes", "vgpu_node_lock_wait_seconds", "vgpu_webhook_outcomes",
                 "vgpu_extender_snapshot_reloads"):  # fmt: skip
        assert name in families, name


async def test_metrics_scrapes_follow_the_snapshot_and_drop_a_removed_node(store: Store, api: Api) -> None:
    """Over HTTP: the device gauges render the node a /filter just changed, and lose a node removed from the store;
    each scrape's hami_* lines are what prometheus_client renders from the same registry."""
    await seed(store)
    async with running_extender(store, api) as ext:
        registry = ext.service.deps.registry

        def hami(text: str) -> list[str]:
            return [line for line in text.splitlines() if line.startswith("hami_")]

        shared = (
            'hami_gpu_shared_count{device_index="3",device_type="NVIDIA-Tesla T4",device_uuid="GPU-gpu-node-2-3",'
            'node="gpu-node-2",vendor="NVIDIA",zone="vGPU"}'
        )
        status, before = await ext.get("/metrics")
        assert status == 200
        assert f"{shared} 0.0" in hami(before)
        assert hami(before) == hami(generate_latest(registry).decode())

        await ext.filter(wire("005-filter.json"))
        _, after = await ext.get("/metrics")
        assert f"{shared} 1.0" in hami(after)
        assert hami(after) == hami(generate_latest(registry).decode())

        await store.inventory.delete("gpu-node-1")
        await eventually(lambda: ext.service.cache.get("gpu-node-1") is None, what="gpu-node-1 leaves the snapshot")
        _, gone = await ext.get("/metrics")
        assert not any('node="gpu-node-1"' in line for line in hami(gone))
        assert f"{shared} 1.0" in hami(gone)
        assert hami(gone) == hami(generate_latest(registry).decode())


# ---- graceful drain ------------------------------------------------------------------------------------------------


async def refuses_connections(url: str) -> bool:
    """Whether nothing accepts a TCP connection at ``url``'s host and port any more."""
    where = urlsplit(url)
    try:
        _, writer = await asyncio.open_connection(where.hostname, where.port)
    except OSError:
        return True
    writer.close()
    await writer.wait_closed()
    return False


async def test_stop_drains_in_flight_filters_before_returning(store: Store, api: Api) -> None:
    await seed(store)
    entered, release = asyncio.Event(), asyncio.Event()

    class Paused:
        def __init__(self, inner: Reservations) -> None:
            self.inner = inner

        async def reserve(self, *args: Any, **kw: Any) -> Any:
            entered.set()
            await release.wait()
            return await self.inner.reserve(*args, **kw)

        async def reserve_fresh(self, *args: Any, **kw: Any) -> Any:
            entered.set()
            await release.wait()
            return await self.inner.reserve_fresh(*args, **kw)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

    paused = patched(store, reservations=Paused(store.reservations))
    async with running_extender(paused, api) as ext:
        in_flight = asyncio.create_task(ext.filter(wire("001-filter.json")), name="in-flight-filter")
        await entered.wait()
        ext.stop.set()  # SIGTERM while the request is inside its commit
        draining = asyncio.create_task(asyncio.wait({ext.task}), name="drain-wait")
        # the drain has begun once the listener is closed; a drain that did not wait for the request would end the
        # extender (or cancel the request) within the 10 ms polls that see it closed
        await eventually(lambda: refuses_connections(ext.url), what="the extender stopped accepting")
        assert not ext.task.done() and not in_flight.done()  # the drain waits for the request
        release.set()
        answer = await in_flight
        await draining
        assert ext.task.done() and ext.task.exception() is None
    assert answer["NodeNames"] == ["gpu-node-1"]
    assert await store.reservations.node_of("84b6aa31-78e6-4344-b242-d2eb58f60cb9") == "gpu-node-1"


# ---- TLS ----------------------------------------------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
async def test_with_cert_and_key_the_extender_serves_https(store: Store, api: Api, tmp_path: Path) -> None:
    from tests.integration.extender.test_tls import make_pair

    cert, key = make_pair(tmp_path / "tls", "vgpu-scheduler-extender")
    await seed(store)
    tls = settings(cert_file=str(cert), key_file=str(key))
    async with running_extender(store, api, extender_settings=tls) as ext:
        server = ext.service.server
        assert server is not None
        client_tls = ssl.create_default_context(cafile=str(cert))
        async with aiohttp.ClientSession() as http:
            url = f"https://127.0.0.1:{server.port}"
            async with http.post(f"{url}/filter", data=wire("001-filter.json"), ssl=client_tls) as r:
                answer = await r.json()
            with pytest.raises(aiohttp.ClientError):
                async with http.get(f"http://127.0.0.1:{server.port}/healthz"):
                    pass
    assert answer["NodeNames"] == ["gpu-node-1"]
