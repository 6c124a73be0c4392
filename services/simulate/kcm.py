"""kube-controller-manager as ``simulate``'s driver plays it: the workload controllers that recreate a deleted pod
they own (:mod:`.controllers`), and the disruption controller that keeps each PodDisruptionBudget's status true
(:mod:`.disruption`), both over the API server's HTTP.

:class:`ControllerManager` decides and writes; *when* (a pod marked for deletion, a pod gone, a pod settled) is the
driver's (:mod:`.driver`). Every pod deleted that a controller owns is recorded as a :class:`Recreation`: the
replacement's name, or why there is none.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vgpu_scheduler.services.simulate.controllers import ControllerSpec, Owner, Replace, owner_of, replacement
from vgpu_scheduler.services.simulate.disruption import budget_status
from vgpu_scheduler.services.simulate.kubehttp import DriverError, KubeHttp
from vgpu_scheduler.services.simulate.timing import SchedulerTiming
from vgpu_scheduler.shared.k8s.nodefit import pod_key

KubeObject = dict[str, Any]

PDB_API, PDBS = "policy/v1", "poddisruptionbudgets"
_SYNC_ATTEMPTS = 10
DEFAULT_CONTROLLER_DELAY_S = SchedulerTiming().controller_delay_s
"""From a pod's deletion (or, for a StatefulSet, its end) to its replacement's creation: the controller's watch,
work queue and create call (``--controller-delay``)."""


@dataclass(frozen=True, slots=True)
class Recreation:
    """A deleted pod a controller owns: its replacement (``namespace/name``), or ``skipped`` saying why none."""

    pod: str
    owner: str
    at_s: float
    replacement: str | None
    skipped: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "pod": self.pod,
            "owner": self.owner,
            "at_s": self.at_s,
            "replacement": self.replacement,
            "skipped": self.skipped,
        }


class ControllerManager:
    """The workload controllers and the disruption controller of one run (module docstring)."""

    def __init__(
        self,
        kube: KubeHttp,
        *,
        controllers: Sequence[ControllerSpec] = (),
        budgets: Sequence[Mapping[str, Any]] = (),
        delay_s: float = DEFAULT_CONTROLLER_DELAY_S,
    ) -> None:
        self.kube = kube
        self.delay_s = delay_s
        self.budgets = [dict(b) for b in budgets]
        """The workload's PodDisruptionBudgets, created by :meth:`start`."""
        self.backoff_limit = {c.owner.uid: c.backoff_limit for c in controllers if c.backoff_limit is not None}
        """A Job's ``spec.backoffLimit`` by its UID."""
        self.scale: collections.Counter[str] = collections.Counter()
        """Each controller's replicas by its UID: the pods that name it, in the workload and the cluster."""
        self.failed: collections.Counter[str] = collections.Counter()
        """Pods of each Job deleted so far (a Job counts an evicted pod as failed)."""
        self._serial: collections.Counter[str] = collections.Counter()
        self._syncing = asyncio.Lock()
        self.recreations: list[Recreation] = []

    def count(self, pods: Iterable[Mapping[str, Any]]) -> None:
        """Add ``pods`` (the workload's, the cluster's running ones) to their controllers' replicas."""
        for pod in pods:
            owner = owner_of(pod)
            if owner is not None:
                self.scale[owner.uid] += 1

    async def start(self) -> None:
        """Create the budgets and compute their status (before the first pod)."""
        for budget in self.budgets:
            await self.kube.create_namespaced(budget, PDBS)
        await self.sync_budgets()

    async def sync_budgets(self) -> None:
        """The disruption controller: recompute every budget's status from the pods and write what changed. One
        sync at a time; a write that lost a race (an eviction spent the budget meanwhile: 409) is recomputed."""
        if not self.budgets:
            return
        async with self._syncing:
            for _ in range(_SYNC_ATTEMPTS):
                try:
                    await self._sync_once()
                    return
                except DriverError as e:
                    if e.status != 409:
                        raise
            raise DriverError(f"the disruption controller lost {_SYNC_ATTEMPTS} races in a row for a budget's status")

    async def _sync_once(self) -> None:
        pods = await self.kube.list_pods()
        for pdb in await self.kube.list_group(PDB_API, PDBS):
            status = budget_status(pdb, pods, self.scale)
            if status != pdb.get("status"):
                pdb.setdefault("apiVersion", PDB_API)
                pdb.setdefault("kind", "PodDisruptionBudget")
                await self.kube.put_status({**pdb, "status": status}, PDBS)

    def replacement(self, deleted: Mapping[str, Any], template: Mapping[str, Any], at_s: float) -> KubeObject | None:
        """The pod ``deleted``'s controller creates in its place from ``template`` (the workload pod, or the deleted
        pod itself), recorded; None (recorded with why) for a Job past its ``backoffLimit``. ``deleted`` must be
        owned (:func:`owned`)."""
        owner = owner_of(deleted)
        assert owner is not None
        key = pod_key(deleted)
        limit = self.backoff_limit.get(owner.uid)
        if owner.kind == "Job":
            self.failed[owner.uid] += 1
            if limit is not None and self.failed[owner.uid] > limit:
                why = f"Job has reached the specified backoff limit ({limit})"
                self.recreations.append(Recreation(key, owner.label, round(at_s, 3), None, why))
                return None
        self._serial[owner.uid] += 1
        pod = replacement(template, owner, self._serial[owner.uid])
        self.recreations.append(Recreation(key, owner.label, round(at_s, 3), pod_key(pod)))
        return pod


def owned(pod: Mapping[str, Any], when: Replace) -> Owner | None:
    """The pod's controller when it replaces the pod at ``when`` (None: a bare pod, or another moment)."""
    owner = owner_of(pod)
    return owner if owner is not None and owner.replace is when else None
