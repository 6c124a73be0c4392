"""``admission.k8s.io`` v1 and v1beta1 AdmissionReview: parse requests, build responses. Pure: no I/O.

Unlike the extender, the API server encodes and decodes these with case-sensitive keys, so we match them
exactly. Responses echo the request's ``apiVersion`` and ``request.uid`` and are shaped like
controller-runtime's (``admission.Allowed`` / ``Denied`` / ``Errored`` / ``PatchResponseFromRaw``), which is
what HAMi's webhook answers with (hami-wire §5.3).
"""

from __future__ import annotations

import base64
import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.protocol import gojson

_E = TypeVar("_E", bound=enum.Enum)

_WHAT: Final = "admission review"

HTTP_OK: Final = 200
HTTP_BAD_REQUEST: Final = 400
HTTP_FORBIDDEN: Final = 403
HTTP_INTERNAL_ERROR: Final = 500


class AdmissionVersion(enum.Enum):
    """The AdmissionReview API versions we speak; the answer uses the request's."""

    V1 = "admission.k8s.io/v1"
    V1BETA1 = "admission.k8s.io/v1beta1"


class Operation(enum.Enum):
    """``request.operation``."""

    CREATE = "CREATE"
    UPDATE = "UPDATE"
    DELETE = "DELETE"
    CONNECT = "CONNECT"


@dataclass(frozen=True, slots=True)
class AdmissionRequest:
    """The parts of ``AdmissionReview.request`` the webhook uses.

    ``object`` is the pod as the API server sent it (camelCase JSON); it is present for CREATE and UPDATE and
    ``None`` otherwise. ``namespace`` is the request's namespace, which is set even when the object's
    ``metadata.namespace`` is still empty (``generateName`` pods).
    """

    api_version: AdmissionVersion
    uid: str
    operation: Operation
    kind: str
    resource: str
    namespace: str
    name: str
    object: dict[str, Any] | None
    old_object: dict[str, Any] | None = None
    dry_run: bool = False


@dataclass(frozen=True, slots=True)
class AdmissionOutcome:
    """The webhook's decision: allowed or not, the JSONPatch to apply, and the status code and message.

    ``code`` follows controller-runtime: 200 allowed, 403 denied, 400/500 errored.
    """

    allowed: bool
    patch_ops: Sequence[Mapping[str, Any]] = field(default_factory=tuple)
    message: str = ""
    code: int = HTTP_OK
    warnings: Sequence[str] = ()
    """``response.warnings``: what the API server returns to the client as ``Warning`` headers (kubectl prints
    them), e.g. a request adjusted the way HAMi adjusts it silently."""

    @classmethod
    def allow(
        cls, message: str = "", patch_ops: Sequence[Mapping[str, Any]] = (), warnings: Sequence[str] = ()
    ) -> AdmissionOutcome:
        """Allowed, optionally with a patch and warnings."""
        return cls(allowed=True, patch_ops=tuple(patch_ops), message=message, code=HTTP_OK, warnings=tuple(warnings))

    @classmethod
    def deny(cls, message: str) -> AdmissionOutcome:
        """Denied (``admission.Denied``): HTTP 403, reason ``Forbidden``."""
        return cls(allowed=False, message=message, code=HTTP_FORBIDDEN)

    @classmethod
    def error(cls, message: str, code: int = HTTP_INTERNAL_ERROR) -> AdmissionOutcome:
        """Errored (``admission.Errored``): the request could not be handled."""
        return cls(allowed=False, message=message, code=code)


def _member(enum_cls: type[_E], raw: object, detail: str) -> _E:
    """The member of ``enum_cls`` whose value is ``raw``, else a DecodeError with ``detail`` and ``raw``."""
    try:
        return enum_cls(raw)
    except ValueError:
        raise DecodeError(_WHAT, detail, repr(raw)) from None


