"""Leases, fencing, fail-over, 410 re-lists and flushed Redis: the registrar stays consistent with the API."""

from __future__ import annotations

import asyncio
from urllib.parse import urlparse

from prometheus_client import CollectorRegistry

from tests.integration.registrar.helpers import (
    REGISTER,
    PausableProxy,
    Running,
    json_register,
    make_node,
    running_registrar,
)
from tests.waiting import eventually
from vgpu_scheduler.services.registrar.metrics import RegistrarMetrics
from vgpu_scheduler.services.registrar.nvidia import NvidiaVendor
from vgpu_scheduler.services.registrar.sync import NodeSync, ProcessMemory
from vgpu_scheduler.shared.emulator import Emulator
from vgpu_scheduler.shared.k8s import Api, EventKind, KubeClient, WatchEvent
from vgpu_scheduler.shared.store import ConnectionSettings, Fence, Store, SyncMarker, connect


async def registered(store: Store) -> list[str]:
    return await store.inventory.list_nodes()


async def devices(store: Store, node: str) -> list[str] | None:
    inv = await store.inventory.get(node)
    return None if inv is None else [d.id for d in inv.devices]


async def test_410_relist_keeps_redis_consistent(emulator: Emulator, kube: KubeClient, store: Store) -> None:
    for name in ("a", "b", "c"):
        emulator.put(make_node(name, annotations={REGISTER: json_register(f"GPU-{name}")}))
    async with running_registrar(store, kube) as r:
        assert await registered(store) == ["a", "b", "c"]
        await emulator.wait_for(lambda: emulator.open_watches("nodes") == 1)
        # in one step, so the watch cannot see any of it: only the re-list after the 410 can
        emulator.close_watches("nodes")
        emulator.delete("nodes", None, "b")
        emulator.patch("nodes", None, "c", {"metadata": {"annotations": {REGISTER: json_register("GPU-c2")}}})
        emulator.put(make_node("d", annotations={REGISTER: json_register("GPU-d")}))
        emulator.compact()
        await eventually(lambda: r.metric("vgpu_registrar_full_passes_total", trigger="relist") == 1, what="relist")
        assert await registered(store) == ["a", "c", "d"]
        assert await devices(store, "c") == ["GPU-c2"]
        assert (await store.meta.status()).is_synced(SyncMarker.INVENTORY)


async def test_flushall_while_leading_rebuilds(emulator: Emulator, kube: KubeClient, store: Store) -> None:
    for name in ("a", "b"):
        emulator.put(make_node(name, annotations={REGISTER: json_register(f"GPU-{name}")}))
    async with running_registrar(store, kube, ttl_s=0.6) as r:
        epoch = (await store.meta.status()).epoch
        await store.client.flushall()  # the lease, the epoch and every inventory are gone
        await eventually(lambda: _synced_with(store, ["a", "b"], not_epoch=epoch), what="rebuilt after flush")
        assert r.service.terms == 2  # the flushed lease ended the first term; the second rebuilt Redis
        assert r.service.is_leader


async def _synced_with(store: Store, nodes: list[str], not_epoch: str | None) -> bool:
    status = await store.meta.status()
    return (
        status.epoch not in (None, not_epoch)
        and status.is_synced(SyncMarker.INVENTORY)
        and await store.inventory.list_nodes() == nodes
    )


async def test_inventory_lost_under_a_live_lease_is_rebuilt(emulator: Emulator, kube: KubeClient, store: Store) -> None:
    for name in ("a", "b"):
        emulator.put(make_node(name, annotations={REGISTER: json_register(f"GPU-{name}")}))
    async with running_registrar(store, kube) as r:
        # the inventories vanish but the lease and the epoch stay (a partial flush, a bad manual cleanup)
        for name in ("a", "b"):
            await store.inventory.delete(name)
        r.service.request_resync()
        # the pass is counted when it starts (it has found the flush) and rebuilds the nodes after that
        await eventually(lambda: r.metric("vgpu_registrar_full_passes_total", trigger="flush") == 1, what="flush")
        await eventually(lambda: _registered_is(store, ["a", "b"]), what="inventories rebuilt")
        assert r.service.terms == 1
        # and a new epoch (meta flushed) is noticed the same way; the pass marks the store synced when it ends
        await store.client.delete(store.keys.meta())
        r.service.request_resync()
        await eventually(lambda: r.metric("vgpu_registrar_full_passes_total", trigger="flush") == 2, what="epoch")
        await eventually(lambda: _inventory_synced(store), what="inventory marked synced")
        assert await registered(store) == ["a", "b"]
        assert r.service.terms == 1


async def _registered_is(store: Store, names: list[str]) -> bool:
    return await registered(store) == names


async def _inventory_synced(store: Store) -> bool:
    return (await store.meta.status()).is_synced(SyncMarker.INVENTORY)


async def test_stale_fence_write_is_refused_and_ends_the_term(
    emulator: Emulator, kube: KubeClient, store: Store
) -> None:
    emulator.put(make_node("a", annotations={REGISTER: json_register("GPU-a")}))
    async with running_registrar(store, kube) as r:
        assert r.service.sync is not None
        current = r.service.lease.fence
        # a writer still carrying the previous token (a paused ex-leader) tries to change node a
        stale = NodeSync(
            store=store,
            api=Api(kube, component="test"),
            vendor=NvidiaVendor(),
            metrics=RegistrarMetrics(CollectorRegistry()),
            fence=Fence(current.lease, current.token - 1),
            memory=ProcessMemory(),
            clock=lambda: 0.0,
        )
        node = make_node("a", annotations={REGISTER: json_register("GPU-stale")})
        node["metadata"]["resourceVersion"] = "1"
        await stale.on_event(WatchEvent(EventKind.MODIFIED, node, "1"))
        assert stale.stale.is_set()
        assert await devices(store, "a") == ["GPU-a"]
        await stale.on_event(WatchEvent(EventKind.DELETED, node, "2"))  # a finished term writes nothing
        assert await devices(store, "a") == ["GPU-a"]


