"""What ``/filter`` + ``/bind`` write to the API server, byte for byte against docs/hami-wire.md (§3, §3.1, §4.1,
§5.2, difference 3), through a real extender replica over HTTP, and what HAMi's device plugin reads back from it
(§3.1, §4.3) — the HEAD and the ≤ v2.8 decoder."""

from __future__ import annotations

import re
import time
from datetime import datetime
from typing import Any

import pytest

from tests.compat.conftest import SCHEDULER
from tests.compat.kit import MERGE_PATCH, RecordingEmulator, local_zone, running_extender
from tests.integration.extender.filter_harness import node, node_object, seed
from vgpu_scheduler.shared.k8s import Api
from vgpu_scheduler.shared.k8s.api import JSON_PATCH
from vgpu_scheduler.shared.store import Store

NODE = "gpu-node-1"
NS, NAME = "team-a", "trainer-0"


def ctr(name: str, gpus: int = 0, mem: int = 0, cores: int = 0) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus), "nvidia.com/gpumem": str(mem), "nvidia.com/gpucores": str(cores)}
    return {"name": name, "image": "busybox", "resources": {"limits": limits} if gpus else {}}


def training_pod(name: str = NAME, namespace: str = NS) -> dict[str, Any]:
    """Two init containers (the second with a GPU) and three app containers (the first without a GPU)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "schedulerName": SCHEDULER,
            "initContainers": [ctr("fetch"), ctr("warmup", 1, 2000, 20)],
            "containers": [ctr("sidecar"), ctr("worker", 2, 3000, 30), ctr("eval", 1, 1000, 10)],
        },
        "status": {"phase": "Pending"},
    }


# init fetch: none; init warmup: GPU-3; sidecar: none; worker: GPU-3 + GPU-2; eval: GPU-1 (spread; equal cards are
# walked from the last, as HAMi's Fit does, and eval meets GPU-1 and GPU-0 in the order worker's sort left them)
DEVICE_LIST = (
    f";GPU-{NODE}-3,NVIDIA,2000,20:;"
    f";GPU-{NODE}-3,NVIDIA,3000,30:GPU-{NODE}-2,NVIDIA,3000,30:;"
    f"GPU-{NODE}-1,NVIDIA,1000,10:;"
)
EXPECTED_PER_CONTAINER = {
    "warmup": [(f"GPU-{NODE}-3", 2000, 20)],
    "worker": [(f"GPU-{NODE}-3", 3000, 30), (f"GPU-{NODE}-2", 3000, 30)],
    "eval": [(f"GPU-{NODE}-1", 1000, 10)],
}

LOCK_RE = re.compile(r"(?P<t>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:Z|[+-]\d{2}:\d{2})),(?P<ns>[^,]+),(?P<name>[^,]+)\Z")


async def _setup(store: Store, emulator: RecordingEmulator) -> None:
    inv = node(NODE, 4)
    await seed(store, [inv])
    emulator.put(node_object(inv))


async def _filter_and_bind(ext: Any, emulator: RecordingEmulator, pod: dict[str, Any]) -> dict[str, Any]:
    """POST /filter as kube-scheduler (nodeCacheCapable) then /bind; returns the created pod."""
    created = emulator.put(pod)
    answer = await ext.post("filter", {"Pod": created, "Nodes": None, "NodeNames": [NODE]})
    assert answer.get("NodeNames") == [NODE] and not answer.get("Error"), answer
    meta = created["metadata"]
    result = await ext.post(
        "bind", {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"], "Node": NODE}
    )
    assert result == {"Error": ""}
    return created


@pytest.mark.parametrize(("tz", "suffix"), [("CST-8", "+08:00"), ("UTC0", "Z"), ("EST5", "-05:00")])
async def test_filter_writes_nothing_and_bind_writes_the_lock_and_a_binding_carrying_the_allocation(
    store: Store, emulator: RecordingEmulator, api: Api, tz: str, suffix: str
) -> None:
    await _setup(store, emulator)
    with local_zone(tz):
        async with running_extender(store, api) as ext:
            created = emulator.put(training_pod())
            node_rv = emulator.node(NODE)["metadata"]["resourceVersion"]
            pod_rv = created["metadata"]["resourceVersion"]
            emulator.raw.clear()

            answer = await ext.post("filter", {"Pod": created, "Nodes": None, "NodeNames": [NODE]})
            assert answer["NodeNames"] == [NODE] and not answer.get("Error")
            assert emulator.writes() == []  # difference 3: no API writes in /filter

            before = int(time.time())
            meta = created["metadata"]
            result = await ext.post("bind", {"PodName": NAME, "PodNamespace": NS, "PodUID": meta["uid"], "Node": NODE})
            after = int(time.time())
            assert result == {"Error": ""}
            await ext.flush_events()

    lock_w, binding_w = emulator.writes()

    # 1. the node lock, <RFC3339 local>,<ns>,<name>, set in one call only if absent: a JSON patch that tests the
    # member for null, then adds it (as atomic as HAMi's resourceVersion-guarded merge patch, one GET fewer)
    assert (lock_w.method, lock_w.path, lock_w.content_type) == ("PATCH", f"/api/v1/nodes/{NODE}", JSON_PATCH)
    lock_path = "/metadata/annotations/hami.io~1mutex.lock"
    test_op, add_op = lock_w.doc
    assert test_op == {"op": "test", "path": lock_path, "value": None}
    assert (add_op["op"], add_op["path"]) == ("add", lock_path)
    lock_value = add_op["value"]
    assert node_rv  # the node existed before the bind; the test op, not its resourceVersion, guards the write
    m = LOCK_RE.match(lock_value)
    assert m is not None, lock_value
    assert (m["ns"], m["name"]) == (NS, NAME)
    assert m["t"].endswith(suffix), lock_value
    at = datetime.fromisoformat(m["t"])
    assert before <= at.timestamp() <= after

    # 2. the Binding, carrying every annotation and the label, guarded by the pod's UID and resourceVersion: the
    # API server merges them into the pod with the node in one update (HAMi: a merge patch, then the Binding)
    assert (binding_w.method, binding_w.path) == ("POST", f"/api/v1/namespaces/{NS}/pods/{NAME}/binding")
    assert binding_w.content_type.startswith("application/json")
    doc = binding_w.doc
    assert set(doc) == {"apiVersion", "kind", "metadata", "target"}
    assert (doc["apiVersion"], doc["kind"]) == ("v1", "Binding")
    assert doc["target"] == {"apiVersion": "v1", "kind": "Node", "name": NODE}
    assert set(doc["metadata"]) == {"name", "namespace", "uid", "resourceVersion", "annotations", "labels"}
    assert (doc["metadata"]["name"], doc["metadata"]["namespace"]) == (NAME, NS)
    assert (doc["metadata"]["uid"], doc["metadata"]["resourceVersion"]) == (meta["uid"], pod_rv)
    assert doc["metadata"]["labels"] == {"hami.io/vgpu-node": NODE}
    annos = doc["metadata"]["annotations"]
    stamp = annos["hami.io/vgpu-time"]
    assert re.fullmatch(r"[0-9]+", stamp) and before <= int(stamp) <= after
    assert annos == {
        "hami.io/vgpu-node": NODE,
        "hami.io/vgpu-time": stamp,
        "hami.io/vgpu-devices-to-allocate": DEVICE_LIST,
        "hami.io/vgpu-devices-allocated": DEVICE_LIST,
        "hami.io/bind-phase": "allocating",
        "hami.io/bind-time": stamp,
    }
    # what the device plugin then reads: the bound pod with exactly those annotations and the label
    stored = emulator.pod(NS, NAME)
    assert stored["spec"]["nodeName"] == NODE
    assert {k: v for k, v in stored["metadata"]["annotations"].items() if k.startswith("hami.io/")} == annos
    assert stored["metadata"]["labels"]["hami.io/vgpu-node"] == NODE

    # the bind's event: BindingSucceed, Normal, from --scheduler-name, about the pod
    events = [w.doc for w in emulator.raw if w.is_event and w.doc["reason"].startswith("Binding")]
    assert [(e["reason"], e["type"], e["message"]) for e in events] == [
        ("BindingSucceed", "Normal", f"Successfully binding node [{NODE}] to {NS}/{NAME}"),
    ]
    for e in events:
        assert e["source"] == {"component": SCHEDULER}
        assert e["involvedObject"]["kind"] == "Pod"
        assert (e["involvedObject"]["namespace"], e["involvedObject"]["name"]) == (NS, NAME)
        assert e["involvedObject"]["uid"] == meta["uid"]
        assert e["metadata"]["namespace"] == NS

    # the lock stays held after a successful bind (§4.2: the device plugin releases it)
    assert emulator.node(NODE)["metadata"]["annotations"]["hami.io/mutex.lock"] == lock_value


async def test_a_successful_filter_records_filtering_succeed(
    store: Store, emulator: RecordingEmulator, api: Api
) -> None:
    await _setup(store, emulator)
    async with running_extender(store, api) as ext:
        created = emulator.put(training_pod())
        answer = await ext.post("filter", {"Pod": created, "Nodes": None, "NodeNames": [NODE]})
        assert answer["NodeNames"] == [NODE]
        await ext.flush_events()
    events = [w.doc for w in emulator.raw if w.is_event]
    assert [(e["reason"], e["type"], e["message"]) for e in events] == [
        ("FilteringSucceed", "Normal", f"find fit node({NODE}), 0 nodes not fit, 1 nodes fit({NODE}:0.00)")
    ]


async def test_a_failed_binding_releases_the_lock_with_a_guarded_null_and_leaves_the_pod_untouched(
    store: Store, emulator: RecordingEmulator, api: Api
) -> None:
    await _setup(store, emulator)
    async with running_extender(store, api) as ext:
        created = emulator.put(training_pod())
        answer = await ext.post("filter", {"Pod": created, "Nodes": None, "NodeNames": [NODE]})
        assert answer["NodeNames"] == [NODE]
        await ext.flush_events()
        emulator.raw.clear()
        emulator.inject_error(500, method="POST", path="/binding$", times=1)
        meta = created["metadata"]
        result = await ext.post("bind", {"PodName": NAME, "PodNamespace": NS, "PodUID": meta["uid"], "Node": NODE})
        assert result["Error"] != ""
        await ext.flush_events()

    # the Binding failed (a 500; the pod read then shows it unbound) and wrote nothing: the pod needs no undo, only
    # the lock is released
    lock_w, binding_w, release_w = emulator.writes()
    assert (binding_w.method, binding_w.path) == ("POST", f"/api/v1/namespaces/{NS}/pods/{NAME}/binding")
    assert binding_w.doc["metadata"]["annotations"]["hami.io/vgpu-node"] == NODE
    lock_value = lock_w.doc[1]["value"]
    assert lock_value.endswith(f",{NS},{NAME}")

    # §4.1: release = {"metadata":{"annotations":{"hami.io/mutex.lock":null},"resourceVersion":"<rv>"}}
    assert (release_w.method, release_w.path, release_w.content_type) == (
        "PATCH",
        f"/api/v1/nodes/{NODE}",
        MERGE_PATCH,
    )
    assert list(release_w.doc["metadata"]) == ["annotations", "resourceVersion"]
    assert release_w.doc["metadata"]["annotations"] == {"hami.io/mutex.lock": None}
    assert release_w.doc["metadata"]["resourceVersion"]
    assert "hami.io/mutex.lock" not in emulator.node(NODE)["metadata"]["annotations"]
    assert not any(k.startswith("hami.io/") for k in emulator.pod(NS, NAME)["metadata"].get("annotations") or {})

    events = [w.doc for w in emulator.raw if w.is_event]
    assert [(e["reason"], e["type"]) for e in events] == [("BindingFailed", "Warning")]
    assert events[0]["message"] == result["Error"]
    assert await store.locks.inspect(NODE) is None


async def test_a_node_name_that_is_no_valid_label_value_still_binds_without_the_label(
    store: Store, emulator: RecordingEmulator, api: Api
) -> None:
    """Node names are DNS subdomains of up to 253 characters; label values stop at 63. The API server refuses the
    whole write for an invalid label value (422), so the label is left out for such nodes (as HAMi's
    PatchPodAnnotations does: IsValidLabelValue) while the annotation still names the node."""
    long_name = "gpu-node-" + "a" * 60 + ".cluster.example.com"
    inv = node(long_name, 2)
    await seed(store, [inv])
    emulator.put(node_object(inv))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": NS},
        "spec": {"schedulerName": SCHEDULER, "containers": [ctr("main", 1, 1000, 10)]},
        "status": {"phase": "Pending"},
    }
    async with running_extender(store, api) as ext:
        created = emulator.put(pod)
        answer = await ext.post("filter", {"Pod": created, "Nodes": None, "NodeNames": [long_name]})
        assert answer["NodeNames"] == [long_name]
        bind = {"PodName": "p", "PodNamespace": NS, "PodUID": created["metadata"]["uid"], "Node": long_name}
        assert await ext.post("bind", bind) == {"Error": ""}
    stored = emulator.pod(NS, "p")
    assert stored["spec"]["nodeName"] == long_name
    assert stored["metadata"]["annotations"]["hami.io/vgpu-node"] == long_name
    assert "hami.io/vgpu-node" not in (stored["metadata"].get("labels") or {})


async def test_a_failed_filter_records_hamis_filtering_failed_events_and_writes_nothing_else(
    store: Store, emulator: RecordingEmulator, api: Api
) -> None:
    await _setup(store, emulator)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "huge", "namespace": NS},
        "spec": {"schedulerName": SCHEDULER, "containers": [ctr("main", 1, 20000, 10)]},
        "status": {"phase": "Pending"},
    }
    async with running_extender(store, api) as ext:
        created = emulator.put(pod)
        emulator.raw.clear()
        answer = await ext.post("filter", {"Pod": created, "Nodes": None, "NodeNames": [NODE]})
        await ext.flush_events()
    assert answer["FailedAndUnresolvableNodes"] == {NODE: "4/4 CardInsufficientMemory"}
    assert not answer.get("NodeNames")
    assert emulator.writes() == []
    events = [w.doc for w in emulator.raw if w.is_event]
    assert [(e["reason"], e["type"], e["message"]) for e in events] == [
        ("FilteringFailed", "Warning", f"1 nodes CardInsufficientMemory({NODE})"),
        ("FilteringFailed", "Warning", "no available node, 1 nodes do not meet"),
    ]
    assert {e["source"]["component"] for e in events} == {SCHEDULER}
