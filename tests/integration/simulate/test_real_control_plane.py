"""What ``simulate`` says in the API server's and kube-scheduler's name is what the real ones say: each pod of the
validation table is POSTed to a real kube-apiserver v1.36 (its ``Status.message`` must be the simulator's
message), and a pod asking for an extended resource no node advertises is left Pending by a real kube-scheduler
with the simulator's ``FitError`` text. Skipped without ``KUBEBUILDER_ASSETS`` (see tests/controlplane)."""

from __future__ import annotations

import json
import time
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.controlplane.control import ApiServer, start_scheduler
from tests.controlplane.fixtures import own_control_plane
from tests.unit.simulate.test_podvalidation import INVALID
from vgpu_scheduler.shared.k8s.nodefit import Ledger, fit_error
from vgpu_scheduler.shared.k8s.podvalidation import pod_invalid


@pytest.fixture(scope="module")
def api() -> Iterator[ApiServer]:
    with own_control_plane() as server:
        yield server


def _create(api: ApiServer, pod: dict[str, Any]) -> str | None:
    """POST the pod; the API server's message when it refuses it (None: created)."""
    body = {"apiVersion": "v1", "kind": "Pod", **pod}
    try:
        api.request("POST", "/api/v1/namespaces/default/pods", body)
    except urllib.error.HTTPError as e:
        status = json.loads(e.read())
        return str(status["message"])
    return None


@pytest.mark.parametrize(("case", "pod", "message"), INVALID, ids=[c for c, _, _ in INVALID])
def test_the_api_server_refuses_with_the_simulators_message(
    api: ApiServer, case: str, pod: dict[str, Any], message: str
) -> None:
    assert pod_invalid(pod) == message
    assert _create(api, pod) == message


def test_kube_scheduler_leaves_an_unadvertised_extended_resource_pending_with_the_same_text(
    api: ApiServer, tmp_path: Path
) -> None:
    nodes = []
    for i in (1, 2, 3):
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": f"fit-{i}", "labels": {"kubernetes.io/hostname": f"fit-{i}"}},
        }
        api.request("POST", "/api/v1/nodes", node)
        status = {
            "status": {
                "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110", "nvidia.com/gpu": "8"},
                "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110", "nvidia.com/gpu": "8"},
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ready"}],
            }
        }
        api.request("PATCH", f"/api/v1/nodes/fit-{i}/status", status, content_type="application/merge-patch+json")
        nodes.append(api.request("GET", f"/api/v1/nodes/fit-{i}"))
    pod = {
        "metadata": {"name": "dcu", "namespace": "default"},
        "spec": {"containers": [{"name": "main", "image": "x", "resources": {"limits": {"hygon.com/dcunum": "1"}}}]},
    }
    assert _create(api, pod) is None
    fits, refused = Ledger(nodes, []).filter(pod, [n["metadata"]["name"] for n in nodes], frozenset())
    assert fits == []
    expected = fit_error({node: ", ".join(reasons) for node, reasons in refused.items()})
    assert expected == "0/3 nodes are available: 3 Insufficient hygon.com/dcunum."
    with start_scheduler(api, {"profiles": [{"schedulerName": "default-scheduler"}]}, tmp_path / "sched"):
        deadline = time.monotonic() + 60
        message = ""
        while time.monotonic() < deadline:
            got = api.request("GET", "/api/v1/namespaces/default/pods/dcu")
            conditions = {c["type"]: c for c in (got.get("status") or {}).get("conditions") or []}
            message = str(conditions.get("PodScheduled", {}).get("message", ""))
            if message:
                break
            time.sleep(0.2)  # an external process: nothing to await
    # kube-scheduler appends its preemption plugin's message, which the simulator leaves out
    assert message.startswith(expected), message
