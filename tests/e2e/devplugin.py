"""The node side of the end-to-end tests: a simulated HAMi device plugin and a capacity monitor.

:class:`DevicePlugin` does what HAMi's NVIDIA plugin does after the kubelet calls Allocate for a pod that was just
bound (hami-wire §3.1, §4.3): it finds "the" pod through the node's ``hami.io/mutex.lock`` (recording a
violation if the lock names another pod: the allocation would go to the wrong pod), checks that the to-allocate
devices are the node's, consumes the to-allocate list, sets ``hami.io/bind-phase: success`` and releases the
lock annotation (owner-checked, resourceVersion-guarded). Everything goes through the API over HTTP.

:class:`CapacityMonitor` is an emulator write hook: after every write to a pod it updates that pod's collapsed
charges (from its *allocated* annotation, difference 10) and checks every touched device against its capacity, so
"no device over capacity, ever" is checked at every state the API server went through, not only at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec.nodelock import parse_node_lock
from vgpu_scheduler.shared.codec.podannotations import decode_allocation
from vgpu_scheduler.shared.codec.poddevices import decode_pod_devices
from vgpu_scheduler.shared.codec.register import decode_register
from vgpu_scheduler.shared.codec.resources import pod_containers
from vgpu_scheduler.shared.domain.accounting import collapse
from vgpu_scheduler.shared.domain.model import DeviceInfo
from vgpu_scheduler.shared.emulator import WriteRecord, WriteVerb
from vgpu_scheduler.shared.errors import ConflictError, DecodeError, NotFoundError, VgpuError
from vgpu_scheduler.shared.k8s import Api, EventKind, Informer, InformerSettings, KubeClient, Resource, WatchEvent
from vgpu_scheduler.shared.k8s.objects import annotations_of, name_of, namespace_of, resource_version_of, uid_of

logger = logging.getLogger(__name__)

FAST_WATCH = InformerSettings(watch_timeout_s=60, read_grace_s=10, backoff_initial_s=0.01, backoff_max_s=0.1)
_TERMINAL = ("Succeeded", "Failed")


@dataclass
class DevicePlugin:
    """Simulated device plugins of every node (one Allocate worker pool, API calls over HTTP)."""

    kube: KubeClient
    workers: int = 4
    stuck_nodes: frozenset[str] = frozenset()
    """Nodes whose plugin never answers (Allocate hangs): their pods stay ``allocating``."""
    allocated: dict[str, str] = field(default_factory=dict)
    """pod uid → node, for every pod allocated."""
    allocated_names: set[str] = field(default_factory=set)
    """``<namespace>/<name>`` of every pod allocated."""
    violations: list[str] = field(default_factory=list)
    settled: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.api = Api(self.kube, component="device-plugin", instance="sim")
        self._queue: asyncio.Queue[tuple[str, str, str]] = asyncio.Queue()
        self._seen: set[str] = set()
        self._pending = 0
        self.informer = Informer(self.kube, Resource.PODS, self._on_pod, settings=FAST_WATCH)

    @property
    def busy(self) -> int:
        """Allocations queued or in progress."""
        return self._pending

    async def run(self) -> None:
        """Watch pods and allocate bound ones until cancelled."""
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self.informer.run(), name="devplugin:pod-watch")
            for i in range(self.workers):
                tg.create_task(self._worker(), name=f"devplugin:allocate-{i}")

    async def _on_pod(self, ev: WatchEvent) -> None:
        if ev.kind not in (EventKind.ADDED, EventKind.MODIFIED):
            return
        pod = ev.obj
        uid = uid_of(pod)
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or uid in self._seen or node in self.stuck_nodes:
            return
        if annotations_of(pod).get(keys.BIND_PHASE) != "allocating":
            return
        self._seen.add(uid)
        self._pending += 1
        self.settled.clear()
        self._queue.put_nowait((node, namespace_of(pod), name_of(pod)))

    async def _worker(self) -> None:
        while True:
            node, ns, name = await self._queue.get()
            try:
                await self._allocate(node, ns, name)
            except VgpuError as e:
                self.violations.append(f"allocate {ns}/{name} on {node}: {e}")
            finally:
                self._pending -= 1
                if self._pending == 0:
                    self.settled.set()

    async def _allocate(self, node: str, ns: str, name: str) -> None:
        pod = await self._live_pod(ns, name)
        if pod is None:
            return  # deleted or ended before the kubelet got to it: no Allocate
        node_obj = await self.api.get_node(node)
        lock = annotations_of(node_obj).get(keys.NODE_LOCK)
        if lock is None or not parse_node_lock(lock).owned_by(ns, name):
            if await self._live_pod(ns, name) is None:
                return  # ended meanwhile: its lock was rightly released
            self.violations.append(f"{ns}/{name} bound to {node} but the node lock names someone else: {lock}")
        annos = annotations_of(pod)
        node_uuids = {d.id for d in decode_register(annotations_of(node_obj)[keys.NODE_NVIDIA_REGISTER])}
        entries = decode_pod_devices(annos.get(keys.DEVICES_TO_ALLOCATE, ""), keys.DEVICES_TO_ALLOCATE)
        foreign = [d.uuid for ctr in entries for d in ctr if d.uuid not in node_uuids]
        if foreign or annos.get(keys.VGPU_NODE) != node:
            self.violations.append(f"{ns}/{name} on {node} was given devices of another node: {foreign}")
        consumed = ";" * len(entries)  # every container's entry popped, as the plugin leaves it
        try:
            await self.api.patch_pod_metadata(
                ns, name, annotations={keys.DEVICES_TO_ALLOCATE: consumed, keys.BIND_PHASE: "success"}
            )
        except NotFoundError:
            return
        self.allocated[uid_of(pod)] = node
        self.allocated_names.add(f"{ns}/{name}")
        await self._release_lock(node, ns, name)

    async def _live_pod(self, ns: str, name: str) -> dict[str, Any] | None:
        try:
            pod = await self.api.get_pod(ns, name)
        except NotFoundError:
            return None
        return None if (pod.get("status") or {}).get("phase") in _TERMINAL else pod

    async def _release_lock(self, node: str, ns: str, name: str) -> None:
        """HAMi's ``ReleaseNodeLock``: remove the annotation only if it names this pod."""
        for _ in range(10):
            node_obj = await self.api.get_node(node)
            lock = annotations_of(node_obj).get(keys.NODE_LOCK)
            if lock is None:
                return
            with contextlib.suppress(DecodeError):
                if not parse_node_lock(lock).owned_by(ns, name):
                    return
            try:
                await self.api.patch_node_metadata(
                    node, annotations={keys.NODE_LOCK: None}, resource_version=resource_version_of(node_obj)
                )
            except ConflictError:
                continue
            return