def parse_admission_review(body: bytes | str) -> AdmissionRequest:
    """Decode an AdmissionReview (v1 or v1beta1); raise :class:`DecodeError` naming what is malformed."""
    _, top = gojson.loads_object(body, _WHAT)
    version = _member(AdmissionVersion, top.get("apiVersion"), "unsupported apiVersion")
    if top.get("kind") != "AdmissionReview":
        raise DecodeError(_WHAT, "kind must be AdmissionReview", repr(top.get("kind")))
    request = top.get("request")
    if request is None:
        raise DecodeError(_WHAT, "missing request")
    if not isinstance(request, dict):
        raise DecodeError(_WHAT, f"request must be an object, got {gojson.type_name(request)}")

    uid = request.get("uid")
    if uid is None or uid == "":
        raise DecodeError(_WHAT, "missing request.uid")
    if not isinstance(uid, str):
        raise DecodeError(_WHAT, f"request.uid must be a string, got {gojson.type_name(uid)}")
    operation = _member(
        Operation, request.get("operation"), "request.operation must be CREATE, UPDATE, DELETE or CONNECT"
    )

    kind_obj = _optional_object(request, "kind")
    resource_obj = _optional_object(request, "resource")
    obj = _optional_object(request, "object")
    if obj is None and operation in (Operation.CREATE, Operation.UPDATE):
        raise DecodeError(_WHAT, f"missing request.object for {operation.value}")
    dry_run = request.get("dryRun", False)
    if dry_run is None:
        dry_run = False
    if not isinstance(dry_run, bool):
        raise DecodeError(_WHAT, f"request.dryRun must be a boolean, got {gojson.type_name(dry_run)}")
    return AdmissionRequest(
        api_version=version,
        uid=uid,
        operation=operation,
        kind=_optional_str(kind_obj or {}, "kind", "request.kind.kind"),
        resource=_optional_str(resource_obj or {}, "resource", "request.resource.resource"),
        namespace=_optional_str(request, "namespace", "request.namespace"),
        name=_optional_str(request, "name", "request.name"),
        object=obj,
        old_object=_optional_object(request, "oldObject"),
        dry_run=dry_run,
    )


def _optional_object(parent: Mapping[str, Any], key: str) -> dict[str, Any] | None:
    return gojson.optional_object(parent, key, _WHAT, f"request.{key}")


def _optional_str(parent: Mapping[str, Any], key: str, name: str) -> str:
    return gojson.optional_string(parent, key, _WHAT, name)


def _status(outcome: AdmissionOutcome) -> dict[str, Any]:
    """``metav1.Status`` as Go marshals it: ``metadata`` always, the rest when set."""
    status: dict[str, Any] = {"metadata": {}}
    if outcome.message:
        status["message"] = outcome.message
    if not outcome.allowed and outcome.code == HTTP_FORBIDDEN:
        status["reason"] = "Forbidden"
    if outcome.code:
        status["code"] = outcome.code
    return status


def response_dict(outcome: AdmissionOutcome, *, uid: str, api_version: AdmissionVersion) -> dict[str, Any]:
    """The AdmissionReview answer as a JSON object (keys in Go struct order)."""
    response: dict[str, Any] = {"uid": uid, "allowed": outcome.allowed}
    if outcome.patch_ops and outcome.allowed:
        patch = gojson.dumps([dict(op) for op in outcome.patch_ops])
        response["patch"] = base64.b64encode(patch).decode("ascii")
        response["patchType"] = "JSONPatch"
    elif outcome.message or not outcome.allowed:
        response["status"] = _status(outcome)
    if outcome.warnings:
        response["warnings"] = list(outcome.warnings)
    return {"kind": "AdmissionReview", "apiVersion": api_version.value, "response": response}


def review_response(request: AdmissionRequest, outcome: AdmissionOutcome) -> bytes:
    """The AdmissionReview answer to ``request``, echoing its apiVersion and uid."""
    return gojson.dumps(response_dict(outcome, uid=request.uid, api_version=request.api_version))


def error_review(
    message: str, *, code: int = HTTP_BAD_REQUEST, uid: str = "", api_version: AdmissionVersion = AdmissionVersion.V1
) -> bytes:
    """An Errored answer for a body we could not decode (uid unknown unless given)."""
    return gojson.dumps(response_dict(AdmissionOutcome.error(message, code), uid=uid, api_version=api_version))


def decode_patch(response: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The JSONPatch operations of an AdmissionReview ``response`` object (``[]`` when there is none)."""
    raw = response.get("patch")
    if raw is None:
        return []
    if not isinstance(raw, str):
        raise DecodeError(_WHAT, "response.patch must be a base64 string")
    try:
        decoded = base64.b64decode(raw, validate=True)
    except ValueError as e:
        raise DecodeError(_WHAT, "response.patch is not valid base64") from e
    ops = gojson.loads(decoded, "json patch").value
    if not isinstance(ops, list) or not all(isinstance(op, dict) for op in ops):
        raise DecodeError(_WHAT, "response.patch must be a JSON array of operation objects")
    return ops
