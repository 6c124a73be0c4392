"""The control-plane fixture itself: the API server answers with the admin kubeconfig's token, keeps a Node's
status as posted, and a kube-scheduler started from a config dict binds a pod to that node."""

from __future__ import annotations

import subprocess
import time
import urllib.error
import uuid
from pathlib import Path

import pytest

from tests.controlplane.control import ApiServer, Cleanup, assets_dir, start_scheduler


def _node(name: str) -> dict[str, object]:
    return {
        "metadata": {"name": name},
        "status": {
            "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def test_api_server_keeps_posted_node_status(kube_apiserver: ApiServer, kube_cleanup: Cleanup) -> None:
    name = f"fixture-node-{uuid.uuid4().hex[:6]}"
    kube_apiserver.request("POST", "/api/v1/nodes", _node(name))
    kube_cleanup.node(name)
    got = kube_apiserver.request("GET", f"/api/v1/nodes/{name}")
    assert got["status"]["allocatable"]["cpu"] == "8"
    assert kube_apiserver.token in kube_apiserver.kubeconfig.read_text()


def test_unauthenticated_request_is_refused(kube_apiserver: ApiServer) -> None:
    bad = ApiServer(
        url=kube_apiserver.url,
        kubeconfig=kube_apiserver.kubeconfig,
        ca_file=kube_apiserver.ca_file,
        token="wrong",
        cert_dir=kube_apiserver.cert_dir,
    )
    with pytest.raises(urllib.error.HTTPError) as info:
        bad.request("GET", "/api/v1/nodes")
    assert info.value.code == 401


def test_scheduler_binds_a_pod(kube_apiserver: ApiServer, kube_cleanup: Cleanup, tmp_path: Path) -> None:
    suffix = uuid.uuid4().hex[:6]
    node = f"fixture-node-{suffix}"
    ns = kube_cleanup.namespace(f"fixture-{suffix}")
    kube_apiserver.request("POST", "/api/v1/nodes", _node(node))
    kube_cleanup.node(node)
    pod = {
        "metadata": {"name": "p"},
        "spec": {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                        ]
                    }
                }
            },
            "containers": [{"name": "c", "image": "x"}],
        },
    }
    kube_apiserver.request("POST", f"/api/v1/namespaces/{ns}/pods", pod)
    with start_scheduler(kube_apiserver, {"profiles": [{"schedulerName": "default-scheduler"}]}, tmp_path):
        deadline = time.monotonic() + 30
        bound = ""
        while time.monotonic() < deadline and not bound:
            bound = kube_apiserver.request("GET", f"/api/v1/namespaces/{ns}/pods/p")["spec"].get("nodeName", "")
            time.sleep(0.1)  # another process binds it: nothing to await
    assert bound == node


def test_the_binaries_report_the_release_they_were_built_as(kube_apiserver: ApiServer) -> None:
    """scripts/install-control-plane.sh sets the version strings to the release it writes to ``.k8s-version``:
    ``GET /version`` and ``kube-scheduler --version`` say it (a setup-envtest directory has no such file)."""
    assets = assets_dir()
    assert assets is not None
    marker = assets / ".k8s-version"
    if not marker.exists():
        pytest.skip(f"{assets} was not filled by scripts/install-control-plane.sh (no .k8s-version)")
    release = marker.read_text().strip()
    served = kube_apiserver.request("GET", "/version")
    assert (served["gitVersion"], served["major"], served["minor"]) == (release, "1", release.split(".")[1])
    scheduler = subprocess.run(
        [str(assets / "kube-scheduler"), "--version"], capture_output=True, text=True, timeout=30, check=True
    )
    assert scheduler.stdout.split() == ["Kubernetes", release]
