"""A Binding that carries the pod's annotations and labels, on the real kube-apiserver and on our emulator alike.

``/bind`` writes a pod's allocation with its Binding (one request instead of a patch and a Binding), so what the
API server does with a Binding's metadata is a contract we rely on: the annotations and (v1.35+) labels are
merged into the pod with the node, the UID and resourceVersion are preconditions, and a refused Binding writes
nothing. Each check runs against both servers, so the emulator cannot drift from the real one."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tests.controlplane.control import ApiServer, Cleanup, assets_dir, release_minor
from vgpu_scheduler.shared.emulator import Emulator
from vgpu_scheduler.shared.errors import ConflictError
from vgpu_scheduler.shared.k8s import AlreadyBoundError, Api, KubeSettings, StaleVersionError
from vgpu_scheduler.shared.k8s.client import open_client

Create = Callable[[str], dict[str, Any]]


def _pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "binding-test"}, "annotations": {"kept": "yes"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}], "schedulerName": "nobody"},
    }


@pytest.fixture(params=["kube-apiserver", "emulator"])
async def server(
    request: pytest.FixtureRequest,
) -> AsyncIterator[tuple[Api, Create, Callable[[str], dict[str, Any]], bool]]:
    """``(api, create pod, get pod, whether Binding labels are copied)`` on the real API server or the emulator."""
    if request.param == "emulator":
        em = Emulator(bookmark_interval_s=None)
        await em.start()
        try:
            async with open_client(KubeSettings(server=em.url, qps=0, timeout_s=10.0)) as kube:

                def create(name: str) -> dict[str, Any]:
                    return em.put({**_pod(name), "metadata": {**_pod(name)["metadata"], "namespace": "default"}})

                def get(name: str) -> dict[str, Any]:
                    pod = em.get("Pod", "default", name)
                    assert pod is not None
                    return pod

                yield Api(kube, component="test"), create, get, True  # it serves v1.35+ behaviour
        finally:
            await em.stop()
        return
    real: ApiServer = request.getfixturevalue("kube_apiserver")
    cleanup: Cleanup = request.getfixturevalue("kube_cleanup")
    ns = cleanup.namespace(f"binding-{uuid.uuid4().hex[:6]}")
    async with open_client(KubeSettings(kubeconfig=str(real.kubeconfig), qps=0, timeout_s=10.0)) as kube:

        def create_real(name: str) -> dict[str, Any]:
            created: dict[str, Any] = real.request("POST", f"/api/v1/namespaces/{ns}/pods", _pod(name))
            return created

        def get_real(name: str) -> dict[str, Any]:
            got: dict[str, Any] = real.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
            return got

        yield _NamespacedApi(kube, ns), create_real, get_real, _labels_copied()


class _NamespacedApi(Api):
    """The real server's pods live in a test namespace: calls naming ``default`` go there."""

    def __init__(self, kube: Any, namespace: str) -> None:
        super().__init__(kube, component="test")
        self._ns = namespace

    async def bind_pod(self, namespace: str, name: str, node: str, **kw: Any) -> None:
        await super().bind_pod(self._ns, name, node, **kw)


def _labels_copied() -> bool:
    """A Binding's labels reach the pod from v1.35 (PodTopologyLabelsAdmission on by default)."""
    assets = assets_dir()
    minor = release_minor(assets) if assets is not None else None
    return minor is None or minor >= 35


async def test_a_binding_carries_annotations_and_labels_to_the_pod(server: Any) -> None:
    api, create, get, copies_labels = server
    pod = create("p1")
    m = pod["metadata"]
    await api.bind_pod(
        "default",
        "p1",
        "node-a",
        uid=m["uid"],
        resource_version=m["resourceVersion"],
        annotations={"hami.io/vgpu-node": "node-a", "hami.io/bind-phase": "allocating"},
        labels={"hami.io/vgpu-node": "node-a"},
    )
    bound = get("p1")
    assert bound["spec"]["nodeName"] == "node-a"
    annotations = bound["metadata"]["annotations"]
    assert annotations["hami.io/vgpu-node"] == "node-a" and annotations["hami.io/bind-phase"] == "allocating"
    assert annotations["kept"] == "yes"  # merged, not replaced
    labels = bound["metadata"]["labels"]
    assert labels["app"] == "binding-test"
    if copies_labels:
        assert labels["hami.io/vgpu-node"] == "node-a"
    else:  # dropped silently: the informer adds it (services/informer/labels.py)
        assert "hami.io/vgpu-node" not in labels
    conditions = {c["type"]: c["status"] for c in bound["status"].get("conditions") or []}
    assert conditions.get("PodScheduled") == "True"


async def test_a_stale_resource_version_is_refused_and_writes_nothing(server: Any) -> None:
    api, create, get, _ = server
    pod = create("p1")
    stale = pod["metadata"]["resourceVersion"]
    with pytest.raises(StaleVersionError, match="Precondition failed: ResourceVersion"):
        await api.bind_pod(
            "default", "p1", "node-a", resource_version=str(int(stale) - 1), annotations={"hami.io/vgpu-node": "x"}
        )
    after = get("p1")
    assert not after["spec"].get("nodeName")
    assert "hami.io/vgpu-node" not in after["metadata"]["annotations"]


async def test_another_uid_is_a_plain_conflict(server: Any) -> None:
    api, create, get, _ = server
    create("p1")
    with pytest.raises(ConflictError, match="Precondition failed: UID") as info:
        await api.bind_pod("default", "p1", "node-a", uid=str(uuid.uuid4()), annotations={"hami.io/vgpu-node": "x"})
    assert not isinstance(info.value, StaleVersionError | AlreadyBoundError)
    assert "hami.io/vgpu-node" not in get("p1")["metadata"]["annotations"]


async def test_a_bound_pod_is_already_bound_and_keeps_its_annotations(server: Any) -> None:
    api, create, get, _ = server
    create("p1")
    await api.bind_pod("default", "p1", "node-a", annotations={"hami.io/vgpu-node": "node-a"})
    with pytest.raises(AlreadyBoundError) as info:
        await api.bind_pod("default", "p1", "node-b", annotations={"hami.io/vgpu-node": "node-b"})
    assert info.value.node == "node-a"
    assert get("p1")["metadata"]["annotations"]["hami.io/vgpu-node"] == "node-a"
