"""Reconcile: drift injected behind the informer's back is repaired and counted; a flushed Redis is rebuilt at once
and the store marked synced again (the extender's readiness) without any restart."""

from __future__ import annotations

import dataclasses

import redis as sync_redis

from tests.integration.informer.conftest import TUNING, Harness, fake_allocation, metric, settings
from tests.unit.informer.builders import pod, quota
from tests.waiting import eventually
from vgpu_scheduler.services.informer.metrics import RepairKind
from vgpu_scheduler.shared.domain.quota import QuotaLimits
from vgpu_scheduler.shared.store import ReservationState, Reserved, SyncMarker


async def test_injected_drift_is_repaired_and_counted(harness: Harness, redis_url: str) -> None:
    em, store = harness.emulator, harness.store
    await harness.put_inventory("n1", "n2")
    em.put(quota("gpu", "ns", {"limits.nvidia.com/gpumem": "50000"}))
    keep = em.put(pod("keep", "ns", node="n1", app=[[("GPU-n1-0", 2000, 20)]], phase="Running"))
    lost = em.put(pod("lost", "ns", node="n2", app=[[("GPU-n2-0", 3000, 30)]], phase="Running"))
    async with harness.run() as svc:
        await harness.assert_audit()
        report = await svc.term.reconcile()
        assert not report.rebuild and report.repairs == {}

        # drift: wrong counters, an extra confirmed allocation, a lost one, a wrong quota charge and limit
        raw = sync_redis.Redis.from_url(redis_url)
        try:
            raw.hset(store.keys.usage("n1"), "u|GPU-n1-0", "5,9999,99,0")
        finally:
            raw.close()
        await store.reservations.record(fake_allocation("ghost", "n1", "GPU-n1-1", 1000, 10))
        await store.reservations.release(lost["metadata"]["uid"])
        await store.quota.record("ns", keep["metadata"]["uid"], 1, 1)
        await store.quota.set_limits("ns", QuotaLimits(mem_mib=1))

        report = await svc.term.reconcile()
        assert report.repairs == {
            RepairKind.USAGE_COUNTERS: 1,
            RepairKind.EXTRA_ALLOCATION: 1,
            RepairKind.MISSING_ALLOCATION: 1,
            RepairKind.QUOTA_USAGE: 1,
            RepairKind.QUOTA_LIMITS: 1,
        }
        for kind in ("usage_counters", "extra_allocation", "missing_allocation", "quota_usage", "quota_limits"):
            assert metric(svc, "vgpu_informer_reconcile_repairs_total", kind=kind) == 1
        await harness.assert_audit()
        assert (await store.quota.get("ns")).limits == QuotaLimits(mem_mib=50000)

        # repaired: the next pass finds nothing
        assert (await svc.term.reconcile()).repairs == {}


async def test_changed_allocation_is_rewritten(harness: Harness) -> None:
    em, store = harness.emulator, harness.store
    p = em.put(pod("p", node="n1", app=[[("GPU-a", 2000, 20)]]))
    async with harness.run() as svc:
        await harness.assert_audit()
        await store.reservations.record(fake_allocation(p["metadata"]["uid"], "n9", "GPU-z", 1, 1))
        report = await svc.term.reconcile()
        assert report.repairs.get(RepairKind.CHANGED_ALLOCATION) == 1
        await harness.assert_audit()
        assert await store.usage.node_usage("n9") == {}


async def test_orphaned_quota_charge_is_refunded_on_the_second_pass(harness: Harness) -> None:
    store = harness.store
    async with harness.run() as svc:
        await store.quota.record("ns", "nobody", 5000, 50)
        first = await svc.term.reconcile()
        assert RepairKind.QUOTA_USAGE not in first.repairs  # may be an extender's charge just before its reserve
        assert (await store.quota.get("ns")).used_mem_mib == 5000
        second = await svc.term.reconcile()
        assert second.repairs == {RepairKind.QUOTA_USAGE: 1}
        assert (await store.quota.get("ns")).used_mem_mib == 0


