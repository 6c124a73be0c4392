"""The resource types the emulator serves: core/v1 nodes, pods, resourcequotas, events, namespaces."""

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

    @property
    def list_kind(self) -> str:
        return self.kind + "List"


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


def by_plural() -> dict[str, ResourceType]:
    """The resource types keyed by URL plural."""
    return {r.plural: r for r in RESOURCE_TYPES}


def resolve(name: str) -> ResourceType:
    """A resource type from its plural (``pods``) or kind (``Pod``), case-insensitive."""
    low = name.lower()
    for r in RESOURCE_TYPES:
        if low in (r.plural, r.kind.lower()):
            return r
    raise KeyError(f"the emulator does not serve {name!r}")
