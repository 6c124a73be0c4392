"""The commit of ``POST /filter``'s plan (docs/store.md, Consistency): charge the namespace quota when it has limits,
then reserve the devices with the store's capacity-checked script; and before it, the pod's context: where an
earlier reservation of the pod is and its namespace's quota (one round trip, read while the plan is made), an
earlier reservation kept, given back or (while a bind owns it) never moved, a preemption hold waited for.

The answers, the retry loop around a conflict and the metrics are :mod:`services.extender.filter`'s.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from vgpu_scheduler.services.extender.filterplan import Planner
from vgpu_scheduler.services.extender.filterpod import FilterError, FilterPod
from vgpu_scheduler.services.extender.metrics import FilterOutcome
from vgpu_scheduler.services.extender.snapshot import SnapshotCache
from vgpu_scheduler.shared.domain.allocation import Allocation
from vgpu_scheduler.shared.domain.model import NvidiaConfig
from vgpu_scheduler.shared.domain.plan import Decision, Failure
from vgpu_scheduler.shared.domain.quota import QuotaState
from vgpu_scheduler.shared.domain.scoring import Policies, effective_policy
from vgpu_scheduler.shared.store import (
    Owned,
    PodQuotaCharge,
    QuotaExceeded,
    ReserveConflict,
    Reserved,
    Store,
    Unsettled,
)
from vgpu_scheduler.shared.vendors.registry import Vendors

if TYPE_CHECKING:
    from vgpu_scheduler.services.extender.preempt import Preemptor

logger = logging.getLogger(__name__)

_SEND_TURNS = 2
"""Event-loop turns a Redis read started as a task needs to be on the wire (redis-py 8; more do no harm)."""


@dataclass(frozen=True, slots=True)
class Kept:
    """The pod already holds devices on ``node``, a candidate: answer it again (design: ownership)."""

    node: str


@dataclass(frozen=True, slots=True)
class Waiting:
    """The pod's devices on ``node`` are held for it by a preemption whose ``victims`` pods have not left yet."""

    node: str
    victims: int


