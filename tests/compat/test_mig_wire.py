"""Dynamic MIG on the wire (hami-wire §7.1): the device list carries the physical UUID with the profile's
``memoryMB``/``core``, and ``hami.io/vgpu-mig-allocations`` is Go's ``json.Marshal`` of ``[]MigAllocation``
(key order ``containerIndex, deviceIndex, gpuUUID, profile, placement{start,size}``, no spaces), with
``containerIndex`` counting init containers first — all in the one Binding of ``/bind``."""

from __future__ import annotations

from typing import Any

from tests.compat.conftest import SCHEDULER
from tests.compat.kit import RecordingEmulator, running_extender
from tests.integration.extender.filter_harness import node_object, seed
from vgpu_scheduler.shared.domain.model import NVIDIA, DeviceInfo, MigPlacement, MigProfile, NodeInventory
from vgpu_scheduler.shared.k8s import Api
from vgpu_scheduler.shared.store import Store

NODE = "mig-node"
UUID = "GPU-3b2f0c1e-8d4a-4c55-9e61-7a0b1c2d3e4f"


def a100() -> DeviceInfo:
    return DeviceInfo(
        id=UUID,
        index=0,
        count=7,
        devmem_mib=40960,
        devcore=100,
        type="NVIDIA A100-PCIE-40GB",
        numa=0,
        mode="mig",
        health=True,
        mig_profiles=(
            MigProfile("1g.5gb", 4864, 15, 1, tuple(MigPlacement(i, 1) for i in range(7))),
            MigProfile("3g.20gb", 19968, 43, 3, (MigPlacement(0, 4), MigPlacement(4, 4))),
        ),
    )


def ctr(name: str, mem: int | None = None) -> dict[str, Any]:
    if mem is None:
        return {"name": name, "image": "x"}
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(mem)}
    return {"name": name, "image": "x", "resources": {"limits": limits}}


async def test_mig_allocations_annotation_bytes(store: Store, emulator: RecordingEmulator, api: Api) -> None:
    inv = NodeInventory(node=NODE, vendor=NVIDIA, devices=(a100(),))
    await seed(store, [inv])
    emulator.put(node_object(inv))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "mig-pod", "namespace": "default"},
        "spec": {
            "schedulerName": SCHEDULER,
            "initContainers": [ctr("prep")],
            "containers": [ctr("a", 4000), ctr("b", 10000)],
        },
        "status": {"phase": "Pending"},
    }
    async with running_extender(store, api) as ext:
        created = emulator.put(pod)
        answer = await ext.post("filter", {"Pod": created, "Nodes": None, "NodeNames": [NODE]})
        assert answer["NodeNames"] == [NODE], answer
        meta = created["metadata"]
        bind = {"PodName": "mig-pod", "PodNamespace": "default", "PodUID": meta["uid"], "Node": NODE}
        assert await ext.post("bind", bind) == {"Error": ""}

    (pod_w,) = [w for w in emulator.writes() if w.path.endswith("/pods/mig-pod/binding")]
    annos = pod_w.doc["metadata"]["annotations"]
    assert annos["hami.io/vgpu-devices-allocated"] == f";{UUID},NVIDIA,4864,15:;{UUID},NVIDIA,19968,43:;"
    assert annos["hami.io/vgpu-mig-allocations"] == (
        f'[{{"containerIndex":1,"deviceIndex":0,"gpuUUID":"{UUID}","profile":"1g.5gb","placement":{{"start":6,"size":1}}}},'
        f'{{"containerIndex":2,"deviceIndex":0,"gpuUUID":"{UUID}","profile":"3g.20gb","placement":{{"start":0,"size":4}}}}]'
    )
