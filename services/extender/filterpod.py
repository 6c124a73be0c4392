"""What ``POST /filter`` reads of a request: the pod decoded once (identity, requests, constraints, the bind hint,
its gang), the body cap's message, and :class:`FilterError`, the refusal that ends a call in an ``Error`` answer.

Decoding only, over the protocol and codec layers: no store, no snapshot, no log line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vgpu_scheduler.services.extender.bindhint import bind_hint_for
from vgpu_scheduler.services.extender.metrics import FilterOutcome
from vgpu_scheduler.shared.codec.gang import coscheduling_group, pod_group_name
from vgpu_scheduler.shared.domain.model import PodConstraints, PodRequest
from vgpu_scheduler.shared.errors import DecodeError, VgpuError
from vgpu_scheduler.shared.k8s.objects import pod_ref
from vgpu_scheduler.shared.protocol.constraints import pod_constraints
from vgpu_scheduler.shared.protocol.extender import MAX_BODY_BYTES, ExtenderArgs
from vgpu_scheduler.shared.vendors.pods import vendors_pod_request
from vgpu_scheduler.shared.vendors.registry import Vendors


@dataclass(frozen=True, slots=True)
class FilterPod:
    """What the filter needs of the pod, decoded once."""

    namespace: str
    name: str
    uid: str
    request: PodRequest
    constraints: PodConstraints
    ref: Mapping[str, Any]
    bind_hint: str = ""
    """Stored with the reservation for the bind (:mod:`services.extender.bindhint`); empty: the bind reads the pod."""
    obj: Mapping[str, Any] | None = None
    """The pod as kube-scheduler sent it (for preemption, off the request path)."""
    group: str | None = None
    """The native PodGroup it belongs to (``spec.schedulingGroup.podGroupName``; docs/gangs.md)."""
    label_group: str | None = None
    """Else its coscheduling group (label ``scheduling.x-k8s.io/pod-group``)."""

    @property
    def gang(self) -> tuple[str, bool] | None:
        """(group, whether it is a coscheduling group), or None."""
        if self.group is not None:
            return self.group, False
        return (self.label_group, True) if self.label_group is not None else None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class FilterError(VgpuError):
    """A filter call that ends in an ``Error`` answer; ``outcome`` says which kind for the metrics."""

    def __init__(self, message: str, outcome: FilterOutcome) -> None:
        super().__init__(message)
        self.outcome = outcome


def _annotations(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = pod.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    if annotations is None:
        return {}
    if not isinstance(annotations, dict):
        raise DecodeError("extender args", "Pod.metadata.annotations must be an object")
    return annotations


def body_too_large_message(limit: int = MAX_BODY_BYTES) -> str:
    return f"extender args: request body exceeds {limit} bytes"


def decode_pod(args: ExtenderArgs, vendors: Vendors, allocated_keys: tuple[str, ...]) -> FilterPod | None:
    """The pod's identity, requests and constraints; None when it requests no managed resource."""
    request = vendors_pod_request(args.pod, vendors)
    if not request.any:
        return None
    namespace, name, uid = args.pod_namespace, args.pod_name, args.pod_uid
    constraints = pod_constraints(_annotations(args.pod), vendors)  # the webhook's decoding too
    metadata = args.pod.get("metadata")
    rv = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
    ref = pod_ref(namespace, name, uid, rv if isinstance(rv, str) else "")
    hint = bind_hint_for(args.pod, allocated_keys)
    return FilterPod(
        namespace,
        name,
        uid,
        request,
        constraints,
        ref,
        hint,
        args.pod,
        pod_group_name(args.pod),
        coscheduling_group(args.pod),
    )
