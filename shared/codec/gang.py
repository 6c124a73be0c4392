"""Gang membership as the API writes it (docs/gangs.md): Kubernetes' native PodGroup (``scheduling.k8s.io/v1beta1``
from v1.37, ``v1alpha2`` on v1.36; the same fields in both) named by a pod's ``spec.schedulingGroup.podGroupName``,
its ``spec.schedulingPolicy.gang.minCount``, and scheduler-plugins' coscheduling label
``scheduling.x-k8s.io/pod-group`` with its ``scheduling.x-k8s.io/v1alpha1`` PodGroup's ``spec.minMember``. Pure:
objects in, facts out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vgpu_scheduler.shared.codec import annotations as keys

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
POD_GROUP_VERSIONS = ("v1beta1", "v1alpha2")
"""The ``scheduling.k8s.io`` versions that serve native PodGroups, newest first: ``v1beta1`` (Kubernetes v1.37,
``GenericWorkload``), ``v1alpha2`` (v1.36, ``GenericWorkload`` and ``GangScheduling``)."""


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


def coscheduling_min_member(group: Mapping[str, Any]) -> int | None:
    """A scheduler-plugins PodGroup's (``scheduling.x-k8s.io/v1alpha1``) ``spec.minMember``; None when absent,
    malformed or below 1."""
    n = _mapping(group, "spec").get("minMember")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


def live_members(pods: Sequence[Mapping[str, Any]], group: str, *, label: bool = False) -> list[Mapping[str, Any]]:
    """The pods of ``pods`` naming PodGroup ``group`` (``label``: by the coscheduling label instead of
    ``spec.schedulingGroup``) that have not ended and are not being deleted."""
    name_of = coscheduling_group if label else pod_group_name
    return [
        p
        for p in pods
        if name_of(p) == group
        and _mapping(p, "status").get("phase") not in TERMINAL_PHASES
        and not _mapping(p, "metadata").get("deletionTimestamp")
    ]


def cannot_be_whole(live: int, min_count: int, failing: int = 1) -> bool:
    """``failing`` live members (the one just refused among them) fit on no node in this pass: can the group
    still reach ``min_count``? Not when the others alone are fewer (``live - failing < min_count``); then
    kube-scheduler's pass fails, and whatever its members hold would only block other pods. With ``min_count``
    below the group's size, a pass survives up to ``live - min_count`` members that fit nowhere."""
    return live - max(failing, 1) < min_count
