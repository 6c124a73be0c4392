"""Gang membership as the API writes it (docs/gangs.md): Kubernetes v1.36's ``scheduling.k8s.io/v1alpha2``
PodGroup named by a pod's ``spec.schedulingGroup.podGroupName``, its ``spec.schedulingPolicy.gang.minCount``, and
scheduler-plugins' coscheduling label ``scheduling.x-k8s.io/pod-group``. Pure: objects in, facts out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vgpu_scheduler.shared.codec import annotations as keys

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


def _mapping(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    v = obj.get(key)
    return v if isinstance(v, Mapping) else {}


def pod_group_name(pod: Mapping[str, Any]) -> str | None:
    """The native PodGroup the pod belongs to (``spec.schedulingGroup.podGroupName``), or None."""
    name = _mapping(_mapping(pod, "spec"), "schedulingGroup").get("podGroupName")
    return name if isinstance(name, str) and name else None


def coscheduling_group(pod: Mapping[str, Any]) -> str | None:
    """scheduler-plugins' coscheduling group (label ``scheduling.x-k8s.io/pod-group``), or None."""
    name = _mapping(_mapping(pod, "metadata"), "labels").get(keys.POD_GROUP_LABEL)
    return name if isinstance(name, str) and name else None


def gang_min_count(group: Mapping[str, Any]) -> int | None:
    """A PodGroup's ``spec.schedulingPolicy.gang.minCount``; None for the ``basic`` policy (no gang) or when
    absent or malformed."""
    gang = _mapping(_mapping(_mapping(group, "spec"), "schedulingPolicy"), "gang")
    n = gang.get("minCount")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


def live_members(pods: Sequence[Mapping[str, Any]], group: str) -> list[Mapping[str, Any]]:
    """The pods of ``pods`` naming PodGroup ``group`` that have not ended and are not being deleted."""
    return [
        p
        for p in pods
        if pod_group_name(p) == group
        and _mapping(p, "status").get("phase") not in TERMINAL_PHASES
        and not _mapping(p, "metadata").get("deletionTimestamp")
    ]


def cannot_be_whole(live: int, min_count: int) -> bool:
    """One live member fits on no node: can the group still reach ``min_count`` this time? Not when the others
    alone are fewer (``live - 1 < min_count``); then kube-scheduler's pass fails, and whatever its members hold
    would only block other pods."""
    return live - 1 < min_count
