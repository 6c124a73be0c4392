"""The node side of a bound pod, as the driver plays it: the kubelet's Allocate calls and what HAMi's device plugins
do with them (find the pod through the node lock, serve the devices written for it, mark the bind a success,
release the node lock), then the pod runs. A pod no HAMi plugin can serve is rejected by the kubelet instead.

The decisions are the pure functions of :mod:`.devplugin`; this is their I/O against the API server.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final

from vgpu_scheduler.services.simulate.devplugin import (
    LockedPod,
    NoPod,
    PendingPod,
    allocation_problems,
    fallback_choice,
    lock_choice,
    lock_kinds_of,
    unserved_resources,
    vendor_allocation_problems,
)
from vgpu_scheduler.services.simulate.kubehttp import DriverError, KubeHttp
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.domain.model import NvidiaConfig
from vgpu_scheduler.shared.k8s.nodefit import pod_request
from vgpu_scheduler.shared.vendors.base import NodeLockKind
from vgpu_scheduler.shared.vendors.registry import Vendors

KubeObject = dict[str, Any]

_PATCH_ATTEMPTS: Final = 5


class NodeSide:
    """The kubelet and HAMi's device plugins of the node a pod was bound to.

    ``vendors``: the enabled vendors (None: NVIDIA only, with ``cfg``), whose plugins serve what the scheduler
    wrote; ``managed``: their resource names; ``known``: every vendor family this build knows, whose HAMi plugin
    may run on a node even when the device config does not enable it.
    """

    def __init__(
        self,
        kube: KubeHttp,
        *,
        cfg: NvidiaConfig,
        vendors: Vendors | None,
        managed: frozenset[str],
        known: Vendors,
    ) -> None:
        self.kube = kube
        self.cfg = cfg
        self.vendors = vendors
        self.managed = managed
        self.known = known

    async def settle(self, ns: str, name: str, node: str) -> tuple[KubeObject, str | None]:
        """The device plugin after Allocate: bind phase success, node lock released, then the pod runs. Or, for a
        pod kube-scheduler placed by itself on a node whose HAMi device plugin serves a resource it asks for, that
        plugin's Allocate fails: the pod ends ``Failed`` and the kubelet's message is returned."""
        pod = await self.kube.get_pod(ns, name)
        annos = pod["metadata"].get("annotations") or {}
        if keys.VGPU_NODE not in annos:
            requested = sorted(pod_request(pod).scalar)
            unserved = unserved_resources(
                requested, await self.kube.get_node(node), self.managed, self.known, datetime.now()
            )
            if unserved:
                message = unserved[0].message
                status = {"phase": "Failed", "reason": "UnexpectedAdmissionError", "message": message}
                await self.kube.patch_pod(ns, name, {"status": status}, status=True)
                return await self.kube.get_pod(ns, name), message
        if keys.VGPU_NODE in annos:  # a pod that asked for no device has nothing to allocate
            await self._check_plugin_serves(pod, node)
            await self.kube.patch_pod(ns, name, {"metadata": {"annotations": {keys.BIND_PHASE: "success"}}})
            await self._release_node_lock(node, ns, name)
            if self.vendors is not None and NodeLockKind.CAMBRICON in lock_kinds_of(pod, self.vendors):
                await self._release_time_lock(node, NodeLockKind.CAMBRICON.value)
        # startTime to the microsecond: preemption evicts the most recently started first, and a run's order of
        # events (the simulated clock's) is also the wall clock's, so equal seconds must not tie
        started = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        await self.kube.patch_pod(ns, name, {"status": {"phase": "Running", "startTime": started}}, status=True)
        return await self.kube.get_pod(ns, name), None

    async def terminate(self, ns: str, name: str) -> KubeObject | None:
        """The kubelet and a pod being deleted (``deletionTimestamp`` set, e.g. a preemption's victim): its containers
        stop at the end of its grace period (taken whole, on the driver's clock), the pod ends ``Failed`` (the
        informer releases its devices then), and the kubelet deletes it for good (``gracePeriodSeconds: 0``, uid
        precondition). Returns the pod's last state (None when it was already gone)."""
        try:
            pod = await self.kube.get_pod(ns, name)
        except DriverError as e:
            if e.status == 404:
                return None
            raise
        await asyncio.sleep(int(pod["metadata"].get("deletionGracePeriodSeconds") or 0))
        try:
            await self.kube.patch_pod(ns, name, {"status": {"phase": "Failed"}}, status=True)
            last = await self.kube.get_pod(ns, name)
        except DriverError as e:
            if e.status == 404:
                return None
            raise
        await self.kube.delete_pod(ns, name, grace_period_s=0, uid=str(pod["metadata"].get("uid") or ""))
        return last

    async def _check_plugin_serves(self, pod: KubeObject, node: str) -> None:
        """Raise DriverError unless HAMi's plugin on ``node`` would find ``pod`` (through the node lock) and
        serve each of its containers the devices the scheduler wrote for it."""
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        where = f"device plugin on {node}, allocating {ns}/{name}"
        # every plugin of the pod takes no node lock (Enflame, Moore Threads): each finds its pod through its own
        # annotations (gcu-assigned, predicate-time), not through HAMi's pending-pod search
        own_annotations = self.vendors is not None and not lock_kinds_of(pod, self.vendors)
        if not own_annotations:
            choice: PendingPod | None = lock_choice(await self.kube.get_node(node))
            if choice is None:
                choice = fallback_choice(node, await self.kube.list_pods(node_name=node))
            if isinstance(choice, NoPod):
                raise DriverError(f"{where}: Allocate fails: {choice.reason}")
            if (choice.namespace, choice.name) != (ns, name):
                how = "the node lock names" if isinstance(choice, LockedPod) else "without a lock it would pick"
                raise DriverError(f"{where}: {how} {choice.namespace}/{choice.name} instead")
        if self.vendors is not None:
            problems = vendor_allocation_problems(pod, self.vendors)
        else:
            problems = allocation_problems(pod, self.cfg.resource_count_name)
        if problems:
            raise DriverError(f"{where}: " + "; ".join(problems))

    async def _release_time_lock(self, node: str, key: str) -> None:
        """Cambricon's device plugin after Allocate: its node lock ``key`` (a time, naming no pod) removed,
        guarded by the node's resourceVersion."""
        await self._remove_node_annotation(node, key, lambda _value: True, f"could not remove {key}")

    async def _release_node_lock(self, node: str, ns: str, name: str) -> None:
        """HAMi's ``ReleaseNodeLock``: only a lock naming this pod, guarded by the node's resourceVersion."""
        await self._remove_node_annotation(
            node,
            keys.NODE_LOCK,
            lambda value: value is not None and str(value).endswith(f",{ns},{name}"),
            f"could not release the node lock of {ns}/{name}",
        )

    async def _remove_node_annotation(self, node: str, key: str, ours: Callable[[Any], bool], failure: str) -> None:
        """Remove the node's annotation ``key`` while it is there and ``ours(value)`` holds (else it was released
        already, or is someone else's), guarded by the node's resourceVersion; a conflict reads the node again."""
        for _ in range(_PATCH_ATTEMPTS):
            obj = await self.kube.get_node(node)
            annotations = obj["metadata"].get("annotations") or {}
            if key not in annotations or not ours(annotations[key]):
                return
            patch = {"metadata": {"annotations": {key: None}, "resourceVersion": obj["metadata"]["resourceVersion"]}}
            try:
                await self.kube.patch_node(node, patch)
                return
            except DriverError as e:
                if e.status != 409:
                    raise
        raise DriverError(f"node {node}: {failure} (conflicts)")
