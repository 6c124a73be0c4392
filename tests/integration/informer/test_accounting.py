"""Pod accounting end to end: the informer mirrors what pods hold into Redis (difference 10, §5.4)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.informer.conftest import Harness, metric
from tests.unit.informer.builders import mig_alloc, pod
from tests.waiting import eventually
from vgpu_scheduler.services.informer import accounting, pods
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.domain.model import DeviceUsage, MigPlacement
from vgpu_scheduler.shared.store import ReservationState, Store


async def test_pod_lifecycle_from_allocation_to_deletion(harness: Harness) -> None:
    em, store = harness.emulator, harness.store
    await harness.put_inventory("n1")
    async with harness.run() as svc:
        em.put(pod("p1", "team-a", node="n1", app=[[("GPU-n1-0", 3000, 30)]], phase="Pending"))
        await eventually(lambda: store.usage.node_usage("n1"), what="usage appears")
        assert await store.usage.node_usage("n1") == {"GPU-n1-0": DeviceUsage(1, 3000, 30)}
        uid = em.get("Pod", "team-a", "p1")["metadata"]["uid"]  # type: ignore[index]
        rec = await store.reservations.get(uid)
        assert rec is not None and rec.state is ReservationState.CONFIRMED
        assert (await store.quota.get("team-a")).used_mem_mib == 3000
        await harness.assert_audit()

        em.patch("pods", "team-a", "p1", {"status": {"phase": "Running"}})
        await harness.assert_audit()
        await eventually(lambda: metric(svc, "vgpu_informer_pods_tracked") == 1)

        em.delete("pods", "team-a", "p1")
        await eventually(lambda: _none(store, uid), what="released")
        await harness.assert_audit()
        assert await store.usage.node_usage("n1") == {}
        assert (await store.quota.get("team-a")).used_mem_mib == 0
        await eventually(lambda: metric(svc, "vgpu_informer_pods_tracked") == 0)


async def _none(store: Store, uid: str) -> bool:
    return await store.reservations.get(uid) is None


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
async def test_terminated_pods_release_at_once(harness: Harness, phase: str) -> None:
    em, store = harness.emulator, harness.store
    async with harness.run():
        em.put(pod("p1", node="n1", app=[[("GPU-a", 1000, 10)]], phase="Running"))
        em.put(pod("p2", node="n1", app=[[("GPU-a", 500, 5)]], phase="Running"))
        await eventually(lambda: _usage_is(store, "n1", {"GPU-a": DeviceUsage(2, 1500, 15)}), what="both pods counted")
        em.patch("pods", "default", "p1", {"status": {"phase": phase}})
        await eventually(lambda: _usage_is(store, "n1", {"GPU-a": DeviceUsage(1, 500, 5)}), what="p1 released")
        await harness.assert_audit()


async def test_terminating_pods_stay_counted(harness: Harness) -> None:
    em, store = harness.emulator, harness.store
    async with harness.run():
        em.put(pod("p1", node="n1", app=[[("GPU-a", 1000, 10)]], phase="Running"))
        await eventually(lambda: _usage_is(store, "n1", {"GPU-a": DeviceUsage(1, 1000, 10)}))
        em.patch("pods", "default", "p1", {"metadata": {"deletionTimestamp": "2030-01-01T00:00:00Z"}})
        await em.wait_for(lambda: "deletionTimestamp" in em.get("Pod", "default", "p1")["metadata"])  # type: ignore[index]
        await harness.assert_audit()
        assert await store.usage.node_usage("n1") == {"GPU-a": DeviceUsage(1, 1000, 10)}


async def _usage_is(store: Store, node: str, want: dict[str, DeviceUsage]) -> bool:
    return bool(await store.usage.node_usage(node) == want)


async def test_init_containers_collapse_for_usage_and_quota(harness: Harness) -> None:
    em, store = harness.emulator, harness.store
    async with harness.run():
        # HAMi #3052: a GPU-less init container must not disturb the count; a GPU init container counts as its peak
        em.put(pod("a", "ns", node="n1", init=[[]], app=[[("GPU-1", 2000, 20)], [("GPU-1", 1000, 10)]]))
        em.put(pod("b", "ns", node="n1", init=[[("GPU-1", 6000, 60)]], app=[[("GPU-1", 1000, 10)]]))
        await harness.assert_audit()
        assert await store.usage.node_usage("n1") == {"GPU-1": DeviceUsage(3, 9000, 90)}
        q = await store.quota.get("ns")
        assert (q.used_mem_mib, q.used_cores_pct) == (9000, 90)


async def test_multi_gpu_quota_usage_sums_every_device(harness: Harness) -> None:
    em, store = harness.emulator, harness.store
    async with harness.run():
        # HAMi #1393: a 4-GPU pod uses 4 × its per-GPU memory
        em.put(pod("big", "ml", node="n1", app=[[(f"GPU-{i}", 4000, 25) for i in range(4)]]))
        await harness.assert_audit()
        q = await store.quota.get("ml")
        assert (q.used_mem_mib, q.used_cores_pct) == (16000, 100)


async def test_mig_allocations_occupy_their_placements(harness: Harness) -> None:
    em, store = harness.emulator, harness.store
    async with harness.run():
        em.put(
            pod(
                "m1",
                node="n1",
                app=[[("GPU-M", 10240, 28)], [("GPU-M", 4864, 14)]],
                mig=[mig_alloc(0, 0, "GPU-M", 0, 2), mig_alloc(1, 0, "GPU-M", 6, 1)],
            )
        )
        await harness.assert_audit()
        usage = (await store.usage.node_usage("n1"))["GPU-M"]
        assert usage.mig_in_use == (MigPlacement(0, 2), MigPlacement(6, 1))
        assert (usage.used, usage.used_mem_mib) == (2, 15104)


async def test_legacy_mig_suffixes_are_charged(harness: Harness) -> None:
    em, store = harness.emulator, harness.store
    p = pod("l1", node="n1", app=[[("GPU-L", 10240, 28)]])
    value = "GPU-L[1-2],NVIDIA,10240,28:;"
    p["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"] = value
    async with harness.run():
        em.put(p)
        await harness.assert_audit()
        usage = (await store.usage.node_usage("n1"))["GPU-L"]
        assert (usage.legacy_geometry, usage.legacy_slots) == (1, frozenset({2}))


async def test_pods_present_before_start_are_loaded(harness: Harness) -> None:
    em = harness.emulator
    em.put(pod("p1", node="n1", app=[[("GPU-a", 1000, 10)]], phase="Running"))
    em.put(pod("p2", node="n2", app=[[("GPU-b", 2000, 20)]], phase="Running"))
    em.put(pod("gone", node="n2", app=[[("GPU-b", 2000, 20)]], phase="Succeeded"))
    async with harness.run() as svc:
        assert svc.synced.is_set()
        await harness.assert_audit()
        assert (await harness.store.meta.status()).epoch == svc.synced_epoch


async def test_unreadable_annotation_is_skipped_reported_and_others_proceed(harness: Harness) -> None:
    em, store = harness.emulator, harness.store
    bad = pod("bad", node="n1", app=[[("GPU-a", 1000, 10)]])
    bad["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"] = "GPU-a,NVIDIA,lots,10:;"
    async with harness.run(audit=False) as svc:  # audited below, without the unreadable pod
        em.put(bad)
        em.put(pod("good", node="n1", app=[[("GPU-a", 500, 5)]]))
        await eventually(lambda: _usage_is(store, "n1", {"GPU-a": DeviceUsage(1, 500, 5)}), what="good counted")
        await eventually(lambda: metric(svc, "vgpu_informer_malformed_total", kind="pod_allocation") == 1)
        await em.wait_for(lambda: any(e["reason"] == "UnreadableAllocation" for e in em.list("events")))
        event = next(e for e in em.list("events") if e["reason"] == "UnreadableAllocation")
        assert event["involvedObject"]["name"] == "bad" and event["type"] == "Warning"
        assert "hami.io/vgpu-devices-allocated" in event["message"]
        # the same problem again (a status update) is not reported twice
        em.patch("pods", "default", "bad", {"status": {"phase": "Running"}})
        em.patch("pods", "default", "good", {"status": {"phase": "Running"}})
        await svc.term.reconcile()
        assert metric(svc, "vgpu_informer_malformed_total", kind="pod_allocation") == 1
        pods = [p for p in harness.pods() if p["metadata"]["name"] != "bad"]
        from tests.audit import usage_from_pods

        assert await store.usage.node_usage("n1") == usage_from_pods(pods)["n1"]


async def _handled(harness: Harness, svc: Any, name: str) -> None:
    """A barrier: pod ``name`` (not placed) is created after the updates of interest; once the informer's cache
    holds it, every earlier pod event was handled (one at a time, in order)."""
    harness.emulator.put(pod(name))
    await eventually(lambda: svc.term.pods.get(name, "default") is not None, what=f"{name} handled")


async def test_an_update_that_leaves_the_allocation_as_it_was_decodes_nothing(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    em = harness.emulator
    await harness.put_inventory("n1")
    decoded: list[str] = []
    real = pods.pod_allocation

    def counting(pod_obj: Any, *args: Any, **kwargs: Any) -> Any:
        decoded.append(pod_obj["metadata"]["name"])
        return real(pod_obj, *args, **kwargs)

    monkeypatch.setattr(accounting, "pod_allocation", counting)
    async with harness.run() as svc:
        em.put(pod("p1", node="n1", app=[[("GPU-n1-0", 3000, 30)]], bind_phase="allocating"))
        await eventually(lambda: metric(svc, "vgpu_informer_pods_tracked") == 1)
        await _handled(harness, svc, "barrier-1")
        decoded.clear()
        # what the device plugin and the kubelet change: the bind phase, the status, labels
        em.patch("pods", "default", "p1", {"metadata": {"annotations": {keys.BIND_PHASE: "success"}}})
        em.patch("pods", "default", "p1", {"status": {"phase": "Running"}, "metadata": {"labels": {"a": "b"}}})
        await _handled(harness, svc, "barrier-2")
        assert decoded == []
        # a changed allocation is read again (and recorded)
        em.patch(
            "pods",
            "default",
            "p1",
            {"metadata": {"annotations": {keys.DEVICES_ALLOCATED: "GPU-n1-1,NVIDIA,2000,20:;"}}},
        )
        await eventually(lambda: harness.store.usage.node_usage("n1"), what="usage")
        await _handled(harness, svc, "barrier-3")
        assert "p1" in decoded
        assert await harness.store.usage.node_usage("n1") == {"GPU-n1-1": DeviceUsage(1, 2000, 20)}
        await harness.assert_audit()


async def test_a_node_s_inventory_is_read_once_until_its_registration_changes(harness: Harness) -> None:
    em = harness.emulator
    await harness.put_inventory("n1")
    em.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "annotations": {"hami.io/x": "1"}}})
    async with harness.run() as svc:
        inventory = svc.term.accountant._store.inventory
        reads: list[str] = []
        get = inventory.get

        async def counted(node: str) -> Any:
            reads.append(node)
            return await get(node)

        inventory.get = counted  # type: ignore[method-assign]
        try:
            await eventually(lambda: svc.term.nodes.get("n1") is not None, what="node seen")
            for i in range(3):
                em.put(pod(f"p{i}", node="n1", app=[[(f"GPU-n1-{i}", 1000, 10)]]))
            await eventually(lambda: metric(svc, "vgpu_informer_pods_tracked") == 3)
            assert reads == ["n1"]
            # the node lock comes and goes with every bind: the registration stays
            em.patch(
                "nodes", None, "n1", {"metadata": {"annotations": {keys.NODE_LOCK: "2026-11-27T09:00:00Z,default,p9"}}}
            )
            em.patch("nodes", None, "n1", {"metadata": {"annotations": {keys.NODE_LOCK: None}}})
            em.put(pod("p3", node="n1", app=[[("GPU-n1-3", 1000, 10)]]))
            await eventually(lambda: metric(svc, "vgpu_informer_pods_tracked") == 4)
            assert reads == ["n1"]
            # a new registration: read again (and, for a while, for every pod: the registrar writes it just after)
            em.patch("nodes", None, "n1", {"metadata": {"annotations": {"hami.io/x": "2"}}})
            await eventually(lambda: svc.term.registrations.get("n1", {}).get("hami.io/x") == "2", what="seen")
            em.put(pod("p4", node="n1", app=[[("GPU-n1-0", 1000, 10)]]))
            em.put(pod("p5", node="n1", app=[[("GPU-n1-1", 1000, 10)]]))
            await eventually(lambda: metric(svc, "vgpu_informer_pods_tracked") == 6)
            assert reads == ["n1"] * 3
        finally:
            inventory.get = get  # type: ignore[method-assign]
        await harness.assert_audit()
