"""``explain`` for preemption and gangs (docs/preemption.md, docs/gangs.md), in process against the API emulator
and the real redis-server: what a pending high-priority pod would preempt, why no victim set exists, a hold waiting
for its victims, and why a PodGroup member waits for its group."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.integration.extender.filter_harness import node, seed
from vgpu_scheduler.services.inspect.explain import explain
from vgpu_scheduler.services.inspect.explaintext import render_text
from vgpu_scheduler.shared.config import CommonSettings, InspectSettings, Service
from vgpu_scheduler.shared.domain.accounting import collapse
from vgpu_scheduler.shared.domain.allocation import Allocation
from vgpu_scheduler.shared.domain.model import ContainerDevice
from vgpu_scheduler.shared.emulator import Emulator
from vgpu_scheduler.shared.k8s import Api, KubeClient
from vgpu_scheduler.shared.store import Reserved, Store, connect

NODE = "gpu-node-1"
SETTINGS = InspectSettings(common=CommonSettings(service=Service.EXPLAIN, instance_id="t"))


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[Store]:
    s = Store.create(connect(redis_url), prefix="xp")
    try:
        yield s
    finally:
        await s.aclose()


@pytest.fixture
def api(kube: KubeClient) -> Api:
    return Api(kube, component="vgpu-scheduler")


def pod_obj(name: str, priority: int, *, node_name: str | None = None, group: str | None = None) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "16384"}
    spec: dict[str, Any] = {"priority": priority, "containers": [{"name": "main", "resources": {"limits": limits}}]}
    if node_name:
        spec["nodeName"] = node_name
    if group:
        spec["schedulingGroup"] = {"podGroupName": group}
    phase = "Running" if node_name else "Pending"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": spec,
        "status": {"phase": phase},
    }


def allocation(name: str, gpu: int, node_name: str = NODE) -> Allocation:
    devices = ((ContainerDevice(uuid=f"GPU-{node_name}-{gpu}", used_mem_mib=16384, used_cores=0),),)
    return Allocation(f"uid-{name}", "default", name, node_name, devices, collapse(devices, 0))


async def full_node(store: Store, emulator: Emulator, priorities: tuple[int, int]) -> None:
    await seed(store, [node(NODE, 2)])
    for i, prio in enumerate(priorities):
        emulator.put(pod_obj(f"low{i}", prio, node_name=NODE))
        await store.reservations.record(allocation(f"low{i}", i))


async def test_a_pending_pod_is_told_what_it_would_preempt(store: Store, api: Api, emulator: Emulator) -> None:
    await full_node(store, emulator, (0, 5))
    emulator.put(pod_obj("high", 100))
    out = await explain(SETTINGS, store, api, "default", "high")
    assert out.preemption is not None and out.preemption["state"] == "would preempt", out.preemption
    assert out.preemption["victims"] == [{"pod": "default/low0", "priority": 0}]
    assert "would evict default/low0 (priority 0) on gpu-node-1" in render_text(out)


async def test_no_victim_set_says_why(store: Store, api: Api, emulator: Emulator) -> None:
    await full_node(store, emulator, (100, 200))
    emulator.put(pod_obj("high", 100))
    out = await explain(SETTINGS, store, api, "default", "high")
    assert out.preemption == {
        "state": "no victim set",
        "reasons": {NODE: "no lower-priority pod holds devices on this node"},
    }
    assert "preemption: no victim set" in render_text(out)


async def test_a_hold_waits_for_its_victims(store: Store, api: Api, emulator: Emulator) -> None:
    await full_node(store, emulator, (0, 0))
    emulator.put(pod_obj("high", 100))
    assert isinstance(await store.reservations.reserve(allocation("high", 0), victims=["uid-low0"]), Reserved)
    out = await explain(SETTINGS, store, api, "default", "high")
    assert out.preemption == {"state": "holding", "node": NODE, "waiting_for_victims": 1}
    assert "waiting for 1 preempted pod(s) to terminate" in render_text(out)
    assert await store.reservations.preemption_waiting("uid-high", NODE, cleanup=False) == 1


async def test_a_gang_member_is_told_why_its_group_waits(store: Store, api: Api, emulator: Emulator) -> None:
    await seed(store, [node(NODE, 2)])
    emulator.put(pod_obj("m0", 0, group="train"))
    out = await explain(SETTINGS, store, api, "default", "m0")
    assert out.gang == {"pod_group": "train", "placed_whole_now": True, "why_not": None}
    await store.reservations.mark_gang_failed("default", "train", "member m7 fits on no node", 30)
    out = await explain(SETTINGS, store, api, "default", "m0")
    assert out.gang is not None and out.gang["why_not"] == "member m7 fits on no node"
    assert "waiting for its group: member m7 fits on no node" in render_text(out)
    assert out.to_json()["gang"] == out.gang
