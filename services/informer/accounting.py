"""Mirroring pods into Redis (difference 10): what each pod holds, and its namespace quota charge.

Every write carries the leader's :class:`~shared.store.Fence`; a refused write raises ``StaleFenceError``, which
ends the leadership term. Recording a pod confirms the extender's reservation of it (the store's ``record`` is
unconditional: the API wins, even over capacity).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from vgpu_scheduler.services.informer.metrics import InformerMetrics, Malformed
from vgpu_scheduler.services.informer.pods import PodFacts, PodStatus, pod_allocation, pod_facts
from vgpu_scheduler.services.informer.reporting import ProblemReporter
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec.resources import pod_containers, pod_requests_managed_resource
from vgpu_scheduler.shared.domain.model import NVIDIA, Allocation, NvidiaConfig
from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.k8s.objects import annotations_of
from vgpu_scheduler.shared.store import Fence, Store
from vgpu_scheduler.shared.vendors.catalog import NVIDIA_ONLY_VENDORS
from vgpu_scheduler.shared.vendors.registry import Vendors

logger = logging.getLogger(__name__)

UNREADABLE_ALLOCATION = "UnreadableAllocation"
"""Reason of the Warning event on a pod whose allocation annotations cannot be read."""


class Accountant:
    """Keeps Redis in step with what pods hold. ``recorded`` caches what this term wrote, so repeated pod
    events (status updates) cost no Redis round trip; reconcile replaces the cache with what it verified."""

    def __init__(
        self,
        store: Store,
        fence: Fence,
        cfg: NvidiaConfig,
        reporter: ProblemReporter,
        metrics: InformerMetrics,
        *,
        vendors: Vendors = NVIDIA_ONLY_VENDORS,
    ) -> None:
        """``vendors``: every enabled vendor (a pod is ours when it names any one's resources; what it holds is
        read from each one's allocated annotation). NVIDIA's resource names come from ``cfg``."""
        self._store = store
        self._fence = fence
        self._cfg = cfg
        self._vendors = vendors
        self._others = tuple(v for v in vendors if v.name != NVIDIA)
        self._reporter = reporter
        self._metrics = metrics
        self._recorded: dict[str, Allocation] = {}

    @property
    def recorded(self) -> Mapping[str, Allocation]:
        return self._recorded

    def replace_cache(self, recorded: Mapping[str, Allocation]) -> None:
        """After a reconcile pass: Redis holds exactly ``recorded`` (by pod uid)."""
        self._recorded = dict(recorded)
        self._metrics.pods_tracked.set(len(self._recorded))

    async def device_totals(self, node: str) -> dict[str, int] | None:
        """Core totals of ``node``'s devices from its inventory, so whole-card charges match the extender's."""
        try:
            inv = await self._store.inventory.get(node)
        except DecodeError as e:
            logger.warning("inventory unreadable, charging without it", extra={"node": node, "error": str(e)})
            return None
        return None if inv is None else {d.id: d.devcore for d in inv.devices}

    def allocation_of(self, pod: Mapping[str, Any], totals: Mapping[str, int] | None) -> Allocation | None:
        """What ``pod`` holds (None: nothing). Raises DecodeError for unreadable annotations or node names."""
        alloc = pod_allocation(pod, totals, self._vendors.all)
        if alloc is not None:
            self._store.keys.node_tag(alloc.node)  # a node name Redis keys cannot carry is a DecodeError too
            self._store.keys.quota(alloc.namespace)
        return alloc

    def ours(self, pod: Mapping[str, Any]) -> bool:
        """Whether the pod may hold something in Redis: placed, or asking for a vendor resource."""
        if keys.VGPU_NODE in annotations_of(pod):
            return True
        try:
            if pod_requests_managed_resource(pod, self._cfg):
                return True
            if not self._others:
                return False
            init, app = pod_containers(pod)
        except DecodeError:
            return True
        return any(isinstance(c, Mapping) and v.manages(c) for c in (*init, *app) for v in self._others)

    async def observe(self, pod: Mapping[str, Any], *, force: bool = False) -> None:
        """Bring Redis in line with one pod as the API shows it (ADDED/MODIFIED)."""
        facts = pod_facts(pod)
        status = facts.status
        if status is PodStatus.NOT_PLACED:
            return  # before /bind: the extender's reservation (if any) stands until confirmed or expired
        if status is PodStatus.TERMINATED:
            await self.release(facts, pod)
            return
        try:
            if not force and self._unchanged(pod):
                return  # a status update of a pod already recorded: no round trip
            totals = await self.device_totals(facts.node) if facts.node else None
            alloc = self.allocation_of(pod, totals)
        except DecodeError as e:
            # fail safe: whatever Redis holds for this pod stays until it ends
            await self._reporter.report(Malformed.POD_ALLOCATION, "Pod", pod, UNREADABLE_ALLOCATION, str(e))
            return
        self._reporter.forget("Pod", pod)
        if alloc is None:
            await self.release(facts, pod)
            return
        await self.record(alloc)

    def _unchanged(self, pod: Mapping[str, Any]) -> bool:
        """Whether the pod's annotations say what this term last recorded for it (charges aside)."""
        facts = pod_facts(pod)
        cached = self._recorded.get(facts.uid)
        if cached is None:
            return False
        alloc = pod_allocation(pod, vendors=self._vendors.all)
        return alloc is not None and (alloc.node, alloc.namespace, alloc.name, alloc.devices, alloc.mig) == (
            cached.node,
            cached.namespace,
            cached.name,
            cached.devices,
            cached.mig,
        )

    async def record(self, alloc: Allocation) -> None:
        """Record the pod's allocation (confirmed) and its quota charge."""
        result = await self._store.reservations.record(alloc, self._fence)
        await self._store.quota.record(
            alloc.namespace,
            alloc.pod_uid,
            alloc.quota_mem_mib,
            alloc.quota_cores_pct,
            self._fence,
            others=alloc.quota_others_of(self._vendors.names),
        )
        if alloc.pod_uid not in self._recorded:
            logger.info(
                "allocation recorded",
                extra={
                    "pod": f"{alloc.namespace}/{alloc.name}",
                    "pod_uid": alloc.pod_uid,
                    "node": alloc.node,
                    "devices": [c.uuid for c in alloc.charges],
                    "usage_changed": result.usage_changed,
                },
            )
        self._recorded[alloc.pod_uid] = alloc
        self._metrics.pods_tracked.set(len(self._recorded))

    async def release(self, facts: PodFacts, pod: Mapping[str, Any] | None = None) -> Allocation | None:
        """Give back what the pod held (allocation or unconfirmed reservation) and its quota charge."""
        if facts.uid not in self._recorded and (pod is None or not self.ours(pod)):
            return None
        if not facts.uid:
            return None
        released = await self._store.reservations.release(facts.uid, fence=self._fence)
        if facts.namespace:
            await self._store.quota.refund(facts.namespace, facts.uid, self._fence)
        self._recorded.pop(facts.uid, None)
        self._metrics.pods_tracked.set(len(self._recorded))
        if released is not None:
            logger.info(
                "allocation released",
                extra={
                    "pod": f"{facts.namespace}/{facts.name}",
                    "pod_uid": facts.uid,
                    "node": released.node,
                    "phase": facts.phase,
                },
            )
        return released

    async def deleted(self, pod: Mapping[str, Any]) -> None:
        """The pod is gone from the API: release at once."""
        self._reporter.forget("Pod", pod)
        await self.release(pod_facts(pod), pod)
