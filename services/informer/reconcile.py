"""Reconcile: recompute everything the informer owns in Redis from fresh API lists, and repair the difference.

One pass (under the term's mutex, so pod and quota events wait):

1. Snapshot Redis (allocations, quota charges) *before* listing the API, so a record that a concurrent writer
   adds after the snapshot can never be mistaken for an extra one; read the store status and epoch.
2. List pods and ResourceQuotas; compute what every pod holds (difference 10, §5.4) and every
   namespace's limits (§8).
3. Record missing or different allocations; release confirmed records of pods that hold nothing. Unconfirmed
   reservations are in flight (the expiry sweep judges them); records of pods with unreadable annotations
   are left as they are (fail-safe). So are stored records that cannot be decoded (never lose data): a newer
   replica's envelope version is left to that replica, even for a pod the API shows (recording it would
   downgrade it); a corrupt record of a pod the API shows is rewritten from the API (a repair). Each is logged
   once and counted in ``vgpu_informer_undecodable_records{reason}``; their quota charges are kept too.
4. Recount every node's usage counters from its per-pod charges.
5. Record missing or different quota charges; refund charges that belong to no pod and no reservation in two
   consecutive passes (an extender charges quota just before it reserves: one pass may see the charge first).
6. Set differing quota limits.
7. Mark the store synced (allocations, quotas) in the epoch read at step 1; the extender is ready only then.

A pass over a store that was not synced (new, or flushed) is a *rebuild*: its writes are not drift and are not
counted as repairs. Any other difference is drift, counted in ``vgpu_informer_reconcile_repairs_total{kind}``
and logged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from vgpu_scheduler.services.informer.accounting import UNREADABLE_ALLOCATION, Accountant
from vgpu_scheduler.services.informer.metrics import InformerMetrics, Malformed, RepairKind, UndecodableReason
from vgpu_scheduler.services.informer.pods import PodStatus, pod_facts
from vgpu_scheduler.services.informer.quotas import limited_namespaces, namespace_limits
from vgpu_scheduler.services.informer.reporting import ProblemReporter
from vgpu_scheduler.shared.domain.allocation import Allocation
from vgpu_scheduler.shared.domain.model import NvidiaConfig
from vgpu_scheduler.shared.domain.quota import QuotaLimits
from vgpu_scheduler.shared.errors import DecodeError, PermanentError
from vgpu_scheduler.shared.store import (
    AllocationRecord,
    Fence,
    PodQuotaCharge,
    ReservationState,
    Store,
    SyncMarker,
    UndecodableRecord,
)
from vgpu_scheduler.shared.vendors.catalog import NVIDIA_ONLY_VENDORS
from vgpu_scheduler.shared.vendors.registry import Vendors

logger = logging.getLogger(__name__)

Lister = Callable[[], Awaitable[list[dict[str, Any]]]]


@dataclass
class ReconcileReport:
    """What one pass did. ``synced`` is False when the store was flushed during the pass (run another)."""

    rebuild: bool
    epoch: str
    synced: bool = False
    repairs: dict[RepairKind, int] = field(default_factory=dict)
    pods: int = 0
    duration_s: float = 0.0
    undecodable: list[UndecodableRecord] = field(default_factory=list)  # left as they are

    def add(self, kind: RepairKind, n: int = 1) -> None:
        if n:
            self.repairs[kind] = self.repairs.get(kind, 0) + n


class Reconciler:
    """Runs reconcile passes for one leadership term."""

    def __init__(
        self,
        *,
        store: Store,
        fence: Fence,
        cfg: NvidiaConfig,
        accountant: Accountant,
        reporter: ProblemReporter,
        metrics: InformerMetrics,
        list_pods: Lister,
        list_quotas: Lister,
        vendors: Vendors = NVIDIA_ONLY_VENDORS,
    ) -> None:
        self._store = store
        self._vendors = vendors
        self._fence = fence
        self._cfg = cfg
        self._accountant = accountant
        self._reporter = reporter
        self._metrics = metrics
        self._list_pods = list_pods
        self._list_quotas = list_quotas
        self._orphans: set[tuple[str, str]] = set()  # (namespace, uid) quota charges orphaned in the last pass
        self._undecodable_logged: set[tuple[str, str, str]] = set()  # (uid, node, error) logged this term

    @property
    def suspected_orphans(self) -> bool:
        """Whether the last pass found quota charges of no pod (refunded by the next pass if still orphaned)."""
        return bool(self._orphans)

    async def run_pass(self) -> ReconcileReport:
        started = time.perf_counter()
        status = await self._store.meta.status()
        epoch = await self._store.meta.ensure_epoch()
        report = ReconcileReport(
            rebuild=not status.is_synced(SyncMarker.ALLOCATIONS) or status.epoch != epoch, epoch=epoch
        )

        # 1. Redis first, then the API
        undecodable: list[UndecodableRecord] = []
        stored = await self._store.reservations.list_all(undecodable)
        quota_namespaces = await self._store.quota.namespaces()
        charges = {ns: await self._store.quota.pod_charges(ns) for ns in quota_namespaces}
        pods = await self._list_pods()
        quotas = await self._list_quotas()

        # 2. what the API says
        desired, unreadable = await self._desired(pods)
        report.pods = len(desired)
        records: dict[str, AllocationRecord] = {r.allocation.pod_uid: r for rs in stored.values() for r in rs}
        bad = {u.pod_uid: u for u in undecodable}

        # 3. allocations (an undecodable record is never released: it is not in ``records``)
        for uid, alloc in desired.items():
            rec = records.get(uid)
            if rec is not None and rec.allocation == alloc and rec.state is ReservationState.CONFIRMED:
                continue
            u = bad.get(uid)
            if u is not None and u.newer_version:
                continue  # a newer replica's record: recording ours would downgrade it
            if u is not None:  # a corrupt record: rewrite it from the API
                try:
                    await self._store.reservations.record(alloc, self._fence)
                except PermanentError as e:  # its charges are unreadable to the scripts too: leave it
                    logger.warning(
                        "corrupt allocation record could not be rewritten",
                        extra={"pod_uid": uid, "node": u.node, "error": str(e)},
                    )
                    continue
                del bad[uid]
                self._repair(report, RepairKind.CHANGED_ALLOCATION, alloc)
                continue
            result = await self._store.reservations.record(alloc, self._fence)
            if rec is None and (result.usage_changed or result.record_changed):
                self._repair(report, RepairKind.MISSING_ALLOCATION, alloc)
            elif rec is not None and rec.state is ReservationState.CONFIRMED and rec.allocation != alloc:
                self._repair(report, RepairKind.CHANGED_ALLOCATION, alloc)
        reserved: set[str] = set()
        for uid, rec in records.items():
            if uid in desired or uid in unreadable:
                continue
            if rec.state.unconfirmed:  # reserved or mid-bind: expired after the grace, never here
                reserved.add(uid)
                continue
            released = await self._store.reservations.release(uid, node=rec.allocation.node, fence=self._fence)
            if released is not None:
                self._repair(report, RepairKind.EXTRA_ALLOCATION, released)

        report.undecodable = list(bad.values())
        self._report_undecodable(report.undecodable, desired)

        # 4. usage counters (an undecodable record's charges count: they are still held)
        nodes = set(stored) | {u.node for u in undecodable} | {a.node for a in desired.values()}
        nodes |= set(await self._store.inventory.list_nodes())
        bad_nodes = {u.node for u in bad.values()}
        for node in sorted(nodes):
            try:
                audit = await self._store.usage.recount(node, self._fence)
            except PermanentError as e:
                if node not in bad_nodes:
                    raise
                # a record whose charges the script cannot parse: the node keeps its counters until it is fixed
                logger.warning(
                    "usage recount failed on a node with an undecodable record", extra={"node": node, "error": str(e)}
                )
                continue
            if audit.drift:
                report.add(RepairKind.USAGE_COUNTERS, audit.drift)
                logger.warning("usage counters repaired", extra={"node": node, "fields": audit.drift})

        # 5. quota usage
        await self._reconcile_quota_usage(report, desired, charges, reserved | unreadable | set(bad))

        # 6. quota limits
        await self._reconcile_quota_limits(report, quotas, quota_namespaces)

        # 7. synced markers
        ok_alloc = await self._store.meta.mark_synced(SyncMarker.ALLOCATIONS, epoch, self._fence)
        ok_quota = await self._store.meta.mark_synced(SyncMarker.QUOTAS, epoch, self._fence)
        report.synced = ok_alloc and ok_quota
        self._accountant.replace_cache(desired)

        report.duration_s = time.perf_counter() - started
        mode = "rebuild" if report.rebuild else "reconcile"
        self._metrics.reconciles.labels(mode).inc()
        self._metrics.reconcile_duration.observe(report.duration_s)
        if not report.rebuild:
            for kind, n in report.repairs.items():
                self._metrics.reconcile_repairs.labels(kind.value).inc(n)
        logger.info(
            "reconcile pass done",
            extra={
                "mode": mode,
                "epoch": epoch,
                "pods": report.pods,
                "repairs": {k.value: n for k, n in report.repairs.items()},
                "undecodable": len(report.undecodable),
                "synced": report.synced,
                "duration_s": round(report.duration_s, 3),
            },
        )
        return report

    def _repair(self, report: ReconcileReport, kind: RepairKind, alloc: Allocation) -> None:
        report.add(kind)
        if not report.rebuild:
            logger.warning(
                "allocation drift repaired",
                extra={
                    "kind": kind.value,
                    "pod": f"{alloc.namespace}/{alloc.name}",
                    "pod_uid": alloc.pod_uid,
                    "node": alloc.node,
                },
            )

    def _report_undecodable(self, undecodable: list[UndecodableRecord], desired: Mapping[str, Allocation]) -> None:
        """Set the gauge; log each undecodable record once per term (again if it recurs after being fixed)."""
        counts = dict.fromkeys(UndecodableReason, 0)
        seen: set[tuple[str, str, str]] = set()
        for u in undecodable:
            reason = UndecodableReason.NEWER_VERSION if u.newer_version else UndecodableReason.CORRUPT
            counts[reason] += 1
            key = (u.pod_uid, u.node, str(u.error))
            seen.add(key)
            if key in self._undecodable_logged:
                continue
            pod = desired.get(u.pod_uid)
            logger.warning(
                "allocation record undecodable: left as it is",
                extra={
                    "pod_uid": u.pod_uid,
                    "pod": None if pod is None else f"{pod.namespace}/{pod.name}",
                    "node": u.node,
                    "reason": reason.value,
                    "error": str(u.error),
                },
            )
        self._undecodable_logged = seen
        for reason, n in counts.items():
            self._metrics.undecodable_records.labels(reason.value).set(n)

    async def _desired(self, pods: list[dict[str, Any]]) -> tuple[dict[str, Allocation], set[str]]:
        """What every pod holds (by uid), and the uids whose annotations are unreadable."""
        holding = [p for p in pods if pod_facts(p).status is PodStatus.HOLDS]
        nodes = sorted({pod_facts(p).node or "" for p in holding} - {""})
        valid_nodes = []
        for n in nodes:
            try:
                self._store.keys.node_tag(n)
                valid_nodes.append(n)
            except DecodeError:
                pass
        try:
            inventories = await self._store.inventory.get_many(valid_nodes)
        except DecodeError:
            inventories = {}
        totals = {n: {d.id: d.devcore for d in inv.devices} for n, inv in inventories.items()}
        desired: dict[str, Allocation] = {}
        unreadable: set[str] = set()
        for pod in holding:
            facts = pod_facts(pod)
            try:
                alloc = self._accountant.allocation_of(pod, totals.get(facts.node or ""))
            except DecodeError as e:
                unreadable.add(facts.uid)
                await self._reporter.report(Malformed.POD_ALLOCATION, "Pod", pod, UNREADABLE_ALLOCATION, str(e))
                continue
            if alloc is not None:
                desired[alloc.pod_uid] = alloc
        return desired, unreadable

    async def _reconcile_quota_usage(
        self,
        report: ReconcileReport,
        desired: Mapping[str, Allocation],
        current: Mapping[str, Mapping[str, PodQuotaCharge]],
        keep: set[str],
    ) -> None:
        want: dict[str, dict[str, PodQuotaCharge]] = {}
        for alloc in desired.values():
            want.setdefault(alloc.namespace, {})[alloc.pod_uid] = PodQuotaCharge(
                alloc.quota_mem_mib, alloc.quota_cores_pct, alloc.quota_others_of(self._vendors.names)
            )
        orphans: set[tuple[str, str]] = set()
        for ns in sorted(set(want) | set(current)):
            have = current.get(ns, {})
            for uid, charge in want.get(ns, {}).items():
                if have.get(uid) != charge:
                    await self._store.quota.record(
                        ns, uid, charge.mem_mib, charge.cores_pct, self._fence, others=charge.others
                    )
                    self._quota_repair(report, ns, uid, "missing or different")
            for uid in have:
                if uid in want.get(ns, {}) or uid in keep:
                    continue
                if (ns, uid) not in self._orphans:
                    orphans.add((ns, uid))
                    continue
                if await self._store.quota.refund(ns, uid, self._fence) is not None:
                    self._quota_repair(report, ns, uid, "orphaned")
        self._orphans = orphans

    def _quota_repair(self, report: ReconcileReport, ns: str, uid: str, what: str) -> None:
        report.add(RepairKind.QUOTA_USAGE)
        if not report.rebuild:
            logger.warning("quota charge repaired", extra={"namespace": ns, "pod_uid": uid, "problem": what})

    async def _reconcile_quota_limits(
        self, report: ReconcileReport, quotas: list[dict[str, Any]], known: list[str]
    ) -> None:
        want = namespace_limits(quotas, self._cfg, self._vendors)
        for ns in sorted(set(want) | set(known)):
            limits = want.get(ns, QuotaLimits())
            state = await self._store.quota.get(ns)
            if state.limits != limits:
                await self._store.quota.set_limits(ns, limits, self._fence)
                report.add(RepairKind.QUOTA_LIMITS)
                if not report.rebuild:
                    logger.warning(
                        "quota limits repaired",
                        extra={"namespace": ns, "had": str(state.limits), "want": str(limits)},
                    )
        self._metrics.quota_namespaces.set(limited_namespaces(want))
