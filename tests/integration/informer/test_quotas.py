"""Namespace quotas (§8): raw limits from ResourceQuotas (explicit 0 blocks, minimum of several), usage summed over
every device of every pod (HAMi #1393) with init containers collapsed (HAMi #3052)."""

from __future__ import annotations

from tests.integration.informer.conftest import Harness, metric
from tests.unit.informer.builders import pod, quota
from tests.waiting import eventually
from vgpu_scheduler.shared.domain.quota import QuotaLimits
from vgpu_scheduler.shared.store import QuotaCharged, QuotaExceeded, Store

MEM = "limits.nvidia.com/gpumem"
CORES = "limits.nvidia.com/gpucores"


async def limits_are(store: Store, ns: str, want: QuotaLimits) -> bool:
    return (await store.quota.get(ns)).limits == want


async def test_limits_follow_resource_quotas(harness: Harness) -> None:
    em, store = harness.emulator, harness.store
    em.put(quota("gpu", "team-a", {MEM: "20k", CORES: "300", "cpu": "8"}))
    async with harness.run() as svc:
        # present before start: loaded by the first pass, raw (no memoryFactor)
        assert (await store.quota.get("team-a")).limits == QuotaLimits(20000, 300)
        assert metric(svc, "vgpu_informer_quota_namespaces") == 1

        # a second, tighter quota in the same namespace: the minimum per key wins
        em.put(quota("tight", "team-a", {MEM: "8000"}))
        await eventually(lambda: limits_are(store, "team-a", QuotaLimits(8000, 300)))

        # explicit 0 blocks
        em.put(quota("zero", "team-b", {CORES: "0"}))
        await eventually(lambda: limits_are(store, "team-b", QuotaLimits(None, 0)))
        assert isinstance(await store.quota.charge("team-b", "x", 100, 1), QuotaExceeded)
        assert isinstance(await store.quota.charge("team-b", "y", 100, 0), QuotaCharged)
        await store.quota.refund("team-b", "y")  # (a charge no pod backs would fail the final audit)
        await eventually(lambda: metric(svc, "vgpu_informer_quota_namespaces") == 2)

        # updates and deletion
        em.patch("resourcequotas", "team-a", "tight", {"spec": {"hard": {MEM: "10000"}}})
        await eventually(lambda: limits_are(store, "team-a", QuotaLimits(10000, 300)))
        em.delete("resourcequotas", "team-a", "tight")
        em.delete("resourcequotas", "team-a", "gpu")
        await eventually(lambda: limits_are(store, "team-a", QuotaLimits()))
        await eventually(lambda: metric(svc, "vgpu_informer_quota_namespaces") == 1)


async def test_unreadable_limit_is_reported_and_the_rest_honoured(harness: Harness) -> None:
    em, store = harness.emulator, harness.store
    async with harness.run() as svc:
        em.put(quota("odd", "ns", {MEM: "1.5", CORES: "200"}))
        await eventually(lambda: limits_are(store, "ns", QuotaLimits(None, 200)))
        assert metric(svc, "vgpu_informer_malformed_total", kind="quota_limit") == 1
        await em.wait_for(lambda: any(e["reason"] == "UnreadableQuotaLimit" for e in em.list("events")))
        event = next(e for e in em.list("events") if e["reason"] == "UnreadableQuotaLimit")
        assert event["involvedObject"]["kind"] == "ResourceQuota" and MEM in event["message"]


async def test_quota_usage_multi_gpu_and_init_containers(harness: Harness) -> None:
    em, store = harness.emulator, harness.store
    em.put(quota("gpu", "ml", {MEM: "100000"}))
    async with harness.run():
        em.put(pod("train", "ml", node="n1", app=[[("GPU-0", 8000, 50), ("GPU-1", 8000, 50)]]))
        em.put(pod("prep", "ml", node="n1", init=[[], [("GPU-2", 4000, 0)]], app=[[("GPU-2", 1000, 10)], []]))
        await harness.assert_audit()
        state = await store.quota.get("ml")
        assert (state.used_mem_mib, state.used_cores_pct) == (16000 + 4000, 100 + 10)
        assert state.limits == QuotaLimits(mem_mib=100000)

        em.patch("pods", "ml", "train", {"status": {"phase": "Succeeded"}})
        await harness.assert_audit()
        assert (await store.quota.get("ml")).used_mem_mib == 4000
