"""The emulator's wire shapes, checked with a plain HTTP client: what kube-apiserver would answer."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.integration.k8s.conftest import make_node, make_pod
from vgpu_scheduler.shared.emulator import Emulator, WriteRecord, WriteVerb
from vgpu_scheduler.shared.k8s import Api

MERGE = {"Content-Type": "application/merge-patch+json"}


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        yield session


async def call(
    http: aiohttp.ClientSession, method: str, url: str, body: Any = None, headers: dict[str, str] | None = None
) -> tuple[int, Any]:
    data = json.dumps(body) if body is not None else None
    async with http.request(method, url, data=data, headers=headers or {"Content-Type": "application/json"}) as r:
        return r.status, await r.json(content_type=None)


async def read_frames(resp: aiohttp.ClientResponse, n: int) -> list[dict[str, Any]]:
    return [json.loads(await resp.content.readline()) for _ in range(n)]


def status(code: int, reason: str, message: str, details: dict[str, str] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    }
    if details is not None:
        body["details"] = details
    body["code"] = code
    return body


async def test_list_shape(emulator: Emulator, http: aiohttp.ClientSession) -> None:
    emulator.put(make_pod("b", "ns"))
    emulator.put(make_pod("a", "ns"))
    code, body = await call(http, "GET", f"{emulator.url}/api/v1/namespaces/ns/pods")
    assert code == 200
    assert body["kind"] == "PodList" and body["apiVersion"] == "v1"
    assert body["metadata"] == {"resourceVersion": str(emulator.resource_version)}
    assert [i["metadata"]["name"] for i in body["items"]] == ["a", "b"]  # key order
    assert all("kind" not in i and "apiVersion" not in i for i in body["items"])


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (
            "/api/v1/namespaces/ns/pods/ghost",
            status(404, "NotFound", 'pods "ghost" not found', {"name": "ghost", "kind": "pods"}),
        ),
        ("/api/v1/nodes/ghost", status(404, "NotFound", 'nodes "ghost" not found', {"name": "ghost", "kind": "nodes"})),
        ("/api/v1/deployments", status(404, "NotFound", "the server could not find the requested resource")),
        ("/api/v1/pods/x", status(404, "NotFound", "the server could not find the requested resource")),
        (
            "/api/v1/namespaces/ns/pods/x/exec",
            status(404, "NotFound", "the server could not find the requested resource"),
        ),
    ],
    ids=["pod", "node", "unknown-resource", "pod-without-namespace", "unknown-subresource"],
)
async def test_not_found_status(
    emulator: Emulator, http: aiohttp.ClientSession, path: str, expected: dict[str, Any]
) -> None:
    code, body = await call(http, "GET", emulator.url + path)
    assert (code, body) == (404, expected)


async def test_create(emulator: Emulator, http: aiohttp.ClientSession) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": []},
        "status": {"phase": "Running"},
    }
    code, body = await call(http, "POST", f"{emulator.url}/api/v1/namespaces/ns/pods", pod)
    assert code == 201
    meta = body["metadata"]
    assert meta["namespace"] == "ns" and meta["uid"] and meta["resourceVersion"] == str(emulator.resource_version)
    assert meta["creationTimestamp"].endswith("Z")
    assert body["status"] == {"phase": "Pending"}  # the pod strategy resets status on create
    code, body = await call(http, "POST", f"{emulator.url}/api/v1/namespaces/ns/pods", pod)
    assert (code, body) == (409, status(409, "AlreadyExists", 'pods "p" already exists', {"name": "p", "kind": "pods"}))
    code, body = await call(
        http,
        "POST",
        f"{emulator.url}/api/v1/namespaces/other/pods",
        {**pod, "metadata": {"name": "q", "namespace": "ns"}},
    )
    assert code == 400 and body["reason"] == "BadRequest"
    code, body = await call(
        http, "POST", f"{emulator.url}/api/v1/namespaces/ns/pods", {"metadata": {"generateName": "gen-"}}
    )
    assert code == 201 and body["metadata"]["name"].startswith("gen-") and len(body["metadata"]["name"]) == 9


async def test_update_preconditions_and_status_rules(emulator: Emulator, http: aiohttp.ClientSession) -> None:
    pod = emulator.put(make_pod("p", "ns"))
    url = f"{emulator.url}/api/v1/namespaces/ns/pods/p"
    stale = {**pod, "metadata": {**pod["metadata"], "resourceVersion": "1"}}
    code, body = await call(http, "PUT", url, stale)
    assert code == 409
    assert body["message"] == (
        'Operation cannot be fulfilled on pods "p": the object has been modified; please apply your changes to the '
        "latest version and try again"
    )
    changed = {**pod, "spec": {"containers": [], "nodeName": "n9"}, "status": {"phase": "Running"}}
    code, body = await call(http, "PUT", url, changed)
    assert code == 200 and body["spec"]["nodeName"] == "n9"
    assert body["status"] == {"phase": "Pending"}  # the main resource ignores status
    code, body = await call(
        http, "PATCH", url + "/status", {"status": {"phase": "Running"}, "spec": {"nodeName": "x"}}, MERGE
    )
    assert code == 200 and body["status"] == {"phase": "Running"}
    assert body["spec"]["nodeName"] == "n9"  # the status endpoint ignores spec


async def test_noop_patch_keeps_the_version(emulator: Emulator, http: aiohttp.ClientSession) -> None:
    pod = emulator.put(make_pod("p", "ns", annotations={"a": "1"}))
    code, body = await call(
        http, "PATCH", f"{emulator.url}/api/v1/namespaces/ns/pods/p", {"metadata": {"annotations": {"a": "1"}}}, MERGE
    )
    assert code == 200 and body["metadata"]["resourceVersion"] == pod["metadata"]["resourceVersion"]


@pytest.mark.parametrize(
    ("content_type", "patch", "annotations"),
    [
        ("application/merge-patch+json", {"metadata": {"annotations": {"b": "2"}}}, {"a": "1", "b": "2"}),
        ("application/strategic-merge-patch+json", {"metadata": {"annotations": {"a": None}}}, {}),
        (
            "application/json-patch+json",
            [{"op": "add", "path": "/metadata/annotations/c", "value": "3"}],
            {"a": "1", "c": "3"},
        ),
    ],
    ids=["merge", "strategic", "json-patch"],
)
async def test_patch_types(
    emulator: Emulator, http: aiohttp.ClientSession, content_type: str, patch: Any, annotations: dict[str, str]
) -> None:
    emulator.put(make_node("n", annotations={"a": "1"}))
    code, body = await call(http, "PATCH", f"{emulator.url}/api/v1/nodes/n", patch, {"Content-Type": content_type})
    assert code == 200 and body["metadata"]["annotations"] == annotations


async def test_unsupported_patch_type_is_415(emulator: Emulator, http: aiohttp.ClientSession) -> None:
    emulator.put(make_node("n"))
    code, body = await call(
        http, "PATCH", f"{emulator.url}/api/v1/nodes/n", {}, {"Content-Type": "application/apply-patch+yaml"}
    )
    assert code == 415 and body["reason"] == "UnsupportedMediaType"


async def test_delete_and_preconditions(emulator: Emulator, http: aiohttp.ClientSession) -> None:
    pod = emulator.put(make_pod("p", "ns"))
    url = f"{emulator.url}/api/v1/namespaces/ns/pods/p"
    code, body = await call(http, "DELETE", url, {"preconditions": {"uid": "other"}})
    assert code == 409 and "Precondition failed: UID in precondition: other" in body["message"]
    code, body = await call(http, "DELETE", url, {"preconditions": {"uid": pod["metadata"]["uid"]}})
    assert code == 200 and body["metadata"]["name"] == "p"
    assert emulator.get("pods", "ns", "p") is None


async def test_binding(emulator: Emulator, http: aiohttp.ClientSession) -> None:
    emulator.put(make_pod("p", "ns"))
    url = f"{emulator.url}/api/v1/namespaces/ns/pods/p/binding"
    code, body = await call(http, "POST", url, {"metadata": {"name": "p"}, "target": {"kind": "Node"}})
    assert code == 422 and body["reason"] == "Invalid"
    binding = {"metadata": {"name": "p", "annotations": {"x": "y"}}, "target": {"kind": "Node", "name": "n1"}}
    code, body = await call(http, "POST", url, binding)
    assert (code, body) == (
        201,
        {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201},
    )
    pod = emulator.get("pods", "ns", "p")
    assert pod is not None
    assert pod["spec"]["nodeName"] == "n1" and pod["metadata"]["annotations"]["x"] == "y"
    assert [c["type"] for c in pod["status"]["conditions"]] == ["PodScheduled"]
    code, body = await call(http, "POST", url, binding)
    assert (code, body) == (
        409,
        status(
            409,
            "Conflict",
            'Operation cannot be fulfilled on pods/binding "p": pod p is already assigned to node "n1"',
            {"name": "p", "kind": "pods/binding"},
        ),
    )


async def test_watch_initial_events_then_changes(emulator: Emulator, http: aiohttp.ClientSession) -> None:
    emulator.put(make_node("n1"))
    async with http.get(f"{emulator.url}/api/v1/nodes", params={"watch": "1"}) as resp:
        assert resp.status == 200
        [first] = await read_frames(resp, 1)
        assert first["type"] == "ADDED" and first["object"]["kind"] == "Node"
        await emulator.wait_for(lambda: emulator.open_watches("nodes") == 1)
        emulator.patch("nodes", None, "n1", {"metadata": {"labels": {"a": "b"}}})
        emulator.delete("nodes", None, "n1")
        modified, deleted = await read_frames(resp, 2)
        assert modified["type"] == "MODIFIED" and modified["object"]["metadata"]["labels"] == {"a": "b"}
        assert deleted["type"] == "DELETED"
        assert int(deleted["object"]["metadata"]["resourceVersion"]) == emulator.resource_version  # the delete's rv


async def test_watch_replays_history_after_a_version(emulator: Emulator, http: aiohttp.ClientSession) -> None:
    emulator.put(make_node("n1"))
    since = emulator.resource_version
    emulator.put(make_node("n2"))
    emulator.delete("nodes", None, "n1")
    params = {"watch": "true", "resourceVersion": str(since), "timeoutSeconds": "0.2"}
    async with http.get(f"{emulator.url}/api/v1/nodes", params=params) as resp:
        frames = [json.loads(line) for line in (await resp.read()).splitlines()]  # the stream ends at the timeout
    assert [(f["type"], f["object"]["metadata"]["name"]) for f in frames] == [("ADDED", "n2"), ("DELETED", "n1")]


@pytest.mark.parametrize("http_status", [False, True], ids=["error-event", "http-410"])
async def test_watch_too_old_version(http: aiohttp.ClientSession, http_status: bool) -> None:
    async with Emulator(history_limit=1, expired_as_http_status=http_status) as em:
        em.put(make_node("n1"))
        em.put(make_node("n2"))
        em.put(make_node("n3"))
        async with http.get(f"{em.url}/api/v1/nodes", params={"watch": "1", "resourceVersion": "2"}) as resp:
            if http_status:
                assert resp.status == 410
                body = await resp.json()
            else:
                assert resp.status == 200
                [frame] = [json.loads(line) for line in (await resp.read()).splitlines()]
                assert frame["type"] == "ERROR"
                body = frame["object"]
    assert body == status(410, "Expired", "too old resource version: 2 (3)")


async def test_bookmarks(http: aiohttp.ClientSession) -> None:
    async with Emulator(bookmark_interval_s=0.05) as em:
        em.put(make_pod("p", "ns"))
        params = {"watch": "1", "resourceVersion": str(em.resource_version), "allowWatchBookmarks": "true"}
        async with http.get(f"{em.url}/api/v1/pods", params=params) as resp:
            [frame] = await read_frames(resp, 1)  # idle: the interval produces one
    assert frame == {
        "type": "BOOKMARK",
        "object": {"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": str(em.resource_version)}},
    }


async def test_no_bookmarks_unless_asked(emulator: Emulator, http: aiohttp.ClientSession) -> None:
    params = {"watch": "1", "resourceVersion": str(emulator.resource_version)}
    async with http.get(f"{emulator.url}/api/v1/pods", params=params) as resp:
        await emulator.wait_for(lambda: emulator.open_watches("pods") == 1)
        assert emulator.send_bookmarks() == 0
        emulator.put(make_pod("p", "ns"))
        [frame] = await read_frames(resp, 1)
    assert frame["type"] == "ADDED"


async def test_hooks_see_http_writes_only(emulator: Emulator, http: aiohttp.ClientSession) -> None:
    seen: list[WriteRecord] = []
    emulator.hooks.append(seen.append)
    emulator.put(make_node("n"))  # in-process helper: not a request
    await call(http, "PATCH", f"{emulator.url}/api/v1/nodes/n", {"metadata": {"labels": {"a": "b"}}}, MERGE)
    assert [(r.verb, r.resource, r.name, r.result["metadata"]["labels"]) for r in seen] == [
        (WriteVerb.PATCH, "nodes", "n", {"a": "b"})
    ]


async def test_injected_faults_are_used_up(emulator: Emulator, http: aiohttp.ClientSession) -> None:
    emulator.inject_error(500, method="GET", path="/nodes", times=1, message="boom")
    code, body = await call(http, "GET", f"{emulator.url}/api/v1/nodes")
    assert (code, body) == (500, status(500, "InternalError", "boom"))
    code, _ = await call(http, "GET", f"{emulator.url}/api/v1/nodes")
    assert code == 200


async def test_namespaces_are_cluster_scoped(emulator: Emulator, http: aiohttp.ClientSession) -> None:
    code, body = await call(http, "POST", f"{emulator.url}/api/v1/namespaces", {"metadata": {"name": "team-a"}})
    assert code == 201 and "namespace" not in body["metadata"]
    code, body = await call(http, "GET", f"{emulator.url}/api/v1/namespaces/team-a")
    assert code == 200 and body["kind"] == "Namespace"
    code, body = await call(
        http, "PATCH", f"{emulator.url}/api/v1/namespaces/team-a/status", {"status": {"phase": "Active"}}, MERGE
    )
    assert code == 200 and body["status"] == {"phase": "Active"}
    code, body = await call(http, "GET", f"{emulator.url}/api/v1/namespaces/team-a/pods")
    assert code == 200 and body["kind"] == "PodList"


def test_helpers_refuse_what_they_cannot_place(emulator: Emulator) -> None:
    with pytest.raises(ValueError, match="no kind"):
        emulator.put({"metadata": {"name": "x"}})
    with pytest.raises(KeyError, match="does not serve"):
        emulator.put({"kind": "Deployment", "metadata": {"name": "x"}})
    with pytest.raises(KeyError, match="does not exist"):
        emulator.patch("pods", "ns", "ghost", {})
    assert emulator.delete("nodes", None, "ghost") is None


async def test_pod_groups_are_served_under_their_api_group(
    emulator: Emulator, http: aiohttp.ClientSession, api: Api
) -> None:
    """Kubernetes v1.36's PodGroups and scheduler-plugins' are two resources of the same plural in two groups."""
    native = {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "train", "namespace": "ns"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 4}}},
    }
    code, created = await call(
        http, "POST", f"{emulator.url}/apis/scheduling.k8s.io/v1alpha2/namespaces/ns/podgroups", native
    )
    assert code == 201 and created["apiVersion"] == "scheduling.k8s.io/v1alpha2", created
    emulator.put(
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "train", "namespace": "ns"},
            "spec": {"minMember": 3},
        }
    )
    code, got = await call(
        http, "GET", f"{emulator.url}/apis/scheduling.x-k8s.io/v1alpha1/namespaces/ns/podgroups/train"
    )
    assert code == 200 and got["spec"] == {"minMember": 3}
    group = await api.get_pod_group("ns", "train")
    assert group is not None and group["spec"]["schedulingPolicy"]["gang"]["minCount"] == 4
    assert await api.get_pod_group("ns", "other") is None
    code, _ = await call(http, "GET", f"{emulator.url}/apis/scheduling.k8s.io/v1alpha2/namespaces/ns/widgets")
    assert code == 404


async def test_graceful_pod_deletion_keeps_a_bound_pod_until_the_kubelet_deletes_it(
    http: aiohttp.ClientSession,
) -> None:
    async with Emulator(bookmark_interval_s=None, graceful_pod_deletion=True) as em:
        bound = make_pod("bound", "ns")
        bound["spec"].update(nodeName="n1", terminationGracePeriodSeconds=20)
        em.put(bound)
        em.put(make_pod("pending", "ns"))
        url = f"{em.url}/api/v1/namespaces/ns/pods"
        code, body = await call(http, "DELETE", f"{url}/bound", {"kind": "DeleteOptions", "apiVersion": "v1"})
        assert code == 200 and body["metadata"]["deletionGracePeriodSeconds"] == 20
        marked = em.get("Pod", "ns", "bound")
        assert marked is not None and marked["metadata"]["deletionTimestamp"]
        # a longer grace changes nothing; a shorter one shortens it
        await call(http, "DELETE", f"{url}/bound", {"gracePeriodSeconds": 60})
        assert em.get("Pod", "ns", "bound")["metadata"]["deletionGracePeriodSeconds"] == 20  # type: ignore[index]
        await call(http, "DELETE", f"{url}/bound", {"gracePeriodSeconds": 5})
        assert em.get("Pod", "ns", "bound")["metadata"]["deletionGracePeriodSeconds"] == 5  # type: ignore[index]
        # the kubelet's final delete, and a pod on no node, go at once
        code, _ = await call(http, "DELETE", f"{url}/bound", {"gracePeriodSeconds": 0})
        assert code == 200 and em.get("Pod", "ns", "bound") is None
        await call(http, "DELETE", f"{url}/pending", {})
        assert em.get("Pod", "ns", "pending") is None
