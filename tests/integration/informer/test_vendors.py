"""The informer with several vendors: a pod's devices are read from every enabled vendor's allocated annotation,
so usage, reconcile and release cover them all (a small fake vendor next to NVIDIA)."""

from __future__ import annotations

from typing import Any

from tests.fakevendor_node import FAKE, FAKE_ALLOCATED, FAKE_COUNT, FakeVendor
from tests.integration.informer.conftest import Harness
from tests.unit.informer.builders import pod
from tests.waiting import eventually
from vgpu_scheduler.shared.domain.model import DeviceUsage
from vgpu_scheduler.shared.store import ReservationState, Store
from vgpu_scheduler.shared.vendors.nvidia import NvidiaVendor
from vgpu_scheduler.shared.vendors.registry import Vendors

VENDORS = Vendors((NvidiaVendor(), FakeVendor()))


def mixed_pod(name: str) -> dict[str, Any]:
    p = pod(
        name,
        "team",
        node="n1",
        app=[[("GPU-1", 1000, 10)], []],
        extra_annotations={FAKE_ALLOCATED: "FK-1,FAKE,4096,25:;FK-2,FAKE,2048,0:;"},
        phase="Running",
    )
    p["spec"]["containers"][0]["resources"]["limits"][FAKE_COUNT] = "1"
    p["spec"]["containers"][1]["resources"]["limits"] = {FAKE_COUNT: "1"}
    return p


async def _usage_is(store: Store, node: str, want: dict[str, DeviceUsage]) -> bool:
    return bool(await store.usage.node_usage(node) == want)


async def test_usage_reconcile_and_release_cover_every_vendor(harness: Harness) -> None:
    em, store = harness.emulator, harness.store
    async with harness.run(vendors=VENDORS, audit=False) as svc:
        em.put(mixed_pod("p1"))
        want = {
            "GPU-1": DeviceUsage(1, 1000, 10),
            "FK-1": DeviceUsage(1, 4096, 25),
            "FK-2": DeviceUsage(1, 2048, 0),
        }
        await eventually(lambda: _usage_is(store, "n1", want), what="both vendors counted")
        uid = em.get("Pod", "team", "p1")["metadata"]["uid"]  # type: ignore[index]
        rec = await store.reservations.get(uid)
        assert rec is not None and rec.state is ReservationState.CONFIRMED
        assert [[(d.uuid, d.type) for d in ctr] for ctr in rec.allocation.devices] == [
            [("GPU-1", "NVIDIA"), ("FK-1", FAKE)],
            [("FK-2", FAKE)],
        ]

        report = await svc.term.reconcile()
        assert report.repairs == {}  # what the events recorded is what a fresh list computes

        em.delete("pods", "team", "p1")
        await eventually(lambda: _usage_is(store, "n1", {}), what="released")
        assert await store.reservations.get(uid) is None


async def test_a_pod_asking_only_for_another_vendor_is_ours(harness: Harness) -> None:
    em, store = harness.emulator, harness.store
    async with harness.run(vendors=VENDORS, audit=False) as svc:
        p = pod("only-fake", node="n2", app=[[]], extra_annotations={FAKE_ALLOCATED: "FK-7,FAKE,100,0:;"})
        del p["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"]
        del p["metadata"]["annotations"]["hami.io/vgpu-devices-to-allocate"]
        p["spec"]["containers"][0]["resources"]["limits"] = {FAKE_COUNT: "1"}
        assert svc.term.accountant.ours(p)
        unplaced = pod("waiting", app=[[]])
        unplaced["spec"]["containers"][0]["resources"]["limits"] = {FAKE_COUNT: "1"}
        assert svc.term.accountant.ours(unplaced)
        assert not svc.term.accountant.ours(pod("plain", app=[[]]))

        em.put(p)
        await eventually(lambda: _usage_is(store, "n2", {"FK-7": DeviceUsage(1, 100, 0)}), what="counted")
        em.patch("pods", "default", "only-fake", {"status": {"phase": "Succeeded"}})
        await eventually(lambda: _usage_is(store, "n2", {}), what="released on completion")
