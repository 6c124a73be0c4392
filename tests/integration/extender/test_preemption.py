"""Device-aware preemption through the real extender replica and the API emulator: our own preemption when
/filter finds no node (kube-scheduler's dry run proposes no victim then), the hold that keeps the freed devices
for the preemptor, and the ``/preempt`` verb on kube-scheduler's candidates."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tests.integration.extender.filter_harness import node, running_extender, seed
from tests.waiting import eventually
from vgpu_scheduler.shared.domain.accounting import collapse
from vgpu_scheduler.shared.domain.allocation import Allocation
from vgpu_scheduler.shared.domain.model import ContainerDevice
from vgpu_scheduler.shared.emulator import Emulator
from vgpu_scheduler.shared.k8s import Api
from vgpu_scheduler.shared.k8s.api import LIST_PAGE
from vgpu_scheduler.shared.preemption import PER_NODE_LISTS, PLACED
from vgpu_scheduler.shared.store import Store

NODE = "gpu-node-1"


def pod_obj(
    name: str, *, priority: int, mem: int = 16384, gpus: int = 1, node_name: str | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "priority": priority,
        "containers": [
            {
                "name": "main",
                "image": "x",
                "resources": {"limits": {"nvidia.com/gpu": str(gpus), "nvidia.com/gpumem": str(mem)}},
            }
        ],
    }
    if node_name:
        spec["nodeName"] = node_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": spec,
        "status": {"phase": "Running" if node_name else "Pending"},
    }


async def running_low(emulator: Emulator, store: Store, name: str, gpu: int) -> dict[str, Any]:
    """A low-priority pod running on NODE holding all of GPU ``gpu``'s memory."""
    pod = emulator.put(pod_obj(name, priority=0, node_name=NODE))
    devices = ((ContainerDevice(uuid=f"GPU-{NODE}-{gpu}", used_mem_mib=16384, used_cores=0),),)
    await store.reservations.record(
        Allocation(
            pod_uid=pod["metadata"]["uid"],
            namespace="default",
            name=name,
            node=NODE,
            devices=devices,
            charges=collapse(devices, 0),
        )
    )
    return pod


async def test_a_high_priority_pod_preempts_exactly_the_pods_holding_the_devices_it_needs(
    store: Store, api: Api, emulator: Emulator
) -> None:
    await seed(store, [node(NODE, 4)])
    for i in range(4):
        await running_low(emulator, store, f"low-{i}", i)
    high = emulator.put(pod_obj("high", priority=1000, gpus=2))
    body = {"Pod": high, "NodeNames": [NODE]}
    async with running_extender(store, api) as r:
        first = await r.filter(body)
        assert first["FailedAndUnresolvableNodes"][NODE].endswith("CardInsufficientMemory"), first
        # off the request path: two victims deleted, the pod nominated, its devices held
        await emulator.wait_for(
            lambda: len([p for p in emulator.list("Pod") if p["metadata"]["name"].startswith("low")]) == 2
        )
        await emulator.wait_for(
            lambda: (emulator.get("Pod", "default", "high") or {}).get("status", {}).get("nominatedNodeName") == NODE
        )
        record = await store.reservations.get(high["metadata"]["uid"])
        assert record is not None and record.allocation.node == NODE
        gone = {f"low-{i}" for i in range(4)} - {p["metadata"]["name"] for p in emulator.list("Pod")}
        held = {c.uuid for c in record.allocation.charges}
        assert held == {f"GPU-{NODE}-{n[-1]}" for n in gone}
        # while the victims still hold their devices, the pod waits and nobody else gets them
        waiting = await r.filter(body)
        assert "waiting for 2 preempted pod(s)" in waiting["FailedNodes"][NODE], waiting
        other = emulator.put(pod_obj("other", priority=0, mem=1000))
        refused = await r.filter({"Pod": other, "NodeNames": [NODE]})
        assert refused["NodeNames"] in (None, []), refused
        # the informer releases the victims as they go: then the pod gets its node
        for name in gone:
            await store.reservations.release(f"uid-{name}", NODE)
        kept = await r.filter(body)
        assert kept["NodeNames"] == [NODE], kept
        events = [e for e in emulator.list("Event") if e.get("reason") in ("Preempted", "Preempting")]
        assert {e["involvedObject"]["name"] for e in events} == gone | {"high"}
        assert all("default/high" in e["message"] for e in events if e["reason"] == "Preempted")
        assert r.metric("vgpu_preemption_victims_total", by="extender") == 2