async def test_in_flight_reservations_are_left_to_the_expiry(harness: Harness) -> None:
    em, store = harness.emulator, harness.store
    await harness.put_inventory("n1")
    async with harness.run(audit=False) as svc:  # the reservation is not (yet) in any pod's annotations
        p = em.put(pod("pending", "ns"))
        alloc = fake_allocation(p["metadata"]["uid"], "n1", "GPU-n1-0", 1000, 10, ns="ns")
        await store.quota.charge("ns", alloc.pod_uid, alloc.quota_mem_mib, alloc.quota_cores_pct)
        assert isinstance(await store.reservations.reserve(alloc), Reserved)
        for _ in range(2):
            report = await svc.term.reconcile()
            assert report.repairs == {}
        rec = await store.reservations.get(alloc.pod_uid)
        assert rec is not None and rec.state is ReservationState.RESERVED
        assert (await store.quota.get("ns")).used_mem_mib == 1000


async def test_flushed_redis_is_rebuilt_without_restart(harness: Harness, redis_url: str) -> None:
    em, store = harness.emulator, harness.store
    em.put(quota("gpu", "ns", {"limits.nvidia.com/gpucores": "400"}))
    em.put(pod("a", "ns", node="n1", app=[[("GPU-1", 1000, 10)]], phase="Running"))
    em.put(pod("b", "ns", node="n2", init=[[("GPU-2", 5000, 0)]], app=[[("GPU-2", 100, 100)]]))
    async with harness.run() as svc:
        await harness.assert_audit()
        before = svc.synced_epoch
        raw = sync_redis.Redis.from_url(redis_url)
        try:
            raw.flushall()
        finally:
            raw.close()
        assert await harness.store.usage.node_usage("n1") == {}

        await eventually(lambda: svc.synced.is_set() and svc.synced_epoch != before, what="rebuilt")
        status = await store.meta.status()
        assert status.is_synced(SyncMarker.ALLOCATIONS) and status.is_synced(SyncMarker.QUOTAS)
        assert status.epoch == svc.synced_epoch
        await harness.assert_audit()
        assert (await store.quota.get("ns")).limits == QuotaLimits(None, 400)
        assert metric(svc, "vgpu_informer_store_flushes_detected_total") == 1
        assert metric(svc, "vgpu_informer_reconciles_total", mode="rebuild") >= 2
        # a rebuild is not drift
        assert metric(svc, "vgpu_informer_reconcile_repairs_total", kind="missing_allocation") == 0

        # and the informer keeps working afterwards
        em.put(pod("c", "ns", node="n1", app=[[("GPU-1", 500, 5)]]))
        await harness.assert_audit()


async def test_periodic_reconcile(harness: Harness) -> None:
    async with harness.run(settings(reconcile_s=0.05)) as svc:
        await eventually(lambda: metric(svc, "vgpu_informer_reconciles_total", mode="reconcile") >= 2)


async def test_a_pass_that_suspects_an_orphaned_charge_is_followed_soon_by_the_one_that_refunds_it(
    harness: Harness,
) -> None:
    """A quota charge of no pod (an extender that charged, then could not reserve nor refund: cut off from Redis)
    is refunded by the second pass that finds it; that pass comes ``orphan_recheck_s`` after the first, not a whole
    ``--reconcile-interval`` later (the chaos run: pods of a namespace at its quota waited nine minutes)."""
    store = harness.store
    tuning = dataclasses.replace(TUNING, orphan_recheck_s=0.05)
    async with harness.run(settings(reconcile_s=3600), tuning=tuning) as svc:
        await store.quota.record("ns", "nobody", 5000, 50)
        svc.term.reconcile_trigger.set()  # the periodic pass, now

        async def refunded() -> bool:
            return (await store.quota.get("ns")).used_mem_mib == 0

        await eventually(refunded, 10, what="the orphaned charge refunded")
