"""Kubernetes ``Status`` bodies and the one exception the emulator raises to answer with one.

The shapes and messages follow the real API server (``k8s.io/apimachinery/pkg/api/errors``), so client code
sees exactly what it would see against a cluster.
"""

from __future__ import annotations

from typing import Any

_REASONS: dict[int, str] = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def reason_for(code: int) -> str:
    """The Status ``reason`` the API server uses for an HTTP code (``Unknown`` for others)."""
    return _REASONS.get(code, "Unknown")


class ApiError(Exception):
    """An error answer: HTTP ``code`` with a ``Status`` body carrying ``reason`` and ``message``."""

    def __init__(self, code: int, message: str, reason: str | None = None, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or reason_for(code)
        self.details = details

    def status(self) -> dict[str, Any]:
        """The ``Status`` object for this error, as the API server serialises it."""
        return failure_status(self.code, self.message, self.reason, self.details)


def failure_status(code: int, message: str, reason: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """A ``Status`` with ``status: Failure``."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    }
    if details is not None:
        body["details"] = details
    body["code"] = code
    return body


def success_status(code: int) -> dict[str, Any]:
    """A ``Status`` with ``status: Success`` (what ``pods/binding`` answers)."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code}


def not_found(plural: str, name: str) -> ApiError:
    return ApiError(404, f'{plural} "{name}" not found', details={"name": name, "kind": plural})


def already_exists(plural: str, name: str) -> ApiError:
    return ApiError(409, f'{plural} "{name}" already exists', "AlreadyExists", {"name": name, "kind": plural})


def conflict(plural: str, name: str, cause: str) -> ApiError:
    return ApiError(
        409, f'Operation cannot be fulfilled on {plural} "{name}": {cause}', details={"name": name, "kind": plural}
    )


MODIFIED_CAUSE = "the object has been modified; please apply your changes to the latest version and try again"


def stale(plural: str, name: str) -> ApiError:
    """The 409 an update with a stale ``metadata.resourceVersion`` gets."""
    return conflict(plural, name, MODIFIED_CAUSE)


def bad_request(message: str) -> ApiError:
    return ApiError(400, message)


def invalid(kind: str, name: str, cause: str) -> ApiError:
    return ApiError(422, f'{kind} "{name}" is invalid: {cause}', details={"name": name, "kind": kind})


def expired(message: str) -> ApiError:
    return ApiError(410, message)
