"""Reservations made by the extender at /filter: confirmed by the pod's annotations, or expired after the grace."""

from __future__ import annotations

from typing import Any

from tests.integration.informer.conftest import Harness, metric, settings
from tests.unit.informer.builders import devices, pod
from tests.waiting import eventually
from vgpu_scheduler.shared.codec.podannotations import allocation_labels
from vgpu_scheduler.shared.domain.accounting import collapse
from vgpu_scheduler.shared.domain.allocation import Allocation
from vgpu_scheduler.shared.domain.model import DeviceUsage
from vgpu_scheduler.shared.store import Claimed, ReservationState, Reserved, Store
from vgpu_scheduler.shared.vendors.pods import allocation_annotations

GRACE_S = 120.0


async def reserve_like_the_extender(
    store: Store, p: dict[str, Any], node: str, dev: list[tuple[str, int, int]]
) -> Allocation:
    """What /filter does: charge the namespace quota, then reserve the devices, keyed by pod uid."""
    devs = devices(dev)
    alloc = Allocation(
        pod_uid=p["metadata"]["uid"],
        namespace=p["metadata"]["namespace"],
        name=p["metadata"]["name"],
        node=node,
        devices=devs,
        charges=collapse(devs, 0, device_totals={u: 100 for u, _, _ in dev}),
    )
    await store.quota.charge(alloc.namespace, alloc.pod_uid, alloc.quota_mem_mib, alloc.quota_cores_pct)
    assert isinstance(await store.reservations.reserve(alloc), Reserved)
    return alloc


def bind_patch(node: str, dev: list[tuple[str, int, int]]) -> dict[str, Any]:
    """What /bind writes on the pod (one merge patch)."""
    return {
        "metadata": {
            "annotations": allocation_annotations(node, devices(dev), (), 1_700_000_000),
            "labels": allocation_labels(node),
        }
    }


async def test_unconfirmed_reservation_expires_after_the_grace(harness: Harness) -> None:
    em, store = harness.emulator, harness.store
    await harness.put_inventory("n1")
    async with harness.run(settings(grace_s=GRACE_S)) as svc:
        p = em.put(pod("waiting", "ns", phase="Pending"))  # bind never happens
        alloc = await reserve_like_the_extender(store, p, "n1", [("GPU-n1-0", 2000, 20)])
        assert await store.usage.node_usage("n1") == {"GPU-n1-0": DeviceUsage(1, 2000, 20)}

        assert await svc.term.expire_reservations() == 0  # within the grace: kept
        assert (await store.reservations.get(alloc.pod_uid)) is not None

        harness.clock.advance(GRACE_S + 1)
        await eventually(lambda: _gone(store, alloc.pod_uid), what="reservation expired")
        await harness.assert_audit()  # usage and the quota charge are given back
        assert await store.usage.node_usage("n1") == {}
        assert (await store.quota.get("ns")).used_mem_mib == 0
        await eventually(lambda: metric(svc, "vgpu_informer_reservations_expired_total") == 1)


async def test_reservation_of_a_deleted_pod_expires(harness: Harness) -> None:
    em, store = harness.emulator, harness.store
    await harness.put_inventory("n1")
    async with harness.run() as svc:
        p = em.put(pod("short-lived", phase="Pending"))
        alloc = await reserve_like_the_extender(store, p, "n1", [("GPU-n1-1", 1000, 0)])
        em.delete("pods", "default", "short-lived")
        harness.clock.advance(GRACE_S + 1)
        assert await svc.term.expire_reservations() in (0, 1)  # the sweep loop may have taken it first
        await eventually(lambda: _gone(store, alloc.pod_uid))
        await eventually(lambda: metric(svc, "vgpu_informer_reservations_expired_total") == 1)
        await harness.assert_audit()


