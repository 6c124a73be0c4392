"""A Redis that fails over (Sentinel): a decision's write is on a replica before it is acknowledged (WAIT), a
shortfall undoes it, and a new primary starts a new store epoch and ends the leases (real redis-server and
``redis-server --sentinel`` processes)."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.e2e.redisproc import SentinelGroup
from tests.integration.store.conftest import alloc, gpu, node
from vgpu_scheduler.shared.config import CommonSettings, Service
from vgpu_scheduler.shared.errors import TransientError
from vgpu_scheduler.shared.store import (
    Claimed,
    ClaimRefused,
    LeaseAcquired,
    ReplicationShortfall,
    Reserved,
    Store,
    StoreEpochChanged,
    StoreStatus,
    connect,
    is_sentinel,
)

A = alloc("p1", "n1", (("GPU-a", 1000, 30),))


async def test_a_reservation_no_replica_acknowledged_is_undone_and_not_answered(redis_url: str) -> None:
    # a lone redis-server has no replica: WAIT 1 times out, so the reservation must not stand
    waiting = Store.create(connect(redis_url), prefix="t", wait_replicas=1, wait_timeout_s=0.02)
    try:
        await waiting.inventory.put(node("n1", gpu("GPU-a")))
        with pytest.raises(ReplicationShortfall) as info:
            await waiting.reservations.reserve(A)
        assert info.value.acked == 0 and "0 of 1 Redis replicas" in str(info.value)
        assert isinstance(info.value, TransientError)  # /filter answers "not ready"; kube-scheduler retries
        assert await waiting.reservations.get("p1") is None
        assert await waiting.usage.raw("n1") == {}  # the charges went with it
    finally:
        await waiting.aclose()


async def test_a_new_primary_starts_a_new_epoch_and_ends_leases_but_keeps_bind_claims(redis_url: str) -> None:
    store = Store.create(connect(redis_url), prefix="t", track_primary=True)
    try:
        await store.inventory.put(node("n1", gpu("GPU-a")))
        assert isinstance(await store.reservations.reserve(A), Reserved)
        assert isinstance(await store.reservations.claim("p1", "n1", "tok-a", 600), Claimed)
        epoch = await store.meta.ensure_epoch()  # records this primary's replication id
        assert await store.meta.status() == StoreStatus(epoch=epoch)  # the same primary: nothing changes
        lease = await store.leases.acquire("registrar", "r-1", 60)
        assert isinstance(lease, LeaseAcquired)

        assert await store.meta.follow_primary("a-promoted-replica")  # what a client meets after a failover
        status = await store.meta.status()  # the real primary's id differs again: one more rotation, same rules
        assert status.epoch not in (None, epoch) and not status.synced
        assert await store.leases.inspect("registrar") is None  # the leader steps down; a new term rebuilds
        again = await store.leases.acquire("registrar", "r-2", 60)
        assert isinstance(again, LeaseAcquired) and again.token > lease.token
        # a bind in flight keeps its claim: nobody else may take the record of a pod it may already have bound
        assert await store.reservations.check_claim("p1", "n1", "tok-a", 600)
        busy = await store.reservations.claim("p1", "n1", "tok-b", 600)
        assert isinstance(busy, ClaimRefused) and busy.reason == "busy"
    finally:
        await store.aclose()


async def test_a_bind_claim_no_replica_acknowledged_stops_the_bind(redis_url: str) -> None:
    plain = Store.create(connect(redis_url), prefix="t")
    waiting = Store.create(connect(redis_url), prefix="t", wait_replicas=1, wait_timeout_s=0.02)
    try:
        await plain.inventory.put(node("n1", gpu("GPU-a")))
        assert isinstance(await plain.reservations.reserve(A), Reserved)
        assert isinstance(await plain.reservations.claim("p1", "n1", "tok", 60), Claimed)
        with pytest.raises(ReplicationShortfall):  # the bind must not write the pod on an unreplicated claim
            await waiting.reservations.check_claim("p1", "n1", "tok", 60)
    finally:
        await plain.aclose()
        await waiting.aclose()


async def test_without_waiting_nothing_changes_for_a_plain_url(redis_url: str) -> None:
    plain = Store.create(connect(redis_url), prefix="t")
    try:
        assert not is_sentinel(plain.client)
        await plain.inventory.put(node("n1", gpu("GPU-a")))
        assert isinstance(await plain.reservations.reserve(A), Reserved)  # no replica, no WAIT: answered
    finally:
        await plain.aclose()


async def _until_served(store: Store, timeout_s: float = 30.0) -> float:
    """Seconds until the store answers again (through the Sentinels' new primary)."""
    started = time.monotonic()
    while True:
        try:
            await store.meta.ping()
            return time.monotonic() - started
        except TransientError:
            if time.monotonic() - started > timeout_s:
                raise
            await asyncio.sleep(0.05)  # Sentinel electing a new primary: no event to await from here


async def test_a_failover_keeps_acknowledged_reservations_and_starts_a_new_epoch() -> None:
    async with SentinelGroup() as group:
        # a generous WAIT timeout: a loaded test machine may not run a replica within the default 250 ms
        store = Store.create(connect(group.url), prefix="t", wait_timeout_s=2.0)
        try:
            assert is_sentinel(store.client)
            await store.inventory.put(node("n1", gpu("GPU-a", count=100)))
            epoch = await store.meta.ensure_epoch()
            lease = await store.leases.acquire("informer", "holder-1", 60)
            assert isinstance(lease, LeaseAcquired)
            # every reservation answered was on a replica first: none is lost when the primary dies right after
            answered = []
            for i in range(50):
                a = alloc(f"p{i}", "n1", (("GPU-a", 10, 1),))
                reply = await store.reservations.reserve(a)
                assert isinstance(reply, Reserved)
                answered.append(a.pod_uid)
            old = await group.kill_primary()
            down_s = await _until_served(store)
            assert await group.primary_port() != old
            missing = [uid for uid in answered if await store.reservations.get(uid) is None]
            assert missing == [], f"acknowledged reservations lost in the failover: {missing}"
            # the new primary is noticed: a new epoch (markers of the old one void) and the leases ended
            status = await store.meta.status()
            assert status.epoch is not None and status.epoch != epoch
            assert await store.meta.ensure_epoch() == status.epoch
            assert await store.leases.inspect("informer") is None
            again = await store.leases.acquire("informer", "holder-2", 60)
            assert (
                isinstance(again, LeaseAcquired) and again.token > lease.token
            )  # fencing tokens never repeat across the failover
            print(f"\nfailover: store answering again {down_s:.2f}s after the primary was killed")
        finally:
            await store.aclose()


async def test_the_embedded_store_has_no_replicas_to_wait_for() -> None:
    embedded = Store.create(connect(None), prefix="t", wait_replicas=1, track_primary=True)
    try:
        assert not is_sentinel(embedded.client)
        await embedded.inventory.put(node("n1", gpu("GPU-a")))
        assert isinstance(await embedded.reservations.reserve(A), Reserved)  # no WAIT (fakeredis has none)
        assert (await embedded.meta.status()).epoch is None  # and no INFO: nothing to follow
    finally:
        await embedded.aclose()


async def test_a_reservation_planned_in_another_store_epoch_writes_nothing(redis_url: str) -> None:
    store = Store.create(connect(redis_url), prefix="t")
    try:
        await store.inventory.put(node("n1", gpu("GPU-a")))
        epoch = await store.meta.ensure_epoch()
        with pytest.raises(StoreEpochChanged):  # planned before a flush or a failover rotated the epoch
            await store.reservations.reserve(A, epoch="an-older-epoch")
        assert await store.reservations.get("p1") is None and await store.usage.raw("n1") == {}
        assert isinstance(await store.reservations.reserve(A, epoch=epoch), Reserved)
    finally:
        await store.aclose()


async def test_a_service_store_takes_the_url_prefix_and_replica_wait_from_its_settings(redis_url: str) -> None:
    common = CommonSettings(
        service=Service.EXTENDER,
        instance_id="t",
        redis_url=redis_url,
        key_prefix="svc",
        redis_wait_replicas=1,
        redis_wait_timeout_s=0.02,
    )
    store = Store.for_service(common)
    try:
        assert store.keys.prefix == "svc"
        await store.inventory.put(node("n1", gpu("GPU-a")))
        with pytest.raises(ReplicationShortfall):  # a lone redis-server: WAIT 1 is not met within 20 ms
            await store.reservations.reserve(A)
    finally:
        await store.aclose()
