"""Gangs that bind whole or leave nothing behind (docs/gangs.md).

kube-scheduler (v1.36 with ``GangScheduling``, v1.37 with ``GenericWorkload``) schedules a PodGroup in one pass: it
filters its members in turn, our ``/filter`` reserving devices for each, and binds the members only when
``minCount`` of them found a node (v1.37's workload-aware preemption re-runs such a pass the same way). When
it does not, it forgets its own assumptions (its Unreserve), but an extender is not told: the members'
reservations would stay, holding devices the group cannot use, while the group retries.

So when a member of a native PodGroup (or of a coscheduling group named by the label
``scheduling.x-k8s.io/pod-group``, its size from scheduler-plugins' PodGroup ``spec.minMember``) fits on no node,
:class:`GangKeeper` works out off the request path whether the group can still reach ``minCount`` this time:
every member that fitted on no node in the last :data:`FAILING_WINDOW_S` (and has not fitted since) counts as
failing, and ``live members - failing < minCount`` means it cannot (with ``minCount`` below the group's size, a
pass survives up to ``size - minCount`` such members). If it cannot, it
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

from vgpu_scheduler.services.extender.snapshot import SnapshotCache
from vgpu_scheduler.shared.codec.annotations import POD_GROUP_LABEL
from vgpu_scheduler.shared.codec.gang import cannot_be_whole, coscheduling_min_member, gang_min_count, live_members
from vgpu_scheduler.shared.errors import VgpuError
from vgpu_scheduler.shared.k8s.objects import NOT_ENDED, KubeObject, pod_ref
from vgpu_scheduler.shared.protocol.events import EventType
from vgpu_scheduler.shared.runtime import cancel_until_done
from vgpu_scheduler.shared.store import Owned

if TYPE_CHECKING:
    from vgpu_scheduler.services.extender.deps import ExtenderDeps

logger = logging.getLogger(__name__)

FAILED_TTL_S = 5.0
"""How long a group that cannot be placed whole is refused without reserving (then a real pass tries again)."""
FAILING_WINDOW_S = 5.0
"""A member's failure to fit counts towards its group's pass for this long (a pass filters its members within
moments; the next comes after kube-scheduler's backoff), unless the member fits meanwhile."""
COSCHEDULING_PREFIX = "coscheduling~"
"""Store keys of a coscheduling group (``~`` is in no Kubernetes name, so no native group shares them)."""


class GangKeeper:
    """Release what a PodGroup that cannot be placed whole holds (module docstring)."""

    def __init__(self, deps: ExtenderDeps, cache: SnapshotCache) -> None:
        self._store = deps.store
        self._api = deps.api
        self._cache = cache
        self._running: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._queued: dict[tuple[str, str], dict[str, str]] = {}
        """Per group: the members that fitted nowhere and are not noted yet, with the reason."""
        self._tasks: set[asyncio.Task[None]] = set()
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
        await cancel_until_done([*self._running.values(), *self._tasks])

    async def idle(self) -> None:
        """Wait until no group check is running here (the simulator waits for them, as for preemptions)."""
        while self._running or self._tasks:
            await asyncio.gather(*self._running.values(), *self._tasks, return_exceptions=True)

    async def blocked(self, namespace: str, group: str, *, label: bool = False) -> str | None:
        """Why ``group``'s members are refused now (None: plan them as usual). ``label``: a coscheduling group."""
        why = await self._store.reservations.gang_failed(namespace, _gid(group, label))
        if why is not None:
            self.refused.inc()
        return why

    def fitted(self, namespace: str, group: str, member: str, *, label: bool = False) -> None:
        """Member ``member`` of ``group`` found a node: it no longer counts among the group's failures. Never
        waits, never raises."""
        task = asyncio.get_running_loop().create_task(self._fitted(namespace, _gid(group, label), member))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _fitted(self, namespace: str, gid: str, member: str) -> None:
        try:
            await self._store.reservations.clear_gang_failure(namespace, gid, member)
        except VgpuError as e:
            logger.info("gang failure not cleared", extra={"pod_group": f"{namespace}/{gid}", "error": str(e)})

    def failed(self, namespace: str, group: str, member: str, reason: str, *, label: bool = False) -> None:
        """Member ``member`` of ``group`` fits on no node: check the group off the request path (one check per
        group at a time; failures arriving meanwhile are taken by it). Never waits, never raises."""
        key = (namespace, _gid(group, label))
        self._queued.setdefault(key, {})[member] = reason
        if key in self._running:
            return
        task = asyncio.get_running_loop().create_task(self._checks(namespace, group, label), name=f"gang:{group}")
        self._running[key] = task
        task.add_done_callback(lambda _t: self._running.pop(key, None))

    async def _checks(self, namespace: str, group: str, label: bool) -> None:
        key = (namespace, _gid(group, label))
        while self._queued.get(key):
            queued = self._queued.pop(key)
            await self._check(namespace, group, queued, label=label)

    async def _min_count(self, namespace: str, group: str, label: bool) -> int | None:
        if label:
            cosched = await self._api.get_coscheduling_pod_group(namespace, group)
            return coscheduling_min_member(cosched) if cosched is not None else None
        podgroup = await self._api.get_pod_group(namespace, group)
        return gang_min_count(podgroup) if podgroup is not None else None

    async def _members(self, namespace: str, group: str, label: bool) -> list[KubeObject]:
        """The namespace's pods not ended that may belong to the group, as summaries, a page at a time (a
        coscheduling group's by its label; a native group's membership is in the pod's spec, which no selector
        reaches, so every pod of the namespace)."""
        return await self._api.list_pod_summaries(
            namespace=namespace,
            label_selector=f"{POD_GROUP_LABEL}={group}" if label else None,
            field_selector=NOT_ENDED,
        )

    async def _check(self, namespace: str, group: str, queued: Mapping[str, str], *, label: bool) -> None:
        gid = _gid(group, label)
        try:
            min_count = await self._min_count(namespace, group, label)
            if min_count is None:
                self.checks.labels("not_a_gang").inc()
                return  # not a gang (basic policy) or no PodGroup: members are scheduled one by one
            members = live_members(await self._members(namespace, group, label), group, label=label)
            names = {str((p.get("metadata") or {}).get("name") or "") for p in members}
            failing: set[str] = set()
            for name in queued:
                failing = await self._store.reservations.note_gang_failure(namespace, gid, name, FAILING_WINDOW_S)
            failing &= names
            if not cannot_be_whole(len(members), min_count, len(failing)):
                self.checks.labels("can_be_whole").inc()
                return
            self.checks.labels("cannot_be_whole").inc()
            member, reason = next(iter(queued.items()))
            why = (
                f"pod group {group} cannot be placed whole: member {member} fits on no node ({reason}); "
                f"{len(members)} live member(s), {len(failing)} fitting nowhere, minCount {min_count}"
            )
            await self._store.reservations.mark_gang_failed(namespace, gid, why, FAILED_TTL_S)
            released = await self._release(members)
            logger.info(
                "gang cannot be placed whole: its reservations released",
                extra={
                    "pod_group": f"{namespace}/{group}",
                    "member": member,
                    "failing": sorted(failing),
                    "released": released,
                },
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


def _gid(group: str, label: bool) -> str:
    """The group's name in the store's keys (a coscheduling group's kept apart from a native one's)."""
    return COSCHEDULING_PREFIX + group if label else group
