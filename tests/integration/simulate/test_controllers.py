"""``simulate`` with workload controllers, PodDisruptionBudgets and the Eviction API: a pod a controller owns comes
back (a new pod, scheduled as any other) when a preemption or an eviction deletes it, a bare pod does not; a budget
forbids an eviction through the API server, and the extender's own preemption spares the pod a budget protects."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.simulate.conftest import run_cli, run_cli_json
from vgpu_scheduler.services.simulate.clock import VirtualClockLoop
from vgpu_scheduler.services.simulate.controllers import expand
from vgpu_scheduler.services.simulate.driver import Driver, schedule_all
from vgpu_scheduler.services.simulate.harness import EmbeddedCluster
from vgpu_scheduler.services.simulate.manifests import load_cluster, load_workload
from vgpu_scheduler.services.simulate.report import PodResult
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec.register import decode_register
from vgpu_scheduler.shared.config import Service, settings_for

POLICIES = ("--node-scheduler-policy", "binpack", "--gpu-scheduler-policy", "binpack")
VIOLATES = "Cannot evict pod as it would violate the pod's disruption budget."


def pool(cards: int) -> dict[str, Any]:
    devices = [{"vendor": "NVIDIA", "type": "NVIDIA-Tesla T4", "count": cards, "memory": "16Gi"}]
    return {
        "apiVersion": "v1",
        "kind": "NodePool",
        "metadata": {"name": "t4"},
        "spec": {"nodes": 2, "devices": devices},
    }


def priority_class(name: str, value: int) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value}


def pod_spec(mem: int, *, gpus: int = 1, priority_class_name: str | None = None) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": gpus, "nvidia.com/gpumem": mem}
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 5,
        "containers": [{"name": "main", "image": "x", "resources": {"limits": limits}}],
    }
    if priority_class_name is not None:
        spec["priorityClassName"] = priority_class_name
    return spec


def bare(name: str, spec: dict[str, Any], labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "labels": labels or {}},
        "spec": spec,
    }


def owned(kind: str, name: str, spec: dict[str, Any], *, replicas: int = 1, **extra: Any) -> dict[str, Any]:
    api = "batch/v1" if kind == "Job" else "apps/v1"
    doc: dict[str, Any] = {
        "apiVersion": api,
        "kind": kind,
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            ("parallelism" if kind == "Job" else "replicas"): replicas,
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
            **extra,
        },
    }
    if kind != "Job":
        doc["spec"]["selector"] = {"matchLabels": {"app": name}}
    return doc


def budget(app: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": app, "namespace": "ml"},
        "spec": {"selector": {"matchLabels": {"app": app}}, **spec},
    }


def eviction(name: str, at: str) -> dict[str, Any]:
    annotations = {"vgpu-scheduler.io/simulate-at": at}
    return {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": "ml", "annotations": annotations},
    }


def simulate(tmp_path: Path, cluster: dict[str, Any], docs: list[dict[str, Any]]) -> dict[str, Any]:
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cluster), encoding="utf-8")
    (tmp_path / "w.yaml").write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    args = ("simulate", "--cluster", str(tmp_path / "c.yaml"), "--workload", str(tmp_path / "w.yaml"), *POLICIES)
    out: dict[str, Any] = run_cli_json(*args)
    return out


def by_name(pods: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in pods}


def devices(pod: dict[str, Any]) -> set[str]:
    text = pod["annotations"].get("hami.io/vgpu-devices-allocated", "")
    return {d.split(",")[0] for ctr in text.split(";") for d in ctr.split(":") if d}


@pytest.fixture(scope="module")
def preempted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Two nodes of two cards: a ReplicaSet's pod and a bare pod (priority 100) share one node, a pod of higher
    priority than the preemptor holds a card of the other; the preemptor wants two whole cards."""
    docs = [
        priority_class("low", 100),
        priority_class("keep", 20000),
        priority_class("urgent", 10000),
        owned("ReplicaSet", "web", pod_spec(16000, priority_class_name="low")),
        bare("solo", pod_spec(16000, priority_class_name="low")),
        bare("keep", pod_spec(16000, priority_class_name="keep")),
        bare("urgent", pod_spec(16000, gpus=2, priority_class_name="urgent")),
    ]
    return simulate(tmp_path_factory.mktemp("preempted"), pool(2), docs)


