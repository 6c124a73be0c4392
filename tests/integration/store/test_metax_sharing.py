"""MetaX sGPU app classes and QoS policies re-checked by the atomic reserve (docs/vendors/metax.md): two pods that
may not share a card, planned against the same snapshot (both see the card idle) and reserved at once, leave one on
the card and refuse the other with ``ConflictDimension.SHARING``; the card's usage carries the holders' tags that
the next ``/filter`` reads, the informer's record of the pod keeps them, and a release takes them away. Runs on the
real redis-server and on fakeredis (the store conftest)."""

from __future__ import annotations

import asyncio

import pytest

from vgpu_scheduler.services.informer.pods import pod_allocation
from vgpu_scheduler.shared.domain.allocation import Allocation
from vgpu_scheduler.shared.domain.model import ContainerRequest, DeviceInfo, NodeInventory, NvidiaConfig, PodRequest
from vgpu_scheduler.shared.domain.plan import Decision, Failure, plan
from vgpu_scheduler.shared.domain.scoring import Policies
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.store import ConflictDimension, ReserveConflict, Reserved, Store
from vgpu_scheduler.shared.vendors import metax_sgpu
from vgpu_scheduler.shared.vendors.catalog import enabled_vendors
from vgpu_scheduler.shared.vendors.pods import decode_vendor_constraints

SG = metax_sgpu.NAME
APP, QOS = metax_sgpu.APP_CLASS_KEY, metax_sgpu.QOS_POLICY_KEY
VENDORS = enabled_vendors(NvidiaConfig())
CARD = DeviceInfo("SG-a", 0, 10, 16384, 100, SG, 0, metax_sgpu.device_mode("best-effort", 0), True, vendor=SG)
INVENTORY = NodeInventory(node="n1", vendor=SG, devices=(CARD,))


def placed(uid: str, annotations: dict[str, str], snap: NodeSnapshot, cores: int = 30) -> Allocation:
    """The allocation ``/filter`` would reserve for an sGPU pod (one card, 1 GiB, ``cores``) planned on ``snap``."""
    pod = PodRequest(containers=(ContainerRequest(1, 1024, -1, cores, SG),), init_count=0)
    got = plan(pod, decode_vendor_constraints(annotations, VENDORS), [snap], policies=Policies(), rules=VENDORS.rules)
    assert isinstance(got, Decision), got
    return Allocation(uid, "default", f"pod-{uid}", got.node, got.devices, got.charges)


async def snapshot(store: Store) -> NodeSnapshot:
    return NodeSnapshot(INVENTORY, await store.usage.node_usage("n1"))


@pytest.mark.parametrize(
    ("first", "second"),
    [
        pytest.param({QOS: "best-effort"}, {QOS: "burst-share"}, id="two-qos-policies"),
        pytest.param({APP: "online"}, {QOS: "best-effort"}, id="online-and-unclassed"),
        pytest.param({APP: "offline", QOS: "fixed-share"}, {QOS: "fixed-share"}, id="offline-and-unclassed"),
    ],
)
async def test_two_reservations_racing_for_an_idle_card(
    store: Store, first: dict[str, str], second: dict[str, str]
) -> None:
    await store.inventory.put(INVENTORY)
    idle = await snapshot(store)
    a, b = placed("a", first, idle), placed("b", second, idle)
    results = await asyncio.gather(store.reservations.reserve(a), store.reservations.reserve(b))
    won = [r for r in results if isinstance(r, Reserved)]
    lost = [r for r in results if isinstance(r, ReserveConflict)]
    assert len(won) == 1 and len(lost) == 1, results
    assert (lost[0].dimension, lost[0].device) == (ConflictDimension.SHARING, "SG-a") and lost[0].detail
    # the loser's retry plans on the fresh snapshot, and Fit refuses the card as the reserve did
    loser = b if won[0].pod_uid == "a" else a
    annotations = second if loser is b else first
    pod = PodRequest(containers=(ContainerRequest(1, 1024, -1, 30, SG),), init_count=0)
    retry = plan(pod, decode_vendor_constraints(annotations, VENDORS), [await snapshot(store)], policies=Policies(),
                 rules=VENDORS.rules)  # fmt: skip
    assert isinstance(retry, Failure)
    assert retry.reasons["n1"] in ("1/1 CardQosPolicyMismatch", "1/1 CardAppClassMismatch")


async def test_tags_follow_the_pod_through_record_and_release(store: Store) -> None:
    await store.inventory.put(INVENTORY)
    offline = placed("off", {APP: "offline", QOS: "burst-share"}, await snapshot(store), cores=60)
    assert isinstance(await store.reservations.reserve(offline), Reserved)
    usage = (await store.usage.node_usage("n1"))["SG-a"]
    assert usage.tags == (("app=offline", 1), ("qos=burst-share", 1)) and usage.used_cores == 60
    # an offline pod of the same policy fills the card's cores
    fill = placed("fill", {APP: "offline", QOS: "burst-share"}, await snapshot(store), cores=40)
    assert isinstance(await store.reservations.reserve(fill), Reserved)
    # an online pod still joins it: 0 cores recorded, and the reserve does not hold it to the cores either
    online = placed("on", {APP: "online"}, await snapshot(store), cores=50)
    assert online.devices[0][0].used_cores == 0 and online.charges[0].cores_unchecked
    assert isinstance(await store.reservations.reserve(online), Reserved)
    assert isinstance(await store.reservations.release("fill", "n1"), Allocation)
    # planned on a stale view (the card idle), an unclassed pod is refused by the reserve's sharing rule ...
    plain = placed("plain", {QOS: "best-effort"}, NodeSnapshot(INVENTORY, {}))
    refused = await store.reservations.reserve(plain)
    assert isinstance(refused, ReserveConflict) and refused.dimension is ConflictDimension.SHARING
    # ... and so is an offline pod now that the card runs an online one
    late = placed("late", {APP: "offline", QOS: "burst-share"}, NodeSnapshot(INVENTORY, {}))
    refused = await store.reservations.reserve(late)
    assert isinstance(refused, ReserveConflict) and refused.dimension is ConflictDimension.SHARING
    usage = (await store.usage.node_usage("n1"))["SG-a"]
    assert usage.tags == (("app=offline", 1), ("app=online", 1), ("qos=burst-share", 1))

    # the informer records the online pod from its annotations: the reservation's charge byte for byte, so recording
    # it only confirms the reservation
    pod = {
        "metadata": {
            "uid": "on",
            "namespace": "default",
            "name": "pod-on",
            "annotations": {
                "hami.io/vgpu-node": "n1",
                metax_sgpu.ALLOCATED_KEY: metax_sgpu.MetaxSgpuVendor().encode_devices(online.devices),
                APP: "online",
            },
        },
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"metax-tech.com/sgpu": "1"}}}]},
    }
    recorded = pod_allocation(pod, {"SG-a": 100}, VENDORS.all)
    assert recorded is not None and recorded.charges == online.charges  # tags, sharing rule and all
    confirmed = await store.reservations.record(recorded)
    assert not confirmed.usage_changed and (await store.usage.node_usage("n1"))["SG-a"] == usage

    # releasing the online pod takes its tag away; the card takes offline pods again
    assert await store.reservations.release("on", "n1") is not None
    assert (await store.usage.node_usage("n1"))["SG-a"].tags == (("app=offline", 1), ("qos=burst-share", 1))
    audit = await store.usage.recount("n1")
    assert audit.drift == 0
    assert await store.reservations.release("off", "n1") is not None
    assert "SG-a" not in await store.usage.node_usage("n1")
    assert (await store.usage.raw("n1")) == {}
