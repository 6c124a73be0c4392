"""The resource types the emulator serves: core/v1 nodes, pods, resourcequotas, events, namespaces; for gang
scheduling, ``scheduling.k8s.io`` PodGroups (``v1beta1`` as Kubernetes v1.37 serves them, ``v1alpha2`` as v1.36
does) and scheduler-plugins' ``scheduling.x-k8s.io/v1alpha1`` PodGroups (coscheduling); and ``policy/v1``
PodDisruptionBudgets (read by preemption and honoured by ``pods/eviction``; their ``status`` is kept on create,
since no disruption controller runs)."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class CreateStatus(enum.Enum):
    """What happens to ``status`` in a create request, as the resource's registry strategy does."""

    KEEP = "keep"  # nodes, events: the client may set status on create
    RESET = "reset"  # resourcequotas, namespaces: status is the controllers' business
    PENDING = "pending"  # pods: status becomes {"phase": "Pending"}


@dataclass(frozen=True)
class ResourceType:
    """One REST resource: URL plural, object kind, scope, field labels, status rules."""

    plural: str
    kind: str
    namespaced: bool
    field_labels: frozenset[str]
    has_status: bool
    create_status: CreateStatus
    group_version: str = "v1"
    """``v1`` for the core group, else ``<group>/<version>`` (served under ``/apis/<group>/<version>``)."""

    @property
    def list_kind(self) -> str:
        return self.kind + "List"

    @property
    def key(self) -> str:
        """The store's table of this type: the plural, qualified by the group outside the core group."""
        return self.plural if self.group_version == "v1" else f"{self.plural}.{self.group_version}"


_META = frozenset({"metadata.name", "metadata.namespace"})

RESOURCE_TYPES: tuple[ResourceType, ...] = (
    ResourceType(
        "pods",
        "Pod",
        True,
        _META
        | {
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        },
        True,
        CreateStatus.PENDING,
    ),
    ResourceType("nodes", "Node", False, frozenset({"metadata.name", "spec.unschedulable"}), True, CreateStatus.KEEP),
    ResourceType("resourcequotas", "ResourceQuota", True, _META, True, CreateStatus.RESET),
    ResourceType(
        "events",
        "Event",
        True,
        _META
        | {
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        },
        False,
        CreateStatus.KEEP,
    ),
    ResourceType(
        "namespaces", "Namespace", False, frozenset({"metadata.name", "status.phase"}), True, CreateStatus.RESET
    ),
)


GROUP_RESOURCE_TYPES: tuple[ResourceType, ...] = (
    ResourceType("podgroups", "PodGroup", True, _META, True, CreateStatus.KEEP, "scheduling.k8s.io/v1beta1"),
    ResourceType("podgroups", "PodGroup", True, _META, True, CreateStatus.KEEP, "scheduling.k8s.io/v1alpha2"),
    ResourceType("podgroups", "PodGroup", True, _META, True, CreateStatus.KEEP, "scheduling.x-k8s.io/v1alpha1"),
    ResourceType("poddisruptionbudgets", "PodDisruptionBudget", True, _META, True, CreateStatus.KEEP, "policy/v1"),
)
"""The resource types of other API groups (the extender's gang handling, docs/gangs.md; PodDisruptionBudgets)."""


def by_plural(group_version: str = "v1") -> dict[str, ResourceType]:
    """The resource types of one API group version (the core group by default) keyed by URL plural."""
    return {r.plural: r for r in (*RESOURCE_TYPES, *GROUP_RESOURCE_TYPES) if r.group_version == group_version}


def resolve(name: str, api_version: str | None = None) -> ResourceType:
    """A resource type from its plural (``pods``) or kind (``Pod``), case-insensitive; ``api_version`` picks the
    group (by default the core group first, then the others in order)."""
    low = name.lower()
    for r in (*RESOURCE_TYPES, *GROUP_RESOURCE_TYPES):
        if low in (r.plural, r.kind.lower()) and api_version in (None, r.group_version):
            return r
    raise KeyError(f"the emulator does not serve {name!r}" + (f" in {api_version}" if api_version else ""))
