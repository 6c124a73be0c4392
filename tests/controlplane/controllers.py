"""kube-controller-manager on the real control plane, started by the tests that need controllers (the
``KUBEBUILDER_ASSETS`` directory holds it when ``scripts/install-control-plane.sh`` made it): only the controllers a
test names run, e.g. Deployments and ReplicaSets recreating evicted pods and the disruption controller computing
PodDisruptionBudgets' ``status``. No kubelet runs, so a pod the ReplicaSet creates stays ``Pending`` until a test
marks it running."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.controlplane.control import SKIP_REASON, ApiServer, ControlPlaneError, assets_dir, start_component

CONTROLLER_MANAGER = "kube-controller-manager"
WORKLOAD_CONTROLLERS = (
    "deployment-controller",
    "replicaset-controller",
    "disruption-controller",
    "garbage-collector-controller",
)
"""What a test of evictions needs: Deployments own ReplicaSets, which recreate their evicted pods; the disruption
controller computes PodDisruptionBudgets' ``status.disruptionsAllowed``; the garbage collector deletes what a
deleted Deployment owned."""


def has_controller_manager() -> bool:
    """Whether ``$KUBEBUILDER_ASSETS`` holds kube-controller-manager (install-control-plane.sh builds it)."""
    assets = assets_dir()
    return assets is not None and (assets / CONTROLLER_MANAGER).exists()


@dataclass
class ControllerManager:
    """A running kube-controller-manager: its process, log and secure port."""

    proc: subprocess.Popen[bytes]
    log: Path
    port: int

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


@contextlib.contextmanager
def start_controller_manager(
    api: ApiServer, tmp: Path, *, controllers: Sequence[str] = WORKLOAD_CONTROLLERS
) -> Iterator[ControllerManager]:
    """Run kube-controller-manager against ``api`` with only ``controllers`` (its ``--controllers`` names), the
    admin kubeconfig and the API server's service-account key (the key that signs tokens, which the token
    controller would use), leader election off; wait for its ``/healthz``; SIGTERM it on exit."""
    assets = assets_dir()
    if assets is None:
        raise ControlPlaneError(SKIP_REASON)
    tmp.mkdir(parents=True, exist_ok=True)
    log = tmp / "kube-controller-manager.log"
    args = [
        f"--kubeconfig={api.kubeconfig}",
        f"--controllers={','.join(controllers)}",
        f"--service-account-private-key-file={api.cert_dir / 'sa.key'}",
        f"--root-ca-file={api.ca_file}",
        "--leader-elect=false",
        "--kube-api-qps=100",
        "--kube-api-burst=200",
    ]
    with start_component(api, assets, CONTROLLER_MANAGER, args, log) as (proc, port):
        yield ControllerManager(proc=proc, log=log, port=port)
