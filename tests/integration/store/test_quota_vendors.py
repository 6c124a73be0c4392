"""Namespace quota per vendor: other vendors' limits and charges beside NVIDIA's, in the same atomic scripts."""

from __future__ import annotations

import asyncio

import pytest

from vgpu_scheduler.shared.codec.envelope import encode_quota_limits
from vgpu_scheduler.shared.domain.quota import QuotaLimits, QuotaState, QuotaUse, VendorLimits, quota_limits
from vgpu_scheduler.shared.store import PodQuotaCharge, QuotaCharged, QuotaDimension, QuotaExceeded, Store

DCU_MEM = quota_limits(VendorLimits(), {"DCU": VendorLimits(mem_mib=8000)})
"""A DCU memory limit of 8000 MiB and nothing else."""


async def test_vendor_memory_limit_refuses_only_that_vendor(store: Store) -> None:
    await store.quota.set_limits("ns", DCU_MEM)
    dcu = (("DCU", QuotaUse(6000, 50)),)
    assert await store.quota.charge("ns", "p1", 0, 0, others=dcu) == QuotaCharged(True)
    assert await store.quota.charge("ns", "p2", 0, 0, others=(("DCU", QuotaUse(2001, 0)),)) == QuotaExceeded(
        QuotaDimension.MEMORY, 8000, 6000, 2001, vendor="DCU"
    )
    # NVIDIA and another vendor are not limited by DCU's limit
    assert await store.quota.charge("ns", "p3", 50_000, 300, others=(("MLU", QuotaUse(9000, 0)),)) == QuotaCharged(True)
    state = await store.quota.get("ns")
    assert state == QuotaState(DCU_MEM, 50_000, 300, (("DCU", QuotaUse(6000, 50)), ("MLU", QuotaUse(9000, 0))))
    assert state.for_vendor("DCU") == QuotaState(QuotaLimits(mem_mib=8000), 6000, 50)
    assert state.for_vendor("NVIDIA") == QuotaState(QuotaLimits(), 50_000, 300)


async def test_vendor_cores_limit_and_explicit_zero(store: Store) -> None:
    limits = quota_limits(VendorLimits(), {"MLU": VendorLimits(cores_pct=0), "AMD": VendorLimits(cores_pct=150)})
    await store.quota.set_limits("ns", limits)
    assert (await store.quota.get("ns")).limits == limits
    assert await store.quota.charge("ns", "p1", 0, 0, others=(("MLU", QuotaUse(256, 1)),)) == QuotaExceeded(
        QuotaDimension.CORES, 0, 0, 1, vendor="MLU"
    )
    assert await store.quota.charge("ns", "p1", 0, 0, others=(("AMD", QuotaUse(1, 100)),)) == QuotaCharged(True)
    assert await store.quota.charge("ns", "p2", 0, 0, others=(("AMD", QuotaUse(1, 51)),)) == QuotaExceeded(
        QuotaDimension.CORES, 150, 100, 51, vendor="AMD"
    )


async def test_charge_refund_and_replace_per_vendor(store: Store) -> None:
    await store.quota.set_limits("ns", DCU_MEM)
    both = (("DCU", QuotaUse(3000, 20)), ("MLU", QuotaUse(512, 0)))
    assert await store.quota.charge("ns", "p1", 1000, 10, others=both) == QuotaCharged(True)
    assert await store.quota.charge("ns", "p1", 1000, 10, others=both) == QuotaCharged(False)
    assert await store.quota.pod_charges("ns") == {"p1": PodQuotaCharge(1000, 10, both)}
    # the pod's own earlier charge does not count against its replacement
    assert await store.quota.charge("ns", "p1", 1000, 10, others=(("DCU", QuotaUse(8000, 20)),)) == QuotaCharged(True)
    assert (await store.quota.get("ns")).used_others == (("DCU", QuotaUse(8000, 20)),)
    assert await store.quota.refund("ns", "p1") == PodQuotaCharge(1000, 10, (("DCU", QuotaUse(8000, 20)),))
    assert await store.quota.get("ns") == QuotaState(DCU_MEM)
    assert await store.quota.refund("ns", "p1") is None


async def test_reset_recounts_every_vendor(store: Store) -> None:
    await store.quota.charge("ns", "gone", 5, 5, others=(("AMD", QuotaUse(7, 7)),))
    n = await store.quota.reset_usage(
        "ns",
        {
            "p1": PodQuotaCharge(100, 10, (("DCU", QuotaUse(1000, 30)),)),
            "p2": PodQuotaCharge(0, 0, (("DCU", QuotaUse(500, 0)), ("MLU", QuotaUse(256, 1)))),
        },
    )
    assert n == 3
    state = await store.quota.get("ns")
    assert state == QuotaState(QuotaLimits(), 100, 10, (("DCU", QuotaUse(1500, 30)), ("MLU", QuotaUse(256, 1))))


