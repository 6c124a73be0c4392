"""What one ``/bind`` comes to: its outcome (the ``outcome`` label of ``vgpu_bind_outcomes_total``), the answer
kube-scheduler gets, the exception that ends a bind early with both, and the checks that end it so: a pod that
cannot be bound (:func:`check_pod`), a claim refused (:func:`claim_refused`) or lost (:func:`claim_lost`), a pod
without a reservation that asks for no device (:func:`requests_devices`: bound plainly)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.k8s.objects import meta, uid_of
from vgpu_scheduler.shared.protocol.extender import ExtenderBindingArgs
from vgpu_scheduler.shared.store import ClaimRefused
from vgpu_scheduler.shared.vendors.pods import vendors_pod_request
from vgpu_scheduler.shared.vendors.registry import Vendors


class BindOutcome(enum.Enum):
    """The ``outcome`` label of ``vgpu_bind_outcomes_total``."""

    BOUND = "bound"
    """Lock taken, annotations written, Binding created."""
    ALREADY_BOUND = "already_bound"
    """The pod was already on this node (a retried bind): success, nothing written."""
    PLAIN = "plain"
    """A pod asking for nothing we manage: bound without devices or lock."""
    BAD_REQUEST = "bad_request"
    NO_RESERVATION = "no_reservation"
    WRONG_NODE = "wrong_node"
    POD_GONE = "pod_gone"
    """The pod is gone, re-created under another UID, or being deleted."""
    BOUND_ELSEWHERE = "bound_elsewhere"
    NODE_GONE = "node_gone"
    LOCK_TIMEOUT = "lock_timeout"
    NOT_OWNER = "not_owner"
    """Another bind of this pod owns its record (claimed first, or took over an expired claim): nothing written."""
    ERROR = "error"
    """An API or Redis failure (or an unknown Binding outcome)."""

    @property
    def success(self) -> bool:
        return self in (BindOutcome.BOUND, BindOutcome.ALREADY_BOUND, BindOutcome.PLAIN)


@dataclass(frozen=True, slots=True)
class BindResult:
    """What ``/bind`` answers: ``error`` is empty on success."""

    outcome: BindOutcome
    error: str = ""


class BindFailed(Exception):
    """Ends a bind with ``outcome``; the message is the ``Error`` kube-scheduler gets."""

    def __init__(self, outcome: BindOutcome, message: str) -> None:
        super().__init__(message)
        self.outcome = outcome


def check_pod(pod: Mapping[str, Any], args: ExtenderBindingArgs) -> bool:
    """Raise BindFailed if the pod cannot be bound to ``args.node``; True if it already is."""
    ns, name = args.pod_namespace, args.pod_name
    if uid_of(pod) and uid_of(pod) != args.pod_uid:
        raise BindFailed(
            BindOutcome.POD_GONE, f"pod {ns}/{name} was re-created (uid {uid_of(pod)}, asked {args.pod_uid})"
        )
    if meta(pod).get("deletionTimestamp") is not None:
        raise BindFailed(BindOutcome.POD_GONE, f"pod {ns}/{name} is being deleted")
    bound_to = (pod.get("spec") or {}).get("nodeName")
    if bound_to == args.node:
        return True
    if bound_to:
        raise BindFailed(BindOutcome.BOUND_ELSEWHERE, f"pod {ns}/{name} is already bound to node {bound_to}")
    return False


def requests_devices(pod: Mapping[str, Any], vendors: Vendors) -> bool:
    """The filter's test: a pod whose containers ask for no device passed through it unreserved."""
    try:
        return vendors_pod_request(pod, vendors).any
    except DecodeError:
        return True  # the filter refused it too; never bind it blind


def claim_refused(args: ExtenderBindingArgs, claim: ClaimRefused) -> BindFailed:
    """The store refused this bind a claim on the pod's record: why, as the bind's failure."""
    ns, name = args.pod_namespace, args.pod_name
    if claim.reason == "elsewhere":
        return BindFailed(
            BindOutcome.WRONG_NODE,
            f"pod {ns}/{name} has its devices reserved on node {claim.node}, not {args.node}: "
            "it will be filtered again",
        )
    if claim.reason == "busy":
        return BindFailed(
            BindOutcome.NOT_OWNER,
            f"pod {ns}/{name}: another bind of it owns its devices on node {args.node} (for up to "
            f"{claim.remaining_ms / 1000:.1f}s more); this one writes nothing, the pod will be retried",
        )
    return BindFailed(
        BindOutcome.NO_RESERVATION,
        f"pod {ns}/{name} (uid {args.pod_uid}) has no device reservation: it will be filtered again",
    )


def claim_lost(args: ExtenderBindingArgs) -> BindFailed:
    """The claim this bind held on the pod's record is gone: nothing more is written."""
    return BindFailed(
        BindOutcome.NOT_OWNER,
        f"pod {args.pod_key}: this bind no longer owns its devices on node {args.node} "
        "(taken over, released or Redis restarted); nothing written, the pod will be retried",
    )