async def test_standby_takes_over_and_a_resumed_stale_leader_is_fenced(
    emulator: Emulator, kube: KubeClient, store: Store, redis_url: str
) -> None:
    emulator.put(make_node("x", annotations={REGISTER: json_register("GPU-x0")}))
    target = urlparse(redis_url)
    proxy = PausableProxy(target.hostname or "127.0.0.1", target.port or 6379)
    proxied = await proxy.start()
    store_a = Store.create(connect(proxied, ConnectionSettings(socket_timeout_s=30.0)), prefix="t")
    try:
        async with running_registrar(store_a, kube, instance="a", ttl_s=1.0) as a:
            assert a.service.is_leader
            async with running_registrar(store, kube, instance="b", ttl_s=1.0) as b:
                assert not _leads(b)
                assert await b.service.readiness() == (True, "standby (lease held by a)")
                sync_a = a.service.sync
                assert sync_a is not None

                # A freezes (as far as Redis can tell) while it is writing a change of node x
                proxy.pause()
                emulator.patch("nodes", None, "x", {"metadata": {"annotations": {REGISTER: json_register("GPU-x1")}}})
                # B takes the lapsed lease and rebuilds from the API
                await eventually(lambda: _leads(b) and b.service.ready.is_set(), what="b leads")
                await eventually(lambda: _is(store, "x", ["GPU-x1"]), what="b wrote x1")
                emulator.patch("nodes", None, "x", {"metadata": {"annotations": {REGISTER: json_register("GPU-x2")}}})
                await eventually(lambda: _is(store, "x", ["GPU-x2"]), what="b wrote x2")
                generation = (await store.inventory.generations(["x"]))["x"]
                token_b = b.service.lease.fence.token

                # A wakes up: its held write (x1, old token) reaches Redis and is refused; A steps down
                proxy.resume()
                await eventually(lambda: a.service.sync is None, what="a stepped down")
                assert sync_a.stale.is_set() or a.metric("vgpu_registrar_step_downs_total", reason="lease_lost") == 1
                assert await devices(store, "x") == ["GPU-x2"]
                assert (await store.inventory.generations(["x"]))["x"] == generation
                assert _leads(b) and b.service.lease.fence.token == token_b
                assert a.metric("vgpu_registrar_leader") == 0 and b.metric("vgpu_registrar_leader") == 1
                await eventually(lambda: _standby_ready(a), what="a is a ready standby again")
        # both stopped: the lease was released on the way out
        assert await store.leases.inspect("registrar") is None
    finally:
        await store_a.aclose()
        await proxy.stop()


def _leads(r: Running) -> bool:
    return r.service.is_leader


async def _is(store: Store, node: str, ids: list[str]) -> bool:
    return await devices(store, node) == ids


async def _standby_ready(r: Running) -> bool:
    ok, detail = await r.service.readiness()
    return ok and detail.startswith("standby")


async def test_stop_releases_the_lease_for_a_standby(emulator: Emulator, kube: KubeClient, store: Store) -> None:
    emulator.put(make_node("a", annotations={REGISTER: json_register("GPU-a")}))
    async with running_registrar(store, kube, instance="one", ttl_s=30.0) as one:
        assert one.service.is_leader
        assert (await one.service.readiness())[0]
    # a long ttl: only a release lets anybody else in now
    assert await store.leases.inspect("registrar") is None
    async with running_registrar(store, kube, instance="two", ttl_s=30.0) as two:
        assert two.service.is_leader
        assert await registered(store) == ["a"]
        assert two.metric("vgpu_registrar_step_downs_total", reason="stop") == 0
    assert two.metric("vgpu_registrar_step_downs_total", reason="stop") == 1


async def test_cancelled_leader_task_still_releases(emulator: Emulator, kube: KubeClient, store: Store) -> None:
    async with running_registrar(store, kube, instance="one", ttl_s=30.0) as one:
        assert one.service.is_leader
        one.task.cancel()
        await asyncio.gather(one.task, return_exceptions=True)
        assert one.task.cancelled()
        assert await store.leases.inspect("registrar") is None
        assert one.metric("vgpu_registrar_leader") == 0


async def test_short_redis_outage_is_retried_within_the_term(
    emulator: Emulator, kube: KubeClient, store: Store, redis_url: str
) -> None:
    emulator.put(make_node("x", annotations={REGISTER: json_register("GPU-x0")}))
    target = urlparse(redis_url)
    proxy = PausableProxy(target.hostname or "127.0.0.1", target.port or 6379)
    proxied = await proxy.start()
    store_a = Store.create(connect(proxied, ConnectionSettings(socket_timeout_s=0.3)), prefix="t")
    try:
        async with running_registrar(store_a, kube, ttl_s=10.0) as a:
            proxy.pause()
            emulator.patch("nodes", None, "x", {"metadata": {"annotations": {REGISTER: json_register("GPU-x1")}}})
            await eventually(lambda: a.metric("vgpu_registrar_transient_errors_total") >= 1, what="a failed write")
            proxy.resume()
            await eventually(lambda: _is(store, "x", ["GPU-x1"]), what="the event was redelivered")
            assert a.service.terms == 1 and _leads(a)
    finally:
        await store_a.aclose()
        await proxy.stop()
