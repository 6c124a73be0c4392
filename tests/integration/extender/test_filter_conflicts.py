"""Races between plan and commit: another client takes the room first; the filter retries on fresh data or fails
cleanly, and never over-commits. Also quota: the plan's own check and the store's atomic charge."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from tests.integration.extender.filter_harness import node, patched, running_extender, seed, wire_doc
from vgpu_scheduler.shared.domain.allocation import Allocation
from vgpu_scheduler.shared.domain.model import ContainerDevice
from vgpu_scheduler.shared.domain.quota import QuotaLimits
from vgpu_scheduler.shared.k8s import Api
from vgpu_scheduler.shared.store import (
    ConflictDimension,
    Reservations,
    ReserveConflict,
    ReserveResult,
    Store,
    Unsettled,
)


class Intercepted:
    """Wraps the store's reservations: runs ``before(alloc)`` ahead of each of the first ``times`` reserves."""

    def __init__(self, inner: Reservations, before: Callable[[Allocation], Awaitable[None]], times: int = 1) -> None:
        self._inner = inner
        self._before = before
        self.left = times
        self.calls: list[str] = []

    async def reserve(
        self, alloc: Allocation, fence: Any = None, *, mutex: bool = False, epoch: str | None = None, hint: str = ""
    ) -> ReserveResult:
        await self._intercept(alloc)
        return await self._inner.reserve(alloc, fence, mutex=mutex, epoch=epoch, hint=hint)

    async def reserve_fresh(
        self, alloc: Allocation, *, mutex: bool = False, epoch: str | None = None, hint: str = ""
    ) -> ReserveResult | Unsettled:
        await self._intercept(alloc)
        return await self._inner.reserve_fresh(alloc, mutex=mutex, epoch=epoch, hint=hint)

    async def _intercept(self, alloc: Allocation) -> None:
        self.calls.append(alloc.node)
        if self.left > 0:
            self.left -= 1
            await self._before(alloc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def whole_card_pod(uid: str, nodes: list[str]) -> dict[str, Any]:
    body = wire_doc("001-filter.json")
    body["Pod"]["metadata"]["uid"] = uid
    body["Pod"]["metadata"]["name"] = f"pod-{uid}"
    body["Pod"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpucores"] = "100"
    body["NodeNames"] = nodes
    return body


def steal(other: Store, uid: str) -> Callable[[Allocation], Awaitable[None]]:
    """Take every device the filter is about to reserve, for pod ``uid``, through another client."""

    async def before(alloc: Allocation) -> None:
        devices = tuple(tuple(ContainerDevice(d.uuid, d.used_mem_mib, d.used_cores) for d in c) for c in alloc.devices)
        charges = tuple(dataclasses.replace(c, exclusive=True) for c in alloc.charges)
        thief = Allocation(uid, "default", uid, alloc.node, devices, charges)
        assert not isinstance(await other.reservations.reserve(thief), ReserveConflict)

    return before


async def test_a_stolen_device_makes_the_filter_retry_on_fresh_data(store: Store, other_store: Store, api: Api) -> None:
    await seed(store, [node("n1", 1, count=1), node("n2", 1, count=1)])
    spy = Intercepted(store.reservations, steal(other_store, "thief"))
    async with running_extender(patched(store, reservations=spy), api) as ext:
        answer = await ext.filter(whole_card_pod("p1", ["n1", "n2"]))
        conflicts = ext.metric("vgpu_reservation_conflicts_total")
        retries = ext.metric("vgpu_reservation_retries_total")
    assert answer["NodeNames"] == ["n2"]
    assert spy.calls == ["n1", "n2"]
    assert (conflicts, retries) == (1, 1)
    assert await store.reservations.node_of("thief") == "n1"
    assert await store.reservations.node_of("p1") == "n2"


def share(other: Store, uid: str) -> Callable[[Allocation], Awaitable[None]]:
    """Put a small pod ``uid`` on the first device the filter is about to reserve (shared, not exclusive)."""

    async def before(alloc: Allocation) -> None:
        first = alloc.charges[0]
        small = dataclasses.replace(first, slots=1, mem_mib=100, cores_pct=0, exclusive=False)
        thief = Allocation(uid, "default", uid, alloc.node, ((ContainerDevice(first.uuid, 100, 0),),), (small,))
        assert not isinstance(await other.reservations.reserve(thief), ReserveConflict)

    return before


async def test_a_mutex_pod_never_shares_a_device_taken_between_plan_and_commit(
    store: Store, other_store: Store, api: Api
) -> None:
    await seed(store, [node("n1", 2)])
    body = wire_doc("001-filter.json")
    body["Pod"]["metadata"]["annotations"] = {"hami.io/gpu-scheduler-policy": "mutex"}
    body["Pod"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"] = "1000"
    body["NodeNames"] = ["n1"]
    spy = Intercepted(store.reservations, share(other_store, "neighbour"))
    async with running_extender(patched(store, reservations=spy), api) as ext:
        answer = await ext.filter(body)
    assert answer["NodeNames"] == ["n1"]
    mine = await store.reservations.get(body["Pod"]["metadata"]["uid"])
    theirs = await store.reservations.get("neighbour")
    assert mine is not None and theirs is not None
    assert {c.uuid for c in mine.allocation.charges}.isdisjoint(c.uuid for c in theirs.allocation.charges)


async def test_when_the_thief_takes_everything_the_filter_fails_with_reasons(
    store: Store, other_store: Store, api: Api
) -> None:
    await seed(store, [node("n1", 1, count=1), node("n2", 1, count=1)])
    thieves = iter(["t1", "t2"])

    async def before(alloc: Allocation) -> None:
        await steal(other_store, next(thieves))(alloc)

    spy = Intercepted(store.reservations, before, times=2)
    async with running_extender(patched(store, reservations=spy), api) as ext:
        answer = await ext.filter(whole_card_pod("p1", ["n1", "n2"]))
    assert answer["NodeNames"] is None and answer["Error"] == ""
    assert set(answer["FailedAndUnresolvableNodes"]) == {"n1", "n2"}
    assert await store.reservations.node_of("p1") is None
    for n in ("n1", "n2"):  # never over-committed: one whole-card task per single-slot card
        assert [u.used for u in (await store.usage.node_usage(n)).values()] == [1]


async def test_conflicts_on_every_attempt_end_in_a_clear_error(store: Store, api: Api) -> None:
    await seed(store, [node("n1", 2)])

    class AlwaysConflict:
        def __init__(self, inner: Reservations) -> None:
            self.inner = inner
            self.calls = 0

        async def reserve(
            self, alloc: Allocation, fence: Any = None, *, mutex: bool = False, epoch: str | None = None, hint: str = ""
        ) -> ReserveResult:
            self.calls += 1
            return ReserveConflict(alloc.pod_uid, alloc.node, ConflictDimension.SLOTS, "GPU-n1-0", 1, 0, "busy")

        async def reserve_fresh(
            self, alloc: Allocation, *, mutex: bool = False, epoch: str | None = None, hint: str = ""
        ) -> ReserveResult:
            return await self.reserve(alloc, mutex=mutex, epoch=epoch, hint=hint)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

    flaky = AlwaysConflict(store.reservations)
    async with running_extender(patched(store, reservations=flaky), api) as ext:
        answer = await ext.filter(whole_card_pod("p1", ["n1"]))
        conflicts = ext.metric("vgpu_reservation_conflicts_total")
        retries = ext.metric("vgpu_reservation_retries_total")
    assert answer["Error"] == "reservation conflicts on 5 attempts (nodes are changing fast): retry the pod"
    assert flaky.calls == 5 and (conflicts, retries) == (5, 4)


async def test_two_replicas_racing_for_the_last_cards_never_over_commit(
    store: Store, other_store: Store, api: Api
) -> None:
    """Two replicas, 12 whole-card pods at once for 8 single-slot cards: exactly 8 placed, the other 4 refused.

    A filter that loses the store's race on every one of its attempts answers "retry the pod" instead (the
    kube-scheduler retries it); it never takes a card, so the 8 cards still go to 8 pods."""
    await seed(store, [node("n1", 4, count=1), node("n2", 4, count=1)])
    async with running_extender(store, api) as a, running_extender(other_store, api) as b:
        answers = await asyncio.gather(
            *((a if i % 2 else b).filter(whole_card_pod(f"p{i}", ["n1", "n2"])) for i in range(12))
        )
    placed = [x for x in answers if x["NodeNames"]]
    refused = [x for x in answers if x["FailedAndUnresolvableNodes"]]
    errors = [x for x in answers if x["Error"]]
    assert len(placed) + len(refused) + len(errors) == 12
    assert (len(placed), len(refused) + len(errors)) == (8, 4)
    assert all(x["Error"].endswith("retry the pod") for x in errors), errors
    assert all(x["FailedAndUnresolvableNodes"]["n1"] == "4/4 CardTimeSlicingExhausted" for x in refused), refused
    for n in ("n1", "n2"):
        usage = await store.usage.node_usage(n)
        assert sorted(u.used for u in usage.values()) == [1, 1, 1, 1]


def quota_pod(uid: str, mem: str, nodes: list[str]) -> dict[str, Any]:
    body = copy.deepcopy(wire_doc("005-filter.json"))
    body["Pod"]["metadata"]["uid"] = uid
    body["Pod"]["metadata"]["name"] = f"pod-{uid}"
    body["Pod"]["spec"]["containers"][0]["resources"]["limits"] = {
        "nvidia.com/gpu": "1",
        "nvidia.com/gpumem": mem,
        "nvidia.com/gpucores": "10",
    }
    body["NodeNames"] = nodes
    return body


async def test_the_namespace_quota_is_charged_and_enforced(store: Store, api: Api) -> None:
    await seed(store, [node("n1", 2)])
    await store.quota.set_limits("default", QuotaLimits(mem_mib=5000, cores_pct=None))
    async with running_extender(store, api) as ext:
        first = await ext.filter(quota_pod("q1", "3000", ["n1"]))
        second = await ext.filter(quota_pod("q2", "3000", ["n1"]))
    assert first["NodeNames"] == ["n1"]
    assert second["FailedAndUnresolvableNodes"] == {"n1": "2/2 ResourceQuotaNotFit"}  # the plan's own quota check
    state = await store.quota.get("default")
    assert (state.used_mem_mib, state.used_cores_pct) == (3000, 10)


async def test_a_quota_race_lost_at_the_store_fails_every_node_with_resource_quota_not_fit(
    store: Store, other_store: Store, api: Api
) -> None:
    await seed(store, [node("n1", 2), node("n2", 2)])
    await store.quota.set_limits("default", QuotaLimits(mem_mib=5000, cores_pct=None))

    class RacingQuota:
        """Another pod's charge lands between the filter's quota read and its charge."""

        def __init__(self, inner: Any) -> None:
            self.inner = inner

        async def charge(self, namespace: str, pod_uid: str, mem_mib: int, cores_pct: int, **kw: Any) -> Any:
            await other_store.quota.charge(namespace, "racer", 4000, 0)
            return await self.inner.charge(namespace, pod_uid, mem_mib, cores_pct, **kw)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

    racing = patched(store, quota=RacingQuota(store.quota))
    async with running_extender(racing, api) as ext:
        answer = await ext.filter(quota_pod("q1", "3000", ["n1", "n2"]))
        quota_exceeded = ext.metric("vgpu_filter_outcomes_total", outcome="quota_exceeded")
    assert answer["FailedAndUnresolvableNodes"] == {"n1": "ResourceQuotaNotFit", "n2": "ResourceQuotaNotFit"}
    assert quota_exceeded == 1
    assert await store.reservations.node_of("q1") is None
    assert "q1" not in await store.quota.pod_charges("default")


async def test_a_device_conflict_refunds_the_quota_charge(store: Store, other_store: Store, api: Api) -> None:
    await seed(store, [node("n1", 1, count=1)])
    await store.quota.set_limits("default", QuotaLimits(mem_mib=100_000, cores_pct=None))
    spy = Intercepted(store.reservations, steal(other_store, "thief"))
    async with running_extender(patched(store, reservations=spy), api) as ext:
        answer = await ext.filter(quota_pod("q1", "3000", ["n1"]))
    assert set(answer["FailedAndUnresolvableNodes"]) == {"n1"}
    assert "q1" not in await store.quota.pod_charges("default")


async def test_quota_limits_scale_with_the_memory_factor(store: Store, api: Api) -> None:
    """memoryFactor 4: a request of 1000 is 4000 MiB on the card and against the quota, whose raw limit 1000 allows
    4000 (hami-wire §8)."""
    from tests.integration.extender.filter_harness import settings
    from vgpu_scheduler.shared.domain.model import NvidiaConfig

    await seed(store, [node("n1", 2)])
    await store.quota.set_limits("default", QuotaLimits(mem_mib=1000, cores_pct=None))
    base = settings()
    scaled = dataclasses.replace(base, common=dataclasses.replace(base.common, nvidia=NvidiaConfig(memory_factor=4)))
    async with running_extender(store, api, extender_settings=scaled) as ext:
        first = await ext.filter(quota_pod("q1", "1000", ["n1"]))
        second = await ext.filter(quota_pod("q2", "1", ["n1"]))
    assert first["NodeNames"] == ["n1"]
    assert second["FailedAndUnresolvableNodes"] == {"n1": "2/2 ResourceQuotaNotFit"}
    state = await store.quota.get("default")
    assert state.used_mem_mib == 4000
    record = await store.reservations.get("q1")
    assert record is not None and record.allocation.devices[0][0].used_mem_mib == 4000
