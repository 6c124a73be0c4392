"""HAMi's device plugin (re-implemented in :mod:`tests.compat.hami_plugin` from docs/hami-wire.md alone) reads what
a real extender wrote through ``/filter`` + ``/bind``: it must find exactly the bound pod through the node lock,
even with a fallback trap on the node, and hand every kubelet Allocate the devices we gave that container,
init containers included, for the HEAD decoder and the ≤ v2.8 one that drops empty entries."""

from __future__ import annotations

from typing import Any

import pytest

from tests.compat import hami_plugin as hami
from tests.compat.kit import RecordingEmulator, running_extender, running_informer
from tests.compat.test_bind_wire import DEVICE_LIST, EXPECTED_PER_CONTAINER, NAME, NODE, NS, _setup, training_pod
from vgpu_scheduler.shared.k8s import Api, KubeClient
from vgpu_scheduler.shared.store import Store


def decoy(name: str) -> dict[str, Any]:
    """A pod the plugin already allocated on the node, still Pending (pulling its image): the first pod in list
    order that passes ``GetPendingPod``'s fallback test, so only the lock can point the plugin elsewhere."""
    pod = training_pod(name)
    pod["metadata"]["annotations"] = {
        "hami.io/vgpu-node": NODE,
        "hami.io/bind-time": "1",
        "hami.io/bind-phase": "success",
        "hami.io/vgpu-devices-to-allocate": f"GPU-{NODE}-3,NVIDIA,1,0:;",
        "hami.io/vgpu-devices-allocated": f"GPU-{NODE}-3,NVIDIA,1,0:;",
    }
    pod["spec"]["nodeName"] = NODE
    return pod


async def _bind(ext: Any, emulator: RecordingEmulator, pod: dict[str, Any]) -> dict[str, Any]:
    created = emulator.put(pod)
    answer = await ext.post("filter", {"Pod": created, "Nodes": None, "NodeNames": [NODE]})
    assert answer.get("NodeNames") == [NODE], answer
    meta = created["metadata"]
    bind = {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"], "Node": NODE}
    assert await ext.post("bind", bind) == {"Error": ""}
    return created


@pytest.mark.parametrize("variant", list(hami.Variant), ids=lambda v: v.value)
async def test_the_plugin_finds_the_bound_pod_and_each_container_gets_its_devices(
    store: Store, emulator: RecordingEmulator, api: Api, plugin_api: Api, variant: hami.Variant
) -> None:
    await _setup(store, emulator)
    emulator.put(decoy("a-decoy"))
    trap = await hami.get_pending_pod(plugin_api, NODE)
    assert trap["metadata"]["name"] == "a-decoy"  # without a lock the fallback picks the decoy

    async with running_extender(store, api) as ext:
        created = await _bind(ext, emulator, training_pod())
        requests = hami.kubelet_requests(created)
        assert requests == [("warmup", 1), ("worker", 2), ("eval", 1)]
        got = [await hami.allocate(plugin_api, NODE, n, variant) for _, n in requests]

    assert {(a.namespace, a.pod) for a in got} == {(NS, NAME)}
    for (container, _), a in zip(requests, got, strict=True):
        assert [(d.uuid, d.mem_mib, d.cores) for d in a.devices] == EXPECTED_PER_CONTAINER[container]
        assert {d.type for d in a.devices} == {"NVIDIA"}
        if variant is hami.Variant.HEAD:
            assert a.container == container  # index → init containers first, then app containers
    final = emulator.pod(NS, NAME)["metadata"]["annotations"]
    assert final["hami.io/bind-phase"] == "success"
    assert "NVIDIA" not in final["hami.io/vgpu-devices-to-allocate"]
    assert final["hami.io/vgpu-devices-allocated"] == DEVICE_LIST  # accounting's source is never rewritten
    assert "hami.io/mutex.lock" not in emulator.node(NODE)["metadata"]["annotations"]


def test_the_head_decoder_keeps_one_entry_per_container_plus_the_trailing_piece() -> None:
    entries = hami.decode_head(DEVICE_LIST)
    assert [len(c) for c in entries] == [0, 1, 0, 2, 1, 0]  # fetch, warmup, sidecar, worker, eval, terminator
    assert [len(c) for c in hami.decode_v28(DEVICE_LIST)] == [1, 2, 1]


async def test_pods_bound_one_after_another_are_each_found_through_their_own_lock(
    store: Store, emulator: RecordingEmulator, kube: KubeClient, api: Api, plugin_api: Api
) -> None:
    """With the real informer releasing each Redis lock once the plugin settled the pod."""
    await _setup(store, emulator)
    emulator.put(decoy("a-decoy"))
    async with running_informer(store, kube, api), running_extender(store, api) as ext:
        for i in range(3):
            pod = training_pod(f"trainer-{i}")
            created = await _bind(ext, emulator, pod)
            for _, n in hami.kubelet_requests(created):
                allocated = await hami.allocate(plugin_api, NODE, n)
                assert allocated.pod == f"trainer-{i}"
            annos = emulator.pod(NS, f"trainer-{i}")["metadata"]["annotations"]
            assert annos["hami.io/bind-phase"] == "success"
