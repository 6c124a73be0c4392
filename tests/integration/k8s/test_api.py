"""Typed API calls against the emulator: reads, metadata merge patches with resourceVersion preconditions,
binding, events, error translation, deadlines, client configuration and closing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.integration.k8s.conftest import make_node, make_pod
from vgpu_scheduler.shared.emulator import Emulator, WriteRecord, WriteVerb
from vgpu_scheduler.shared.errors import ConfigError, ConflictError, NotFoundError, TransientError
from vgpu_scheduler.shared.k8s import (
    AlreadyBoundError,
    Api,
    EventType,
    KubeClient,
    KubeRequestError,
    KubeSettings,
    open_client,
)


async def test_get_and_list(emulator: Emulator, api: Api) -> None:
    emulator.put(make_pod("a", "ns1", node="n1", labels={"hami.io/vgpu-node": "n1"}))
    emulator.put(make_pod("b", "ns1", node="n2"))
    emulator.put(make_pod("c", "ns2", node="n1"))
    emulator.put(make_pod("d", "ns2"))
    emulator.put(make_node("n1", labels={"gpu": "on"}))
    emulator.put(make_node("n2"))

    pod = await api.get_pod("ns1", "a")
    assert pod["kind"] == "Pod" and pod["spec"]["nodeName"] == "n1"
    assert (await api.get_node("n1"))["status"]["allocatable"] == {"nvidia.com/gpu": "4"}

    def names(objs: list[dict[str, Any]]) -> list[str]:
        return [o["metadata"]["name"] for o in objs]

    assert names(await api.list_pods()) == ["a", "b", "c", "d"]
    assert names(await api.list_pods(node_name="n1")) == ["a", "c"]
    assert names(await api.list_pods(namespace="ns2", node_name="n1")) == ["c"]
    assert names(await api.list_pods(node_name="")) == ["d"]  # unscheduled pods
    assert names(await api.list_pods(label_selector="hami.io/vgpu-node=n1")) == ["a"]
    assert names(await api.list_pods(node_name="n1", field_selector="metadata.namespace=ns1")) == ["a"]
    assert all(p["kind"] == "Pod" for p in await api.list_pods())
    assert names(await api.list_nodes(label_selector="gpu=on")) == ["n1"]
    assert [n["kind"] for n in await api.list_nodes()] == ["Node", "Node"]


def make_quota(name: str, namespace: str, hard: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"hard": hard},
    }


async def test_list_resource_quotas(emulator: Emulator, api: Api) -> None:
    emulator.put(make_quota("gpu", "ns1", {"limits.nvidia.com/gpumem": "4096"}))
    emulator.put(make_quota("cpu", "ns1", {"limits.cpu": "8"}))
    emulator.put(make_quota("gpu", "ns2", {"limits.nvidia.com/gpu": "2"}))

    def keys(objs: list[dict[str, Any]]) -> list[str]:
        return sorted(f"{o['metadata']['namespace']}/{o['metadata']['name']}" for o in objs)

    everything = await api.list_resource_quotas()
    assert keys(everything) == ["ns1/cpu", "ns1/gpu", "ns2/gpu"]
    assert all(q["kind"] == "ResourceQuota" and q["apiVersion"] == "v1" for q in everything)
    gpu = next(q for q in everything if q["metadata"]["namespace"] == "ns2")
    assert gpu["spec"]["hard"] == {"limits.nvidia.com/gpu": "2"}
    assert keys(await api.list_resource_quotas(namespace="ns1")) == ["ns1/cpu", "ns1/gpu"]
    assert await api.list_resource_quotas(namespace="empty") == []


async def test_listing_resource_quotas_has_a_deadline(emulator: Emulator, api: Api) -> None:
    emulator.inject_delay(30.0, method="GET")
    with pytest.raises(TransientError, match=r"no answer within 0\.2s"):
        await api.list_resource_quotas(timeout_s=0.2)


async def test_missing_objects_are_not_found(api: Api) -> None:
    with pytest.raises(NotFoundError, match='pods "ghost" not found'):
        await api.get_pod("default", "ghost")
    with pytest.raises(NotFoundError):
        await api.get_node("ghost")
    with pytest.raises(NotFoundError):
        await api.patch_pod_metadata("default", "ghost", annotations={"a": "b"})
    with pytest.raises(NotFoundError):
        await api.bind_pod("default", "ghost", "n1")


async def test_merge_patch_annotations_and_labels(emulator: Emulator, api: Api) -> None:
    emulator.put(make_pod("p", annotations={"keep": "1", "drop": "2"}))
    writes: list[WriteRecord] = []
    emulator.hooks.append(writes.append)
    out = await api.patch_pod_metadata(
        "default",
        "p",
        annotations={"hami.io/vgpu-node": "n1", "drop": None},
        labels={"hami.io/vgpu-node": "n1"},
    )
    assert out["metadata"]["annotations"] == {"keep": "1", "hami.io/vgpu-node": "n1"}
    assert out["metadata"]["labels"] == {"hami.io/vgpu-node": "n1"}
    assert emulator.get("Pod", "default", "p")["metadata"]["annotations"] == out["metadata"]["annotations"]  # type: ignore[index]
    [write] = writes
    assert write.verb is WriteVerb.PATCH
    assert write.content_type == "application/merge-patch+json"
    assert write.body == {
        "metadata": {"annotations": {"hami.io/vgpu-node": "n1", "drop": None}, "labels": {"hami.io/vgpu-node": "n1"}}
    }


async def test_resource_version_precondition(emulator: Emulator, api: Api) -> None:
    node = emulator.put(make_node("n1"))
    rv = node["metadata"]["resourceVersion"]
    lock = "2025-01-23T10:00:00+08:00,default,gpu-pod-1"
    out = await api.patch_node_metadata("n1", annotations={"hami.io/mutex.lock": lock}, resource_version=rv)
    assert out["metadata"]["annotations"]["hami.io/mutex.lock"] == lock
    assert out["metadata"]["resourceVersion"] != rv
    with pytest.raises(ConflictError, match="the object has been modified") as info:
        await api.patch_node_metadata("n1", annotations={"hami.io/mutex.lock": None}, resource_version=rv)
    assert not isinstance(info.value, AlreadyBoundError)
    assert emulator.get("Node", None, "n1")["metadata"]["annotations"]["hami.io/mutex.lock"] == lock  # type: ignore[index]
    released = await api.patch_node_metadata(
        "n1", annotations={"hami.io/mutex.lock": None}, resource_version=out["metadata"]["resourceVersion"]
    )
    assert "hami.io/mutex.lock" not in released["metadata"]["annotations"]


async def test_bind_once_then_already_bound(emulator: Emulator, api: Api) -> None:
    pod = emulator.put(make_pod("p"))
    writes: list[WriteRecord] = []
    emulator.hooks.append(writes.append)
    await api.bind_pod("default", "p", "n1", uid=pod["metadata"]["uid"])
    bound = emulator.get("pods", "default", "p")
    assert bound is not None and bound["spec"]["nodeName"] == "n1"
    assert [w.verb for w in writes] == [WriteVerb.BIND]
    assert writes[0].body["target"] == {"apiVersion": "v1", "kind": "Node", "name": "n1"}
    with pytest.raises(AlreadyBoundError, match="is already assigned to node") as info:
        await api.bind_pod("default", "p", "n2")
    assert info.value.node == "n1"
    assert isinstance(info.value, ConflictError)


async def test_bind_with_a_stale_uid_is_a_plain_conflict(emulator: Emulator, api: Api) -> None:
    emulator.put(make_pod("p"))
    with pytest.raises(ConflictError, match="Precondition failed: UID") as info:
        await api.bind_pod("default", "p", "n1", uid="not-the-uid")
    assert not isinstance(info.value, AlreadyBoundError)
    assert emulator.get("pods", "default", "p")["spec"].get("nodeName") is None  # type: ignore[index]


async def test_events_on_pods_and_nodes(emulator: Emulator, api: Api) -> None:
    pod = emulator.put(make_pod("p", "team-a"))
    node = emulator.put(make_node("n1"))
    await api.pod_event(pod, reason="BindingSucceed", message="Successfully binding node [n1] to team-a/p")
    await api.node_event(node, reason="NodeLockExpired", message="x" * 5000, event_type=EventType.WARNING)
    pod_ev, node_ev = emulator.list("events", "team-a")[0], emulator.list("events", "default")[0]
    assert pod_ev["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "p",
        "namespace": "team-a",
        "uid": pod["metadata"]["uid"],
        "resourceVersion": pod["metadata"]["resourceVersion"],
    }
    assert (pod_ev["reason"], pod_ev["type"], pod_ev["message"]) == (
        "BindingSucceed",
        "Normal",
        "Successfully binding node [n1] to team-a/p",
    )
    assert pod_ev["source"] == {"component": "vgpu-scheduler"}
    assert pod_ev["reportingComponent"] == "vgpu-scheduler"
    assert pod_ev["firstTimestamp"] == "2023-11-14T22:13:20Z"
    assert node_ev["involvedObject"]["kind"] == "Node" and "namespace" not in node_ev["involvedObject"]
    assert node_ev["type"] == "Warning"
    assert len(node_ev["message"]) == 1024


async def test_server_errors_are_transient_and_carry_retry_after(emulator: Emulator, api: Api) -> None:
    emulator.put(make_pod("p"))
    emulator.inject_error(503, method="GET", times=1, message="etcd unavailable")
    with pytest.raises(TransientError, match="etcd unavailable"):
        await api.get_pod("default", "p")
    emulator.inject_error(429, method="PATCH", retry_after_s=3, message="slow down")
    with pytest.raises(TransientError) as info:
        await api.patch_pod_metadata("default", "p", annotations={"a": "b"})
    assert info.value.delay == 3.0
    emulator.inject_error(403, method="GET", message='pods "p" is forbidden')
    with pytest.raises(KubeRequestError) as forbidden:
        await api.get_pod("default", "p")
    assert (forbidden.value.code, forbidden.value.reason) == (403, "Forbidden")
    assert (await api.get_pod("default", "p"))["metadata"]["name"] == "p"  # faults are used up


async def test_every_call_has_a_deadline(emulator: Emulator, kube: KubeClient) -> None:
    emulator.put(make_pod("p"))
    emulator.inject_delay(30.0, method="GET")
    api = Api(kube, component="vgpu-scheduler")
    with pytest.raises(TransientError, match=r"no answer within 0\.2s"):
        await api.get_pod("default", "p", timeout_s=0.2)


async def test_network_failure_is_transient() -> None:
    em = Emulator()
    url = await em.start()
    await em.stop()  # nothing listens there any more
    async with open_client(KubeSettings(server=url, timeout_s=2.0)) as client:
        with pytest.raises(TransientError, match="ClientConnectorError"):
            await Api(client, component="x").get_node("n1")


async def test_client_closes_its_session(emulator: Emulator) -> None:
    async with open_client(KubeSettings(server=emulator.url)) as client:
        session = client.api_client.rest_client.pool_manager
        assert not session.closed
        assert (await Api(client, component="x").list_nodes()) == []
    assert session.closed


async def test_client_closes_on_error(emulator: Emulator) -> None:
    with pytest.raises(NotFoundError):
        async with open_client(KubeSettings(server=emulator.url)) as client:
            session = client.api_client.rest_client.pool_manager
            await Api(client, component="x").get_node("ghost")
    assert session.closed


async def test_kubeconfig_file(emulator: Emulator, tmp_path: Path) -> None:
    emulator.put(make_node("n1"))
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        f"""apiVersion: v1
kind: Config
clusters:
- name: emu
  cluster:
    server: {emulator.url}
