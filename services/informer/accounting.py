"""Mirroring pods into Redis (difference 10): what each pod holds, and its namespace quota charge.

Every write carries the leader's :class:`~shared.store.Fence`; a refused write raises ``StaleFenceError``, which
ends the leadership term. Recording a pod confirms the extender's reservation of it (the store's ``record`` is
unconditional: the API wins, even over capacity).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from vgpu_scheduler.services.informer.metrics import InformerMetrics, Malformed
from vgpu_scheduler.services.informer.pods import PodFacts, PodStatus, pod_allocation, pod_facts
from vgpu_scheduler.services.informer.reporting import ProblemReporter
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec.resources import pod_containers, pod_requests_managed_resource
from vgpu_scheduler.shared.domain.allocation import Allocation
from vgpu_scheduler.shared.domain.model import NVIDIA, NvidiaConfig
from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.k8s.objects import annotations_of, meta
from vgpu_scheduler.shared.store import Fence, PodQuotaCharge, Store
from vgpu_scheduler.shared.vendors.catalog import NVIDIA_ONLY_VENDORS
from vgpu_scheduler.shared.vendors.registry import Vendors

logger = logging.getLogger(__name__)

TOTALS_SETTLE_S = 10.0
"""How long after a node's registration changed its inventory is read again for every pod (not kept)."""

UNREADABLE_ALLOCATION = "UnreadableAllocation"
"""Reason of the Warning event on a pod whose allocation annotations cannot be read."""


class Accountant:
    """Keeps Redis in step with what pods hold. ``recorded`` caches what this term wrote, so repeated pod
    events (status updates) cost no Redis round trip; reconcile replaces the cache with what it verified.

    Per pod event the work is kept to what changed: an update whose allocation annotations (and name) are the
    very strings last recorded is recognised without decoding them, and a node's device core totals are read from
    its inventory once, then kept until the node's registration changes (:meth:`forget_totals`) or a reconcile
    pass replaces the cache."""

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
        self._vendor_names = frozenset(vendors.names)  # computed per call otherwise
        self._reporter = reporter
        self._metrics = metrics
        self._recorded: dict[str, Allocation] = {}
        self._read_from: dict[str, tuple[object, ...]] = {}
        """pod uid → the raw annotations (and name) its recorded allocation was read from (:meth:`_raw`)."""
        self._keys = (keys.VGPU_NODE, keys.MIG_ALLOCATIONS, *(v.allocated_key for v in vendors.all))
        self._totals: dict[str, dict[str, int]] = {}
        """node → device core totals read from its inventory (:meth:`device_totals`)."""
        self._unsettled: dict[str, float] = {}
        """node → until when (monotonic) its registration is too fresh to keep its totals (:meth:`forget_totals`)."""

    @property
    def recorded(self) -> Mapping[str, Allocation]:
        return self._recorded

    def replace_cache(self, recorded: Mapping[str, Allocation]) -> None:
        """After a reconcile pass: Redis holds exactly ``recorded`` (by pod uid)."""
        self._recorded = dict(recorded)
        self._read_from.clear()
        self._totals.clear()
        self._metrics.pods_tracked.set(len(self._recorded))

    def forget_totals(self, node: str, *, changed: bool = True) -> None:
        """``node``'s registration changed (or the node is new, ``changed=False``, or gone): read its core totals
        afresh; after a change, every time for :data:`TOTALS_SETTLE_S` (the registrar writes the new inventory a
        moment after the node changed), then keep them again."""
        self._totals.pop(node, None)
        if changed:
            self._unsettled[node] = time.monotonic() + TOTALS_SETTLE_S
        else:
            self._unsettled.pop(node, None)

    async def device_totals(self, node: str, *, cached: bool = True) -> dict[str, int] | None:
        """Core totals of ``node``'s devices from its inventory, so whole-card charges match the extender's; kept
        per node (``cached=False`` reads the inventory again). A node without an inventory is not kept: the
        registrar may not have written it yet."""
        if cached and (totals := self._totals.get(node)) is not None:
            return totals
        try:
            inv = await self._store.inventory.get(node)
        except DecodeError as e:
            logger.warning("inventory unreadable, charging without it", extra={"node": node, "error": str(e)})
            return None
        if inv is None:
            return None
        totals = {d.id: d.devcore for d in inv.devices}
        until = self._unsettled.get(node)
        if until is None or time.monotonic() >= until:
            self._unsettled.pop(node, None)
            self._totals[node] = totals
        return totals

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

    async def observe(self, pod: Mapping[str, Any], *, force: bool = False, facts: PodFacts | None = None) -> None:
        """Bring Redis in line with one pod as the API shows it (ADDED/MODIFIED); ``facts``: the pod's, when the
        caller has them already."""
        facts = facts if facts is not None else pod_facts(pod)
        status = facts.status
        if status is PodStatus.NOT_PLACED:
            return  # before /bind: the extender's reservation (if any) stands until confirmed or expired
        if status is PodStatus.TERMINATED:
            await self.release(facts, pod)
            return
        try:
            if not force:
                raw = self._raw(pod)
                if facts.uid in self._recorded and self._read_from.get(facts.uid) == raw:
                    return  # an update of a recorded pod that left its allocation as it was: no decode, no round trip
                if self._unchanged(pod):
                    self._read_from[facts.uid] = raw
                    return  # a status update of a pod already recorded: no round trip
            totals = await self.device_totals(facts.node, cached=not force) if facts.node else None
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
        self._read_from[alloc.pod_uid] = self._raw(pod)

    def _raw(self, pod: Mapping[str, Any]) -> tuple[object, ...]:
        """What a pod's allocation is read from, as the API serves it: its namespace, name and allocation
        annotations (node, every enabled vendor's allocated list, MIG). Containers are immutable."""
        m = meta(pod)
        annotations = annotations_of(pod)
        return (m.get("namespace"), m.get("name"), *(annotations.get(k) for k in self._keys))

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
        """Record the pod's allocation (confirmed) and its quota charge, in one Redis round trip."""
        charge = PodQuotaCharge(alloc.quota_mem_mib, alloc.quota_cores_pct, alloc.quota_others_of(self._vendor_names))
        result, _ = await self._store.record_observed(alloc, charge, self._fence)
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
        self._read_from.pop(facts.uid, None)
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

    async def deleted(self, pod: Mapping[str, Any], facts: PodFacts | None = None) -> None:
        """The pod is gone from the API: release at once."""
        self._reporter.forget("Pod", pod)
        await self.release(facts if facts is not None else pod_facts(pod), pod)
