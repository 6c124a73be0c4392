"""Every rendered manifest applied to a real kube-apiserver as a server-side dry run (``dryRun=All``) with strict
field validation: the API server's own schema, defaulting, validation and admission accept each object, and no
field is unknown (a typo in the chart would be dropped silently by a lenient client).

The release namespace is created for real first (a dry-run Namespace does not exist for the objects in it).
Objects of kinds served only by a CRD — the Prometheus Operator's ServiceMonitor, cert-manager's Certificate and
Issuer — are skipped: this API server has no such CRDs, and a stand-in CRD would accept anything."""

from __future__ import annotations

import json
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.controlplane.control import ApiServer, Cleanup

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "deploy" / "manifests"
CRD_KINDS = {"ServiceMonitor", "Certificate", "Issuer"}
NAMESPACE = "vgpu-system"


class Discovery:
    """(apiVersion, kind) -> (resource, namespaced) from the API server's discovery documents."""

    def __init__(self, api: ApiServer) -> None:
        self.resources: dict[tuple[str, str], tuple[str, bool]] = {}
        self._add(api, "/api/v1", "v1")
        for group in api.request("GET", "/apis")["groups"]:
            for version in group["versions"]:
                self._add(api, f"/apis/{version['groupVersion']}", version["groupVersion"])

    def _add(self, api: ApiServer, path: str, group_version: str) -> None:
        for resource in api.request("GET", path)["resources"]:
            if "/" not in resource["name"]:
                self.resources[(group_version, resource["kind"])] = (resource["name"], resource["namespaced"])

    def collection(self, obj: dict[str, Any]) -> str:
        """The collection path an object is created in."""
        api_version, kind = obj["apiVersion"], obj["kind"]
        assert (api_version, kind) in self.resources, f"{api_version} {kind} is not served by this API server"
        resource, namespaced = self.resources[(api_version, kind)]
        prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        if namespaced:
            namespace = obj["metadata"].get("namespace")
            assert namespace, f"{kind} {obj['metadata']['name']} has no namespace"
            return f"{prefix}/namespaces/{namespace}/{resource}"
        return f"{prefix}/{resource}"


def committed_objects() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path in sorted(MANIFESTS.glob("*.yaml")):
        out += [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
    return out


def dry_run_errors(api: ApiServer, objects: list[dict[str, Any]]) -> list[str]:
    """Dry-run create every object; the API server's refusals (and strict-validation warnings) as messages."""
    discovery = Discovery(api)
    errors = []
    for obj in objects:
        where = f"{obj['kind']} {obj['metadata']['name']}"
        path = discovery.collection(obj) + "?dryRun=All&fieldValidation=Strict"
        try:
            created = api.request("POST", path, obj)
        except urllib.error.HTTPError as e:
            errors.append(f"{where}: {e.code} {json.loads(e.read()).get('message')}")
            continue
        assert created["metadata"]["name"] == obj["metadata"]["name"], where
    return errors


@pytest.fixture(scope="module")
def release_namespace(kube_apiserver: ApiServer) -> Iterator[str]:
    """The release namespace, created for real for this module and deleted after it."""
    cleanup = Cleanup(kube_apiserver)
    cleanup.namespace(NAMESPACE, {"hami.io/webhook": "ignore"})
    try:
        yield NAMESPACE
    finally:
        cleanup.run()


def test_every_committed_manifest_passes_a_server_side_dry_run(
    kube_apiserver: ApiServer, release_namespace: str
) -> None:
    objects = [o for o in committed_objects() if o["kind"] != "Namespace"]
    kinds = {o["kind"] for o in objects}
    assert {"Deployment", "MutatingWebhookConfiguration", "ClusterRole", "Job", "PodDisruptionBudget"} <= kinds
    assert not kinds & CRD_KINDS  # the default values render none
    assert dry_run_errors(kube_apiserver, objects) == []


def test_a_broken_object_is_refused_by_the_dry_run(kube_apiserver: ApiServer, release_namespace: str) -> None:
    """The check is not blind: an unknown field and an invalid value are both reported."""
    [webhook] = [o for o in committed_objects() if o["kind"] == "MutatingWebhookConfiguration"]
    typo = json.loads(json.dumps(webhook))
    typo["webhooks"][0]["failurPolicy"] = "Fail"
    bad_cel = json.loads(json.dumps(webhook))
    bad_cel["webhooks"][0]["matchConditions"][0]["expression"] = "object.spec.containers.exists(c,"
    errors = dry_run_errors(kube_apiserver, [typo, bad_cel])
    assert len(errors) == 2, errors
    assert "failurPolicy" in errors[0]
    assert "matchConditions" in errors[1]


@pytest.mark.parametrize(
    ("values", "skipped"),
    [
        pytest.param(
            {"serviceMonitor": {"enabled": True}, "grafanaDashboard": {"enabled": True}},
            {"ServiceMonitor"},
            id="monitoring",
        ),
        pytest.param({"tls": {"certManager": {"enabled": True}}}, {"Certificate", "Issuer"}, id="cert-manager"),
        pytest.param(
            # the Secret's URL carries the credentials: no separate password Secret
            {"redis": {"enabled": False, "external": {"existingSecret": "redis-conn"}, "auth": {"enabled": False}}},
            set(),
            id="external-redis",
        ),
        pytest.param({"deviceConfig": {"config": {"nvidia": {"overwriteEnv": True}}}}, set(), id="overwrite-env"),
        pytest.param({"redis": {"sentinel": {"enabled": True}}}, set(), id="redis-sentinel"),
    ],
)
def test_values_switches_pass_a_server_side_dry_run(
    kube_apiserver: ApiServer, release_namespace: str, values: dict[str, Any], skipped: set[str]
) -> None:
    """Helm renders each switch; everything but the CRD-served kinds goes through the dry run."""
    pytest.importorskip("helm_python", reason="helm-python-sdk (Helm's SDK, Linux x86_64 only) is not installed")
    from deploy.render import load_chart, objects, render_chart

    with load_chart() as chart:
        rendered = objects(render_chart(chart, values=values))
    assert {o["kind"] for o in rendered} & CRD_KINDS == skipped
    assert dry_run_errors(kube_apiserver, [o for o in rendered if o["kind"] not in CRD_KINDS]) == []