async def test_preemption_never_takes_pods_of_equal_priority(store: Store, api: Api, emulator: Emulator) -> None:
    await seed(store, [node(NODE, 1)])
    await running_low(emulator, store, "low-0", 0)
    emulator.patch("Pod", "default", "low-0", {"spec": {"priority": 1000}})
    high = emulator.put(pod_obj("high", priority=1000))
    async with running_extender(store, api) as r:
        await r.filter({"Pod": high, "NodeNames": [NODE]})
        for _ in range(200):
            if r.metric("vgpu_preemption_attempts_total", outcome="no_victims"):
                break
            await asyncio.sleep(0.02)
        assert r.metric("vgpu_preemption_attempts_total", outcome="no_victims") == 1
        assert emulator.get("Pod", "default", "low-0") is not None
        assert await store.reservations.get("uid-high") is None


async def test_the_preempt_verb_adds_the_device_victims_to_kube_schedulers_and_drops_hopeless_nodes(
    store: Store, api: Api, emulator: Emulator
) -> None:
    await seed(store, [node(NODE, 2), node("gpu-node-2", 1)])
    await running_low(emulator, store, "low-0", 0)
    await running_low(emulator, store, "low-1", 1)
    cpu_only = emulator.put(pod_obj("cpu-only", priority=0, node_name=NODE, gpus=0))
    # gpu-node-2's only GPU is held by a pod of higher priority: no set there
    p2 = emulator.put(pod_obj("mighty", priority=5000, node_name="gpu-node-2"))
    devices = ((ContainerDevice(uuid="GPU-gpu-node-2-0", used_mem_mib=16384, used_cores=0),),)
    await store.reservations.record(
        Allocation(
            pod_uid=p2["metadata"]["uid"],
            namespace="default",
            name="mighty",
            node="gpu-node-2",
            devices=devices,
            charges=collapse(devices, 0),
        )
    )
    high = emulator.put(pod_obj("high", priority=1000))
    args = {
        "Pod": high,
        "NodeNameToMetaVictims": {
            NODE: {"Pods": [{"UID": cpu_only["metadata"]["uid"]}], "NumPDBViolations": 0},
            "gpu-node-2": {"Pods": [{"UID": "uid-unrelated"}], "NumPDBViolations": 0},
        },
    }
    async with running_extender(store, api) as r:
        status, answer = await r.post("/preempt", json.dumps(args))
        assert status == 200, answer
        victims = answer["NodeNameToMetaVictims"]
        assert list(victims) == [NODE]
        uids = [p["UID"] for p in victims[NODE]["Pods"]]
        assert uids[0] == "uid-cpu-only" and len(uids) == 2 and uids[1] in ("uid-low-0", "uid-low-1")
        status, _ = await r.post("/preempt", "{")
        assert status == 400


async def test_a_gang_member_is_not_preempted_for_on_its_own(store: Store, api: Api, emulator: Emulator) -> None:
    await seed(store, [node(NODE, 2)])
    for i in range(2):
        await running_low(emulator, store, f"low-{i}", i)
    member = pod_obj("member", priority=1000)
    member["spec"]["schedulingGroup"] = {"podGroupName": "train"}
    member = emulator.put(member)
    high = emulator.put(pod_obj("high", priority=1000))
    async with running_extender(store, api) as r:
        assert (await r.filter({"Pod": member, "NodeNames": [NODE]}))["FailedAndUnresolvableNodes"]
        assert (await r.filter({"Pod": high, "NodeNames": [NODE]}))["FailedAndUnresolvableNodes"]
        await eventually(lambda: r.metric("vgpu_preemption_attempts_total", outcome="preempted") == 1, 10, "preempted")
        assert len([p for p in emulator.list("Pod") if p["metadata"]["name"].startswith("low")]) == 1
        assert await store.reservations.get("uid-member") is None
        assert await store.reservations.get("uid-high") is not None


