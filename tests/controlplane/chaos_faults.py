"""The faults of the chaos run (``tests/controlplane/chaos.py``), each injected at a random (seeded) moment:

* ``kill:<service>``: SIGKILL of an extender replica, the informer or the registrar, started again with its
  arguments 1-4 s later (a Deployment replacing its pod);
* ``redis-failover``: SIGKILL of the Redis primary; the Sentinels promote the replica; the killed server comes back
  empty as a replica 5 s later;
* ``redis-restart-empty``: every Redis data server killed and started empty (no persistence): the books are
  rebuilt from the API server;
* ``kube-scheduler``: SIGKILL, started again 2 s later (its queue and cache rebuilt from the API);
* ``apiserver``: kube-apiserver stopped and started again on its port (every watch and client reconnects);
* ``stall``: the proxy between one extender replica and Redis forwards nothing for ``stall_s`` (longer than a
  bind's claim on a reservation);
* ``pause``: one extender replica SIGSTOPped for ``pause_s``, then SIGCONTed;
* ``node-reboot``: a node deleted with its pods (as the pod garbage collector would), registered again without
  devices, then its device plugin registers them again;
* ``card-unhealthy``: one card of a node reported unhealthy by its device plugin, healthy again 10-20 s later.

Faults on one target (a process, Redis, a node) never overlap; faults on different targets may."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import random
import signal
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from tests.controlplane.chaos_workload import DELETE_NOW, call, patch_merge
from tests.controlplane.control import ApiServer
from tests.controlplane.harness import Kube, NodeShape, System, gpu_node, node_devices
from tests.controlplane.stallproxy import StallProxy
from tests.e2e.redisproc import SentinelGroup
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec.register import encode_register_json

_NODE_FAULTS = ("node-reboot", "card-unhealthy")
"""The faults that strike one node (:attr:`Injector.occupied` picks it)."""


def fault_names(replicas: int, node_reboots: int = 2, card_faults: int = 2) -> list[str]:
    """Every fault once (node reboots and card faults as many times as asked)."""
    names = [f"kill:extender-{i}" for i in range(replicas)]
    names += ["kill:informer", "kill:registrar", "redis-failover", "redis-restart-empty", "kube-scheduler"]
    names += ["apiserver", "stall", "pause"]
    names += ["node-reboot"] * node_reboots + ["card-unhealthy"] * card_faults
    return names


@dataclass
class Injected:
    name: str
    at_s: float
    took_s: float
    detail: str = ""
    error: str = ""


@dataclass
class Injector:
    """Injects :func:`fault_names`' faults at random moments of ``[0.05, 0.75] × window_s`` (module docstring)."""

    system: System
    api: ApiServer
    kube: Kube
    redis: SentinelGroup
    proxy: StallProxy
    restart_scheduler: Callable[[], Awaitable[None]]
    nodes: Sequence[str]
    node_bodies: dict[str, dict[str, Any]]
    shape: NodeShape
    rng: random.Random
    stall_s: float
    pause_s: float
    stalled_replica: int
    paused_replica: int
    log: list[Injected] = field(default_factory=list)
    progress: Callable[[str], None] = field(default=lambda _: None)
    """Told each fault once injected."""
    occupied: Callable[[], Collection[str]] = field(default=lambda: ())
    """The nodes holding the workload's pods now: a reboot or a sick card strikes one of them when there is one
    (an idle node's reboot takes nothing with it)."""
    start: float = field(default_factory=time.monotonic)

    async def run(self, names: Sequence[str], window_s: float) -> None:
        times = sorted(self.rng.uniform(0.05, 0.75) * window_s for _ in names)
        order = list(names)
        self.rng.shuffle(order)
        busy: dict[str, asyncio.Lock] = {}
        nodes = self.rng.sample(list(self.nodes), min(len(self.nodes), len(order)))

        async def one(name: str, at_s: float, node: str) -> None:
            await asyncio.sleep(max(0.0, self.start + at_s - time.monotonic()))  # its random moment
            if name in _NODE_FAULTS and (occupied := sorted(self.occupied())):
                node = self.rng.choice(occupied)
            target = node if name in _NODE_FAULTS else _target(name, self)
            async with busy.setdefault(target, asyncio.Lock()):
                began = time.monotonic()
                entry = Injected(name, began - self.start, 0.0)
                try:
                    entry.detail = await self._inject(name, node)
                except Exception as e:  # a fault that could not be injected is reported, not raised
                    entry.error = f"{type(e).__name__}: {e}"
                entry.took_s = time.monotonic() - began
                self.log.append(entry)
                self.progress(f"fault at {entry.at_s:.0f}s: {name} ({entry.took_s:.1f}s) {entry.detail}{entry.error}")

        await asyncio.gather(
            *(one(n, t, nodes[i % len(nodes)]) for i, (n, t) in enumerate(zip(order, times, strict=True)))
        )

    async def _inject(self, name: str, node: str) -> str:
        if name.startswith("kill:"):
            service = name.split(":", 1)[1]
            await self.system.kill(service)
            await asyncio.sleep(self.rng.uniform(1.0, 4.0))  # the Deployment notices and starts a new pod
            await self.system.restart(service)
            return f"{service} restarted"
        if name == "redis-failover":
            old = await self.redis.kill_primary()
            new = await self.redis.agreed_primary()
            await asyncio.sleep(5.0)  # the killed Redis pod restarts a little later
            await self.redis.revive()
            return f"primary {old} -> {new}"
        if name == "redis-restart-empty":
            return f"primary {await self.redis.restart_empty()} restarted empty"
        if name == "kube-scheduler":
            self.system.scheduler.proc.kill()
            self.system.scheduler.proc.wait()
            await asyncio.sleep(2.0)  # a new pod of its Deployment
            await self.restart_scheduler()
            return "restarted"
        if name == "apiserver":
            assert self.api.restart is not None
            await asyncio.to_thread(self.api.restart)
            return "restarted"
        if name == "stall":
            await self.proxy.stall(self.stall_s)
            return f"extender-{self.stalled_replica} cut off from Redis for {self.stall_s:.0f}s"
        if name == "pause":
            return await self._pause()
        if name == "node-reboot":
            return await self._reboot(node)
        if name == "card-unhealthy":
            return await self._unhealthy(node)
        raise ValueError(f"unknown fault {name}")

    async def _pause(self) -> str:
        service = self.system.extenders()[self.paused_replica]
        os.kill(service.proc.pid, signal.SIGSTOP)
        try:
            await asyncio.sleep(self.pause_s)  # the pause's length is the point
        finally:
            os.kill(service.proc.pid, signal.SIGCONT)
        return f"{service.name} paused {self.pause_s:.0f}s"

    async def _reboot(self, node: str) -> str:
        await call(self.kube, "DELETE", f"/api/v1/nodes/{node}", DELETE_NOW)
        deleted = await self._collect_pods_of(node)
        await asyncio.sleep(self.rng.uniform(2.0, 5.0))  # the machine reboots
        deleted += await self._collect_pods_of(node)  # a bind in flight may have landed on the deleted node
        body = self.node_bodies[node]
        bare = {**body, "metadata": {**body["metadata"], "annotations": {}}}
        await call(self.kube, "POST", "/api/v1/nodes", bare)
        await asyncio.sleep(self.rng.uniform(3.0, 8.0))  # kubelet registered the node; the device plugin starts
        await self._register(node, body["metadata"]["annotations"][keys.NODE_NVIDIA_REGISTER])
        return f"{node}: {deleted} pods deleted with it, registered again"

    async def _collect_pods_of(self, node: str) -> int:
        """Delete the pods bound to ``node``, gone, as the pod garbage collector does; how many."""
        status, data = await call(self.kube, "GET", f"/api/v1/pods?fieldSelector=spec.nodeName%3D{node}")
        pods = (data or {}).get("items", []) if status == 200 else []
        for pod in pods:
            meta = pod["metadata"]
            await call(self.kube, "DELETE", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}", DELETE_NOW)
        return len(pods)

    async def _unhealthy(self, node: str) -> str:
        devices = node_devices(node, self.shape)
        index = self.rng.randrange(len(devices))
        sick = tuple(dataclasses.replace(d, health=False) if d.index == index else d for d in devices)
        await self._register(node, encode_register_json(sick))
        await asyncio.sleep(self.rng.uniform(10.0, 20.0))  # the card recovers
        await self._register(node, encode_register_json(devices))
        return f"{node}: GPU {index} unhealthy, then healthy"

    async def _register(self, node: str, register: str) -> None:
        patch = {"metadata": {"annotations": {keys.NODE_NVIDIA_REGISTER: register}}}
        await patch_merge(self.kube, f"/api/v1/nodes/{node}", patch)


def _target(name: str, injector: Injector) -> str:
    """What a fault acts on: faults on one target never overlap."""
    if name == "stall":
        return f"extender-{injector.stalled_replica}"
    if name == "pause":
        return f"extender-{injector.paused_replica}"
    if name.startswith("redis"):
        return "redis"
    return name.removeprefix("kill:")


def node_bodies(names: Sequence[str], shape: NodeShape, labels: dict[str, str]) -> dict[str, dict[str, Any]]:
    return {n: gpu_node(n, shape, labels) for n in names}
