"""The bind hint: what ``/filter`` saw of the pod that ``/bind`` needs, kept with the pod's reservation in Redis.

kube-scheduler sends the whole Pod to ``/filter`` but only its name, namespace and UID to ``/bind``. A bind used to
read the pod first (one API call) to learn its ``resourceVersion`` and to check that it can still be bound. The
filter already holds that pod, so it stores ``1|<g or ->|<resourceVersion>`` with the reservation (``g``: a
PodGroup member, which waits longer for a node lock), and only for a pod the bind could write as it stands: not
being deleted, not bound, carrying no allocation annotation. The bind then patches the pod with that
``resourceVersion`` as a precondition: if the pod changed in any way since the filter saw it (deleted, re-created,
bound, annotated by another bind), the API server refuses the patch (409) and the bind reads the pod and checks it
as before. A hint is never trusted for anything the precondition does not guard (docs/extender-bind.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.k8s.objects import annotations_of, labels_of, meta

_VERSION: Final = "1"


@dataclass(frozen=True, slots=True)
class BindHint:
    """The pod as ``/filter`` saw it: its ``resourceVersion`` and whether it is a PodGroup member."""

    resource_version: str
    pod_group: bool


def is_pod_group_member(pod: Mapping[str, Any]) -> bool:
    """A PodGroup member (label ``scheduling.x-k8s.io/pod-group`` or ``spec.schedulingGroup.podGroupName``)."""
    if labels_of(pod).get(keys.POD_GROUP_LABEL):
        return True
    group = (pod.get("spec") or {}).get("schedulingGroup")
    return isinstance(group, Mapping) and bool(group.get("podGroupName"))


def bind_hint_for(pod: Mapping[str, Any], allocation_keys: Iterable[str]) -> str:
    """The hint to store with the pod's reservation, or ``''`` when the bind must read the pod itself: no
    ``resourceVersion``, being deleted, already bound, or already carrying ``hami.io/vgpu-node`` or one of
    ``allocation_keys`` (another decision's allocation, or a retried bind's: the bind compares them)."""
    metadata = meta(pod)
    rv = metadata.get("resourceVersion")
    if not isinstance(rv, str) or not rv or "|" in rv or metadata.get("deletionTimestamp") is not None:
        return ""
    spec = pod.get("spec")
    if isinstance(spec, Mapping) and spec.get("nodeName"):
        return ""
    annotations = annotations_of(pod)
    if keys.VGPU_NODE in annotations or any(k in annotations for k in allocation_keys):
        return ""
    return f"{_VERSION}|{'g' if is_pod_group_member(pod) else '-'}|{rv}"


def parse_bind_hint(text: str) -> BindHint | None:
    """The hint ``bind_hint_for`` wrote; None for none, or for a form this version does not know (a newer
    replica's): the bind then reads the pod."""
    version, _, rest = text.partition("|")
    group, _, rv = rest.partition("|")
    if version != _VERSION or group not in ("g", "-") or not rv:
        return None
    return BindHint(resource_version=rv, pod_group=group == "g")