class Committer:
    """Reserves what the planner decided for a pod, in the store; reads and settles the pod's context first."""

    def __init__(
        self,
        store: Store,
        cache: SnapshotCache,
        planner: Planner,
        *,
        nvidia: NvidiaConfig,
        vendors: Vendors,
        policies: Policies,
        preemptor: Preemptor | None,
        on_reserved: Callable[[str], None] | None = None,
    ) -> None:
        self._on_reserved = on_reserved
        """Told the UID of every pod reserved anew (the bind limit times how long its bind takes to come)."""
        self._store = store
        self._cache = cache
        self._plan = planner.plan
        self._nvidia = nvidia
        self._vendors = vendors
        self._policies = policies
        self._preemptor = preemptor

    async def commit(
        self, pod: FilterPod, decision: Decision, quota: QuotaState | None, *, fresh: bool = False
    ) -> Reserved | ReserveConflict | QuotaExceeded | Owned | Unsettled:
        """Charge the quota (when the namespace has limits), then reserve the devices (docs/store.md). ``fresh``:
        the pod's context was not read; reserve only if it holds no record and its namespace no quota."""
        allocation = _allocation(pod, decision)
        if quota is not None:
            owed = quota_charge(allocation, self._vendors.names)
            charge = await self._store.quota.charge(
                pod.namespace,
                pod.uid,
                owed.mem_mib,
                owed.cores_pct,
                mem_limit_factor=max(self._nvidia.memory_factor, 1),
                others=owed.others,
            )
            if isinstance(charge, QuotaExceeded):
                return charge
        # mutex (§6.4 step 7) needs idle devices: the store re-checks it atomically, as the charges cannot say so
        mutex = effective_policy(self._policies, pod.constraints).mutex
        # planned on the snapshot of one store epoch: a flush or a new Redis primary since refuses (not ready)
        epoch = self._cache.epoch
        if fresh:
            reserved = await self._store.reservations.reserve_fresh(
                allocation, mutex=mutex, epoch=epoch, hint=pod.bind_hint
            )
        else:
            reserved = await self._store.reservations.reserve(allocation, mutex=mutex, epoch=epoch, hint=pod.bind_hint)
        if isinstance(reserved, Reserved) and reserved.changed:
            self._cache.apply_local(decision, reserved.generation)
            self._cache.mark_busy(decision.node)  # its bind is coming: the next pods may prefer other nodes
            if self._on_reserved is not None:
                self._on_reserved(allocation.pod_uid)
        return reserved

    async def first_plan(
        self, pod: FilterPod, names: Sequence[str], planned: tuple[Decision | Failure, list[str]] | None = None
    ) -> tuple[QuotaState | None, tuple[Decision | Failure, int | None] | Kept | Waiting | None, list[str]]:
        """Read where the pod's earlier reservation is and its namespace quota (one round trip), and plan while
        that read is in flight (unless ``planned`` already holds the plan without quota): most pods have neither,
        and then that plan stands.

        Returns the quota to plan with (None: the namespace has no limits), the plan with the chosen node's
        generation if it still holds (else None: plan again) and the candidates missing from the snapshot.
        """
        context = asyncio.create_task(
            self._store.reservations.node_and_quota(pod.uid, pod.namespace), name=f"filter-context:{pod.uid}"
        )
        try:
            if planned is None:
                # Let the task reach the socket first (redis-py takes a pooled connection, then sends: two loop
                # turns); without this the read would only be sent once planning is done, and nothing would overlap.
                for _ in range(_SEND_TURNS):
                    await asyncio.sleep(0)
                planned = self._plan(pod, names, None)
            result, missing = planned
            planned_at = self._cache.generation(result.node) if isinstance(result, Decision) else None
        finally:
            previous, quota = await context
        if previous is not None:
            kept = await self._settle_previous(pod, previous, names)
            if kept is not None:
                return None, kept, missing
            quota = await self._store.quota.get(pod.namespace)
            return (quota if quota.limited else None), None, missing
        if quota.limited:
            return quota, None, missing
        return None, (result, planned_at), missing

    async def _settle_previous(self, pod: FilterPod, node: str, names: Sequence[str]) -> Kept | Waiting | None:
        """The pod already holds a record on ``node`` (docs/extender-bind.md, ownership): keep that decision when
        ``node`` is a registered candidate; otherwise give a plain reservation back (with its quota charge) and
        plan again. A record a bind owns is never released here: :class:`FilterError` (``owned_elsewhere``).
        A preemption hold whose victims have not left yet is kept, and the pod waits (docs/preemption.md)."""
        if self._preemptor is not None:
            victims = await self._preemptor.waiting(pod.uid, node)
            if victims:
                return Waiting(node, victims)
        if node in names and self._cache.get(node) is not None:
            # answered again: the informer's expiry counts from now, so it cannot take the devices before the bind
            await self._store.reservations.renew(pod.uid, node)
            return Kept(node)
        released = await self._store.reservations.release_unowned(pod.uid, node)
        if isinstance(released, Owned):
            raise owned_error(pod, node, released.state.value)
        if released:
            await self._store.quota.refund(pod.namespace, pod.uid)
        await self._cache.refresh([node])
        logger.debug("previous reservation dropped", extra={"pod": pod.key, "node": node})
        return None


def owned_error(pod: FilterPod, node: str, state: str) -> FilterError:
    return FilterError(
        f"pod {pod.key} already holds devices on node {node} ({state}), which is not among the candidate "
        "nodes: they are not moved while a bind owns them",
        FilterOutcome.OWNED_ELSEWHERE,
    )


def _allocation(pod: FilterPod, decision: Decision) -> Allocation:
    return Allocation(
        pod_uid=pod.uid,
        namespace=pod.namespace,
        name=pod.name,
        node=decision.node,
        devices=decision.devices,
        charges=decision.charges,
        mig=decision.mig,
    )


def quota_charge(allocation: Allocation, vendors: Collection[str]) -> PodQuotaCharge:
    """What the allocation charges to its namespace's quota: memory and cores of its NVIDIA devices (the quota's
    ``nvidia.com/gpumem`` / ``gpucores``), then every other enabled vendor's devices by common word (that vendor's
    ``limits.<memory resource>`` / ``limits.<core resource>``); the informer records the same."""
    return PodQuotaCharge(allocation.quota_mem_mib, allocation.quota_cores_pct, allocation.quota_others_of(vendors))
