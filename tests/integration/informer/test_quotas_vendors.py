"""Namespace quota of another vendor (Hygon DCU): the informer loads the DCU limit from the ResourceQuota (HAMi's
``limits.hygon.com/dcumem``) and counts running DCU pods; a DCU pod beyond it is refused (ResourceQuotaNotFit at
Fit, and by the atomic charge), an NVIDIA pod in the same namespace is not."""

from __future__ import annotations

from collections.abc import Awaitable

from tests.integration.informer.conftest import Harness, metric
from tests.unit.informer.builders import pod, quota
from tests.waiting import eventually
from vgpu_scheduler.shared.domain.model import (
    ContainerDevice,
    ContainerRequest,
    DeviceInfo,
    NodeInventory,
    NvidiaConfig,
    PodConstraints,
    PodRequest,
)
from vgpu_scheduler.shared.domain.plan import Decision, Failure, plan
from vgpu_scheduler.shared.domain.quota import QuotaState, QuotaUse, QuotaUses, VendorLimits, quota_limits
from vgpu_scheduler.shared.domain.scoring import Policies
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.store import QuotaCharged, QuotaDimension, QuotaExceeded, Store
from vgpu_scheduler.shared.vendors.catalog import enabled_vendors

VENDORS = enabled_vendors(NvidiaConfig(), {"hygon": {}})
DCU_MEM = "limits.hygon.com/dcumem"
DCU_CORES = "limits.hygon.com/dcucores"
NV_MEM = "limits.nvidia.com/gpumem"


def dcu_pod(name: str, ns: str, mem: int, cores: int, *, phase: str = "Running") -> dict[str, object]:
    hygon = VENDORS.get("DCU")
    assert hygon is not None
    allocated = hygon.encode_devices(((ContainerDevice("DCU-0", mem, cores, "DCU"),),))
    p = pod(name, ns, node="n1", app_count=1, phase=phase, extra_annotations={hygon.allocated_key: allocated})
    p["spec"]["containers"][0]["resources"]["limits"] = {"hygon.com/dcunum": "1", "hygon.com/dcumem": str(mem)}
    return p


def plan_on(state: QuotaState, request: ContainerRequest, device: DeviceInfo) -> Decision | Failure:
    snap = NodeSnapshot(NodeInventory("n1", device.vendor, (device,)), {})
    pod_request = PodRequest(containers=(request,), init_count=0)
    return plan(pod_request, PodConstraints(), [snap], policies=Policies(), quota=state, rules=VENDORS.rules)


async def dcu_used(store: Store, ns: str) -> QuotaUses:
    return (await store.quota.get(ns)).used_others


async def test_dcu_memory_limit_refuses_a_dcu_pod_and_not_an_nvidia_pod(harness: Harness) -> None:
    em, store = harness.emulator, harness.store
    em.put(quota("accel", "ml", {DCU_MEM: "8000", NV_MEM: "100000", "cpu": "8"}))
    async with harness.run(vendors=VENDORS) as svc:
        want = quota_limits(VendorLimits(100_000), {"DCU": VendorLimits(mem_mib=8000)})
        assert (await store.quota.get("ml")).limits == want
        assert metric(svc, "vgpu_informer_quota_namespaces") == 1

        # a running DCU pod holds 6000 MiB of the 8000
        em.put(dcu_pod("held", "ml", 6000, 40))
        await eventually(lambda: _equals(dcu_used(store, "ml"), (("DCU", QuotaUse(6000, 40)),)))
        state = await store.quota.get("ml")
        assert (state.used_mem_mib, state.used_cores_pct) == (0, 0)  # not NVIDIA's usage

        dcu = DeviceInfo("DCU-1", 0, 100, 65536, 100, "DCU", 0, "hami-core", True, vendor="DCU")
        beyond = plan_on(state, ContainerRequest(nums=1, mem_mib=2001, cores_pct=10, type="DCU"), dcu)
        assert isinstance(beyond, Failure)
        assert beyond.reasons["n1"] == "1/1 ResourceQuotaNotFit"
        within = plan_on(state, ContainerRequest(nums=1, mem_mib=2000, cores_pct=10, type="DCU"), dcu)
        assert isinstance(within, Decision)
        # the reserve-time charge is refused the same way, atomically
        assert await store.quota.charge("ml", "new", 0, 0, others=(("DCU", QuotaUse(2001, 10)),)) == QuotaExceeded(
            QuotaDimension.MEMORY, 8000, 6000, 2001, vendor="DCU"
        )

        # an NVIDIA pod of the same namespace is not affected by the DCU limit
        gpu = DeviceInfo("GPU-0", 0, 10, 65536, 100, "NVIDIA-A100", 0, "hami-core", True)
        nvidia = plan_on(state, ContainerRequest(nums=1, mem_mib=30_000, cores_pct=50), gpu)
        assert isinstance(nvidia, Decision)
        assert isinstance(await store.quota.charge("ml", "nv", 30_000, 50), QuotaCharged)
        await store.quota.refund("ml", "nv")  # (a charge no pod backs would fail the final audit)

        # the limit follows the ResourceQuota; the usage goes when the pod ends
        em.patch("resourcequotas", "ml", "accel", {"spec": {"hard": {DCU_MEM: "10000", DCU_CORES: "50"}}})
        await eventually(
            lambda: _limits(store, "ml", quota_limits(VendorLimits(100_000), {"DCU": VendorLimits(10_000, 50)}))
        )
        em.patch("pods", "ml", "held", {"status": {"phase": "Succeeded"}})
        await eventually(lambda: _equals(dcu_used(store, "ml"), ()))


async def test_reconcile_recounts_dcu_usage(harness: Harness) -> None:
    """A DCU pod present before the informer starts is counted by the first pass (the recount)."""
    em, store = harness.emulator, harness.store
    em.put(quota("accel", "ml", {DCU_MEM: "8000"}))
    em.put(dcu_pod("a", "ml", 3000, 20))
    em.put(dcu_pod("b", "ml", 1000, 30))
    await store.quota.charge("ml", "stale", 0, 0, others=(("DCU", QuotaUse(999, 9)),))
    async with harness.run(vendors=VENDORS):
        # the pods' charges are recorded; the unknown charge survives one pass (it may be a reservation's)
        state = await store.quota.get("ml")
        assert state.used_others == (("DCU", QuotaUse(4999, 59)),)
        charges = await store.quota.pod_charges("ml")
        assert sorted(dict(c.others)["DCU"].mem_mib for c in charges.values()) == [999, 1000, 3000]
        await store.quota.refund("ml", "stale")
        assert (await store.quota.get("ml")).used_others == (("DCU", QuotaUse(4000, 50)),)
        # (the shared audit recounts NVIDIA's devices only: end the DCU pods before it runs)
        em.patch("pods", "ml", "a", {"status": {"phase": "Succeeded"}})
        em.patch("pods", "ml", "b", {"status": {"phase": "Failed"}})
        await eventually(lambda: _equals(dcu_used(store, "ml"), ()))


async def _equals(got: Awaitable[QuotaUses], want: QuotaUses) -> bool:
    return await got == want


async def _limits(store: Store, ns: str, want: object) -> bool:
    return (await store.quota.get(ns)).limits == want