def test_a_preempted_replicaset_pod_is_recreated_and_binds_elsewhere(preempted: dict[str, Any]) -> None:
    pods = by_name(preempted["pods"])
    urgent = pods["urgent"]
    [web] = [p for n, p in pods.items() if n.startswith("web-")]
    assert web["owner"] == "ReplicaSet/web" and web["preempted_by"] == "ml/urgent" and web["node"] is None
    [new] = preempted["replacements"]
    assert web["replaced_by"] == f"ml/{new['name']}" and new["replaces"] == f"ml/{web['name']}"
    assert new["name"] != web["name"] and new["name"].startswith("web-") and new["owner"] == "ReplicaSet/web"
    assert new["priority"] == 100 and new["reasons"] == {}
    # the devices its predecessor held went to the preemptor (held for it): the replacement binds on the other node
    assert new["node"] is not None and new["node"] != urgent["node"]
    assert not devices(new) & devices(urgent)
    summary = preempted["summary"]
    assert summary["controllers"]["owned_pods"] == 1 and summary["controllers"]["recreated"] == 1
    assert summary["controllers"]["replacements"] == {"placed": 1, "pending": 0, "preempted": 0, "evicted": 0}
    [recreation] = summary["controllers"]["recreations"]
    assert recreation["pod"] == f"ml/{web['name']}" and recreation["replacement"] == f"ml/{new['name']}"
    assert summary["over_capacity"] == []


def test_a_preempted_bare_pod_is_not_recreated(preempted: dict[str, Any]) -> None:
    solo = by_name(preempted["pods"])["solo"]
    assert solo["preempted_by"] == "ml/urgent" and solo["owner"] is None and solo["replaced_by"] is None
    assert not [r for r in preempted["replacements"] if r["replaces"] == "ml/solo"]
    assert [r["pod"] for r in preempted["summary"]["controllers"]["recreations"]] != ["ml/solo"]
    summary = preempted["summary"]
    assert summary["preempted"] == 2 and summary["evicted"] == 0
    assert summary["placed"] + summary["pending"] + summary["preempted"] + summary["evicted"] == summary["pods"]


def test_the_text_report_lists_the_replacement_and_the_controllers_line(tmp_path: Path) -> None:
    docs = [owned("StatefulSet", "db", pod_spec(8000)), eviction("db-0", "5s")]
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(pool(1)), encoding="utf-8")
    (tmp_path / "w.yaml").write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    code, out, err = run_cli("simulate", "--cluster", str(tmp_path / "c.yaml"), "--workload", str(tmp_path / "w.yaml"))
    assert code == 0, err
    assert "evicted through the Eviction API (terminated after its grace period)" in out
    assert "; replaced by ml/db-0" in out and "(replaces ml/db-0)" in out
    assert "placed 0/1, pending 0, evicted 1" in out
    assert "controllers: 1 owned pod(s) deleted, 1 recreated (replacements: 1 placed)" in out
    assert "evictions (Eviction API): 1 requested, 1 evicted, 0 refused" in out


@pytest.fixture(scope="module")
def evictions(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    """Two nodes of four cards; evictions requested at set times against budgets of several kinds."""
    job = owned("Job", "train", pod_spec(8000), backoffLimit=0)
    [job_pod] = expand(job)[1]
    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "api-7d9f", "controller": True}
    api = [bare(n, pod_spec(8000), {"app": "api"}) for n in ("api-a", "api-b")]
    for pod in api:
        pod["metadata"]["ownerReferences"] = [owner]  # pods as kubectl shows them, owned by a ReplicaSet
    docs = [
        owned("StatefulSet", "db", pod_spec(8000), replicas=2),
        budget("db", minAvailable=2),
        *api,
        budget("api", maxUnavailable=1),
        owned("StatefulSet", "cache", pod_spec(8000)),
        job,
        eviction("cache-0", "10s"),
        eviction("api-a", "30s"),
        eviction("api-b", "31s"),  # api-a is still terminating: the budget allows nothing more
        eviction("db-0", "40s"),
        eviction("nobody", "41s"),
        eviction(job_pod["metadata"]["name"], "50s"),
    ]
    return simulate(tmp_path_factory.mktemp("evictions"), pool(4), docs), job_pod["metadata"]["name"]


