"""Gangs through the real extender replica and the API emulator (docs/gangs.md): a PodGroup member that fits
nowhere, when the group can no longer reach ``minCount``, makes the replica release every plain reservation of the
group and refuse its members for a while without reserving; a group that can still make it is left alone; a
re-filter that keeps a member's node renews its reservation."""

from __future__ import annotations

from typing import Any

from tests.integration.extender.filter_harness import node, running_extender, seed
from tests.waiting import eventually
from vgpu_scheduler.shared.codec.annotations import POD_GROUP_LABEL
from vgpu_scheduler.shared.emulator import Emulator
from vgpu_scheduler.shared.k8s import Api
from vgpu_scheduler.shared.k8s.api import LIST_PAGE
from vgpu_scheduler.shared.k8s.objects import NOT_ENDED
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
        assert failed["FailedAndUnresolvableNodes"], failed
        await eventually(lambda: r.metric("vgpu_gang_reservations_released_total") == 2, 10, "the gang released")
        assert all([await store.reservations.get(f"uid-m{i}") is None for i in range(3)])
        # its members are refused without reserving, naming the member that fits nowhere
        again = await r.filter({"Pod": pods[0], "NodeNames": [NODE]})
        assert "cannot be placed whole: member m2 fits on no node" in again["FailedAndUnresolvableNodes"][NODE], again
        assert await store.reservations.get("uid-m0") is None
        # the room it held goes to a pod that fits
        plain = emulator.put(member("plain", group=None))
        assert (await r.filter({"Pod": plain, "NodeNames": [NODE]}))["NodeNames"] == [NODE]
        events = [e for e in emulator.list("Event") if e.get("reason") == "GangUnschedulable"]
        assert [e["involvedObject"]["name"] for e in events] == ["m2"]
    # the members were read as summaries a page at a time, the ended pods left to the API server
    lists = [q.query for q in emulator.requests if q.path == "/api/v1/namespaces/default/pods"]
    assert lists and all(q == {"fieldSelector": NOT_ENDED, "limit": str(LIST_PAGE)} for q in lists), lists


async def test_a_gang_that_can_still_reach_min_count_keeps_its_reservations(
    store: Store, api: Api, emulator: Emulator
) -> None:
    await seed(store, [node(NODE, 2)])
    with_pod_group(api, 2)
    pods = [emulator.put(member(f"m{i}")) for i in range(3)]
    async with running_extender(store, api) as r:
        for p in pods[:2]:
            assert (await r.filter({"Pod": p, "NodeNames": [NODE]}))["NodeNames"] == [NODE]
        assert (await r.filter({"Pod": pods[2], "NodeNames": [NODE]}))["FailedAndUnresolvableNodes"]
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


async def test_a_gang_below_its_size_is_released_once_too_many_members_fit_nowhere(
    store: Store, api: Api, emulator: Emulator
) -> None:
    """minCount 3 of 5 members on two cards: two members fit, and the pass survives two that fit nowhere (5 - 2 =
    3), not three. Counting one failing member at a time, the group was never released."""
    await seed(store, [node(NODE, 2)])
    with_pod_group(api, 3)
    pods = [emulator.put(member(f"m{i}")) for i in range(5)]
    async with running_extender(store, api) as r:
        for p in pods[:2]:
            assert (await r.filter({"Pod": p, "NodeNames": [NODE]}))["NodeNames"] == [NODE]
        for n, p in enumerate(pods[2:4], start=1):
            assert (await r.filter({"Pod": p, "NodeNames": [NODE]}))["FailedAndUnresolvableNodes"]

            def checked(n: int = n) -> bool:
                return r.metric("vgpu_gang_checks_total", verdict="can_be_whole") == n

            await eventually(checked, 10, "checked")
        assert await store.reservations.get("uid-m0") is not None and await store.reservations.get("uid-m1") is not None
        assert (await r.filter({"Pod": pods[4], "NodeNames": [NODE]}))["FailedAndUnresolvableNodes"]
        await eventually(lambda: r.metric("vgpu_gang_reservations_released_total") == 2, 10, "the gang released")
        assert await store.reservations.get("uid-m0") is None and await store.reservations.get("uid-m1") is None
        why = await store.reservations.gang_failed("default", "train")
        assert why is not None and "5 live member(s), 3 fitting nowhere, minCount 3" in why


async def test_a_member_that_fits_again_no_longer_counts_as_failing(store: Store, api: Api, emulator: Emulator) -> None:
    await seed(store, [node(NODE, 2)])
    with_pod_group(api, 2)
    pods = [emulator.put(member(f"m{i}")) for i in range(3)]
    async with running_extender(store, api) as r:
        assert (await r.filter({"Pod": pods[0], "NodeNames": [NODE]}))["NodeNames"] == [NODE]
        assert (await r.filter({"Pod": pods[1], "NodeNames": [NODE]}))["NodeNames"] == [NODE]
        assert (await r.filter({"Pod": pods[2], "NodeNames": [NODE]}))["FailedAndUnresolvableNodes"]
        await eventually(lambda: r.metric("vgpu_gang_checks_total", verdict="can_be_whole") == 1, 10, "checked")
        # m2's failure is noted; once m2 finds a node (m1 gone), it is forgotten
        await store.reservations.release("uid-m1", NODE)
        await r.service.cache.refresh([NODE])
        assert (await r.filter({"Pod": pods[2], "NodeNames": [NODE]}))["NodeNames"] == [NODE]
        await eventually(lambda: _no_failures(store), 10, "m2's failure cleared")


async def _no_failures(store: Store) -> bool:
    return not await store.client.hgetall(store.keys.gang_failing("default", "train"))


def labelled(name: str, group: str = "ring", mem: int = 16384) -> dict[str, Any]:
    pod = member(name, group=None, mem=mem)
    pod["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": group}
    return pod


async def test_a_coscheduling_group_is_sized_by_its_pod_groups_min_member(
    store: Store, api: Api, emulator: Emulator
) -> None:
    """scheduler-plugins' PodGroup (scheduling.x-k8s.io/v1alpha1, spec.minMember) named by the label: all three
    needed, the third fits nowhere, the two reservations are released and the group refused for a while."""
    await seed(store, [node(NODE, 2)])
    emulator.put(
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "ring", "namespace": "default"},
            "spec": {"minMember": 3},
        }
    )
    pods = [emulator.put(labelled(f"c{i}")) for i in range(3)]
    async with running_extender(store, api) as r:
        for p in pods[:2]:
            assert (await r.filter({"Pod": p, "NodeNames": [NODE]}))["NodeNames"] == [NODE]
        assert (await r.filter({"Pod": pods[2], "NodeNames": [NODE]}))["FailedAndUnresolvableNodes"]
        await eventually(lambda: r.metric("vgpu_gang_reservations_released_total") == 2, 10, "the group released")
        again = await r.filter({"Pod": pods[0], "NodeNames": [NODE]})
        assert "pod group ring cannot be placed whole" in again["FailedAndUnresolvableNodes"][NODE], again
        # the native group of the same name is another group
        assert await store.reservations.gang_failed("default", "ring") is None
    # only the group's pods were read, by its label
    lists = [q.query for q in emulator.requests if q.path == "/api/v1/namespaces/default/pods"]
    assert lists and all(q.get("labelSelector") == f"{POD_GROUP_LABEL}=ring" for q in lists), lists
