"""Gangs that bind whole or leave nothing behind (docs/gangs.md).

kube-scheduler v1.36 schedules a PodGroup (``GangScheduling``) in one pass: it filters each member in turn, our
``/filter`` reserving devices for each, and binds the members only when ``minCount`` of them found a node. When
it does not, it forgets its own assumptions (its Unreserve), but an extender is not told: the members'
reservations would stay, holding devices the group cannot use, while the group retries.

So when a member of a native PodGroup fits on no node, :class:`GangKeeper` works out off the request path whether
the group can still reach ``minCount`` this time (``live members - 1 < minCount``: it cannot). If it cannot, it
remembers that for :data:`FAILED_TTL_S` (``/filter`` then refuses the group's members without reserving,
naming the member that fits nowhere) and releases every plain reservation of the group's members (with their
quota charges). A reservation a bind already claimed is never released here. The reservations of a group that
does reach ``minCount`` are not touched: kube-scheduler binds them right after the pass, and a re-filter that
keeps a member's node renews its reservation, so the informer's expiry cannot take it in between.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client import Counter

from vgpu_scheduler.services.extender.events import pod_ref
from vgpu_scheduler.services.extender.snapshot import SnapshotCache
from vgpu_scheduler.shared.codec.gang import cannot_be_whole, gang_min_count, live_members
from vgpu_scheduler.shared.errors import VgpuError
from vgpu_scheduler.shared.protocol.events import EventType
from vgpu_scheduler.shared.runtime import cancel_until_done
from vgpu_scheduler.shared.store import Owned

if TYPE_CHECKING:
    from vgpu_scheduler.services.extender.deps import ExtenderDeps

logger = logging.getLogger(__name__)

FAILED_TTL_S = 5.0
"""How long a group that cannot be placed whole is refused without reserving (then a real pass tries again)."""


class GangKeeper:
    """Release what a PodGroup that cannot be placed whole holds (module docstring)."""

    def __init__(self, deps: ExtenderDeps, cache: SnapshotCache) -> None:
        self._store = deps.store
        self._api = deps.api
        self._cache = cache
        self._running: dict[tuple[str, str], asyncio.Task[None]] = {}
        self.released = Counter(
            "vgpu_gang_reservations_released_total",
            "Reservations of PodGroup members released because the group could not be placed whole",
            registry=deps.registry,
        )
        self.checks = Counter(
            "vgpu_gang_checks_total",
            "PodGroups checked after a member fitted on no node, by verdict",
            ["verdict"],
            registry=deps.registry,
        )
        self.refused = Counter(
            "vgpu_gang_filters_refused_total",
            "Filters of PodGroup members refused without reserving while their group cannot be placed whole",
            registry=deps.registry,
        )

    async def aclose(self) -> None:
        """Cancel the group checks still running (the replica is stopping)."""
        await cancel_until_done(list(self._running.values()))

    async def blocked(self, namespace: str, group: str) -> str | None:
        """Why ``group``'s members are refused now (None: plan them as usual)."""
        why = await self._store.reservations.gang_failed(namespace, group)
        if why is not None:
            self.refused.inc()
        return why

    def failed(self, namespace: str, group: str, member: str, reason: str) -> None:
        """Member ``member`` of ``group`` fits on no node: check the group off the request path (one check per
        group at a time). Never waits, never raises."""
        key = (namespace, group)
        if key in self._running:
            return
        task = asyncio.get_running_loop().create_task(
            self._check(namespace, group, member, reason), name=f"gang:{group}"
        )
        self._running[key] = task
        task.add_done_callback(lambda _t: self._running.pop(key, None))

    async def _check(self, namespace: str, group: str, member: str, reason: str) -> None:
        try:
            podgroup = await self._api.get_pod_group(namespace, group)
            min_count = gang_min_count(podgroup) if podgroup is not None else None
            if min_count is None:
                self.checks.labels("not_a_gang").inc()
                return  # not a gang (basic policy) or no PodGroup: members are scheduled one by one
            members = live_members(await self._api.list_pods(namespace=namespace), group)
            if not cannot_be_whole(len(members), min_count):
                self.checks.labels("can_be_whole").inc()
                return
            self.checks.labels("cannot_be_whole").inc()
            why = (
                f"pod group {group} cannot be placed whole: member {member} fits on no node ({reason}); "
                f"{len(members)} live member(s), minCount {min_count}"
            )
            await self._store.reservations.mark_gang_failed(namespace, group, why, FAILED_TTL_S)
            released = await self._release(members)
            logger.info(
                "gang cannot be placed whole: its reservations released",
                extra={"pod_group": f"{namespace}/{group}", "member": member, "released": released},
            )
            await self._post(namespace, member, why, released)
        except VgpuError as e:
            logger.warning("gang check failed", extra={"pod_group": f"{namespace}/{group}", "error": str(e)})
        except Exception:
            logger.exception("gang check failed", extra={"pod_group": f"{namespace}/{group}"})

    async def _release(self, members: list[Mapping[str, Any]]) -> int:
        released = 0
        nodes: set[str] = set()
        for pod in members:
            meta = pod.get("metadata") or {}
            uid, namespace = str(meta.get("uid") or ""), str(meta.get("namespace") or "")
            if not uid or (pod.get("spec") or {}).get("nodeName"):
                continue  # bound: its devices are its own
            node = await self._store.reservations.node_of(uid)
            if node is None:
                continue
            done = await self._store.reservations.release_unowned(uid, node)
            if isinstance(done, Owned) or not done:
                continue  # a bind owns it: kube-scheduler decided this member, it is not ours to undo
            await self._store.quota.refund(namespace, uid)
            nodes.add(node)
            released += 1
        if nodes:
            await self._cache.refresh(nodes)
        self.released.inc(released)
        return released

    async def _post(self, namespace: str, member: str, why: str, released: int) -> None:
        try:
            await self._api.pod_event(
                pod_ref(namespace, member),
                reason="GangUnschedulable",
                message=f"{why}; {released} reservation(s) of its members released",
                event_type=EventType.WARNING,
            )
        except VgpuError as e:
            logger.info("gang event not recorded", extra={"error": str(e)})