async def test_nvidia_only_layout_is_unchanged(store: Store) -> None:
    """NVIDIA-only limits and charges keep the exact fields and bytes of before (version-1 envelope, no 'lv'/'uv',
    a 'mem,cores' pod charge)."""
    await store.quota.set_limits("ns", QuotaLimits(mem_mib=4000, cores_pct=100))
    await store.quota.charge("ns", "p1", 3000, 50)
    k = store.keys
    fields = await store.client.hgetall(k.quota("ns"))
    assert fields == {
        b"env": encode_quota_limits(QuotaLimits(4000, 100)),
        b"lm": b"4000",
        b"lc": b"100",
        b"um": b"3000",
        b"uc": b"50",
    }
    assert encode_quota_limits(QuotaLimits(4000, 100))[:20] == b"\x83\xa1k\xacquota-limits\xa1v\x01\xa1"
    assert await store.client.hgetall(k.quota_pods("ns")) == {b"p1": b"3000,50"}


async def test_old_nvidia_record_reads_as_nvidia_only(store: Store) -> None:
    await store.client.hset(store.keys.quota_pods("ns"), "p1", "3000,50")
    await store.client.hset(store.keys.quota("ns"), mapping={"um": "3000", "uc": "50"})
    assert await store.quota.pod_charges("ns") == {"p1": PodQuotaCharge(3000, 50)}
    assert await store.quota.charge("ns", "p1", 3000, 50, others=(("DCU", QuotaUse(10, 0)),)) == QuotaCharged(True)
    assert await store.quota.get("ns") == QuotaState(QuotaLimits(), 3000, 50, (("DCU", QuotaUse(10, 0)),))


async def test_lifting_vendor_limits_removes_them(store: Store) -> None:
    await store.quota.set_limits("ns", DCU_MEM)
    await store.quota.set_limits("ns", QuotaLimits(mem_mib=1))
    assert b"lv" not in set(await store.client.hkeys(store.keys.quota("ns")))
    assert await store.quota.charge("ns", "p1", 0, 0, others=(("DCU", QuotaUse(10**6, 0)),)) == QuotaCharged(True)


@pytest.mark.parametrize(
    "others",
    [
        pytest.param((("NVIDIA", QuotaUse(1, 1)),), id="nvidia-is-not-another-vendor"),
        pytest.param((("D;CU", QuotaUse(1, 1)),), id="not-a-word"),
        pytest.param((("DCU", QuotaUse(-1, 0)),), id="negative"),
        pytest.param((("DCU", QuotaUse(1, 0)), ("DCU", QuotaUse(2, 0))), id="twice"),
    ],
)
async def test_bad_vendor_charge_is_refused(store: Store, others: tuple[tuple[str, QuotaUse], ...]) -> None:
    with pytest.raises(ValueError, match="quota charge"):
        await store.quota.charge("ns", "p1", 0, 0, others=others)
    assert await store.quota.pod_charges("ns") == {}


async def test_concurrent_vendor_charges_never_exceed(store: Store) -> None:
    """30 pods race for a DCU memory limit of 8000 MiB at 1000 each (and an MLU cores limit): exactly 8 DCU
    charges win, and the usage equals the sum of the stored charges."""
    limits = quota_limits(VendorLimits(), {"DCU": VendorLimits(mem_mib=8000), "MLU": VendorLimits(cores_pct=250)})
    await store.quota.set_limits("ns", limits)
    others = (("DCU", QuotaUse(1000, 10)), ("MLU", QuotaUse(256, 25)))
    results = await asyncio.gather(*(store.quota.charge("ns", f"p{i}", 1, 1, others=others) for i in range(30)))
    won = [r for r in results if isinstance(r, QuotaCharged)]
    assert len(won) == 8
    assert all(isinstance(r, QuotaExceeded) and r.vendor == "DCU" for r in results if r not in won)
    state = await store.quota.get("ns")
    assert state.used_others == (("DCU", QuotaUse(8000, 80)), ("MLU", QuotaUse(2048, 200)))
    assert (state.used_mem_mib, state.used_cores_pct) == (8, 8)
    charges = await store.quota.pod_charges("ns")
    assert len(charges) == 8
    assert sum(dict(c.others)["DCU"].mem_mib for c in charges.values()) == 8000
