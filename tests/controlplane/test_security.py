"""Issue 17 on the real control plane: kube-scheduler (configured from the chart) schedules through mTLS — its
extender ``tlsConfig`` carries the client certificate the extenders' ``--client-ca-file`` trusts — while a
kube-scheduler without it gets every ``/filter`` refused and nothing is reserved, locked or bound; and the
chart's objects, NetworkPolicies first, pass a server-side dry run on the real API server."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from tests.controlplane.control import ApiServer, Cleanup
from tests.controlplane.harness import Settings, gpu_pod
from tests.controlplane.scenario import Scenario, run_scenario

pytestmark = pytest.mark.timeout(300)

REFUSED = "extender request without a client certificate refused"


async def test_kube_scheduler_schedules_through_mtls(
    kube_apiserver: ApiServer, kube_cleanup: Cleanup, redis_url: str, tmp_path: Path
) -> None:
    pods = [gpu_pod(f"m{i:02d}", mem=2000, cores=20) for i in range(12)]
    scenario = Scenario("mtls", pods, Settings(replicas=2), nodes=3)
    outcome = await run_scenario(kube_apiserver, kube_cleanup, redis_url, tmp_path, scenario)
    outcome.report.check()
    assert outcome.bound == 12
    extender_logs = [text for name, text in outcome.system_log.items() if name.startswith("extender")]
    assert all(REFUSED not in text for text in extender_logs)
    assert sum(text.count('"pod scheduled"') for text in extender_logs) == 12  # every placement went through /filter


async def test_a_scheduler_without_the_client_certificate_reserves_locks_and_binds_nothing(
    kube_apiserver: ApiServer, kube_cleanup: Cleanup, redis_url: str, tmp_path: Path
) -> None:
    pods = [gpu_pod(f"n{i:02d}") for i in range(3)]
    settings = Settings(replicas=1, scheduler_client_cert=False)
    scenario = Scenario("nocert", pods, settings, nodes=2, stall_s=8.0, deadline_s=60.0)
    outcome = await run_scenario(kube_apiserver, kube_cleanup, redis_url, tmp_path, scenario)
    assert outcome.bound == 0 and outcome.stalled
    assert not outcome.report.correctness  # no allocation annotations on pending pods, no over-commit
    assert not [f for f in outcome.report.liveness if "lock" in f]  # no node lock annotation left
    log = outcome.system_log["extender-0"]
    assert log.count(REFUSED) >= 3, log[-2000:]  # kube-scheduler did call, and was refused
    assert '"pod scheduled"' not in log
    keys = [k.decode() for k in redis.Redis.from_url(redis_url).scan_iter("vgpu-nocert-*")]
    assert any(k.endswith(":inv") for k in keys), keys  # the system ran on this Redis: nodes registered
    assert not [k for k in keys if k.endswith((":allocs", ":lock", ":pods", ":nodes:alloc"))], keys


# ---- the chart's objects, server-side dry run ----------------------------------------------------------------

_PLURAL = {
    "ConfigMap": "configmaps",
    "Secret": "secrets",
    "Service": "services",
    "ServiceAccount": "serviceaccounts",
    "Deployment": "deployments",
    "Job": "jobs",
    "PodDisruptionBudget": "poddisruptionbudgets",
    "NetworkPolicy": "networkpolicies",
    "Role": "roles",
    "RoleBinding": "rolebindings",
    "ClusterRole": "clusterroles",
    "ClusterRoleBinding": "clusterrolebindings",
    "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
}


def _path(obj: dict[str, Any]) -> str:
    group_version = obj["apiVersion"]
    base = f"/api/{group_version}" if "/" not in group_version else f"/apis/{group_version}"
    ns = obj["metadata"].get("namespace")
    scope = f"/namespaces/{ns}" if ns else ""
    return f"{base}{scope}/{_PLURAL[obj['kind']]}?dryRun=All&fieldValidation=Strict"


def test_the_rendered_chart_passes_a_server_side_dry_run(kube_apiserver: ApiServer, kube_cleanup: Cleanup) -> None:
    helm_python = pytest.importorskip("helm_python")
    ns = kube_cleanup.namespace(f"chart-{uuid.uuid4().hex[:6]}")
    chart = helm_python.Chart.load(str(Path(__file__).resolve().parents[2] / "deploy" / "helm" / "vgpu-scheduler"))
    try:
        rendered = chart.render({}, name="vgpu-scheduler", namespace=ns, is_install=True)
    finally:
        chart.close()
    objects = [
        d for path, text in sorted(rendered.items()) if path.endswith(".yaml") for d in yaml.safe_load_all(text) if d
    ]
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
    assert {p["metadata"]["name"] for p in policies} == {"vgpu-scheduler-redis", "vgpu-scheduler-extender"}
    for obj in sorted(objects, key=lambda o: o["kind"] != "NetworkPolicy"):
        answer = kube_apiserver.request("POST", _path(obj), obj)  # HTTPError (4xx) on an invalid object
        assert answer["kind"] == obj["kind"] and answer["metadata"]["name"] == obj["metadata"]["name"]
        if obj["kind"] == "NetworkPolicy":
            assert {k: answer["spec"][k] for k in obj["spec"]} == obj["spec"]  # accepted as rendered
    # a dry run persists nothing
    assert not kube_apiserver.list_items(f"/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies")
