"""What the informer writes when a node lock times out while its holder is still ``allocating`` (hami-wire §4.1,
difference 5): first ``hami.io/bind-phase: failed`` on the pod, then the lock annotation removed, both as
resourceVersion-guarded merge patches."""

from __future__ import annotations

from tests.compat.kit import MERGE_PATCH, RecordingEmulator, running_informer
from tests.compat.test_bind_wire import NODE, _setup
from tests.waiting import eventually
from vgpu_scheduler.shared.k8s import Api, KubeClient
from vgpu_scheduler.shared.store import Store

LOCK = "2020-01-02T03:04:05+08:00,team-a,stuck"


async def test_an_expired_lock_marks_its_allocating_holder_failed_then_is_removed(
    store: Store, emulator: RecordingEmulator, kube: KubeClient, api: Api
) -> None:
    await _setup(store, emulator)
    emulator.patch("Node", None, NODE, {"metadata": {"annotations": {"hami.io/mutex.lock": LOCK}}})
    pod = emulator.put(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "stuck",
                "namespace": "team-a",
                "labels": {"hami.io/vgpu-node": NODE},  # as HAMi's scheduler writes it with the annotations
                "annotations": {
                    "hami.io/vgpu-node": NODE,
                    "hami.io/vgpu-time": "1577905445",
                    "hami.io/vgpu-devices-to-allocate": f"GPU-{NODE}-0,NVIDIA,1000,10:;",
                    "hami.io/vgpu-devices-allocated": f"GPU-{NODE}-0,NVIDIA,1000,10:;",
                    "hami.io/bind-phase": "allocating",
                    "hami.io/bind-time": "1577905445",
                },
            },
            "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "x"}]},
            "status": {"phase": "Pending"},
        }
    )
    node_rv = emulator.node(NODE)["metadata"]["resourceVersion"]
    emulator.raw.clear()
    async with running_informer(store, kube, api):
        await eventually(lambda: "hami.io/mutex.lock" not in emulator.node(NODE)["metadata"]["annotations"])

    mark, release = emulator.writes()
    assert (mark.method, mark.path, mark.content_type) == ("PATCH", "/api/v1/namespaces/team-a/pods/stuck", MERGE_PATCH)
    assert mark.doc == {
        "metadata": {
            "annotations": {"hami.io/bind-phase": "failed"},
            "resourceVersion": pod["metadata"]["resourceVersion"],
        }
    }
    assert (release.method, release.path, release.content_type) == ("PATCH", f"/api/v1/nodes/{NODE}", MERGE_PATCH)
    assert release.doc == {"metadata": {"annotations": {"hami.io/mutex.lock": None}, "resourceVersion": node_rv}}