async def test_preemption_reads_only_the_pods_of_the_nodes_where_eviction_can_help(
    store: Store, api: Api, emulator: Emulator
) -> None:
    """Few nodes to read, no list of the whole cluster's pods. Of five candidate nodes, one holds low-priority pods
    whose eviction makes room; two hold no record (nothing to evict, their one GPU unhealthy); two have GPUs too
    small for the pod even empty. Only the first node's pods are read, field-selected on ``spec.nodeName``
    (before: one list of every pod in the cluster, 27 here)."""
    small = [node(f"small-{i}", 2, mem=8192) for i in range(2)]
    empty = [node(f"empty-{i}", 1, health=False) for i in range(2)]  # no record, no room
    await seed(store, [node(NODE, 2), *small, *empty])
    for i in range(2):
        await running_low(emulator, store, f"low-{i}", i)
    for inv in small:  # pods on the small nodes too, so the store has records there
        for i in range(2):
            pod = emulator.put(pod_obj(f"{inv.node}-p{i}", priority=0, mem=8192, node_name=inv.node))
            devices = ((ContainerDevice(uuid=f"GPU-{inv.node}-{i}", used_mem_mib=8192, used_cores=0),),)
            await store.reservations.record(
                Allocation(
                    pod_uid=pod["metadata"]["uid"],
                    namespace="default",
                    name=f"{inv.node}-p{i}",
                    node=inv.node,
                    devices=devices,
                    charges=collapse(devices, 0),
                )
            )
    for i in range(20):  # unrelated pods elsewhere, which a whole-cluster list would carry
        emulator.put(pod_obj(f"cpu-{i}", priority=0, node_name="empty-0"))
    high = emulator.put(pod_obj("high", priority=1000))
    names = [NODE, *(n.node for n in small), *(n.node for n in empty)]
    async with running_extender(store, api) as r:
        emulator.requests.clear()
        await r.filter({"Pod": high, "NodeNames": names})
        await emulator.wait_for(
            lambda: (emulator.get("Pod", "default", "high") or {}).get("status", {}).get("nominatedNodeName") == NODE
        )
        await eventually(
            lambda: r.metric("vgpu_preemption_attempts_total", outcome="preempted") == 1, 10, "the preemption done"
        )
    pod_lists = [q for q in emulator.requests if q.method == "GET" and q.path == "/api/v1/pods"]
    assert [q.query.get("fieldSelector") for q in pod_lists] == [f"spec.nodeName={NODE}"], pod_lists
    assert len([p for p in emulator.list("Pod") if p["metadata"]["name"].startswith("low")]) == 1


async def test_a_full_cluster_of_lower_priority_pods_is_read_in_one_list_not_one_per_node(
    store: Store, api: Api, emulator: Emulator
) -> None:
    """Found by the 1,000-node chaos run: with every node full of priority-0 pods, every node could make room, and
    each preemption listed the pods of every node, one request each (about four a second from the three replicas'
    preemptions, each list taking seconds on the saturated API server). Past PER_NODE_LISTS nodes to read, one
    list of every pod serves them all."""
    names = [f"full-{i}" for i in range(PER_NODE_LISTS + 1)]
    await seed(store, [node(n, 1) for n in names])
    for n in names:
        pod = emulator.put(pod_obj(f"{n}-low", priority=0, node_name=n))
        devices = ((ContainerDevice(uuid=f"GPU-{n}-0", used_mem_mib=16384, used_cores=0),),)
        allocation = Allocation(
            pod_uid=pod["metadata"]["uid"],
            namespace="default",
            name=f"{n}-low",
            node=n,
            devices=devices,
            charges=collapse(devices, 0),
        )
        await store.reservations.record(allocation)
    high = emulator.put(pod_obj("high", priority=1000))
    async with running_extender(store, api) as r:
        emulator.requests.clear()
        assert (await r.filter({"Pod": high, "NodeNames": names}))["FailedAndUnresolvableNodes"]
        await eventually(
            lambda: r.metric("vgpu_preemption_attempts_total", outcome="preempted") == 1, 10, "the preemption done"
        )
    pod_lists = [q for q in emulator.requests if q.method == "GET" and q.path == "/api/v1/pods"]
    assert [(q.query.get("fieldSelector"), q.query.get("limit")) for q in pod_lists] == [(PLACED, str(LIST_PAGE))]
    lows = [p for p in emulator.list("Pod") if p["metadata"]["name"].endswith("-low")]
    assert len(lows) == len(names) - 1  # one victim, on the node kube-scheduler's rules pick
