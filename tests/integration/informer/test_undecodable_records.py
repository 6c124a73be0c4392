"""Stored allocation records the informer cannot decode (a newer replica's envelope during a rolling upgrade, a
corrupt value): reconcile and the expiry sweep skip them without releasing or overwriting them, log and count
them, and still repair everything else. No pass fails, the term goes on."""

from __future__ import annotations

import logging

import msgpack  # type: ignore[import-untyped]
import pytest

from tests.integration.informer.conftest import Harness, fake_allocation, metric, settings
from tests.unit.informer.builders import pod
from tests.waiting import eventually
from vgpu_scheduler.services.informer.metrics import RepairKind
from vgpu_scheduler.shared.codec.envelope import encode_allocation
from vgpu_scheduler.shared.domain.model import DeviceUsage
from vgpu_scheduler.shared.store import ReservationState, Reserved, Store

GRACE_S = 120.0
GAUGE = "vgpu_informer_undecodable_records"
CORRUPT = b"\xc1\x00\xff not msgpack \x93"


async def rewrite_as_newer_version(store: Store, uid: str, node: str) -> bytes:
    """Replace the pod's envelope with what a newer replica might write: version 99 with an extra field."""
    rec = await store.reservations.get(uid, node)
    assert rec is not None
    body = msgpack.unpackb(encode_allocation(rec.allocation), raw=False)
    body["v"] = 99
    body["d"]["future_field"] = {"x": 1}
    blob: bytes = msgpack.packb(body, use_bin_type=True)
    await store.client.hset(store.keys.allocations(node), uid, blob)
    return blob


async def blob_of(store: Store, uid: str, node: str) -> bytes | None:
    value = await store.client.hget(store.keys.allocations(node), uid)
    assert value is None or isinstance(value, bytes)
    return value


def undecodable_warnings(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str, str]]:
    return [
        (r.pod_uid, r.node, r.reason)  # type: ignore[attr-defined]
        for r in caplog.records
        if r.getMessage() == "allocation record undecodable: left as it is"
    ]


