"""Gangs through the real extender replica and the API emulator (docs/gangs.md): a PodGroup member that fits
nowhere, when the group can no longer reach ``minCount``, makes the replica release every plain reservation of the
group and refuse its members for a while without reserving; a group that can still make it is left alone; a
re-filter that keeps a member's node renews its reservation."""

from __future__ import annotations

from typing import Any

from tests.integration.extender.filter_harness import node, running_extender, seed
from tests.waiting import eventually
from vgpu_scheduler.shared.emulator import Emulator
from vgpu_scheduler.shared.k8s import Api
from vgpu_scheduler.shared.store import Store

NODE = "gpu-node-1"


def member(name: str, group: str | None = "train", mem: int = 16384) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "image": "x",
                "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(mem)}},
            }
        ]
    }
    if group:
        spec["schedulingGroup"] = {"podGroupName": group}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": spec,
        "status": {"phase": "Pending"},
    }


def with_pod_group(api: Api, min_count: int) -> None:
    """The emulator serves no PodGroups: answer this one."""

    async def get_pod_group(namespace: str, name: str, **_: Any) -> dict[str, Any] | None:
        if (namespace, name) != ("default", "train"):
            return None
        return {"metadata": {"name": name}, "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}}}

    api.get_pod_group = get_pod_group  # type: ignore[method-assign]


async def test_a_gang_that_cannot_be_whole_leaves_nothing_reserved(store: Store, api: Api, emulator: Emulator) -> None:
    await seed(store, [node(NODE, 2)])
    with_pod_group(api, 3)
    pods = [emulator.put(member(f"m{i}")) for i in range(3)]
    async with running_extender(store, api) as r:
        for p in pods[:2]:
            assert (await r.filter({"Pod": p, "NodeNames": [NODE]}))["NodeNames"] == [NODE]
        failed = await r.filter({"Pod": pods[2], "NodeNames": [NODE]})
        assert failed["FailedNodes"], failed
        await eventually(lambda: r.metric("vgpu_gang_reservations_released_total") == 2, 10, "the gang released")
        assert all([await store.reservations.get(f"uid-m{i}") is None for i in range(3)])
        # its members are refused without reserving, naming the member that fits nowhere
        again = await r.filter({"Pod": pods[0], "NodeNames": [NODE]})
        assert "cannot be placed whole: member m2 fits on no node" in again["FailedNodes"][NODE], again
        assert await store.reservations.get("uid-m0") is None
        # the room it held goes to a pod that fits
        plain = emulator.put(member("plain", group=None))
        assert (await r.filter({"Pod": plain, "NodeNames": [NODE]}))["NodeNames"] == [NODE]
        events = [e for e in emulator.list("Event") if e.get("reason") == "GangUnschedulable"]
        assert [e["involvedObject"]["name"] for e in events] == ["m2"]


async def test_a_gang_that_can_still_reach_min_count_keeps_its_reservations(
    store: Store, api: Api, emulator: Emulator
) -> None:
    await seed(store, [node(NODE, 2)])
    with_pod_group(api, 2)
    pods = [emulator.put(member(f"m{i}")) for i in range(3)]
    async with running_extender(store, api) as r:
        for p in pods[:2]:
            assert (await r.filter({"Pod": p, "NodeNames": [NODE]}))["NodeNames"] == [NODE]
        assert (await r.filter({"Pod": pods[2], "NodeNames": [NODE]}))["FailedNodes"]
        # the check ran (one member fits nowhere) and left the group alone: two of three reach minCount 2
        await eventually(
            lambda: r.metric("vgpu_gang_checks_total", verdict="can_be_whole") == 1, 10, "the gang checked"
        )
        assert r.metric("vgpu_gang_reservations_released_total") == 0
        assert await store.reservations.gang_failed("default", "train") is None
        assert await store.reservations.get("uid-m0") is not None and await store.reservations.get("uid-m1") is not None


async def test_a_kept_node_renews_the_reservation(store: Store, api: Api, emulator: Emulator) -> None:
    await seed(store, [node(NODE, 2)])
    pod = emulator.put(member("m0"))
    async with running_extender(store, api) as r:
        assert (await r.filter({"Pod": pod, "NodeNames": [NODE]}))["NodeNames"] == [NODE]
        first = await store.reservations.get("uid-m0")
        assert first is not None
        await eventually(lambda: _later(store, first.reserved_at_ms), 5, "a later server millisecond")
        assert (await r.filter({"Pod": pod, "NodeNames": [NODE]}))["NodeNames"] == [NODE]
        second = await store.reservations.get("uid-m0")
        assert second is not None and second.reserved_at_ms > first.reserved_at_ms


async def _later(store: Store, ms: int) -> bool:
    t = await store.client.time()
    return int(t[0]) * 1000 + int(t[1]) // 1000 > ms