users:
- name: tester
  user:
    token: abc
contexts:
- name: emu
  context:
    cluster: emu
    user: tester
current-context: emu
"""
    )
    async with open_client(KubeSettings(kubeconfig=str(kubeconfig))) as client:
        assert [n["metadata"]["name"] for n in await Api(client, component="x").list_nodes()] == ["n1"]
    assert kubeconfig.read_text().count("token: abc") == 1  # never rewritten


def _kubeconfig(server: str, *, context: str = "emu", current: str | None = "emu", parts: str = "all") -> str:
    """A kubeconfig document: ``parts`` "all", "context" (context only) or "cluster" (cluster and user only)."""
    cluster = f"clusters:\n- name: {context}-cluster\n  cluster:\n    server: {server}\n"
    user = f"users:\n- name: {context}-user\n  user:\n    token: abc\n"
    ctx = f"contexts:\n- name: {context}\n  context:\n    cluster: {context}-cluster\n    user: {context}-user\n"
    body = "apiVersion: v1\nkind: Config\n"
    if parts in ("all", "cluster"):
        body += cluster + user
    if parts in ("all", "context"):
        body += ctx
    if current is not None:
        body += f"current-context: {current}\n"
    return body


@pytest.fixture
def no_ambient_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No KUBECONFIG, an empty home, outside a cluster: only what the test sets counts."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    return home


async def _node_names(settings: KubeSettings) -> list[str]:
    async with open_client(settings) as client:
        return [n["metadata"]["name"] for n in await Api(client, component="x").list_nodes()]


async def test_kubeconfig_env_list_is_merged_as_kubectl_does(
    emulator: Emulator, tmp_path: Path, no_ambient_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``KUBECONFIG=a:missing:b``: missing files skipped, entries merged, the first current-context wins (the
    second file's is ignored: kubernetes-asyncio's own merger would let it win)."""
    emulator.put(make_node("n1"))
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text(_kubeconfig(emulator.url, parts="context"))
    # the second file's current-context names a context nobody defines: picking it would fail the load
    second.write_text(_kubeconfig(emulator.url, parts="cluster", current="dead"))
    monkeypatch.setenv("KUBECONFIG", f"{first}:{tmp_path / 'missing.yaml'}:{second}")
    assert await _node_names(KubeSettings()) == ["n1"]