async def test_undecodable_records_are_left_alone_while_other_drift_is_repaired(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    em, store = harness.emulator, harness.store
    await harness.put_inventory("n1", "n2")
    em.put(pod("keep", "ns", node="n1", app=[[("GPU-n1-0", 2000, 20)]], phase="Running"))
    lost = em.put(pod("lost", "ns", node="n2", app=[[("GPU-n2-0", 3000, 30)]], phase="Running"))
    newer = em.put(pod("newer", "ns", node="n1", app=[[("GPU-n1-1", 1000, 10)]], phase="Running"))
    newer_uid = newer["metadata"]["uid"]
    caplog.set_level(logging.WARNING, logger="vgpu_scheduler.services.informer.reconcile")
    async with harness.run(audit=False) as svc:  # tests/audit.py lists strictly: it would refuse the bad records
        await harness.assert_audit()
        assert (await svc.term.reconcile()).repairs == {}
        usage_n1 = await store.usage.node_usage("n1")

        # a newer replica rewrote one record; another record (of a pod the API no longer shows) is corrupt
        newer_blob = await rewrite_as_newer_version(store, newer_uid, "n1")
        await store.reservations.record(fake_allocation("gone", "n2", "GPU-n2-1", 500, 5, ns="ns"))
        await store.client.hset(store.keys.allocations("n2"), "gone", CORRUPT)
        await store.quota.record("ns", "gone", 500, 5)  # its quota charge: never refunded as an orphan either
        # and ordinary drift next to them: a lost allocation, wrong counters
        await store.reservations.release(lost["metadata"]["uid"])
        await store.client.hset(store.keys.usage("n1"), "u|GPU-n1-0", "5,9999,99,0")

        report = await svc.term.reconcile()

        assert report.synced
        assert report.repairs == {RepairKind.MISSING_ALLOCATION: 1, RepairKind.USAGE_COUNTERS: 1}
        assert sorted((u.pod_uid, u.node, u.newer_version) for u in report.undecodable) == sorted(
            [(newer_uid, "n1", True), ("gone", "n2", False)]
        )
        assert metric(svc, GAUGE, reason="newer_version") == 1
        assert metric(svc, GAUGE, reason="corrupt") == 1
        # left exactly as they were: not released, not downgraded, their charges still counted
        assert await blob_of(store, newer_uid, "n1") == newer_blob
        assert await blob_of(store, "gone", "n2") == CORRUPT
        assert await store.reservations.node_of(newer_uid) == "n1"
        assert await store.reservations.node_of("gone") == "n2"
        assert await store.usage.node_usage("n1") == usage_n1
        assert await store.usage.node_usage("n2") == {  # the lost pod is back, next to the corrupt record
            "GPU-n2-0": DeviceUsage(used=1, used_mem_mib=3000, used_cores=30),
            "GPU-n2-1": DeviceUsage(used=1, used_mem_mib=500, used_cores=5),
        }
        assert (await store.reservations.get(lost["metadata"]["uid"])) is not None
        assert (await store.quota.get("ns")).used_mem_mib == 6500  # the newer pod's quota charge is kept

        # logged once each, with pod and node; the next passes find nothing new and log nothing again
        assert sorted(undecodable_warnings(caplog)) == sorted(
            [(newer_uid, "n1", "newer_version"), ("gone", "n2", "corrupt")]
        )
        for _ in range(2):
            again = await svc.term.reconcile()
            assert again.repairs == {} and len(again.undecodable) == 2
        assert len(undecodable_warnings(caplog)) == 2
        assert await blob_of(store, newer_uid, "n1") == newer_blob
        assert await blob_of(store, "gone", "n2") == CORRUPT
        assert (await store.quota.get("ns")).used_mem_mib == 6500
        assert svc.leading


async def test_a_corrupt_record_of_a_pod_the_api_shows_is_rewritten(harness: Harness) -> None:
    em, store = harness.emulator, harness.store
    await harness.put_inventory("n1")
    p = em.put(pod("p", "ns", node="n1", app=[[("GPU-n1-0", 2000, 20)]], phase="Running"))
    uid = p["metadata"]["uid"]
    async with harness.run() as svc:
        await harness.assert_audit()
        await store.client.hset(store.keys.allocations("n1"), uid, CORRUPT)

        report = await svc.term.reconcile()

        assert report.repairs == {RepairKind.CHANGED_ALLOCATION: 1}
        assert report.undecodable == []
        assert metric(svc, GAUGE, reason="corrupt") == 0
        rec = await store.reservations.get(uid)
        assert rec is not None and rec.state is ReservationState.CONFIRMED
        assert rec.allocation.name == "p"


async def test_expiry_sweep_skips_undecodable_reservations(harness: Harness) -> None:
    em, store = harness.emulator, harness.store
    await harness.put_inventory("n1")
    async with harness.run(settings(grace_s=GRACE_S), audit=False) as svc:
        waiting = em.put(pod("waiting", "ns", phase="Pending"))
        future = em.put(pod("future", "ns", phase="Pending"))
        for p, gpu in ((waiting, "GPU-n1-0"), (future, "GPU-n1-1")):
            a = fake_allocation(p["metadata"]["uid"], "n1", gpu, 1000, 10, ns="ns")
            assert isinstance(await store.reservations.reserve(a), Reserved)
        future_uid = future["metadata"]["uid"]
        future_blob = await rewrite_as_newer_version(store, future_uid, "n1")

        harness.clock.advance(GRACE_S + 1)

        async def waiting_expired() -> bool:
            return await store.reservations.node_of(waiting["metadata"]["uid"]) is None

        await eventually(waiting_expired, what="the readable reservation expired")
        assert await svc.term.expire_reservations() == 0
        assert await blob_of(store, future_uid, "n1") == future_blob
        assert await store.reservations.node_of(future_uid) == "n1"
        assert metric(svc, "vgpu_informer_reservations_expired_total") == 1
        assert svc.leading
