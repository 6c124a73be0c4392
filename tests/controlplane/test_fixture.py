"""The control-plane fixture itself: the API server answers with the admin kubeconfig's token, keeps a Node's
status as posted, and a kube-scheduler started from a config dict binds a pod to that node."""

from __future__ import annotations

import time
import urllib.error
import uuid
from pathlib import Path

import pytest

from tests.controlplane.control import ApiServer, Cleanup, start_scheduler


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
