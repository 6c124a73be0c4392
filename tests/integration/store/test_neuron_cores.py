"""AWS Neuron cores re-checked by the atomic reserve (docs/vendors/awsneuron.md, "The atomic reserve"): two
one-core pods planned against the same snapshot (both see the device idle, so both take core 0) and reserved at
once leave one on the core and refuse the other with ``ConflictDimension.SHARING``; a re-plan on the fresh usage
takes core 1. The device's usage carries a ``core=<bit>`` tag per core held, the informer's record of a pod keeps
the reservation's charge byte for byte, and a release takes the tags away. Runs on the real redis-server and on
fakeredis (the store conftest)."""

from __future__ import annotations

import asyncio

import pytest

from vgpu_scheduler.services.informer.pods import pod_allocation
from vgpu_scheduler.shared.domain.allocation import Allocation
from vgpu_scheduler.shared.domain.model import ContainerRequest, NodeInventory, NvidiaConfig, PodRequest
from vgpu_scheduler.shared.domain.plan import Decision, plan
from vgpu_scheduler.shared.domain.scoring import Policies
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.store import ConflictDimension, ReserveConflict, Reserved, Store
from vgpu_scheduler.shared.vendors import awsneuron
from vgpu_scheduler.shared.vendors.catalog import enabled_vendors
from vgpu_scheduler.shared.vendors.pods import decode_vendor_constraints

NEURON = awsneuron.NAME
VENDORS = enabled_vendors(NvidiaConfig())
DEVICES = awsneuron.devices_from_capacity("n1", 2, 4, "inf2.xlarge")  # two devices of two cores (mask 0b11)
FIRST, OTHER = DEVICES[-1].id, DEVICES[0].id
"""Every Neuron device scores 0, so equal devices are tried from the last registered, as HAMi's Fit walks them."""
INVENTORY = NodeInventory(node="n1", vendor=NEURON, devices=DEVICES)


def placed(uid: str, snap: NodeSnapshot, *, cores: int = 1, nums: int = 1) -> Allocation:
    """The allocation ``/filter`` would reserve for a Neuron pod of one container planned on ``snap``."""
    pod = PodRequest(containers=(ContainerRequest(nums=nums, mem_mib=0, cores_pct=cores, type=NEURON),), init_count=0)
    got = plan(pod, decode_vendor_constraints({}, VENDORS), [snap], policies=Policies(), rules=VENDORS.rules)
    assert isinstance(got, Decision), got
    return Allocation(uid, "default", f"pod-{uid}", got.node, got.devices, got.charges)


def masks(alloc: Allocation) -> list[tuple[str, int]]:
    return [(d.uuid, d.used_cores) for ctr in alloc.devices for d in ctr]


async def snapshot(store: Store) -> NodeSnapshot:
    return NodeSnapshot(INVENTORY, await store.usage.node_usage("n1"))


def neuron_pod(uid: str, alloc: Allocation, limits: dict[str, str]) -> dict[str, object]:
    """The pod as the API serves it once bound: the allocated list the bind wrote."""
    vendor = VENDORS.get(NEURON)
    assert vendor is not None
    return {
        "metadata": {
            "uid": uid,
            "namespace": "default",
            "name": f"pod-{uid}",
            "annotations": {
                "hami.io/vgpu-node": "n1",
                awsneuron.ALLOCATED_KEY: vendor.encode_devices(alloc.devices),
            },
        },
        "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]},
    }