@dataclass(frozen=True)
class Capacity:
    slots: int
    mem_mib: int
    cores_pct: int


@dataclass
class CapacityMonitor:
    """Checks every API state for over-committed devices (install with ``emulator.hooks.append(monitor)``)."""

    capacity: dict[str, Capacity] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    checks: int = 0
    peak_slots: dict[str, int] = field(default_factory=dict)
    _charges: dict[str, dict[str, tuple[int, int, int]]] = field(default_factory=dict)
    _used: dict[str, list[int]] = field(default_factory=dict)

    def add_node(self, devices: tuple[DeviceInfo, ...]) -> None:
        for d in devices:
            self.capacity[d.id] = Capacity(d.count, d.devmem_mib, d.devcore)

    def __call__(self, rec: WriteRecord) -> None:
        if rec.resource != "pods" or rec.subresource not in (None, "binding", "status"):
            return
        pod = rec.result
        uid = uid_of(pod)
        deleted = rec.verb is WriteVerb.DELETE
        new = {} if deleted else self._charges_of(pod)
        old = self._charges.pop(uid, {})
        if new:
            self._charges[uid] = new
        touched = set(old) | set(new)
        for uuid in touched:
            used = self._used.setdefault(uuid, [0, 0, 0])
            for i in range(3):
                used[i] += new.get(uuid, (0, 0, 0))[i] - old.get(uuid, (0, 0, 0))[i]
            self._check(uuid, used, f"{namespace_of(pod)}/{name_of(pod)}")

    def _charges_of(self, pod: Mapping[str, Any]) -> dict[str, tuple[int, int, int]]:
        if (pod.get("status") or {}).get("phase") in _TERMINAL:
            return {}
        try:
            decoded = decode_allocation(pod)
        except DecodeError as e:
            self.violations.append(f"{name_of(pod)}: unreadable allocation: {e}")
            return {}
        if decoded is None:
            return {}
        devices, mig = decoded
        init, _ = pod_containers(pod)
        return {c.uuid: (c.slots, c.mem_mib, c.cores_pct) for c in collapse(devices, len(init), mig)}

    def _check(self, uuid: str, used: list[int], by: str) -> None:
        self.checks += 1
        cap = self.capacity.get(uuid)
        if cap is None:
            self.violations.append(f"{by}: charged unknown device {uuid}")
            return
        self.peak_slots[uuid] = max(self.peak_slots.get(uuid, 0), used[0])
        if used[0] > cap.slots or used[1] > cap.mem_mib or used[2] > cap.cores_pct:
            self.violations.append(
                f"{by}: device {uuid} over capacity: slots {used[0]}/{cap.slots}, "
                f"mem {used[1]}/{cap.mem_mib} MiB, cores {used[2]}/{cap.cores_pct}%"
            )
