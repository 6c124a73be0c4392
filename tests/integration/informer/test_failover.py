"""One active informer: standby, hand-over on stop, fencing of a paused ex-leader, clean shutdown, readiness."""

from __future__ import annotations

import asyncio
import dataclasses
import socket

import pytest
import redis as sync_redis
from prometheus_client import CollectorRegistry

from tests.integration.informer.conftest import Harness, fake_allocation, settings
from tests.unit.informer.builders import pod
from tests.waiting import eventually
from vgpu_scheduler.services.informer.service import LEASE_NAME, InformerService
from vgpu_scheduler.shared.store import StaleFenceError, Store, connect


def leading(svc: InformerService) -> bool:
    return svc.leading  # a call, so mypy does not narrow the property across awaits


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_standby_takes_over_when_the_leader_stops(harness: Harness) -> None:
    em = harness.emulator
    em.put(pod("a", node="n1", app=[[("GPU-1", 1000, 10)]]))
    async with harness.run(settings("informer-a")) as a:
        b = harness.service(settings("informer-b"))
        stop_b = asyncio.Event()
        task_b = asyncio.create_task(b.run(stop_b), name="test-informer:b")
        try:
            await asyncio.wait_for(b.ready.wait(), 10)
            assert leading(a) and not leading(b)
            assert await b.readiness() == (True, "standby")
            assert await a.readiness() == (True, "leader, synced")
            lease = await harness.store.leases.inspect(LEASE_NAME)
            assert lease is not None and lease.holder == "informer-a"
        except BaseException:
            stop_b.set()
            await task_b
            raise
    # a stopped: it released the lease, so b takes over at once (no TTL wait) and rebuilds nothing that is right
    try:
        await asyncio.wait_for(b.synced.wait(), 10)
        assert leading(b)
        lease = await harness.store.leases.inspect(LEASE_NAME)
        assert lease is not None and lease.holder == "informer-b"
        em.put(pod("b", node="n1", app=[[("GPU-1", 500, 5)]]))
        em.patch("pods", "default", "a", {"status": {"phase": "Succeeded"}})
        await harness.assert_audit()
    finally:
        stop_b.set()
        await asyncio.wait_for(task_b, 10)
    assert await harness.store.leases.inspect(LEASE_NAME) is None  # released on stop


async def test_a_paused_ex_leader_is_fenced_out(harness: Harness, redis_url: str) -> None:
    em, store = harness.emulator, harness.store
    em.put(pod("a", node="n1", app=[[("GPU-1", 1000, 10)]]))
    async with harness.run(settings("informer-a")) as a:
        old_fence = a.term.fence
        # a "pauses": its lease lapses and b takes it
        raw = sync_redis.Redis.from_url(redis_url)
        try:
            raw.delete(store.keys.lease(LEASE_NAME))
        finally:
            raw.close()
        async with harness.run(settings("informer-b")) as b:
            assert leading(b) and b.term.fence.token > old_fence.token
            # a resumes: any write with its old token is refused...
            with pytest.raises(StaleFenceError):
                await store.reservations.record(fake_allocation("x", "n1", "GPU-9", 1, 1), old_fence)
            # ... and a's own next write ends its term: it stands by
            em.put(pod("c", node="n1", app=[[("GPU-1", 200, 2)]]))
            await eventually(lambda: not leading(a), what="a stands by")
            assert leading(b)
            await harness.assert_audit()
            assert await a.readiness() == (True, "standby")


async def test_clean_stop_releases_the_lease(harness: Harness) -> None:
    async with harness.run() as svc:
        assert leading(svc)
        assert (await harness.store.leases.inspect(LEASE_NAME)) is not None
    assert not leading(svc)
    assert await harness.store.leases.inspect(LEASE_NAME) is None
    assert svc.deps.registry.get_sample_value("vgpu_informer_leader") == 0


async def test_readiness(harness: Harness) -> None:
    svc = harness.service()
    assert await svc.readiness() == (True, "standby")  # not started: holds nothing
    async with harness.run() as running:
        assert await running.readiness() == (True, "leader, synced")
        assert running.deps.registry.get_sample_value("vgpu_informer_leader") == 1


async def test_not_ready_without_redis(harness: Harness) -> None:
    dead = Store.create(connect(f"redis://127.0.0.1:{free_port()}/0"), prefix="t")
    try:
        deps = dataclasses.replace(harness.service().deps, store=dead, registry=CollectorRegistry())
        svc = InformerService(settings(), deps)
        ok, detail = await svc.readiness()
        assert not ok and detail.startswith("redis:")
        stop = asyncio.Event()
        task = asyncio.create_task(svc.run(stop), name="test-informer:no-redis")
        await eventually(lambda: svc._redis_error is not None, what="a lease attempt")  # retried, never raised
        stop.set()
        await asyncio.wait_for(task, 10)
        assert not svc.ready.is_set() and not leading(svc)
    finally:
        await dead.aclose()
