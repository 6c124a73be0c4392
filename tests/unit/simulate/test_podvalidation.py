"""The API server's pod validation as ``simulate`` applies it: each case is a pod and the message kube-apiserver
v1.36 answers on ``POST pods`` (``Status.message``), as written in ``pkg/apis/core/validation/validation.go`` and
``k8s.io/apimachinery``'s field errors."""

from __future__ import annotations

from typing import Any

import pytest

from vgpu_scheduler.shared.k8s.podvalidation import (
    FieldError,
    canonical_quantity,
    invalid_message,
    pod_invalid,
    validate_pod,
)

GPU = "nvidia.com/gpu"
DNS_LABEL = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end "
    "with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
DNS_SUBDOMAIN = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start "
    "and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


def pod(resources: dict[str, Any] | None = None, *, name: str = "p", **spec: Any) -> dict[str, Any]:
    containers = spec.pop("containers", [{"name": "main", "image": "x", "resources": resources or {}}])
    return {"metadata": {"name": name, "namespace": "default"}, "spec": {"containers": containers, **spec}}


VALID: list[tuple[str, dict[str, Any]]] = [
    ("limits only (requests default to them)", pod({"limits": {GPU: "1", "nvidia.com/gpumem": "3000"}})),
    ("requests equal to limits", pod({"limits": {GPU: "2"}, "requests": {GPU: "2"}})),
    (
        "the same value written two ways",
        pod({"limits": {"hygon.com/dcumem": "2k"}, "requests": {"hygon.com/dcumem": "2000"}}),
    ),
    ("cpu request below its limit", pod({"limits": {"cpu": "2"}, "requests": {"cpu": "500m", "memory": "1Gi"}})),
    ("no resources", pod()),
    ("a dotted pod name", pod(name="train.v2")),
]

