"""Cambricon's own node lock ``cambricon.com/dsmlu.lock`` (an RFC3339 time, two minutes). Pure."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from datetime import datetime

from vgpu_scheduler.shared.codec.nodelock import format_rfc3339, parse_rfc3339
from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.vendors.cambricon.keys import LOCK_EXPIRY, LOCK_KEY

# ------------------------------------------------------------------------------------------------------------
# The node lock
# ------------------------------------------------------------------------------------------------------------


class LockState(enum.Enum):
    """What ``cambricon.com/dsmlu.lock`` says about a node at a given time."""

    FREE = "free"
    """No lock annotation: lock by writing :func:`lock_annotation`."""
    HELD = "held"
    """Locked at most two minutes ago (or in the future), or the value is not an RFC 3339 time: HAMi fails the bind
    (and its failure path then deletes the annotation, whoever wrote it)."""
    EXPIRED = "expired"
    """Locked more than two minutes ago: HAMi removes the annotation and locks again."""


def lock_annotation(now: datetime) -> dict[str, str]:
    """The node annotation that takes the lock: ``{"cambricon.com/dsmlu.lock": <now, RFC 3339>}``.

    ``now`` must be aware; HAMi writes its local time (``time.Now().Format(time.RFC3339)``, whole seconds)."""
    return {LOCK_KEY: format_rfc3339(now)}


def lock_time(node_annotations: Mapping[str, str]) -> datetime | None:
    """When the node was locked (aware), None when it is not; DecodeError naming the key for a value that is not
    an RFC 3339 time."""
    value = node_annotations.get(LOCK_KEY)
    if value is None:
        return None
    return parse_rfc3339(value, LOCK_KEY)


def lock_state(node_annotations: Mapping[str, str], now: datetime) -> LockState:
    """HAMi's ``LockNode`` decision: free without the annotation; expired when ``now - lock > 2 minutes``; held
    otherwise, including a lock time in the future and a value that does not parse (``now`` must be aware)."""
    try:
        at = lock_time(node_annotations)
    except DecodeError:
        return LockState.HELD
    if at is None:
        return LockState.FREE
    return LockState.EXPIRED if now - at > LOCK_EXPIRY else LockState.HELD