def test_evictions_go_through_the_api_server_which_honours_budgets(evictions: tuple[dict[str, Any], str]) -> None:
    run, job_pod = evictions
    requests = {r["pod"]: r for r in run["summary"]["evictions"]["requests"]}
    assert {p: (r["evicted"], r["status"]) for p, r in requests.items()} == {
        "ml/cache-0": (True, 201),
        "ml/api-a": (True, 201),
        "ml/api-b": (False, 429),
        "ml/db-0": (False, 429),
        "ml/nobody": (False, 404),
        f"ml/{job_pod}": (True, 201),
    }
    assert requests["ml/api-b"]["message"] == VIOLATES == requests["ml/db-0"]["message"]
    assert requests["ml/api-a"]["at_s"] == 30 and requests["ml/api-a"]["by"] == "workload"
    pods = by_name(run["pods"])
    # a refused eviction leaves the pod where it was
    assert pods["api-b"]["node"] is not None and pods["db-0"]["node"] is not None and not pods["db-0"]["evicted"]
    api_a = pods["api-a"]
    assert api_a["evicted"] and api_a["node"] is None and api_a["preempted_by"] is None
    assert "evicted through the Eviction API" in next(iter(api_a["reasons"].values()))
    summary = run["summary"]
    assert summary["evicted"] == 3 and summary["preempted"] == 0 and summary["preemption"]["evictions"] == []
    assert summary["placed"] + summary["pending"] + summary["evicted"] == summary["pods"]
    assert summary["over_capacity"] == []


def test_controllers_replace_evicted_pods_as_each_kind_does(evictions: tuple[dict[str, Any], str]) -> None:
    run, job_pod = evictions
    recreations = {r["pod"]: r for r in run["summary"]["controllers"]["recreations"]}
    replacements = by_name(run["replacements"])
    # a ReplicaSet replaces a pod as soon as it is marked for deletion (after the 1 s controller delay)
    api = recreations["ml/api-a"]
    assert api["owner"] == "ReplicaSet/api-7d9f" and 30 < api["at_s"] < 35
    assert replacements[api["replacement"].split("/")[1]]["node"] is not None
    # a StatefulSet waits until the pod is gone (its 5 s grace), then makes it again under the same name
    cache = recreations["ml/cache-0"]
    assert cache["replacement"] == "ml/cache-0" and cache["at_s"] >= 15
    assert replacements["cache-0"]["node"] is not None and replacements["cache-0"]["replaces"] == "ml/cache-0"
    # a Job counts an evicted pod as failed: past its backoffLimit (0) it makes none
    job = recreations[f"ml/{job_pod}"]
    assert job["replacement"] is None and job["skipped"] == "Job has reached the specified backoff limit (0)"
    assert run["summary"]["controllers"]["deleted"] == 3 and run["summary"]["controllers"]["recreated"] == 2


def test_the_extenders_preemption_spares_the_pod_a_budget_protects(tmp_path: Path) -> None:
    """Without its budget, the guarded pod (priority 50) would be the victim (the lowest priority goes first); the
    budget the simulated disruption controller keeps (no disruption allowed) makes the extender choose the other."""
    docs = [
        priority_class("guarded", 50),
        {**priority_class("free", 100), "preemptionPolicy": "Never"},  # its replacement will not preempt in turn
        priority_class("urgent", 10000),
        owned("ReplicaSet", "guarded", pod_spec(16000, priority_class_name="guarded")),
        budget("guarded", minAvailable=1),
        owned("ReplicaSet", "free", pod_spec(16000, priority_class_name="free")),
        bare("urgent", pod_spec(16000, priority_class_name="urgent")),
    ]
    run = simulate(tmp_path, pool(1), docs)
    pods = by_name(run["pods"])
    [guarded] = [p for n, p in pods.items() if n.startswith("guarded-")]
    [free] = [p for n, p in pods.items() if n.startswith("free-")]
    assert guarded["node"] is not None and guarded["preempted_by"] is None
    assert free["preempted_by"] == "ml/urgent" and pods["urgent"]["node"] is not None
    # the free pod's replacement finds no room left: it waits, as on a cluster
    [new] = run["replacements"]
    assert new["replaces"] == f"ml/{free['name']}" and new["node"] is None
    assert run["summary"]["controllers"]["replacements"]["pending"] == 1


def test_the_bundled_disruption_example_tells_its_story() -> None:
    from vgpu_scheduler.services.simulate.main import EXAMPLES_DIR

    run = run_cli_json(
        "simulate",
        "--cluster",
        str(EXAMPLES_DIR / "priority-cluster.yaml"),
        "--workload",
        str(EXAMPLES_DIR / "disruption-workload.yaml"),
    )
    summary = run["summary"]
    refused = {r["pod"] for r in summary["evictions"]["requests"] if not r["evicted"]}
    assert refused == {"ml/db-0", "ml/serve-wbdpmh4d5t-sv9gw"}  # the names the example's comments promise
    assert (summary["evictions"]["evicted"], summary["evicted"], summary["preempted"]) == (4, 4, 0)
    controllers = summary["controllers"]
    assert (controllers["deleted"], controllers["recreated"]) == (3, 2)
    assert controllers["replacements"] == {"placed": 2, "pending": 0, "preempted": 0, "evicted": 0}
    assert {r["pod"]: r["skipped"] for r in controllers["recreations"] if r["skipped"]} == {
        "ml/etl-pv6d6": "Job has reached the specified backoff limit (1)"
    }
    pods = by_name(run["pods"])
    assert pods["notebook"]["evicted"] and pods["notebook"]["replaced_by"] is None
    assert summary["over_capacity"] == []


