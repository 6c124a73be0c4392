"""HAMi's NVIDIA device plugin and the kubelet, as the real control plane sees them.

For every pod that gets ``spec.nodeName`` on a GPU node and asks for a GPU, the "kubelet" calls Allocate after
``latency_s`` (serially per node, as the kubelet admits pods one at a time). Allocate does what HAMi's plugin
does: it identifies the pod from the node's ``hami.io/mutex.lock`` annotation (never from the pod list), checks
that its ``hami.io/bind-phase`` is ``allocating`` and that its ``hami.io/vgpu-devices-to-allocate`` decodes and
names devices of this node, then sets ``bind-phase: success`` and removes the lock (owner-checked,
resourceVersion-guarded). When a check fails it marks the pod ``failed``, releases the lock and counts the
failure in :attr:`HamiDevicePlugin.failures`.

Everything goes through the real API server with ``shared.k8s`` (the kubeconfig of the control-plane fixture).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from shared.codec import annotations as keys
from shared.codec.nodelock import parse_node_lock
from shared.codec.poddevices import decode_pod_devices
from shared.codec.register import decode_register
from shared.errors import ConflictError, DecodeError, NotFoundError, VgpuError
from shared.k8s import Api, EventKind, Informer, InformerSettings, KubeClient, Resource, WatchEvent
from shared.k8s.objects import annotations_of, name_of, namespace_of, resource_version_of, uid_of

logger = logging.getLogger(__name__)

DEFAULT_ALLOCATE_LATENCY_S = 0.2
_WATCH = InformerSettings(watch_timeout_s=60, read_grace_s=10, backoff_initial_s=0.05, backoff_max_s=0.5)
_GPU_RESOURCES = ("nvidia.com/gpu",)


def _asks_gpu(pod: Mapping[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    for ctr in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        res = ctr.get("resources") or {}
        for part in ("limits", "requests"):
            if any(r in (res.get(part) or {}) for r in _GPU_RESOURCES):
                return True
    return False


@dataclass
class HamiDevicePlugin:
    """The device plugins (and kubelets) of every node, one Allocate at a time per node."""

    kube: KubeClient
    latency_s: float = DEFAULT_ALLOCATE_LATENCY_S
    succeeded: set[str] = field(default_factory=set)
    """``<ns>/<name>`` of every pod allocated."""
    failures: list[str] = field(default_factory=list)
    """One line per failed Allocate: which pod, which node, why."""

    def __post_init__(self) -> None:
        self.api = Api(self.kube, component="device-plugin", instance="controlplane-test")
        self._seen: set[str] = set()
        self._node_locks: dict[str, asyncio.Lock] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.idle = asyncio.Event()
        self.idle.set()
        self.informer = Informer(self.kube, Resource.PODS, self._on_pod, settings=_WATCH)

    @property
    def busy(self) -> int:
        """Allocations waiting or in progress."""
        return len(self._tasks)

    async def run(self) -> None:
        """Watch pods and allocate the bound ones until cancelled."""
        try:
            await self.informer.run()
        finally:
            for task in list(self._tasks):
                task.cancel()
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _on_pod(self, ev: WatchEvent) -> None:
        if ev.kind not in (EventKind.ADDED, EventKind.MODIFIED):
            return
        pod = ev.obj
        node = (pod.get("spec") or {}).get("nodeName")
        uid = uid_of(pod)
        if not node or uid in self._seen or not _asks_gpu(pod):
            return
        self._seen.add(uid)
        task = asyncio.create_task(self._kubelet(node, namespace_of(pod), name_of(pod)), name=f"kubelet:{node}")
        self._tasks.add(task)
        self.idle.clear()
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not self._tasks:
            self.idle.set()

    async def _kubelet(self, node: str, ns: str, name: str) -> None:
        async with self._node_locks.setdefault(node, asyncio.Lock()):
            await asyncio.sleep(self.latency_s)  # the kubelet's admission and Allocate round trip
            try:
                await self.allocate(node, ns, name)
            except VgpuError as e:
                self.failures.append(f"{ns}/{name} on {node}: API error during Allocate: {e}")

    async def _node_devices(self, node_obj: Mapping[str, Any]) -> frozenset[str] | None:
        register = annotations_of(node_obj).get(keys.NODE_NVIDIA_REGISTER)
        if register is None:
            return None
        try:
            return frozenset(d.id for d in decode_register(register))
        except DecodeError:
            return None

    async def allocate(self, node: str, ns: str, name: str) -> None:
        """One Allocate on ``node`` for the pod the kubelet admits (``ns/name``); the plugin reads the lock."""
        node_obj = await self.api.get_node(node)
        uuids = await self._node_devices(node_obj)
        if uuids is None:
            return  # not a GPU node: no device plugin, nothing to allocate
        lock = annotations_of(node_obj).get(keys.NODE_LOCK)
        if lock is None:
            await self._fail(node, ns, name, "no hami.io/mutex.lock on the node")
            return
        try:
            owner = parse_node_lock(lock)
        except DecodeError as e:
            await self._fail(node, ns, name, f"unreadable node lock {lock!r}: {e}")
            return
        if not owner.owned_by(ns, name):
            # HAMi's plugin would allocate for the pod the lock names: the wrong pod. A failure either way.
            await self._fail(node, ns, name, f"the node lock names another pod: {lock}")
            return
        try:
            pod = await self.api.get_pod(ns, name)
        except NotFoundError:
            return  # deleted before the kubelet got to it
        annos = annotations_of(pod)
        phase = annos.get(keys.BIND_PHASE)
        if phase != "allocating":
            await self._fail(node, ns, name, f"bind-phase is {phase!r}, not 'allocating'")
            return
        try:
            entries = decode_pod_devices(annos.get(keys.DEVICES_TO_ALLOCATE, ""), keys.DEVICES_TO_ALLOCATE)
        except DecodeError as e:
            await self._fail(node, ns, name, f"to-allocate devices do not decode: {e}")
            return
        devices = [d.uuid for ctr in entries for d in ctr]
        foreign = [u for u in devices if u not in uuids]
        if not devices or foreign or annos.get(keys.VGPU_NODE) != node:
            await self._fail(node, ns, name, f"devices {devices} (foreign {foreign}) not all of node {node}")
            return
        try:
            await self.api.patch_pod_metadata(
                ns, name, annotations={keys.DEVICES_TO_ALLOCATE: ";" * len(entries), keys.BIND_PHASE: "success"}
            )
        except NotFoundError:
            return
        self.succeeded.add(f"{ns}/{name}")
        await self._release_lock(node, ns, name)

    async def _fail(self, node: str, ns: str, name: str, why: str) -> None:
        """HAMi's ``PodAllocationFailed``: bind-phase ``failed``, then release the node lock if it is this pod's."""
        self.failures.append(f"{ns}/{name} on {node}: {why}")
        logger.warning("allocate failed", extra={"pod": f"{ns}/{name}", "node": node, "reason": why})
        with contextlib.suppress(NotFoundError):
            await self.api.patch_pod_metadata(ns, name, annotations={keys.BIND_PHASE: "failed"})
        await self._release_lock(node, ns, name)

    async def _release_lock(self, node: str, ns: str, name: str) -> None:
        """HAMi's ``ReleaseNodeLock``: remove the annotation only if it names this pod (retried on a conflict)."""
        for _ in range(20):
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
