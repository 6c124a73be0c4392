"""The read side's pure parts (``shared/defrag/read.py``): who may move by owner and annotation, and which
PodDisruptionBudgets select a pod, by name, with what they still allow."""

from __future__ import annotations

from typing import Any

import pytest

from vgpu_scheduler.shared.defrag.read import STATIC_POD, budgets_of, named_budgets, owner_verdict
from vgpu_scheduler.shared.domain.defragmodel import OPT_OUT_ANNOTATION
from vgpu_scheduler.shared.domain.defragwork import BARE_POD, DAEMON_SET, OPTED_OUT


def pod(namespace: str = "ns", labels: dict[str, str] | None = None, **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": namespace, "labels": labels or {}, **meta}}


def pdb(name: str, namespace: str, selector: dict[str, Any], allowed: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": selector},
        "status": {"disruptionsAllowed": allowed},
    }


def ref(kind: str, controller: bool = True) -> list[dict[str, Any]]:
    return [{"kind": kind, "name": "o", "uid": "u", "controller": controller}]


@pytest.mark.parametrize(
    ("meta", "verdict"),
    [
        ({"ownerReferences": ref("ReplicaSet")}, None),
        ({"ownerReferences": ref("StatefulSet")}, None),
        ({"ownerReferences": ref("Job")}, None),
        ({"ownerReferences": ref("ReplicationController")}, None),
        ({"ownerReferences": ref("DaemonSet")}, DAEMON_SET),
        ({"ownerReferences": ref("Node")}, STATIC_POD),
        ({"ownerReferences": ref("ReplicaSet", controller=False)}, BARE_POD),
        ({}, BARE_POD),
        ({"ownerReferences": ref("RayCluster")}, "owned by a RayCluster (not known to recreate its pods elsewhere)"),
        ({"ownerReferences": ref("ReplicaSet"), "annotations": {OPT_OUT_ANNOTATION: "false"}}, OPTED_OUT),
        ({"ownerReferences": ref("ReplicaSet"), "annotations": {OPT_OUT_ANNOTATION: "Never"}}, OPTED_OUT),
        ({"ownerReferences": ref("ReplicaSet"), "annotations": {OPT_OUT_ANNOTATION: "true"}}, None),
    ],
    ids=lambda x: str(x)[:60],
)
def test_owner_verdict(meta: dict[str, Any], verdict: str | None) -> None:
    assert owner_verdict(pod(**meta)) == verdict


def test_budgets_select_by_namespace_and_labels() -> None:
    budgets = named_budgets(
        [
            pdb("web", "ns", {"matchLabels": {"app": "web"}}, 1),
            pdb("any-web", "ns", {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web", "db"]}]}, 0),
            pdb("other-ns", "other", {"matchLabels": {"app": "web"}}, 3),
            pdb("empty", "ns", {}, 5),  # no usable selector: selects nothing
        ]
    )
    assert [(b.key, b.budget.disruptions_allowed) for b in budgets] == [
        ("ns/web", 1),
        ("ns/any-web", 0),
        ("other/other-ns", 3),
    ]
    assert budgets_of(pod(labels={"app": "web"}), budgets) == ("ns/web", "ns/any-web")
    assert budgets_of(pod(labels={"app": "db"}), budgets) == ("ns/any-web",)
    assert budgets_of(pod(labels={"app": "cache"}), budgets) == ()