async def test_a_reservation_made_after_its_pod_was_deleted_goes_at_the_next_sweep(harness: Harness) -> None:
    """kube-scheduler filters from its cache, so a ``/filter`` in flight can reserve for a pod whose delete event
    the informer has already handled: that record goes at the next sweep, not after the grace. A live pod's
    reservation made at the same moment stays."""
    em, store = harness.emulator, harness.store
    await harness.put_inventory("n1")
    async with harness.run(settings(grace_s=GRACE_S)) as svc:
        gone, alive = em.put(pod("gone", "ns", phase="Pending")), em.put(pod("alive", "ns", phase="Pending"))
        await eventually(lambda: svc.term.pods.get("gone", "ns") is not None, what="the informer saw the pod")
        em.delete("pods", "ns", "gone")
        # the informer's known set moves only once the handler has returned
        await eventually(lambda: svc.term.pods.get("gone", "ns") is None, what="the delete handled")
        late = await reserve_like_the_extender(store, gone, "n1", [("GPU-n1-0", 2000, 20)])
        kept = await reserve_like_the_extender(store, alive, "n1", [("GPU-n1-1", 1000, 10)])

        await eventually(lambda: _gone(store, late.pod_uid), what="released well within the grace")
        assert metric(svc, "vgpu_informer_reservations_expired_total") == 1
        assert await svc.term.expire_reservations() == 0
        assert await _state(store, kept.pod_uid, ReservationState.RESERVED)
        assert await store.usage.node_usage("n1") == {"GPU-n1-1": DeviceUsage(1, 1000, 10)}
        assert (await store.quota.get("ns")).used_mem_mib == 1000
        em.delete("pods", "ns", "alive")  # released by its delete event: the books end even
        await eventually(lambda: _gone(store, kept.pod_uid), what="released with its pod")


async def test_reservation_confirmed_by_the_pod_annotations(harness: Harness) -> None:
    em, store = harness.emulator, harness.store
    await harness.put_inventory("n1")
    dev = [("GPU-n1-0", 3000, 30)]
    async with harness.run() as svc:
        p = em.put(pod("bound", "ns", phase="Pending"))
        alloc = await reserve_like_the_extender(store, p, "n1", dev)
        rec = await store.reservations.get(alloc.pod_uid)
        assert rec is not None and rec.state is ReservationState.RESERVED

        em.patch("pods", "ns", "bound", bind_patch("n1", dev))
        await eventually(lambda: _state(store, alloc.pod_uid, ReservationState.CONFIRMED), what="confirmed")
        confirmed = await store.reservations.get(alloc.pod_uid)
        assert confirmed is not None and confirmed.allocation.charges == alloc.charges
        # charged once, not twice
        assert await store.usage.node_usage("n1") == {"GPU-n1-0": DeviceUsage(1, 3000, 30)}
        assert (await store.quota.get("ns")).used_mem_mib == 3000

        harness.clock.advance(GRACE_S + 1)
        assert await svc.term.expire_reservations() == 0
        assert metric(svc, "vgpu_informer_reservations_expired_total") == 0
        await harness.assert_audit()


async def test_expiry_confirms_a_reservation_whose_annotations_are_there(harness: Harness) -> None:
    """The sweep re-reads the pod: a bound pod's reservation is confirmed, not dropped."""
    em, store = harness.emulator, harness.store
    await harness.put_inventory("n1")
    dev = [("GPU-n1-2", 500, 5)]
    p = em.put(pod("racy", phase="Pending"))
    alloc = await reserve_like_the_extender(store, p, "n1", dev)
    em.patch("pods", "default", "racy", bind_patch("n1", dev))
    async with harness.run() as svc:
        harness.clock.advance(GRACE_S + 1)
        assert await svc.term.expire_reservations() == 0
        rec = await store.reservations.get(alloc.pod_uid)
        assert rec is not None and rec.state is ReservationState.CONFIRMED
        await harness.assert_audit()


async def _gone(store: Store, uid: str) -> bool:
    return await store.reservations.get(uid) is None


async def _state(store: Store, uid: str, state: ReservationState) -> bool:
    rec = await store.reservations.get(uid)
    return rec is not None and rec.state is state


async def test_a_record_a_bind_is_claiming_is_not_expired_until_its_claim_ends(harness: Harness) -> None:
    """Past the grace, a record mid-bind (a live claim) is the bind's; once the claim has expired it is collected."""
    em, store = harness.emulator, harness.store
    await harness.put_inventory("n1")
    async with harness.run(settings(grace_s=GRACE_S)) as svc:
        p = em.put(pod("binding", "ns", phase="Pending"))
        alloc = await reserve_like_the_extender(store, p, "n1", [("GPU-n1-0", 2000, 20)])
        assert isinstance(await store.reservations.claim(alloc.pod_uid, "n1", "bind-a", 600), Claimed)
        harness.clock.advance(GRACE_S + 1)
        assert await svc.term.expire_reservations() == 0
        rec = await store.reservations.get(alloc.pod_uid)
        assert rec is not None and rec.state is ReservationState.BINDING

        # the bind died: its claim runs out (1 ms on the server clock), then the sweep collects the record
        assert isinstance(await store.reservations.claim(alloc.pod_uid, "n1", "bind-a", 0.001), Claimed)
        await eventually(lambda: _gone(store, alloc.pod_uid), what="the record of the dead bind expired")
        await harness.assert_audit()
