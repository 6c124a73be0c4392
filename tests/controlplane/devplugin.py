"""HAMi's device plugins (every enabled vendor's) and the kubelet, as the real control plane sees them.

For every pod that gets ``spec.nodeName`` and asks for devices of an enabled vendor, the "kubelet" calls Allocate
after ``latency_s`` (serially per node, as the kubelet admits pods one at a time), on the plugin of every vendor
the pod asks for. Each plugin finds the pod the way its vendor's does:

* the vendors on HAMi's node lock (NVIDIA, AMD, Hygon, Ascend): the pod named by the node's
  ``hami.io/mutex.lock`` (never from the pod list);
* Cambricon (``cambricon.com/dsmlu.lock``, a bare time that names no pod): the node must carry that lock, and the
  pod is the first on the node whose annotations say it is being allocated MLUs (``bind-phase: allocating``,
  ``hami.io/vgpu-node`` = the node, a non-empty Cambricon to-allocate list);
* vendors without a node lock: the pod's own annotations.

Then the checks every plugin makes: ``hami.io/bind-phase`` is ``allocating``; each vendor's to-allocate list
decodes with that vendor's codec, serves every container the number of devices it asks for
(:func:`services.simulate.devplugin.vendor_allocation_problems`) and names only devices that vendor registered on
this node. On success: the to-allocate lists emptied (one ``;`` per container, as HAMi's plugins erase what they
consumed), ``bind-phase: success``, HAMi's lock removed (owner-checked, resourceVersion-guarded) and Cambricon's
lock removed (our assumption of what Cambricon's plugin does after Allocate: the scheduler leaves it in place).
When a check fails the pod is marked ``failed``, the locks are released and the failure is counted in
:attr:`HamiDevicePlugin.failures`. A pod on a node where no plugin has registered at all (a node rebooted, its
plugin not back yet) is failed by the kubelet's admission instead, as a real kubelet does: ``Failed``,
``UnexpectedAdmissionError``, no plugin called (:attr:`HamiDevicePlugin.refused`).

Everything goes through the real API server with ``shared.k8s`` (the kubeconfig of the control-plane fixture).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from vgpu_scheduler.services.simulate.devplugin import lock_kinds_of, vendor_allocation_problems
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec.nodelock import parse_node_lock
from vgpu_scheduler.shared.codec.resources import pod_containers
from vgpu_scheduler.shared.errors import ConflictError, DecodeError, NotFoundError, TransientError, VgpuError
from vgpu_scheduler.shared.k8s import Api, EventKind, Informer, InformerSettings, KubeClient, Resource, WatchEvent
from vgpu_scheduler.shared.k8s.objects import annotations_of, name_of, namespace_of, resource_version_of, uid_of
from vgpu_scheduler.shared.vendors.base import NodeLockKind, Vendor
from vgpu_scheduler.shared.vendors.catalog import NVIDIA_ONLY_VENDORS
from vgpu_scheduler.shared.vendors.pods import vendors_manage_pod
from vgpu_scheduler.shared.vendors.registration import NodeView, Registered
from vgpu_scheduler.shared.vendors.registry import Vendors

logger = logging.getLogger(__name__)

DEFAULT_ALLOCATE_LATENCY_S = 0.2
API_ATTEMPTS = 40
"""Passes of one admission while the API server cannot be reached (about 70 s: longer than its restart)."""
_WATCH = InformerSettings(watch_timeout_s=60, read_grace_s=10, backoff_initial_s=0.05, backoff_max_s=0.5)


def asks_devices(pod: Mapping[str, Any], vendors: Vendors) -> bool:
    """Whether a container of ``pod`` names a resource of an enabled vendor."""
    try:
        return vendors_manage_pod(pod, vendors)
    except DecodeError:
        return False


def asked_vendors(pod: Mapping[str, Any], vendors: Vendors) -> tuple[Vendor, ...]:
    """The enabled vendors whose resources some (init) container of ``pod`` names, in vendor order."""
    try:
        containers = [c for group in pod_containers(pod) for c in group]
    except DecodeError:
        return ()
    return tuple(v for v in vendors if any(v.manages(c) for c in containers))


def registered_devices(node: Mapping[str, Any], vendors: Vendors) -> dict[str, frozenset[str]]:
    """Device IDs per vendor (common word) that the vendor's registration on ``node`` holds, as the registrar
    reads it; vendors not registered there are absent."""
    view = NodeView.of(node)
    now = datetime.now()
    out: dict[str, frozenset[str]] = {}
    for vendor in vendors:
        seen = vendor.observe(view, now)
        if isinstance(seen, Registered):
            out[vendor.name] = frozenset(d.id for d in seen.inventory.devices if d.vendor == vendor.name)
    return out


@dataclass
class HamiDevicePlugin:
    """The device plugins (and kubelets) of every node, one Allocate at a time per node."""

    kube: KubeClient
    latency_s: float = DEFAULT_ALLOCATE_LATENCY_S
    vendors: Vendors = NVIDIA_ONLY_VENDORS
    """The enabled vendors: each one's plugin runs on the nodes where it is registered."""
    succeeded: set[str] = field(default_factory=set)
    """``<ns>/<name>`` of every pod allocated."""
    failures: list[str] = field(default_factory=list)
    """One line per failed Allocate: which pod, which node, why."""
    refused: list[str] = field(default_factory=list)
    """Pods the kubelet failed at admission, no device plugin being registered on their node (``<ns>/<name> on
    <node>``): what a real node does, so not a failure of the system's."""

    def __post_init__(self) -> None:
        self.api = Api(self.kube, component="device-plugin", instance="controlplane-test")
        self._seen: set[str] = set()
        self._registered: dict[str, tuple[str, dict[str, frozenset[str]]]] = {}
        """node → (what its registration is read from, the devices registered there): decoded again only when
        that changed or 5 s have passed (liveness depends on the time), not at every Allocate: this emulator
        shares the machine's CPUs with what it measures, where a real plugin runs on its own node."""
        self._node_locks: dict[str, asyncio.Lock] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.idle = asyncio.Event()
        self.idle.set()
        self.informer = Informer(self.kube, Resource.PODS, self._on_pod, settings=_WATCH)

    @property
    def busy(self) -> int:
        """Allocations waiting or in progress."""
        return len(self._tasks)

    async def settled(self, timeout_s: float) -> None:
        """Return once every allocation begun has ended. A plugin still busy after ``timeout_s`` (an Allocate that
        never ends) fails the test: AssertionError naming the allocations still waiting or in progress."""
        try:
            async with asyncio.timeout(timeout_s):
                await self.idle.wait()
        except TimeoutError:
            stuck = ", ".join(sorted(t.get_name() for t in self._tasks))
            raise AssertionError(
                f"device plugin still busy after {timeout_s}s: {self.busy} allocation(s): {stuck}"
            ) from None

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
        if not node or uid in self._seen or not asks_devices(pod, self.vendors):
            return
        self._seen.add(uid)
        ns, name = namespace_of(pod), name_of(pod)
        task = asyncio.create_task(self._kubelet(node, ns, name), name=f"kubelet:{node}:{ns}/{name}")
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
            for attempt in range(API_ATTEMPTS):
                try:
                    await self.allocate(node, ns, name)
                    return
                except TransientError as e:
                    # The API server cannot be reached (restarting): the kubelet's pod sync tries the pod again.
                    # allocate() starts over from what the API shows, so a pass cut short after its patch only
                    # releases the lock the next time.
                    if attempt + 1 == API_ATTEMPTS:
                        self.failures.append(f"{ns}/{name} on {node}: API unreachable during Allocate: {e}")
                        return
                    await asyncio.sleep(min(2.0, 0.2 * (attempt + 1)))  # no event says it is back: poll
                except VgpuError as e:
                    self.failures.append(f"{ns}/{name} on {node}: API error during Allocate: {e}")
                    return

    async def allocate(self, node: str, ns: str, name: str) -> None:
        """One admission of ``ns/name`` on ``node``: Allocate on the plugin of every vendor the pod asks for."""
        try:
            node_obj = await self.api.get_node(node)
        except NotFoundError:
            return  # the node is gone (deleted, its machine rebooting): no kubelet runs there to admit the pod
        registered = self._registered_on(node, node_obj)
        if not registered:
            await self._refuse(node, ns, name)
            return
        try:
            pod = await self.api.get_pod(ns, name)
        except NotFoundError:
            return  # deleted before the kubelet got to it
        if annotations_of(pod).get(keys.BIND_PHASE) in ("success", "failed"):
            # decided by an earlier pass cut off by the API server before it released the node lock
            await self._release_locks(node, ns, name, lock_kinds_of(pod, self.vendors))
            return
        asked = asked_vendors(pod, self.vendors)
        kinds = lock_kinds_of(pod, self.vendors)
        why = self._no_plugin(asked, registered, node) or await self._found_by_lock(node_obj, pod, kinds)
        why = why or self._check(node, pod, asked, registered)
        if why:
            await self._fail(node, ns, name, why, kinds)
            return
        annos = annotations_of(pod)
        cleared = {}
        for vendor in asked:
            key = vendor.to_allocate_key
            if key is not None and key in annos:
                cleared[key] = ";" * len(vendor.decode_devices(annos[key]))
        try:
            await self.api.patch_pod_metadata(ns, name, annotations={**cleared, keys.BIND_PHASE: "success"})
        except NotFoundError:
            return
        self.succeeded.add(f"{ns}/{name}")
        await self._release_locks(node, ns, name, kinds)

    async def _refuse(self, node: str, ns: str, name: str) -> None:
        """The kubelet's admission of a pod asking for a resource no device plugin on its node has registered (a
        node just rebooted, its plugin not back yet): it fails at once, the pod ends ``Failed`` with reason
        ``UnexpectedAdmissionError``. No plugin is called, so the pod keeps ``bind-phase: allocating`` and its
        node lock: giving those back is the scheduler's side's to do."""
        status = {
            "phase": "Failed",
            "reason": "UnexpectedAdmissionError",
            "message": f"Allocate failed: no device plugin has registered the pod's resources on node {node}",
        }
        try:
            await self.api.patch_pod_status(ns, name, status)
        except NotFoundError:
            return  # deleted before the kubelet got to it
        self.refused.append(f"{ns}/{name} on {node}")

    def _registered_on(self, node: str, node_obj: Mapping[str, Any]) -> dict[str, frozenset[str]]:
        locks = (keys.NODE_LOCK, NodeLockKind.CAMBRICON.value)
        annos = {k: v for k, v in annotations_of(node_obj).items() if k not in locks}
        status = node_obj.get("status") or {}
        labels = (node_obj.get("metadata") or {}).get("labels")
        shown = json.dumps(
            [annos, labels, status.get("capacity"), status.get("allocatable"), int(time.monotonic() // 5)],
            sort_keys=True,
        )
        cached = self._registered.get(node)
        if cached is not None and cached[0] == shown:
            return cached[1]
        registered = registered_devices(node_obj, self.vendors)
        self._registered[node] = (shown, registered)
        return registered

    @staticmethod
    def _no_plugin(asked: tuple[Vendor, ...], registered: Mapping[str, frozenset[str]], node: str) -> str | None:
        missing = [v.name for v in asked if v.name not in registered]
        if missing:
            return f"node {node} has no registered device plugin for {', '.join(missing)}"
        return None

    async def _found_by_lock(
        self, node_obj: Mapping[str, Any], pod: Mapping[str, Any], kinds: frozenset[NodeLockKind]
    ) -> str | None:
        """Why a plugin of the pod's vendors would not find the pod (None: every one finds it)."""
        node_annos = annotations_of(node_obj)
        ns, name = namespace_of(pod), name_of(pod)
        if NodeLockKind.HAMI in kinds:
            lock = node_annos.get(keys.NODE_LOCK)
            if lock is None:
                return "no hami.io/mutex.lock on the node"
            try:
                owner = parse_node_lock(lock)
            except DecodeError as e:
                return f"unreadable node lock {lock!r}: {e}"
            if not owner.owned_by(ns, name):
                # HAMi's plugin would allocate for the pod the lock names: the wrong pod. A failure either way.
                return f"the node lock names another pod: {lock}"
        if NodeLockKind.CAMBRICON in kinds:
            if NodeLockKind.CAMBRICON.value not in node_annos:
                return f"no {NodeLockKind.CAMBRICON.value} on the node"
            first = await self._first_allocating_mlu(name_of(node_obj))
            if first != (ns, name):
                return f"the Cambricon plugin would take {first} (the first pod allocating MLUs on the node)"
        return None

    async def _first_allocating_mlu(self, node: str) -> tuple[str, str] | None:
        cambricon = [v for v in self.vendors if v.node_lock is NodeLockKind.CAMBRICON]
        pods = await self.api.list_pods(node_name=node)
        for pod in pods:
            annos = annotations_of(pod)
            if annos.get(keys.BIND_PHASE) != "allocating" or annos.get(keys.VGPU_NODE) != node:
                continue
            for vendor in cambricon:
                key = vendor.to_allocate_key or vendor.allocated_key
                with contextlib.suppress(DecodeError):
                    if any(vendor.decode_devices(annos.get(key, ""))):
                        return namespace_of(pod), name_of(pod)
        return None

    def _check(
        self, node: str, pod: Mapping[str, Any], asked: tuple[Vendor, ...], registered: Mapping[str, frozenset[str]]
    ) -> str | None:
        """The plugins' own checks of the pod they found (None: every one can serve it)."""
        annos = annotations_of(pod)
        phase = annos.get(keys.BIND_PHASE)
        if phase != "allocating":
            return f"bind-phase is {phase!r}, not 'allocating'"
        if annos.get(keys.VGPU_NODE) != node:
            return f"hami.io/vgpu-node is {annos.get(keys.VGPU_NODE)!r}, not {node}"
        problems = vendor_allocation_problems(pod, self.vendors)
        if problems:
            return "; ".join(problems)
        for vendor in asked:
            key = vendor.to_allocate_key or vendor.allocated_key
            try:
                entries = vendor.decode_devices(annos.get(key, ""))
            except DecodeError as e:
                return f"{key} does not decode: {e}"
            devices = [d.uuid for ctr in entries for d in ctr]
            foreign = [u for u in devices if u not in registered[vendor.name]]
            if not devices or foreign:
                return f"{key}: devices {devices} (not {vendor.name} devices of node {node}: {foreign})"
        return None

    async def _fail(self, node: str, ns: str, name: str, why: str, kinds: frozenset[NodeLockKind]) -> None:
        """HAMi's ``PodAllocationFailed``: bind-phase ``failed``, then release the node locks of this pod."""
        self.failures.append(f"{ns}/{name} on {node}: {why}")
        logger.warning("allocate failed", extra={"pod": f"{ns}/{name}", "node": node, "reason": why})
        with contextlib.suppress(NotFoundError):
            await self.api.patch_pod_metadata(ns, name, annotations={keys.BIND_PHASE: "failed"})
        await self._release_locks(node, ns, name, kinds)

    async def _release_locks(self, node: str, ns: str, name: str, kinds: frozenset[NodeLockKind]) -> None:
        if NodeLockKind.HAMI in kinds:
            await self._release_lock(node, ns, name)
        if NodeLockKind.CAMBRICON in kinds:
            await self._remove_annotation(node, NodeLockKind.CAMBRICON.value)

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

    async def _remove_annotation(self, node: str, key: str) -> None:
        """Remove a node annotation that names no pod (Cambricon's time lock), resourceVersion-guarded."""
        for _ in range(20):
            node_obj = await self.api.get_node(node)
            if key not in annotations_of(node_obj):
                return
            try:
                await self.api.patch_node_metadata(
                    node, annotations={key: None}, resource_version=resource_version_of(node_obj)
                )
            except ConflictError:
                continue
            return
