"""Kubernetes API answers translated into the project's error tree (``shared.errors``), in one place.

404                      → NotFoundError
409                      → ConflictError (AlreadyBoundError for a pod already bound to a node, StaleVersionError
                           for a write whose resourceVersion precondition failed, UidMismatchError for one whose UID
                           precondition failed: the object was deleted and re-created under its name)
410 Gone/Expired         → ExpiredError (a TransientError with delay 0: re-list, never retry the version)
429, 5xx, network, time  → TransientError (delay from Retry-After when given); a 429 whose cause is a
                           PodDisruptionBudget (an eviction it forbids) → DisruptionBudgetError
other 4xx                → KubeRequestError (a PermanentError carrying code and reason)
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from vgpu_scheduler.shared.errors import ConflictError, NotFoundError, PermanentError, TransientError, VgpuError

_ASSIGNED_RE = re.compile(r'is already assigned to node "([^"]*)"')
_STALE_MARKERS = ("Precondition failed: ResourceVersion", "the object has been modified")
"""How the API server words a failed resourceVersion precondition: a Binding's (``storage.Preconditions``) and a
patch's or update's (optimistic concurrency)."""
_UID_MARKER = "Precondition failed: UID"
"""How the API server words a failed UID precondition (``storage.Preconditions``)."""


class AlreadyBoundError(ConflictError):
    """``pods/binding`` refused: the pod already has ``spec.nodeName`` (``node``, when the server named it)."""

    def __init__(self, message: str, node: str | None) -> None:
        super().__init__(message)
        self.node = node


class StaleVersionError(ConflictError):
    """409: the write named a resourceVersion the object no longer has (it changed since it was read)."""


class UidMismatchError(ConflictError):
    """409: the write named a UID the object does not have: the object of that name is another one (re-created)."""


class ExpiredError(TransientError):
    """HTTP 410 (``Expired``/``Gone``): the resourceVersion asked for is older than the server's history."""

    def __init__(self, message: str) -> None:
        super().__init__(message, delay=0.0)


class DisruptionBudgetError(TransientError):
    """429 from ``pods/eviction``: a PodDisruptionBudget allows no disruption now (or the disruption controller
    has not computed it yet). It may allow one later; the message carries the API server's cause."""


class KubeRequestError(PermanentError):
    """A 4xx answer that retrying will not fix (bad request, forbidden, invalid, unsupported)."""

    def __init__(self, message: str, code: int, reason: str) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason


def status_message(body: bytes | Mapping[str, Any]) -> tuple[str, str]:
    """``(reason, message)`` from a Status body (raw bytes or parsed); the raw text when it is not a Status."""
    parsed: Any = body
    if isinstance(body, bytes | bytearray):
        try:
            parsed = json.loads(body)
        except ValueError:
            text = body.decode("utf-8", "replace").strip()
            return "", text[:300]
    if isinstance(parsed, Mapping):
        return str(parsed.get("reason") or ""), str(parsed.get("message") or "")
    return "", str(parsed)[:300]


def _budget_cause(body: bytes | Mapping[str, Any]) -> str | None:
    """The message of a Status cause of type ``DisruptionBudget`` (``policyv1.DisruptionBudgetCause``), or None."""
    parsed: Any = body
    if isinstance(body, bytes | bytearray):
        try:
            parsed = json.loads(body)
        except ValueError:
            return None
    details = parsed.get("details") if isinstance(parsed, Mapping) else None
    causes = details.get("causes") if isinstance(details, Mapping) else None
    for cause in causes if isinstance(causes, list) else []:
        if isinstance(cause, Mapping) and cause.get("reason") == "DisruptionBudget":
            return str(cause.get("message") or "")
    return None


def _retry_after(headers: Mapping[str, str] | None) -> float:
    raw = (headers or {}).get("Retry-After")
    try:
        return max(0.0, float(raw)) if raw is not None else 1.0
    except ValueError:
        return 1.0


def error_for(
    what: str, code: int, body: bytes | Mapping[str, Any], headers: Mapping[str, str] | None = None
) -> VgpuError:
    """The project error for an API error answer; ``what`` names the call (``patch pod ns/name``)."""
    reason, message = status_message(body)
    text = f"{what}: {code} {reason}: {message}" if reason else f"{what}: {code}: {message}"
    if code == 404:
        return NotFoundError(text)
    if code == 409:
        m = _ASSIGNED_RE.search(message)
        if m is not None:
            return AlreadyBoundError(text, m.group(1))
        if any(marker in message for marker in _STALE_MARKERS):
            return StaleVersionError(text)
        if _UID_MARKER in message:
            return UidMismatchError(text)
        return ConflictError(text)
    if code == 410:
        return ExpiredError(text)
    if code == 429 and (cause := _budget_cause(body)) is not None:
        return DisruptionBudgetError(f"{text} ({cause})" if cause else text, delay=_retry_after(headers))
    if code == 429 or code >= 500:
        return TransientError(text, delay=_retry_after(headers))
    return KubeRequestError(text, code, reason)
