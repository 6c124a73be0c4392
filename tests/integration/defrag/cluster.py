"""A small fragmented cluster for the executor's tests: GPU nodes in the store, pods of one ReplicaSet holding
shares of every card (records in the store, pods in the API emulator), a pending whole-card pod, and a stand-in
for what the cluster's other actors do when a pod is evicted: the ReplicaSet controller creating a replacement,
kube-scheduler binding it where the plan said, the informer releasing the evicted pod's charges and recording the
replacement's, and kube-scheduler binding the helped pod once its room is free (:meth:`Cluster.actors`)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from tests.integration.extender.filter_harness import node, seed
from vgpu_scheduler.shared.defrag.hold import Placement
from vgpu_scheduler.shared.domain.accounting import collapse
from vgpu_scheduler.shared.domain.allocation import Allocation
from vgpu_scheduler.shared.domain.defragmodel import DefragPlan, Move, Target
from vgpu_scheduler.shared.domain.model import ContainerDevice, NvidiaConfig
from vgpu_scheduler.shared.domain.scoring import Policies
from vgpu_scheduler.shared.emulator import Emulator, WriteRecord, WriteVerb
from vgpu_scheduler.shared.store import Store
from vgpu_scheduler.shared.vendors.catalog import enabled_vendors

NS = "default"
RS_UID = "rs-uid-web"
PLACEMENT = Placement(vendors=enabled_vendors(NvidiaConfig()), nvidia=NvidiaConfig(), policies=Policies())


def gpu_pod(name: str, *, mem: int, node_name: str | None = None, owned: bool = True) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "uid": f"uid-{name}", "labels": {"app": "web"}}
    if owned:
        meta["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": RS_UID, "controller": True}
        ]
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "image": "x",
                "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(mem)}},
            }
        ]
    }
    if node_name:
        spec["nodeName"] = node_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": spec,
        "status": {"phase": "Running" if node_name else "Pending"},
    }


@dataclass
class Cluster:
    emulator: Emulator
    store: Store
    plans: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Per pod name, where its replacement goes (node, card), as the plan says."""
    replaced: list[str] = field(default_factory=list)
    probe: tuple[str, str] | None = None
    """A (node, card) another pod tries to take (1,000 MiB) at each replacement: what it got is in ``probes``."""
    probes: list[object] = field(default_factory=list)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def nodes(self, *names: str, gpus: int = 2) -> None:
        await seed(self.store, [node(n, gpus) for n in names])

    async def running(self, name: str, node_name: str, card: str, *, mem: int = 4000) -> Move:
        """A ReplicaSet pod holding ``mem`` MiB of ``card`` on ``node_name``; the move that would take it off."""
        pod = self.emulator.put(gpu_pod(name, mem=mem, node_name=node_name))
        await self.record(pod["metadata"]["uid"], name, node_name, card, mem)
        return Move(NS, name, pod["metadata"]["uid"], 0, node_name, (card,), "", (), mem)

    async def record(self, uid: str, name: str, node_name: str, card: str, mem: int) -> None:
        devices = ((ContainerDevice(uuid=card, used_mem_mib=mem, used_cores=0),),)
        allocation = Allocation(uid, NS, name, node_name, devices, collapse(devices, 0))
        await self.store.reservations.record(allocation)

    def pending(self, name: str = "big", *, mem: int = 16384) -> dict[str, Any]:
        return self.emulator.put(gpu_pod(name, mem=mem, owned=False))

    def plan(
        self, moves: list[Move], dests: list[tuple[str, str]], target: dict[str, Any], node_name: str, card: str
    ) -> DefragPlan:
        """The plan moving each of ``moves`` to its ``dests`` (node, card) so that ``target`` fits on ``card`` of
        ``node_name``."""
        planned = []
        for m, (dest, dest_card) in zip(moves, dests, strict=True):
            planned.append(
                Move(m.namespace, m.name, m.uid, 0, m.source, m.source_devices, dest, (dest_card,), m.memory_mib)
            )
            self.plans[m.name] = (dest, dest_card)
        meta = target["metadata"]
        return DefragPlan(
            moves=tuple(planned),
            target=Target(NS, meta["name"], meta["uid"], node_name, ((card,),)),
            freed=((node_name, card),),
        )

    @contextmanager
    def actors(self, *, bind_target: str | None = None, budget: dict[str, Any] | None = None) -> Iterator[None]:
        """While open, every deleted pod of the ReplicaSet is released from the store and replaced by a new pod
        bound where the plan said; ``bind_target`` (a pod name) is bound to the held node once no moved pod
        holds charges there any more."""

        def on_write(record: WriteRecord) -> None:
            if record.verb is not WriteVerb.DELETE or record.resource != "pods" or record.name not in self.plans:
                return
            task = asyncio.get_running_loop().create_task(self._replace(record.result, bind_target))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        self.emulator.hooks.append(on_write)
        try:
            yield
        finally:
            self.emulator.hooks.remove(on_write)

    async def _replace(self, evicted: dict[str, Any], bind_target: str | None) -> None:
        name, uid = evicted["metadata"]["name"], evicted["metadata"]["uid"]
        await self.store.reservations.release(uid, evicted["spec"]["nodeName"])
        if self.probe is not None:
            node_name, card = self.probe
            devices = ((ContainerDevice(uuid=card, used_mem_mib=1000, used_cores=0),),)
            alloc = Allocation("uid-probe", NS, "probe", node_name, devices, collapse(devices, 0))
            self.probes.append(await self.store.reservations.reserve(alloc))
            await self.store.reservations.release("uid-probe", node_name)
        dest, card = self.plans[name]
        new = f"{name}-r"
        pod = self.emulator.put(gpu_pod(new, mem=4000, node_name=dest))
        await self.record(pod["metadata"]["uid"], new, dest, card, 4000)
        self.replaced.append(new)
        if bind_target is not None:
            target = self.emulator.get("Pod", NS, bind_target)
            record = await self.store.reservations.get(target["metadata"]["uid"]) if target else None
            if record is not None and not await self.store.reservations.preemption_waiting(
                record.allocation.pod_uid, record.allocation.node, cleanup=False
            ):
                self.emulator.patch("Pod", NS, bind_target, {"spec": {"nodeName": record.allocation.node}})

    async def settle(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks))