async def test_two_reservations_racing_for_the_same_core(store: Store) -> None:
    await store.inventory.put(INVENTORY)
    idle = await snapshot(store)
    a, b = placed("a", idle), placed("b", idle)
    assert masks(a) == masks(b) == [(FIRST, 0b01)]  # core 0 of the same device, for both
    results = await asyncio.gather(store.reservations.reserve(a), store.reservations.reserve(b))
    won = [r for r in results if isinstance(r, Reserved)]
    lost = [r for r in results if isinstance(r, ReserveConflict)]
    assert len(won) == 1 and len(lost) == 1, results
    assert (lost[0].dimension, lost[0].device) == (ConflictDimension.SHARING, FIRST), lost[0]
    assert "core=0" in lost[0].detail, lost[0].detail
    usage = (await store.usage.node_usage("n1"))[FIRST]
    assert (usage.used, usage.used_cores, usage.tags) == (1, 0b01, (("core=0", 1),))
    # the loser's retry plans on the fresh snapshot and takes the other core of the device
    loser = b if won[0].pod_uid == "a" else a
    retry = placed(loser.pod_uid, await snapshot(store))
    assert masks(retry) == [(FIRST, 0b10)] and retry.charges[0].tags == ("core=1",)
    assert isinstance(await store.reservations.reserve(retry), Reserved)
    usage = (await store.usage.node_usage("n1"))[FIRST]
    assert (usage.used, usage.used_cores, usage.tags) == (2, 0b11, (("core=0", 1), ("core=1", 1)))
    assert (await store.usage.recount("n1")).drift == 0


@pytest.mark.parametrize(("first", "second"), [(2, 1), (1, 2), (2, 2)])
async def test_core_runs_overlapping_on_one_device(store: Store, first: int, second: int) -> None:
    # runs that overlap by more than one core: the reserve's count of the masks (3 + 1, 1 + 3, 3 + 3 > 3) already
    # refused these pairs before the tags; it still does, and the tags agree (a one-core pod joins a two-core run)
    await store.inventory.put(INVENTORY)
    idle = await snapshot(store)
    a, b = placed("a", idle, cores=first), placed("b", idle, cores=second)
    assert isinstance(await store.reservations.reserve(a), Reserved)
    refused = await store.reservations.reserve(b)
    assert isinstance(refused, ReserveConflict) and refused.device == FIRST, refused
    assert refused.dimension is ConflictDimension.CORES
    retry = placed("b", await snapshot(store), cores=second)
    assert masks(retry) == [(OTHER, (1 << second) - 1)]  # the other device
    assert isinstance(await store.reservations.reserve(retry), Reserved)


async def test_core_tags_follow_the_pod_through_record_and_release(store: Store) -> None:
    await store.inventory.put(INVENTORY)
    one = placed("one", await snapshot(store))
    assert one.charges[0].tags == ("core=0",) and one.charges[0].refuse_tags == ("core=0",)
    assert isinstance(await store.reservations.reserve(one), Reserved)
    two = placed("two", await snapshot(store))
    assert masks(two) == [(FIRST, 0b10)] and two.charges[0].tags == ("core=1",)
    assert isinstance(await store.reservations.reserve(two), Reserved)
    usage = (await store.usage.node_usage("n1"))[FIRST]
    assert usage.tags == (("core=0", 1), ("core=1", 1)) and usage.used_cores == 0b11

    # the informer records the pod from its annotations: the reservation's charge byte for byte, so recording it
    # only confirms the reservation
    recorded = pod_allocation(
        neuron_pod("two", two, {"aws.amazon.com/neuroncore": "1"}), {d.id: d.devcore for d in DEVICES}, VENDORS.all
    )
    assert recorded is not None and recorded.charges == two.charges  # tags, sharing rule and all
    confirmed = await store.reservations.record(recorded)
    assert not confirmed.usage_changed and (await store.usage.node_usage("n1"))[FIRST] == usage

    # planned on a stale view (the device idle), a pod taking core 1 is refused by the tags ...
    stale = placed("stale", NodeSnapshot(INVENTORY, {}), cores=2)
    refused = await store.reservations.reserve(stale)
    assert isinstance(refused, ReserveConflict) and refused.device == FIRST
    # releasing the pod on core 1 takes its tag away; core 1 is free again
    assert await store.reservations.release("two", "n1") is not None
    assert (await store.usage.node_usage("n1"))[FIRST].tags == (("core=0", 1),)
    again = placed("again", await snapshot(store))
    assert masks(again) == [(FIRST, 0b10)]
    assert isinstance(await store.reservations.reserve(again), Reserved)
    assert (await store.usage.recount("n1")).drift == 0
    for uid in ("one", "again"):
        assert await store.reservations.release(uid, "n1") is not None
    assert (await store.usage.raw("n1")) == {}
