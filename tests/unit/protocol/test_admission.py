"""AdmissionReview v1/v1beta1: parsing, malformed reviews, and response shapes."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.protocol.admission import (
    AdmissionOutcome,
    AdmissionVersion,
    Operation,
    decode_patch,
    error_review,
    parse_admission_review,
    response_dict,
    review_response,
)

POD = {"metadata": {"generateName": "job-", "namespace": ""}, "spec": {"containers": [{"name": "c"}]}}


def review(version: str = "admission.k8s.io/v1", **request: Any) -> bytes:
    req: dict[str, Any] = {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": "team-a",
        "operation": "CREATE",
        "userInfo": {"username": "admin"},
        "object": POD,
        "oldObject": None,
        "dryRun": False,
        "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
    }
    req.update(request)
    return json.dumps({"apiVersion": version, "kind": "AdmissionReview", "request": req}).encode()


@pytest.mark.parametrize("version", list(AdmissionVersion), ids=lambda v: v.value)
def test_parse_review(version: AdmissionVersion) -> None:
    req = parse_admission_review(review(version.value))
    assert req.api_version is version
    assert req.uid == "705ab4f5-6393-11e8-b7cc-42010a800002"
    assert req.operation is Operation.CREATE
    assert req.kind == "Pod"
    assert req.resource == "pods"
    assert req.namespace == "team-a"
    assert req.name == ""
    assert req.object == POD
    assert req.old_object is None
    assert req.dry_run is False


def test_delete_has_no_object() -> None:
    req = parse_admission_review(review(operation="DELETE", object=None, oldObject=POD, dryRun=True))
    assert req.object is None
    assert req.old_object == POD
    assert req.dry_run is True


BAD = [
    ("not-json", b"{", "not JSON"),
    ("empty", b"", "empty body"),
    ("array", b"[]", "expected a JSON object, got array"),
    ("no-version", json.dumps({"kind": "AdmissionReview", "request": {}}).encode(), "unsupported apiVersion"),
    ("v1alpha1", review("admission.k8s.io/v1alpha1"), "unsupported apiVersion"),
    (
        "wrong-kind",
        json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "Pod", "request": {}}).encode(),
        "kind must be AdmissionReview",
    ),
    (
        "no-request",
        json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode(),
        "missing request",
    ),
    (
        "request-not-object",
        json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": []}).encode(),
        "request must be an object, got array",
    ),
    ("no-uid", review(uid=None), "missing request.uid"),
    ("empty-uid", review(uid=""), "missing request.uid"),
    ("uid-number", review(uid=5), "request.uid must be a string, got number"),
    ("no-object", review(object=None), "missing request.object for CREATE"),
    ("no-object-update", review(operation="UPDATE", object=None), "missing request.object for UPDATE"),
    ("object-string", review(object="pod"), "request.object must be an object, got string"),
    ("bad-operation", review(operation="PATCH"), "request.operation must be"),
    ("namespace-number", review(namespace=3), "request.namespace must be a string"),
    ("dryrun-string", review(dryRun="yes"), "request.dryRun must be a boolean"),
    ("kind-string", review(kind="Pod"), "request.kind must be an object"),
    # Keys are case-sensitive for the API machinery: "Request" is not "request".
    (
        "case-sensitive",
        json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "Request": {}}).encode(),
        "missing request",
    ),
]


@pytest.mark.parametrize(("body", "message"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_malformed_reviews(body: bytes, message: str) -> None:
    with pytest.raises(DecodeError, match="admission review") as e:
        parse_admission_review(body)
    assert message in str(e.value)


OPS = [{"op": "add", "path": "/spec/containers/0/resources/limits/nvidia.com~1gpucores", "value": "100"}]


@pytest.mark.parametrize("version", list(AdmissionVersion), ids=lambda v: v.value)
def test_patch_response_echoes_version_and_uid(version: AdmissionVersion) -> None:
    req = parse_admission_review(review(version.value))
    body = review_response(req, AdmissionOutcome.allow(patch_ops=OPS))
    out = json.loads(body)
    assert out["apiVersion"] == version.value
    assert out["kind"] == "AdmissionReview"
    assert out["response"]["uid"] == req.uid
    assert out["response"]["allowed"] is True
    assert out["response"]["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(out["response"]["patch"])) == OPS
    assert decode_patch(out["response"]) == OPS
    assert "status" not in out["response"]


GOLDEN = [
    (
        "patch",
        AdmissionOutcome.allow(patch_ops=[{"op": "replace", "path": "/spec/schedulerName", "value": "hami"}]),
        {
            "uid": "u1",
            "allowed": True,
            "patch": base64.b64encode(b'[{"op":"replace","path":"/spec/schedulerName","value":"hami"}]').decode(),
            "patchType": "JSONPatch",
        },
    ),
    ("allow-empty", AdmissionOutcome.allow(), {"uid": "u1", "allowed": True}),
    (
        "allow-message",
        AdmissionOutcome.allow("pod already has different scheduler assigned"),
        {
            "uid": "u1",
            "allowed": True,
            "status": {"metadata": {}, "message": "pod already has different scheduler assigned", "code": 200},
        },
    ),
    (
        "deny",
        AdmissionOutcome.deny("pod has node assigned"),
        {
            "uid": "u1",
            "allowed": False,
            "status": {"metadata": {}, "message": "pod has node assigned", "reason": "Forbidden", "code": 403},
        },
    ),
    (
        "error-500",
        AdmissionOutcome.error("invalid value"),
        {"uid": "u1", "allowed": False, "status": {"metadata": {}, "message": "invalid value", "code": 500}},
    ),
]


@pytest.mark.parametrize(("outcome", "response"), [g[1:] for g in GOLDEN], ids=[g[0] for g in GOLDEN])
def test_response_shapes(outcome: AdmissionOutcome, response: dict[str, Any]) -> None:
    out = response_dict(outcome, uid="u1", api_version=AdmissionVersion.V1BETA1)
    assert out == {"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1beta1", "response": response}
    assert list(out["response"]) == list(response), "Go struct field order"


def test_response_golden_bytes() -> None:
    req = parse_admission_review(review(uid="abc"))
    assert review_response(req, AdmissionOutcome.deny("container gpu <x> is privileged")) == (
        b'{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","response":{"uid":"abc","allowed":false,'
        b'"status":{"metadata":{},"message":"container gpu \\u003cx\\u003e is privileged","reason":"Forbidden",'
        b'"code":403}}}'
    )


def test_denied_outcome_never_carries_a_patch() -> None:
    outcome = AdmissionOutcome(allowed=False, patch_ops=OPS, message="no", code=403)
    assert "patch" not in response_dict(outcome, uid="u", api_version=AdmissionVersion.V1)["response"]


def test_error_review_for_undecodable_body() -> None:
    out = json.loads(error_review("admission review: not JSON"))
    assert out == {
        "kind": "AdmissionReview",
        "apiVersion": "admission.k8s.io/v1",
        "response": {
            "uid": "",
            "allowed": False,
            "status": {"metadata": {}, "message": "admission review: not JSON", "code": 400},
        },
    }


@pytest.mark.parametrize(
    ("response", "message"),
    [
        ({"patch": 5}, "base64 string"),
        ({"patch": "!!!"}, "not valid base64"),
        ({"patch": base64.b64encode(b"{}").decode()}, "JSON array of operation objects"),
        ({"patch": base64.b64encode(b"[1]").decode()}, "JSON array of operation objects"),
    ],
    ids=["not-string", "not-base64", "not-array", "not-objects"],
)
def test_decode_patch_rejects(response: dict[str, Any], message: str) -> None:
    with pytest.raises(DecodeError) as e:
        decode_patch(response)
    assert message in str(e.value)


def test_decode_patch_absent() -> None:
    assert decode_patch({"allowed": True}) == []
