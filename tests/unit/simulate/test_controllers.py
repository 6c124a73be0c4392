"""The workload controllers as ``simulate`` plays them (:mod:`services.simulate.controllers`): the pods a controller
document stands for, the replacement of a deleted pod, and the checks of controller documents and owner references;
and the disruption controller's arithmetic (:func:`services.simulate.disruption.budget_status`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from vgpu_scheduler.services.simulate.controllers import Replace, expand, owner_of, replacement, template_of
from vgpu_scheduler.services.simulate.disruption import budget_status
from vgpu_scheduler.services.simulate.documents import ManifestError
from vgpu_scheduler.services.simulate.manifests import load_workload

TEMPLATE = {
    "metadata": {"labels": {"app": "web"}, "annotations": {"note": "x"}},
    "spec": {"containers": [{"name": "main", "image": "web", "resources": {"limits": {"nvidia.com/gpu": 1}}}]},
}


def controller(kind: str, replicas: int = 2, **spec: Any) -> dict[str, Any]:
    api = "batch/v1" if kind == "Job" else "apps/v1"
    count = {"parallelism": replicas} if kind == "Job" else {"replicas": replicas}
    selector = {} if kind == "Job" else {"selector": {"matchLabels": {"app": "web"}}}
    return {
        "apiVersion": api,
        "kind": kind,
        "metadata": {"name": "web", "namespace": "ml"},
        "spec": {**count, **selector, "template": TEMPLATE, **spec},
    }


@pytest.mark.parametrize(
    ("kind", "owner_kind", "names"),
    [
        pytest.param("ReplicaSet", "ReplicaSet", r"web-[a-z0-9]{5}", id="replicaset"),
        pytest.param("Deployment", "ReplicaSet", r"web-[a-z0-9]{10}-[a-z0-9]{5}", id="deployment"),
        pytest.param("StatefulSet", "StatefulSet", r"web-[01]", id="statefulset"),
        pytest.param("Job", "Job", r"web-[a-z0-9]{5}", id="job"),
    ],
)
def test_a_controller_document_stands_for_its_pods(kind: str, owner_kind: str, names: str) -> None:
    spec, pods = expand(controller(kind))
    assert len(pods) == 2 and len({p["metadata"]["name"] for p in pods}) == 2
    for pod in pods:
        meta = pod["metadata"]
        assert __import__("re").fullmatch(names, meta["name"]), meta["name"]
        assert meta["namespace"] == "ml" and meta["labels"]["app"] == "web" and meta["annotations"] == {"note": "x"}
        owner = owner_of(pod)
        assert owner is not None and owner.kind == owner_kind and owner == spec.owner
        assert pod["spec"] == TEMPLATE["spec"]
    if kind == "StatefulSet":
        assert [p["metadata"]["name"] for p in pods] == ["web-0", "web-1"]
    assert spec.backoff_limit == (6 if kind == "Job" else None)
    assert expand(controller(kind))[1] == pods  # names are derived, not random: runs are reproducible


def test_a_replacement_is_a_new_pod_of_the_same_template_named_as_its_controller_names_it() -> None:
    _, [pod, _] = expand(controller("ReplicaSet"))
    placed = {
        **pod,
        "metadata": {
            **pod["metadata"],
            "uid": "u1",
            "annotations": {"note": "x", "hami.io/vgpu-node": "n1", "hami.io/gpu-scheduler-policy": "spread"},
            "labels": {"app": "web", "hami.io/vgpu-node": "n1"},
        },
        "spec": {**pod["spec"], "nodeName": "n1", "priority": 100},
        "status": {"phase": "Running"},
    }
    owner = owner_of(placed)
    assert owner is not None and owner.replace is Replace.ON_DELETION
    first, second = replacement(placed, owner, 1), replacement(placed, owner, 2)
    assert first["metadata"]["name"] != pod["metadata"]["name"] != second["metadata"]["name"]
    assert first["metadata"]["name"].startswith("web-")
    # the scheduler's and the device plugin's words are gone, the user's policy stays; no node, no status, no uid
    assert first["metadata"]["annotations"] == {"note": "x", "hami.io/gpu-scheduler-policy": "spread"}
    assert first["metadata"]["labels"] == {"app": "web"}
    assert "nodeName" not in first["spec"] and "priority" not in first["spec"] and "status" not in first
    assert "uid" not in first["metadata"] and owner_of(first) == owner


def test_a_statefulset_replacement_keeps_the_name_once_the_pod_is_gone() -> None:
    _, [pod, _] = expand(controller("StatefulSet"))
    owner = owner_of(pod)
    assert owner is not None and owner.replace is Replace.WHEN_GONE
    assert replacement(pod, owner, 1)["metadata"]["name"] == "web-0"


def test_a_bare_pod_has_no_owner() -> None:
    assert owner_of({"metadata": {"name": "p", "ownerReferences": [{"kind": "X", "name": "x"}]}}) is None
    assert template_of({"metadata": {"name": "p"}, "spec": {}})["metadata"] == {"name": "p", "namespace": "default"}


def policy(kind: str, **fields: Any) -> dict[str, Any]:
    """A ``policy/v1`` document named ``b``."""
    return {"apiVersion": "policy/v1", "kind": kind, "metadata": {"name": "b"}, **fields}


def write(tmp_path: Path, *docs: dict[str, Any]) -> Path:
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    return path


def test_the_workload_file_expands_controllers_in_place_and_reads_budgets_and_evictions(tmp_path: Path) -> None:
    bare = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "first", "namespace": "ml"},
        "spec": TEMPLATE["spec"],
    }
    owned = {
        **bare,
        "metadata": {
            "name": "last",
            "namespace": "ml",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "controller": True}],
        },
    }
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": "ml"},
        "spec": {"maxUnavailable": "50%", "selector": {"matchLabels": {"app": "web"}}},
    }
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "web-0", "namespace": "ml", "annotations": {"vgpu-scheduler.io/simulate-at": "90s"}},
    }
    w = load_workload(write(tmp_path, bare, controller("StatefulSet"), owned, pdb, eviction))
    assert [p["metadata"]["name"] for p in w.pods] == ["first", "web-0", "web-1", "last"]
    [ref] = w.pods[3]["metadata"]["ownerReferences"]
    assert ref["uid"]  # given one, shared by every pod naming that controller
    assert [c.owner.label for c in w.controllers] == ["StatefulSet/web"]
    assert [b["metadata"]["name"] for b in w.budgets] == ["web"]
    assert [(e.key, e.at_s) for e in w.evictions] == [("ml/web-0", 90.0)]


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        pytest.param(
            controller("ReplicaSet", replicas=-1), "spec.replicas: expected a non-negative integer", id="replicas"
        ),
        pytest.param(
            {**controller("ReplicaSet"), "spec": {**controller("ReplicaSet")["spec"], "selector": {}}},
            "spec.selector: Required value",
            id="no-selector",
        ),
        pytest.param(
            {
                **controller("ReplicaSet"),
                "spec": {**controller("ReplicaSet")["spec"], "selector": {"matchLabels": {"app": "db"}}},
            },
            "`selector` does not match template `labels`",
            id="selector-mismatch",
        ),
        pytest.param(
            {**controller("Deployment"), "apiVersion": "extensions/v1beta1"},
            "apiVersion: expected apps/v1 for a Deployment",
            id="api-version",
        ),
        pytest.param(
            policy("PodDisruptionBudget", spec={"minAvailable": 1, "maxUnavailable": 1}),
            "exactly one of minAvailable and maxUnavailable",
            id="pdb-both",
        ),
        pytest.param(
            policy("PodDisruptionBudget", spec={"minAvailable": "x"}),
            "spec.minAvailable: expected a non-negative integer or a percentage",
            id="pdb-value",
        ),
        pytest.param(
            {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": "p", "annotations": {"vgpu-scheduler.io/simulate-at": "soon"}},
            },
            "metadata.annotations[vgpu-scheduler.io/simulate-at]: expected a Go duration",
            id="eviction-at",
        ),
    ],
)
def test_bad_controller_budget_and_eviction_documents_give_one_line(
    tmp_path: Path, doc: dict[str, Any], message: str
) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": TEMPLATE["spec"]}
    with pytest.raises(ManifestError) as info:
        load_workload(write(tmp_path, pod, doc))
    assert "\n" not in str(info.value) and message in str(info.value), str(info.value)


def test_two_controllers_making_the_same_pod_name_is_a_bad_input(tmp_path: Path) -> None:
    sts = controller("StatefulSet")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web-1", "namespace": "ml"},
        "spec": TEMPLATE["spec"],
    }
    with pytest.raises(ManifestError, match="Pod ml/web-1 is already defined"):
        load_workload(write(tmp_path, pod, sts))


# ---- the disruption controller --------------------------------------------------------------------------------


def pod(name: str, phase: str = "Running", *, owner: str | None = "rs", deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ml", "labels": {"app": "web"}}
    if owner is not None:
        meta["ownerReferences"] = [{"kind": "ReplicaSet", "name": owner, "uid": owner, "controller": True}]
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "status": {"phase": phase}}


def pdb(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "b", "namespace": "ml"}, "spec": {"selector": {"matchLabels": {"app": "web"}}, **spec}}


THREE = [pod("a"), pod("b"), pod("c")]


@pytest.mark.parametrize(
    ("spec", "pods", "expected"),
    [
        pytest.param({"minAvailable": 2}, THREE, (3, 2, 3, 1), id="min-int"),
        pytest.param({"minAvailable": 3}, THREE, (3, 3, 3, 0), id="min-all"),
        pytest.param({"minAvailable": "50%"}, THREE, (3, 2, 3, 1), id="min-pct-rounds-up"),
        pytest.param({"maxUnavailable": 1}, THREE, (3, 2, 3, 1), id="max-int"),
        pytest.param({"maxUnavailable": "50%"}, THREE, (3, 1, 3, 2), id="max-pct-rounds-up"),
        pytest.param(
            {"maxUnavailable": 1},
            [pod("a"), pod("b", deleting=True), pod("c", "Pending")],
            (1, 2, 3, 0),
            id="terminating-and-pending-are-not-healthy",
        ),
        pytest.param({"maxUnavailable": 1}, [*THREE, pod("bare", owner=None)], (4, 2, 3, 0), id="bare-fails-safe"),
        pytest.param({"minAvailable": 1}, [pod("a"), pod("x", "Failed")], (1, 1, 1, 0), id="ended-not-counted"),
    ],
)
def test_budget_status(spec: dict[str, Any], pods: list[dict[str, Any]], expected: tuple[int, ...]) -> None:
    s = budget_status(pdb(**spec), pods, {"rs": 3})
    assert (s["currentHealthy"], s["desiredHealthy"], s["expectedPods"], s["disruptionsAllowed"]) == expected


def test_a_pod_evicted_but_not_yet_marked_deleted_is_not_healthy() -> None:
    budget = {**pdb(minAvailable=2), "status": {"disruptedPods": {"a": "t", "gone": "t"}}}
    s = budget_status(budget, THREE, {"rs": 3})
    assert (s["currentHealthy"], s["disruptionsAllowed"], s["disruptedPods"]) == (2, 0, {"a": "t"})
