"""What the registrar writes to the API server (hami-wire §2.2, difference 9): the ``Requesting_`` handshake for
≤ v2.7 device plugins only, as ``Requesting_<2006-01-02 15:04:05 in local time>`` in a resourceVersion-guarded
merge patch; nothing at all for v2.8+ (JSON) plugins."""

from __future__ import annotations

from tests.compat.kit import MERGE_PATCH, RecordingEmulator, local_zone
from tests.integration.registrar.helpers import (
    HANDSHAKE,
    FakeClock,
    json_register,
    make_node,
    running_registrar,
)
from tests.waiting import eventually
from vgpu_scheduler.shared.k8s import KubeClient
from vgpu_scheduler.shared.store import Store

# 9-field colon format of a v2.5-v2.7 plugin
COLON = (
    "GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true,0,hami-core:"
    "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true,1,hami-core:"
)
T0 = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC


async def test_handshake_is_requested_in_local_time_for_old_plugins_only(
    store: Store, emulator: RecordingEmulator, kube: KubeClient
) -> None:
    old = emulator.put(make_node("old", annotations={"hami.io/node-nvidia-register": COLON}))
    emulator.put(make_node("new", annotations={"hami.io/node-nvidia-register": json_register("GPU-a", "GPU-b")}))
    with local_zone("CST-8"):
        async with running_registrar(store, kube, clock=FakeClock(T0)):  # ready: the first full pass is done
            await eventually(lambda: HANDSHAKE in emulator.node("old")["metadata"]["annotations"])
            assert sorted(await store.inventory.list_nodes()) == ["new", "old"]

    writes = [w for w in emulator.writes() if "/nodes/" in w.path]
    assert [(w.method, w.path, w.content_type) for w in writes] == [("PATCH", "/api/v1/nodes/old", MERGE_PATCH)]
    assert writes[0].doc == {
        "metadata": {
            "annotations": {HANDSHAKE: "Requesting_2023-11-15 06:13:20"},
            "resourceVersion": old["metadata"]["resourceVersion"],
        }
    }
    assert HANDSHAKE not in emulator.node("new")["metadata"]["annotations"]
