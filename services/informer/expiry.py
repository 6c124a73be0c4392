"""Collecting reservations no bind will confirm: the informer's sweep of unconfirmed records.

A record the extender wrote at ``/filter`` is confirmed when the pod's annotations show it (accounting). One that
is not is released here, with its quota charge:

* after ``--reservation-grace`` (the pod's bind never came: kube-scheduler chose otherwise, restarted, or the pod
  waits elsewhere), unless the pod now holds it (then it is confirmed from the pod);
* at the next sweep, whatever its age, when the informer has already seen its pod deleted. A delete event releases
  what the pod holds, but a ``/filter`` in flight for that pod (kube-scheduler's cache is behind the API) may
  reserve after it; without this its devices would be held for the whole grace, refused to every other pod.

Never under a bind holding a live claim (``release_unclaimed``): that bind owns the devices until it ends.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from vgpu_scheduler.services.informer.accounting import Accountant
from vgpu_scheduler.services.informer.metrics import InformerMetrics
from vgpu_scheduler.services.informer.pods import PodStatus, pod_facts
from vgpu_scheduler.shared.errors import DecodeError, NotFoundError
from vgpu_scheduler.shared.k8s import Api, KubeObject
from vgpu_scheduler.shared.k8s.objects import uid_of
from vgpu_scheduler.shared.store import AllocationRecord, Fence, Store

logger = logging.getLogger(__name__)


class ReservationExpiry:
    """The sweep (module docstring). ``mutex``: the term's, held around each record's writes."""

    def __init__(
        self,
        *,
        store: Store,
        api: Api,
        accountant: Accountant,
        metrics: InformerMetrics,
        fence: Fence,
        mutex: asyncio.Lock,
        clock: Callable[[], float],
        grace_s: float,
    ) -> None:
        self._store = store
        self._api = api
        self._accountant = accountant
        self._metrics = metrics
        self._fence = fence
        self._mutex = mutex
        self._clock = clock
        self._grace_s = grace_s
        self._deleted: dict[str, float] = {}
        """Pod UID → when its delete event was seen; kept for one grace (after it the grace takes any record)."""

    def pod_deleted(self, uid: str) -> None:
        """The pod informer saw ``uid`` deleted: a record of it written from now on is released at the next
        sweep."""
        if uid:
            self._deleted[uid] = self._clock()

    async def sweep(self) -> int:
        """Release what the module docstring says; returns how many records were released."""
        now = self._clock()
        for uid in [u for u, at in self._deleted.items() if now - at > self._grace_s]:
            del self._deleted[uid]
        grace_ms, now_ms = self._grace_s * 1000, now * 1000
        stale = [
            r
            # undecodable records are skipped (never released here): reconcile logs and counts them
            for r in await self._store.reservations.list_unconfirmed(errors=[])
            if now_ms - r.reserved_at_ms >= grace_ms or r.allocation.pod_uid in self._deleted
        ]
        expired = 0
        for rec in stale:
            if await self._expire(rec):
                expired += 1
        return expired

    async def _pod(self, namespace: str, name: str) -> KubeObject | None:
        try:
            return await self._api.get_pod(namespace, name)
        except NotFoundError:
            return None

    async def _expire(self, rec: AllocationRecord) -> bool:
        a = rec.allocation
        deleted = a.pod_uid in self._deleted
        pod = None if deleted else await self._pod(a.namespace, a.name)  # a UID never comes back: no need to ask
        async with self._mutex:
            if pod is not None and uid_of(pod) == a.pod_uid and pod_facts(pod).status is PodStatus.HOLDS:
                await self._accountant.observe(pod, force=True)  # its annotations are there: confirm
                return False
            try:
                current = await self._store.reservations.get(a.pod_uid)
            except DecodeError:
                return False  # rewritten meanwhile in a form we cannot read (a newer replica's): not ours to expire
            if current is None or not current.state.unconfirmed or current.reserved_at_ms != rec.reserved_at_ms:
                return False  # confirmed or reserved again meanwhile
            if not await self._store.reservations.release_unclaimed(a.pod_uid, a.node, fence=self._fence):
                return False
            await self._store.quota.refund(a.namespace, a.pod_uid, self._fence)
        self._metrics.reservations_expired.inc()
        logger.info(
            "reservation expired",
            extra={
                "pod": f"{a.namespace}/{a.name}",
                "pod_uid": a.pod_uid,
                "node": a.node,
                "pod_exists": pod is not None,
                "pod_deleted": deleted,
            },
        )
        return True