def running(name: str, node: str, device: str, mem: int, *, owner: str | None = None) -> dict[str, Any]:
    """A pod of the cluster file, running on ``node`` with ``mem`` MiB of ``device``, as kubectl shows it."""
    pod = bare(name, pod_spec(mem))
    pod["spec"]["nodeName"] = node
    pod["metadata"]["annotations"] = {
        "hami.io/vgpu-node": node,
        "hami.io/vgpu-devices-allocated": f"{device},NVIDIA,{mem},0:;",
        "hami.io/bind-phase": "success",
    }
    if owner is not None:
        pod["metadata"]["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": owner, "uid": owner, "controller": True}
        ]
    pod["status"] = {"phase": "Running"}
    return pod


def test_a_move_made_from_the_unschedulable_hook_makes_room_for_the_waiting_pod(tmp_path: Path) -> None:
    """Three cards, each holding one pod (fragmentation 100 %): a whole-card pod waits. The hook where a defrag
    planner plugs in moves the ReplicaSet's pod: evicted through the Eviction API, its replacement binds beside
    another pod, and once it has terminated the waiting pod binds to the card it left idle."""
    (tmp_path / "pool.yaml").write_text(yaml.safe_dump(pool(1) | {"spec": {**pool(1)["spec"], "nodes": 3}}))
    nodes = load_cluster(tmp_path / "pool.yaml").nodes
    card = {
        n["metadata"]["name"]: decode_register(n["metadata"]["annotations"][keys.NODE_NVIDIA_REGISTER])[0].id
        for n in nodes
    }
    pods = [
        running("web-a", "t4-01", card["t4-01"], 8000, owner="web"),
        running("web-b", "t4-02", card["t4-02"], 8300),
        running("db", "t4-03", card["t4-03"], 6000),
    ]
    (tmp_path / "c.yaml").write_text(yaml.safe_dump_all([yaml.safe_load((tmp_path / "pool.yaml").read_text()), *pods]))
    (tmp_path / "w.yaml").write_text(yaml.safe_dump(bare("big", pod_spec(16000))))
    settings = settings_for(Service.SIMULATE, ["--node-scheduler-policy=binpack", "--gpu-scheduler-policy=binpack"], {})
    cluster, workload = load_cluster(tmp_path / "c.yaml"), load_workload(tmp_path / "w.yaml")

    async def main() -> tuple[Driver, list[PodResult]]:
        async with EmbeddedCluster(settings, cluster) as ec:
            driver = ec.driver(workload)

            async def move(pod: dict[str, Any]) -> None:
                if not driver.eviction_requests:  # the plan: one move
                    await driver.evict("ml", "web-a", by="defrag")

            driver.on_unschedulable = move
            return driver, await schedule_all(driver, list(workload.pods))

    with asyncio.Runner(loop_factory=VirtualClockLoop) as runner:
        driver, [big] = runner.run(main())
    [request] = driver.eviction_requests
    assert (request.pod, request.by, request.status) == ("ml/web-a", "defrag", 201)
    [replacement] = driver.replacements
    assert replacement.replaces == "ml/web-a" and replacement.owner == "ReplicaSet/web"
    assert replacement.node == "t4-02"  # beside web-b: the card web-a left is idle
    assert big.node == "t4-01" and card["t4-01"] in big.annotations[keys.DEVICES_ALLOCATED]
    [recreation] = driver.kcm.recreations
    assert recreation.replacement == f"ml/{replacement.name}" and recreation.replacement != "ml/web-a"


def test_a_pod_without_a_grace_period_is_gone_at_its_eviction_and_still_replaced(tmp_path: Path) -> None:
    spec = {**pod_spec(8000), "terminationGracePeriodSeconds": 0}
    docs = [owned("StatefulSet", "st", spec), owned("StatefulSet", "other", pod_spec(8000)), eviction("st-0", "10s")]
    run = simulate(tmp_path, pool(1), docs)
    st = by_name(run["pods"])["st-0"]
    assert st["evicted"] and st["node"] is None and st["replaced_by"] == "ml/st-0"
    [new] = run["replacements"]
    assert new["name"] == "st-0" and new["node"] is not None
    [recreation] = run["summary"]["controllers"]["recreations"]
    assert 10 < recreation["at_s"] < 12  # gone at once, replaced after the controller's delay
    assert run["summary"]["over_capacity"] == []