async def test_home_kubeconfig_is_used_when_nothing_else_is_given(emulator: Emulator, no_ambient_config: Path) -> None:
    emulator.put(make_node("n2"))
    (no_ambient_config / ".kube").mkdir()
    (no_ambient_config / ".kube" / "config").write_text(_kubeconfig(emulator.url))
    assert await _node_names(KubeSettings()) == ["n2"]


async def test_the_flag_wins_over_kubeconfig_env(
    emulator: Emulator, tmp_path: Path, no_ambient_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    emulator.put(make_node("n3"))
    good, dead = tmp_path / "good.yaml", tmp_path / "dead.yaml"
    good.write_text(_kubeconfig(emulator.url))
    dead.write_text(_kubeconfig("http://127.0.0.1:9"))
    monkeypatch.setenv("KUBECONFIG", str(dead))
    assert await _node_names(KubeSettings(kubeconfig=str(good))) == ["n3"]


async def test_missing_kubeconfig_says_not_found(tmp_path: Path, no_ambient_config: Path) -> None:
    with pytest.raises(ConfigError) as e:
        async with open_client(KubeSettings(kubeconfig=str(tmp_path / "nope"))):
            pass
    assert str(e.value) == f"--kubeconfig {tmp_path / 'nope'}: file not found"


async def test_kubeconfig_env_naming_only_missing_files_says_not_found(
    tmp_path: Path, no_ambient_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'x'}:{tmp_path / 'y'}")
    with pytest.raises(ConfigError, match=r"KUBECONFIG=.*: file not found .*give --kubeconfig FILE or --kube-server"):
        async with open_client(KubeSettings()):
            pass


async def test_kubeconfig_without_current_context_says_so(tmp_path: Path, no_ambient_config: Path) -> None:
    path = tmp_path / "config"
    path.write_text(_kubeconfig("http://127.0.0.1:9", current=None))
    with pytest.raises(ConfigError, match="no current-context set"):
        async with open_client(KubeSettings(kubeconfig=str(path))):
            pass


@pytest.mark.parametrize(
    ("text", "error"),
    [("[1, 2]", "expected a mapping"), ("clusters: {a: 1}", "clusters must be a list"), ("a: [", "not valid YAML")],
)
async def test_malformed_kubeconfig_is_one_line(tmp_path: Path, no_ambient_config: Path, text: str, error: str) -> None:
    path = tmp_path / "config"
    path.write_text(text)
    with pytest.raises(ConfigError, match=error):
        async with open_client(KubeSettings(kubeconfig=str(path))):
            pass


async def test_no_cluster_at_all_says_what_was_tried(no_ambient_config: Path) -> None:
    with pytest.raises(ConfigError) as e:
        async with open_client(KubeSettings()):
            pass
    message = str(e.value)
    assert message.startswith(
        "no Kubernetes cluster configured: tried --kubeconfig (not given); KUBECONFIG (not set); "
        f"{no_ambient_config / '.kube' / 'config'} (not found); in-cluster service account ("
    )
    assert message.endswith(
        "Give --kubeconfig FILE (or set KUBECONFIG) for a cluster outside, or --kube-server URL for an API server "
        "without credentials"
    )


async def test_raw_calls_carry_the_credentials_and_agent_of_generated_calls(
    tmp_path: Path, no_ambient_config: Path
) -> None:
    """The bind path's calls skip kubernetes-asyncio's generated methods: they must still authenticate the same."""
    from aiohttp import web

    seen: list[tuple[str, str, str | None, str | None, str | None]] = []

    async def record(request: web.Request) -> web.Response:
        h = request.headers
        seen.append((request.method, request.path, h.get("Authorization"), h.get("User-Agent"), h.get("Content-Type")))
        if request.path == "/api/v1/nodes":
            return web.json_response({"items": []})
        return web.json_response({"metadata": {"name": "p", "namespace": "default"}})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        kubeconfig = tmp_path / "config"
        kubeconfig.write_text(_kubeconfig(f"http://{host}:{port}"))
        async with open_client(KubeSettings(kubeconfig=str(kubeconfig), user_agent="vgpu-test")) as client:
            api = Api(client, component="x")
            assert await api.list_nodes() == []  # a generated call
            assert (await api.get_pod("default", "p"))["metadata"]["name"] == "p"
            await api.patch_pod_metadata("default", "p", annotations={"a": "b"}, resource_version="7")
            assert await api.add_node_annotation_if_absent("n1", "hami.io/mutex.lock", "v")
            await api.bind_pod("default", "p", "n1", uid="u")
    finally:
        await runner.cleanup()
    assert seen == [
        ("GET", "/api/v1/nodes", "Bearer abc", "vgpu-test", "application/json"),  # the generated GET names one too
        ("GET", "/api/v1/namespaces/default/pods/p", "Bearer abc", "vgpu-test", None),
        ("PATCH", "/api/v1/namespaces/default/pods/p", "Bearer abc", "vgpu-test", "application/merge-patch+json"),
        ("PATCH", "/api/v1/nodes/n1", "Bearer abc", "vgpu-test", "application/json-patch+json"),
        ("POST", "/api/v1/namespaces/default/pods/p/binding", "Bearer abc", "vgpu-test", "application/json"),
    ]
