"""The chaos run's check (tests/controlplane/chaos_checks.py): a pending pod is *stuck* once the room it fits has sat
idle for over a minute while it waited; a pod that fits at every check while the room it fits keeps changing hands
(a backlog larger than the room churn frees) has only *waited*."""

from __future__ import annotations

from typing import Any

from tests.controlplane.chaos_checks import Waiting, check_api
from tests.controlplane.harness import NodeShape, gpu_node, gpu_pod


def node(name: str = "n0", uid: str = "node-uid-1") -> dict[str, Any]:
    body = gpu_node(name, NodeShape(gpus=2), {})
    body["metadata"]["uid"] = uid
    return body


def pending(name: str = "p") -> dict[str, Any]:
    pod = gpu_pod(name, gpus=1)
    pod["metadata"].update(namespace="ns", uid=f"uid-{name}")
    return pod


def running(name: str, on: str = "n0") -> dict[str, Any]:
    """A pod without devices on ``on``: it changes the node's pods, not its room."""
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"}, "spec": {"nodeName": on}}


def checks(states: list[tuple[float, list[dict[str, Any]], list[dict[str, Any]]]]) -> list[tuple[int, int, int]]:
    """Run one check per (time, pods, nodes); each check's (pending-fit, waited, stuck)."""
    waiting: dict[str, Waiting] = {}
    out = []
    for now, pods, nodes in states:
        c = check_api(now, pods, nodes, [], waiting=waiting, now=now)
        out.append((len(c.pending_fit), c.waited, len(c.stuck)))
    return out


def test_room_left_idle_for_over_a_minute_while_a_pod_that_fits_waits_is_stuck() -> None:
    pods, nodes = [pending()], [node()]
    assert checks([(0, pods, nodes), (30, pods, nodes), (60, pods, nodes), (91, pods, nodes)]) == [
        (1, 0, 0),
        (1, 0, 0),
        (1, 0, 0),
        (1, 1, 1),
    ]


def test_a_pod_whose_room_changes_hands_between_checks_has_waited_but_is_not_stuck() -> None:
    nodes = [node()]
    states = [(float(t), [pending(), running(f"r{t}")], nodes) for t in (0, 30, 60, 91, 121)]
    assert checks(states) == [(1, 0, 0), (1, 0, 0), (1, 0, 0), (1, 1, 0), (1, 1, 0)]


def test_room_that_stays_the_same_after_a_change_counts_from_the_change() -> None:
    nodes = [node()]
    before, after = [pending(), running("r1")], [pending(), running("r2")]
    states = [(0.0, before, nodes), (30.0, after, nodes), (61.0, after, nodes), (91.0, after, nodes)]
    assert checks(states) == [(1, 0, 0), (1, 0, 0), (1, 1, 0), (1, 1, 1)]


def test_a_rebooted_node_is_new_room() -> None:
    pods = [pending()]
    states = [(0.0, pods, [node()]), (45.0, pods, [node(uid="node-uid-2")]), (91.0, pods, [node(uid="node-uid-2")])]
    assert checks(states) == [(1, 0, 0), (1, 0, 0), (1, 1, 0)]


def test_a_pod_that_stops_fitting_starts_again_from_zero() -> None:
    pods, nodes = [pending()], [node()]
    quota = {"metadata": {"namespace": "ns", "name": "q"}, "spec": {"hard": {"limits.nvidia.com/gpumem": "1"}}}
    waiting: dict[str, Waiting] = {}
    seen = []
    for now, quotas in ((0.0, []), (45.0, [quota]), (61.0, []), (92.0, [])):
        c = check_api(now, pods, nodes, quotas, waiting=waiting, now=now)
        seen.append((len(c.pending_fit), c.waited, len(c.stuck)))
    assert seen == [(1, 0, 0), (0, 0, 0), (1, 0, 0), (1, 0, 0)]
