"""Many concurrent reservations on one node never over-commit it, and usage always equals the stored charges."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.integration.store.conftest import alloc, gpu, mig_alloc, node
from vgpu_scheduler.shared.domain.allocation import Allocation
from vgpu_scheduler.shared.domain.model import DeviceInfo, MigPlacement
from vgpu_scheduler.shared.store import AllocationRecord, ReserveConflict, Reserved, ReserveResult, Store, connect

TASKS = 200
CLIENTS = 4
PLAIN = [gpu(f"GPU-{i}", index=i, count=4, mem=10_000, cores=100) for i in range(3)]
MIG = gpu("GPU-mig", index=3, count=7, mem=40_960, mode="mig")
INVENTORY = node("hot", *PLAIN, MIG)
Used = tuple[int, int, int, int, list[tuple[int, int]]]
"""(slots, mem, cores, exclusive holders, placements) of one device."""
MIG_PLACEMENTS = [(s, 1) for s in range(7)] + [(0, 2), (2, 2), (4, 2), (0, 4), (4, 4)]


@pytest.fixture
async def stores(backend: str, request: pytest.FixtureRequest) -> AsyncIterator[list[Store]]:
    """Several clients (each with its own connection pool) on the same Redis."""
    if backend == "redis":
        url = request.getfixturevalue("redis_url")
        clients = [Store.create(connect(url), prefix="c") for _ in range(CLIENTS)]
    else:
        shared = connect(None)
        clients = [Store.create(shared, prefix="c") for _ in range(CLIENTS)]
    try:
        yield clients
    finally:
        for c in {id(s.client): s for s in clients}.values():
            await c.aclose()


def random_pod(rng: random.Random, uid: str) -> Allocation:
    kind = rng.random()
    if kind < 0.2:
        placements = rng.sample(MIG_PLACEMENTS, rng.choice([1, 1, 2]))
        return mig_alloc(uid, "hot", MIG.id, *placements)
    devices = rng.sample(PLAIN, rng.choice([1, 1, 1, 2]))
    containers = []
    for d in devices:
        cores = rng.choice([0, 10, 25, 50, 100]) if kind < 0.9 else 100
        containers.append(((d.id, rng.randrange(500, 6000, 500), cores),))
    return alloc(uid, "hot", *containers)


async def test_concurrent_reservations_never_overcommit(stores: list[Store]) -> None:
    await stores[0].inventory.put(INVENTORY)
    rng = random.Random(20260521)
    pods = [random_pod(rng, f"pod-{i}") for i in range(TASKS)]
    # a third of the pods later change their mind (re-reserve different content) or give up (release)
    second_thoughts = {i: rng.choice(["re-reserve", "release"]) for i in rng.sample(range(TASKS), TASKS // 3)}
    outcomes: dict[str, ReserveResult | None] = {}

    async def one(i: int) -> None:
        s = stores[i % CLIENTS]
        pod = pods[i]
        outcomes[pod.pod_uid] = await s.reservations.reserve(pod)
        action = second_thoughts.get(i)
        if action == "release":
            await s.reservations.release(pod.pod_uid, node="hot")
            outcomes[pod.pod_uid] = None
        elif action == "re-reserve":
            outcomes[pod.pod_uid] = await s.reservations.reserve(random_pod(random.Random(i), pod.pod_uid))

    await asyncio.gather(*(one(i) for i in range(TASKS)))

    reserved = {uid for uid, o in outcomes.items() if isinstance(o, Reserved)}
    conflicts = [o for o in outcomes.values() if isinstance(o, ReserveConflict)]
    assert reserved and conflicts, "the workload must both fill the node and be refused"

    store = stores[0]
    records = await store.reservations.list_by_node("hot")
    stored = {r.allocation.pod_uid for r in records}
    # a pod whose re-reservation was refused keeps its first reservation: stored ⊇ reported-reserved
    assert reserved <= stored
    assert stored <= {p.pod_uid for p in pods}

    usage = await store.usage.node_usage("hot")
    recomputed = recompute(records)
    assert {u: (v.used, v.used_mem_mib, v.used_cores) for u, v in usage.items()} == {
        u: v[:3] for u, v in recomputed.items() if v[:3] != (0, 0, 0)
    }
    for device in (*PLAIN, MIG):
        check_capacity(device, recomputed.get(device.id))
    assert sorted((p.start, p.size) for p in usage[MIG.id].mig_in_use) == sorted(recomputed[MIG.id][4])
    assert (await store.usage.recount("hot")).drift == 0


def recompute(records: list[AllocationRecord]) -> dict[str, Used]:
    """(slots, mem, cores, exclusive holders, placements) per device, from the stored allocations alone."""
    acc: dict[str, list[Any]] = {}
    for r in records:
        for c in r.allocation.charges:
            a = acc.setdefault(c.uuid, [0, 0, 0, 0, []])
            a[0] += c.slots
            a[1] += c.mem_mib
            a[2] += c.cores_pct
            a[3] += 1 if c.exclusive else 0
            a[4].extend((p.start, p.size) for p in c.mig_placements)
    return {u: (a[0], a[1], a[2], a[3], a[4]) for u, a in acc.items()}


def check_capacity(device: DeviceInfo, used: Used | None) -> None:
    if used is None:
        return
    slots, mem, cores, exclusive, placements = used
    assert slots <= device.count, device.id
    if device.mode != "mig":  # MIG profile cores may sum past 100: placements are the limit there
        assert mem <= device.devmem_mib, device.id
        assert cores <= device.devcore, device.id
    if exclusive:
        assert (exclusive, slots) == (1, 1), f"{device.id} shared while held exclusively"
    ps = [MigPlacement(s, z) for s, z in placements]
    for i, a in enumerate(ps):
        for b in ps[i + 1 :]:
            assert not a.overlaps(b), f"{device.id}: {a} overlaps {b}"
