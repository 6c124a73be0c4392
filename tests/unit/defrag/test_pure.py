"""The executor's pure parts: when a wave has settled (``Wave.progress``), where the helped pod fits once the moves
are made (``fit_on_cards``), how many cards a partial run freed, the options' checks, and the 429 of a
PodDisruptionBudget told apart from any other 429."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests import builders as b
from vgpu_scheduler.shared.defrag.hold import fit_on_cards
from vgpu_scheduler.shared.defrag.result import ExecuteOptions, freed_cards
from vgpu_scheduler.shared.defrag.waves import Wave
from vgpu_scheduler.shared.domain.defragmodel import DefragPlan, Move
from vgpu_scheduler.shared.domain.model import DeviceCharge, NvidiaConfig, PodConstraints
from vgpu_scheduler.shared.domain.plan import Decision
from vgpu_scheduler.shared.domain.scoring import Policies
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.domain.vendor import NVIDIA_ONLY
from vgpu_scheduler.shared.errors import TransientError
from vgpu_scheduler.shared.k8s import DisruptionBudgetError
from vgpu_scheduler.shared.k8s.errors import error_for

RS = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "rs-1", "controller": True}


def pod(
    uid: str, *, owner: dict[str, Any] | None = RS, node_name: str | None = "n2", deleting: bool = False
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": uid,
        "namespace": "ns",
        "uid": uid,
        "creationTimestamp": f"2026-01-01T00:00:{uid[-1]}0Z",
    }
    if owner is not None:
        meta["ownerReferences"] = [owner]
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    return {"metadata": meta, "spec": {"nodeName": node_name} if node_name else {}}


def move(uid: str, source: str = "n1", card: str = "GPU-n1-0") -> Move:
    return Move("ns", uid, uid, 0, source, (card,), "n2", ("GPU-n2-0",), 4000)


def wave_of(*evicted: dict[str, Any], before: list[dict[str, Any]]) -> Wave:
    wave = Wave.begin(before)
    for p in evicted:
        wave.evicted(move(p["metadata"]["uid"]), p)
    return wave


def test_a_move_settles_once_its_pod_is_gone_and_a_new_pod_of_its_controller_is_bound() -> None:
    old, other = pod("a1"), pod("b1")
    wave = wave_of(old, before=[old, other])
    assert wave.progress([old, other]) == (
        {},
        ["ns/a1 is still there", "no replacement of ns/a1 (ReplicaSet web) bound yet"],
    )
    assert wave.progress([other]) == ({}, ["no replacement of ns/a1 (ReplicaSet web) bound yet"])
    unbound = pod("c1", node_name=None)
    assert wave.progress([other, unbound])[0] == {}
    new = pod("c2")
    settled, waiting = wave.progress([other, new])
    assert list(settled) == ["a1"] and settled["a1"]["metadata"]["name"] == "c2" and waiting == []


def test_pods_of_other_controllers_or_being_deleted_are_no_replacements() -> None:
    old = pod("a1")
    wave = wave_of(old, before=[old])
    stranger = pod("s1", owner={**RS, "uid": "rs-2"})
    dying = pod("d1", deleting=True)
    assert wave.progress([stranger, dying])[0] == {}


def test_each_evicted_pod_needs_its_own_replacement() -> None:
    a, b = pod("a1"), pod("b1")
    wave = wave_of(a, b, before=[a, b])
    settled, waiting = wave.progress([pod("c1")])
    assert list(settled) == ["a1"] and waiting == ["no replacement of ns/b1 (ReplicaSet web) bound yet"]
    assert list(wave.progress([pod("c1"), pod("c2")])[0]) == ["a1", "b1"]


def test_a_pod_without_a_controller_settles_once_gone() -> None:
    bare = pod("a1", owner=None)
    wave = wave_of(bare, before=[bare])
    assert wave.progress([]) == ({"a1": {}}, [])


def test_freed_cards_counts_the_cards_every_planned_pod_has_left() -> None:
    a, b, c = move("a"), move("b"), move("c", card="GPU-n1-1")
    plan = DefragPlan(moves=(a, b, c), target=None, freed=(("n1", "GPU-n1-0"), ("n1", "GPU-n1-1")))
    assert freed_cards(plan, []) == 0
    assert freed_cards(plan, [a]) == 0
    assert freed_cards(plan, [a, b]) == 1
    assert freed_cards(plan, [a, b, c]) == 2


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"wave_size": 0}, "--wave-size must be 1 or more, not 0"),
        ({"wave_timeout_s": 0}, "wave_timeout_s must be positive"),
        ({"bind_timeout_s": -1}, "bind_timeout_s must be positive"),
    ],
)
def test_options_refuse_what_cannot_run(options: dict[str, Any], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        ExecuteOptions(**options)


def _fit(snapshot: NodeSnapshot, freed: list[DeviceCharge], cards: set[str], mem: int = 8000) -> Decision | str:
    return fit_on_cards(
        b.pod(b.req(1, mem)),
        PodConstraints(),
        snapshot,
        freed,
        cards,
        policies=Policies(),
        config=NvidiaConfig(),
        rules=NVIDIA_ONLY,
    )


def test_the_pod_fits_only_on_the_planned_cards_once_the_moved_pods_charges_are_freed() -> None:
    full = b.snap("n1", n=2, usage={0: b.use(1, 2000), 1: b.use(1, 2000)})
    charge = DeviceCharge(uuid="GPU-n1-0", slots=1, mem_mib=2000, cores_pct=0)
    assert isinstance(_fit(full, [], {"GPU-n1-0"}), str)  # nothing moved: no room
    placed = _fit(full, [charge], {"GPU-n1-0"})
    assert isinstance(placed, Decision) and [d.uuid for c in placed.devices for d in c] == ["GPU-n1-0"]
    assert isinstance(_fit(full, [charge], {"GPU-n1-1"}), str)  # the room is on another card than planned
    one_idle = b.snap("n1", n=2, usage={0: b.use(1, 2000)})
    only = _fit(one_idle, [], {"GPU-n1-0"}, mem=1000)
    assert isinstance(only, Decision) and [d.uuid for c in only.devices for d in c] == ["GPU-n1-0"]  # not the idle one


def _status(causes: list[dict[str, str]] | None) -> bytes:
    body: dict[str, Any] = {"kind": "Status", "reason": "TooManyRequests", "message": "Cannot evict pod"}
    if causes is not None:
        body["details"] = {"causes": causes}
    return json.dumps(body).encode()


def test_only_a_429_naming_a_disruption_budget_is_a_budget_refusal() -> None:
    refused = error_for("evict pod ns/a", 429, _status([{"reason": "DisruptionBudget", "message": "needs 2"}]))
    assert isinstance(refused, DisruptionBudgetError) and str(refused).endswith("(needs 2)")
    throttled = error_for("evict pod ns/a", 429, _status(None), {"Retry-After": "3"})
    assert type(throttled) is TransientError and throttled.delay == 3.0
    assert type(error_for("x", 429, b"not json")) is TransientError
