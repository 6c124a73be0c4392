"""What each Kubernetes release serves for gang scheduling (docs/gangs.md): the ``scheduling.k8s.io`` version of its
PodGroups and the feature gates that turn them on, as each release's own source has it. The control plane
(``control.py``) starts kube-apiserver with them; the gang scenarios start kube-scheduler with the same gates."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["GANG_APIS", "GangApi"]


@dataclass(frozen=True)
class GangApi:
    """How one Kubernetes release serves gang scheduling: the ``scheduling.k8s.io`` version of its PodGroups and the
    feature gates that turn them (API server) and the gang plugin (kube-scheduler) on (docs/gangs.md)."""

    version: str
    """``scheduling.k8s.io/<version>`` serves ``podgroups`` (an alpha or beta version off by default:
    ``--runtime-config``)."""
    feature_gates: str
    """``--feature-gates`` for kube-apiserver and kube-scheduler."""

    @property
    def api_version(self) -> str:
        return f"scheduling.k8s.io/{self.version}"

    @property
    def runtime_config(self) -> str:
        return f"{self.api_version}=true"

    def podgroups(self, namespace: str) -> str:
        """The API path of ``namespace``'s PodGroups."""
        return f"/apis/{self.api_version}/namespaces/{namespace}/podgroups"


GANG_APIS: Mapping[int, GangApi] = {
    # v1.35 has no GangScheduling gate; v1.36 serves PodGroups in v1alpha2 and gates the plugin apart
    36: GangApi(version="v1alpha2", feature_gates="GenericWorkload=true,GangScheduling=true"),
    # v1.37: GenericWorkload is beta (still off by default) and alone turns on PodGroups, the GangScheduling plugin
    # and workload-aware preemption (PodGroupPostFilter); the GangScheduling and WorkloadAwarePreemption gates are
    # gone (a gate it does not know is an error); v1alpha2 is gone, v1beta1 is a beta version off by default
    37: GangApi(version="v1beta1", feature_gates="GenericWorkload=true"),
}
"""Gang scheduling's API per minor release, as each release's own source has it (pkg/features/kube_features.go,
pkg/registry/scheduling/rest/storage_scheduling.go, pkg/controlplane/instance.go)."""