# (case, pod, the API server's message)
INVALID: list[tuple[str, dict[str, Any], str]] = [
    (
        "an extended resource only in requests",
        pod({"requests": {GPU: "1"}}),
        'Pod "p" is invalid: spec.containers[0].resources.limits: Required value: '
        "Limit must be set for non overcommitable resources",
    ),
    (
        "extended request differs from its limit",
        pod({"limits": {GPU: "1"}, "requests": {GPU: "2"}}),
        'Pod "p" is invalid: spec.containers[0].resources.requests: Invalid value: "2": '
        "must be equal to nvidia.com/gpu limit of 1",
    ),
    (
        "extended request below its limit, shown canonically",
        pod({"limits": {"nvidia.com/gpumem": "3000"}, "requests": {"nvidia.com/gpumem": "1000"}}),
        'Pod "p" is invalid: spec.containers[0].resources.requests: Invalid value: "1k": '
        "must be equal to nvidia.com/gpumem limit of 3k",
    ),
    (
        "cpu request above its limit",
        pod({"limits": {"cpu": "1"}, "requests": {"cpu": "1500m"}}),
        'Pod "p" is invalid: spec.containers[0].resources.requests: Invalid value: "1500m": '
        "must be less than or equal to cpu limit of 1",
    ),
    (
        "an extended resource must be a whole number",
        pod({"limits": {GPU: "0.5"}}),
        'Pod "p" is invalid: [spec.containers[0].resources.limits[nvidia.com/gpu]: Invalid value: "500m": '
        "must be an integer, spec.containers[0].resources.requests[nvidia.com/gpu]: Invalid value: "
        '"500m": must be an integer]',
    ),
    (
        "negative",
        pod({"limits": {"memory": "-1Gi"}}),
        'Pod "p" is invalid: [spec.containers[0].resources.limits[memory]: Invalid value: "-1Gi": '
        "must be greater than or equal to 0, spec.containers[0].resources.requests[memory]: Invalid value: "
        '"-1Gi": must be greater than or equal to 0]',
    ),
    (
        "a bare resource name",
        pod({"limits": {"gpu": "1"}}),
        'Pod "p" is invalid: [spec.containers[0].resources.limits[gpu]: Invalid value: "gpu": '
        "must be a standard resource type or fully qualified, spec.containers[0].resources.limits[gpu]: "
        'Invalid value: "gpu": must be a standard resource for containers, '
        'spec.containers[0].resources.requests[gpu]: Invalid value: "gpu": must be a standard resource type or '
        'fully qualified, spec.containers[0].resources.requests[gpu]: Invalid value: "gpu": must be a standard '
        "resource for containers]",
    ),
    (
        "pods is not a container resource",
        pod({"limits": {"pods": "1"}}),
        'Pod "p" is invalid: [spec.containers[0].resources.limits[pods]: Invalid value: "pods": must be a standard '
        'resource for containers, spec.containers[0].resources.requests[pods]: Invalid value: "pods": must be a '
        "standard resource for containers]",
    ),
    (
        "a pod name with capitals",
        pod(name="Train_1"),
        f'Pod "Train_1" is invalid: metadata.name: Invalid value: "Train_1": {DNS_SUBDOMAIN}',
    ),
    ("no containers", pod(containers=[]), 'Pod "p" is invalid: spec.containers: Required value'),
    (
        "a container name that is not a DNS label",
        pod(containers=[{"name": "Main", "image": "x"}]),
        f'Pod "p" is invalid: spec.containers[0].name: Invalid value: "Main": {DNS_LABEL}',
    ),
    (
        "a container name with dots",
        pod(containers=[{"name": "a.b", "image": "x"}]),
        'Pod "p" is invalid: spec.containers[0].name: Invalid value: "a.b": must not contain dots',
    ),
    (
        "two containers with one name",
        pod(containers=[{"name": "main", "image": "x"}, {"name": "main", "image": "y"}]),
        'Pod "p" is invalid: spec.containers[1].name: Duplicate value: "main"',
    ),
    (
        "an init container named like a container",
        pod(initContainers=[{"name": "main", "image": "x"}]),
        'Pod "p" is invalid: spec.initContainers[0].name: Duplicate value: "main"',
    ),
    (
        "an init container's extended resource only in requests",
        pod(initContainers=[{"name": "init", "image": "x", "resources": {"requests": {"hygon.com/dcunum": "1"}}}]),
        'Pod "p" is invalid: spec.initContainers[0].resources.limits: Required value: '
        "Limit must be set for non overcommitable resources",
    ),
]


@pytest.mark.parametrize(("case", "obj"), VALID, ids=[c for c, _ in VALID])
def test_what_the_api_server_accepts(case: str, obj: dict[str, Any]) -> None:
    assert validate_pod(obj) == []
    assert pod_invalid(obj) is None


@pytest.mark.parametrize(("case", "obj", "message"), INVALID, ids=[c for c, _, _ in INVALID])
def test_what_the_api_server_refuses_with_its_message(case: str, obj: dict[str, Any], message: str) -> None:
    assert pod_invalid(obj) == message


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("3000", "3k"),
        ("12000", "12k"),
        ("1500", "1500"),
        ("2048Mi", "2Gi"),
        ("1536Mi", "1536Mi"),
        ("1.5Gi", "1536Mi"),
        ("512Ki", "512Ki"),
        ("0.5", "500m"),
        (2.5, "2500m"),
        ("1e3", "1e3"),
        ("1000e3", "1e6"),
        ("0", "0"),
        ("-1", "-1"),
        (7, "7"),
    ],
)
def test_quantities_are_shown_as_go_prints_them(raw: str | int | float, shown: str) -> None:
    assert canonical_quantity(raw) == shown


def test_identical_errors_are_reported_once_and_several_in_brackets() -> None:
    a = FieldError("spec.x", "Required value")
    b = FieldError("spec.y", "Invalid value", '"1"', "bad")
    assert invalid_message("Pod", "p", [a, a]) == 'Pod "p" is invalid: spec.x: Required value'
    assert (
        invalid_message("Pod", "p", [a, b])
        == 'Pod "p" is invalid: [spec.x: Required value, spec.y: Invalid value: "1": bad]'
    )
