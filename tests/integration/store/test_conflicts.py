"""Every capacity dimension refuses with a structured conflict, and a refusal changes nothing."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest

from tests.integration.store.conftest import alloc, gpu, mig_alloc, node
from vgpu_scheduler.shared.domain.allocation import Allocation
from vgpu_scheduler.shared.domain.model import NodeInventory
from vgpu_scheduler.shared.store import ConflictDimension, ReserveConflict, Reserved, Store


@dataclass(frozen=True)
class Case:
    inventory: NodeInventory | None
    before: tuple[Allocation, ...]
    attempt: Allocation
    dimension: ConflictDimension
    device: str
    needed: int = 0
    free: int = 0
    recorded: tuple[Allocation, ...] = field(default=())


PLAIN = node("n1", gpu("GPU-a", count=2, mem=4000, cores=100))
MIG = node("n1", gpu("GPU-m", count=7, mem=40960, mode="mig"))


def one(uid: str, uuid: str, mem: int, cores: int) -> Allocation:
    return alloc(uid, "n1", ((uuid, mem, cores),))


def uniform(a: Allocation) -> Allocation:
    """``a`` with every charge marked ``uniform`` (a device shared only by tasks of one size)."""
    return replace(a, charges=tuple(replace(c, uniform=True) for c in a.charges))


CASES = {
    "node-unknown": Case(None, (), one("p", "GPU-a", 1, 1), ConflictDimension.NODE_UNKNOWN, ""),
    "device-unknown": Case(PLAIN, (), one("p", "GPU-x", 1, 1), ConflictDimension.DEVICE_UNKNOWN, "GPU-x", 1, 0),
    "unhealthy": Case(
        node("n1", gpu("GPU-a", health=False)), (), one("p", "GPU-a", 1, 1), ConflictDimension.UNHEALTHY, "GPU-a"
    ),
    "cordoned": Case(
        node("n1", gpu("GPU-a"), cordoned=frozenset({"GPU-a"})),
        (),
        one("p", "GPU-a", 1, 1),
        ConflictDimension.CORDONED,
        "GPU-a",
    ),
    "slots": Case(
        PLAIN,
        (one("a", "GPU-a", 100, 10), one("b", "GPU-a", 100, 10)),
        one("p", "GPU-a", 100, 10),
        ConflictDimension.SLOTS,
        "GPU-a",
        1,
        0,
    ),
    "slots-two-app-containers": Case(
        PLAIN,
        (one("a", "GPU-a", 100, 10),),
        alloc("p", "n1", (("GPU-a", 10, 1),), (("GPU-a", 10, 1),)),
        ConflictDimension.SLOTS,
        "GPU-a",
        2,
        1,
    ),
    "memory": Case(
        PLAIN,
        (one("a", "GPU-a", 3000, 10),),
        one("p", "GPU-a", 1500, 10),
        ConflictDimension.MEMORY,
        "GPU-a",
        1500,
        1000,
    ),
    "cores": Case(
        PLAIN, (one("a", "GPU-a", 100, 70),), one("p", "GPU-a", 100, 40), ConflictDimension.CORES, "GPU-a", 40, 30
    ),
    "whole-card-held-zero-core": Case(
        PLAIN, (one("a", "GPU-a", 100, 100),), one("p", "GPU-a", 100, 0), ConflictDimension.COMPUTE_EXHAUSTED, "GPU-a"
    ),
    "whole-card-held-some-cores": Case(
        PLAIN, (one("a", "GPU-a", 100, 100),), one("p", "GPU-a", 100, 10), ConflictDimension.CORES, "GPU-a", 10, 0
    ),
    "exclusive-needs-idle": Case(
        PLAIN, (one("a", "GPU-a", 100, 0),), one("p", "GPU-a", 100, 100), ConflictDimension.EXCLUSIVE, "GPU-a", 1, 0
    ),
    "zero-core-on-full-card": Case(
        node("n1", gpu("GPU-a", count=10)),
        (one("a", "GPU-a", 100, 60), one("b", "GPU-a", 100, 40)),
        one("p", "GPU-a", 100, 0),
        ConflictDimension.COMPUTE_EXHAUSTED,
        "GPU-a",
    ),
    "mig-placement-on-shared-card": Case(
        PLAIN, (), mig_alloc("p", "n1", "GPU-a", (0, 1)), ConflictDimension.MIG_MODE, "GPU-a"
    ),
    "plain-charge-on-mig-card": Case(MIG, (), one("p", "GPU-m", 100, 10), ConflictDimension.MIG_MODE, "GPU-m"),
    "mig-overlap": Case(
        MIG,
        (mig_alloc("a", "n1", "GPU-m", (0, 4)),),
        mig_alloc("p", "n1", "GPU-m", (2, 2)),
        ConflictDimension.MIG_PLACEMENT,
        "GPU-m",
        2,
        0,
    ),
    "mig-overlap-within-pod": Case(
        MIG, (), mig_alloc("p", "n1", "GPU-m", (0, 2), (1, 1)), ConflictDimension.MIG_PLACEMENT, "GPU-m", 1, 0
    ),
    "legacy-slot-in-use": Case(
        MIG,
        (alloc("a", "n1", (("GPU-m", 5000, 14),), legacy={"GPU-m": (0, 3)}),),
        alloc("p", "n1", (("GPU-m", 5000, 14),), legacy={"GPU-m": (0, 3)}),
        ConflictDimension.LEGACY_MIG,
        "GPU-m",
        1,
        0,
    ),
    "legacy-other-geometry": Case(
        MIG,
        (alloc("a", "n1", (("GPU-m", 5000, 14),), legacy={"GPU-m": (0, 3)}),),
        alloc("p", "n1", (("GPU-m", 20000, 42),), legacy={"GPU-m": (2, 0)}),
        ConflictDimension.LEGACY_MIG,
        "GPU-m",
        1,
        0,
    ),
    # Kunlunxin vXPUs: an XPU holding quarters takes no half, even though the memory would fit
    "share-size": Case(
        node("n1", gpu("XPU-a", count=4, mem=98304)),
        (uniform(one("a", "XPU-a", 24576, 25)),),
        uniform(one("p", "XPU-a", 49152, 50)),
        ConflictDimension.SHARE_SIZE,
        "XPU-a",
        49152,
        24576,
    ),
}


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
async def test_conflict(store: Store, case: Case) -> None:
    if case.inventory is not None:
        await store.inventory.put(case.inventory)
    for a in case.before:
        assert isinstance(await store.reservations.reserve(a), Reserved)
    usage_before = await store.usage.raw("n1")
    generation_before = await store.inventory.generations(["n1"])

    result = await store.reservations.reserve(case.attempt)

    assert isinstance(result, ReserveConflict)
    assert (result.dimension, result.device, result.needed, result.free) == (
        case.dimension,
        case.device,
        case.needed,
        case.free,
    )
    assert result.pod_uid == case.attempt.pod_uid and result.node == "n1" and result.detail
    assert await store.usage.raw("n1") == usage_before
    assert await store.inventory.generations(["n1"]) == generation_before
    assert await store.reservations.get(case.attempt.pod_uid, node="n1") is None


@pytest.mark.parametrize(
    "attempt",
    [
        pytest.param(mig_alloc("p", "n1", "GPU-m", (4, 4)), id="mig-adjacent"),
        pytest.param(alloc("p", "n1", (("GPU-m", 5000, 14),), legacy={"GPU-m": (0, 4)}), id="legacy-next-slot"),
    ],
)
async def test_mig_neighbours_fit(store: Store, attempt: Allocation) -> None:
    await store.inventory.put(MIG)
    first = (
        mig_alloc("a", "n1", "GPU-m", (0, 4))
        if attempt.mig
        else alloc("a", "n1", (("GPU-m", 5000, 14),), legacy={"GPU-m": (0, 3)})
    )
    assert isinstance(await store.reservations.reserve(first), Reserved)
    assert isinstance(await store.reservations.reserve(attempt), Reserved)
    usage = (await store.usage.node_usage("n1"))["GPU-m"]
    assert usage.used == 2
    if attempt.mig:
        assert [(p.start, p.size) for p in usage.mig_in_use] == [(0, 4), (4, 4)]
    else:
        assert (usage.legacy_geometry, usage.legacy_slots) == (0, frozenset({3, 4}))


async def test_released_mig_placement_is_free_again(store: Store) -> None:
    await store.inventory.put(MIG)
    await store.reservations.reserve(mig_alloc("a", "n1", "GPU-m", (0, 4)))
    await store.reservations.release("a")
    assert isinstance(await store.reservations.reserve(mig_alloc("p", "n1", "GPU-m", (2, 2))), Reserved)


async def test_exact_fit_is_accepted(store: Store) -> None:
    await store.inventory.put(PLAIN)
    assert isinstance(await store.reservations.reserve(one("a", "GPU-a", 2000, 50)), Reserved)
    assert isinstance(await store.reservations.reserve(one("b", "GPU-a", 2000, 50)), Reserved)
    usage = (await store.usage.node_usage("n1"))["GPU-a"]
    assert (usage.used, usage.used_mem_mib, usage.used_cores) == (2, 4000, 100)


async def test_mutex_reservation_needs_idle_devices(store: Store) -> None:
    # hami-wire §6.4 step 7: a pod with the mutex policy only takes devices nobody uses (its charges cannot say so)
    await store.inventory.put(node("n1", gpu("GPU-a"), gpu("GPU-b", index=1)))
    assert isinstance(await store.reservations.reserve(one("a", "GPU-a", 100, 10)), Reserved)

    refused = await store.reservations.reserve(one("p", "GPU-a", 100, 10), mutex=True)
    assert isinstance(refused, ReserveConflict)
    assert (refused.dimension, refused.device) == (ConflictDimension.EXCLUSIVE, "GPU-a")
    assert isinstance(await store.reservations.reserve(one("p", "GPU-b", 100, 10), mutex=True), Reserved)
    # without the policy the shared device is fine
    assert isinstance(await store.reservations.reserve(one("q", "GPU-a", 100, 10)), Reserved)


async def test_whole_card_mark_alone_does_not_block_free_cores(store: Store) -> None:
    # the informer marks 100 cores as a whole-card claim when it cannot see the card's total (default 100); on a
    # 200-core card the core's Fit still sees 100 free cores, and reserve must agree with it
    await store.inventory.put(node("n1", gpu("GPU-a", cores=200)))
    held = one("a", "GPU-a", 100, 100)
    assert held.charges[0].exclusive
    await store.reservations.record(held)
    assert isinstance(await store.reservations.reserve(one("p", "GPU-a", 100, 50)), Reserved)


async def test_mig_profile_cores_may_sum_past_the_card(store: Store) -> None:
    # A100-40GB: seven 1g.5gb instances of 15 % each (ceil(14 SMs x 100 / 98)) fill the card at 105 %
    await store.inventory.put(MIG)
    for s in range(7):
        assert isinstance(await store.reservations.reserve(mig_alloc(f"p{s}", "n1", "GPU-m", (s, 1))), Reserved)
    usage = (await store.usage.node_usage("n1"))["GPU-m"]
    assert (usage.used, usage.used_cores, len(usage.mig_in_use)) == (7, 105, 7)
    eighth = await store.reservations.reserve(mig_alloc("p7", "n1", "GPU-m", (0, 1)))
    assert isinstance(eighth, ReserveConflict) and eighth.dimension is ConflictDimension.SLOTS


async def test_a_uniform_charge_of_the_same_size_shares(store: Store) -> None:
    await store.inventory.put(node("n1", gpu("XPU-a", count=4, mem=98304)))
    for uid in ("a", "b"):
        assert isinstance(await store.reservations.reserve(uniform(one(uid, "XPU-a", 24576, 25))), Reserved)
