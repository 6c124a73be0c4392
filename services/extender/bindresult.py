"""What one ``/bind`` comes to: its outcome (the ``outcome`` label of ``vgpu_bind_outcomes_total``), the answer
kube-scheduler gets, and the exception that ends a bind early with both."""

from __future__ import annotations

import enum
from dataclasses import dataclass


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
