"""Pure parts of the Kubernetes edge: token bucket, backoff, error translation, patch and event bodies."""

from __future__ import annotations

import json

import pytest

from vgpu_scheduler.shared.errors import ConfigError, ConflictError, NotFoundError, PermanentError, TransientError
from vgpu_scheduler.shared.k8s import (
    AlreadyBoundError,
    EventType,
    ExpiredError,
    KubeRequestError,
    KubeSettings,
    TokenBucket,
)
from vgpu_scheduler.shared.k8s.api import event_body, metadata_patch
from vgpu_scheduler.shared.k8s.errors import StaleVersionError, UidMismatchError, error_for
from vgpu_scheduler.shared.k8s.informer import InformerSettings, backoff_delay_s


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_token_bucket_allows_a_burst_then_spaces_calls() -> None:
    clock = FakeClock()
    bucket = TokenBucket(10.0, 3, clock)
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.reserve() == pytest.approx(0.1)
    assert bucket.reserve() == pytest.approx(0.2)  # waiters queue up behind each other
    clock.now += 1.0  # 10 tokens' worth of time, but the two reserved ones were spent in advance
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.reserve() == pytest.approx(0.1)


def test_token_bucket_cancel_gives_the_token_back() -> None:
    bucket = TokenBucket(10.0, 1, FakeClock())
    assert bucket.reserve() == 0.0
    assert bucket.reserve() == pytest.approx(0.1)
    bucket.cancel()
    assert bucket.reserve() == pytest.approx(0.1)


def test_token_bucket_disabled() -> None:
    bucket = TokenBucket(0.0, 0, FakeClock())
    assert [bucket.reserve() for _ in range(1000)] == [0.0] * 1000


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"timeout_s": 0}, "timeout_s"), ({"qps": 5, "burst": 0}, "burst")],
    ids=["zero-timeout", "zero-burst"],
)
def test_bad_settings_are_config_errors(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        KubeSettings(**kwargs)  # type: ignore[arg-type]


S = InformerSettings(backoff_initial_s=0.5, backoff_max_s=30.0)


@pytest.mark.parametrize(
    ("failures", "jitter", "expected"),
    [
        (0, 0.0, 0.25),
        (0, 0.999999, 0.5),
        (1, 0.0, 0.5),
        (3, 1.0, 4.0),
        (10, 0.0, 15.0),
        (10, 1.0, 30.0),
        (500, 1.0, 30.0),
    ],
    ids=["first-low", "first-high", "second", "fourth", "capped-low", "capped-high", "huge"],
)
def test_backoff_is_exponential_jittered_and_capped(failures: int, jitter: float, expected: float) -> None:
    assert backoff_delay_s(failures, S, jitter) == pytest.approx(expected, rel=1e-5)


def test_backoff_honours_retry_after_up_to_the_cap() -> None:
    assert backoff_delay_s(0, S, 0.0, hint_s=7.0) == 7.0
    assert backoff_delay_s(0, S, 0.0, hint_s=700.0) == 30.0


def _status(code: int, reason: str, message: str) -> bytes:
    return json.dumps(
        {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason, "message": message}
    ).encode()


ERROR_CASES = [
    ("not-found", 404, "NotFound", 'pods "x" not found', NotFoundError),
    ("conflict", 409, "Conflict", 'Operation cannot be fulfilled on pods "x": UID in precondition: a', ConflictError),
    ("stale-patch", 409, "Conflict", "the object has been modified", StaleVersionError),
    (
        "stale-binding",
        409,
        "Conflict",
        'Operation cannot be fulfilled on pods/binding "x": Precondition failed: ResourceVersion in precondition: 7, '
        "ResourceVersion in object meta: 9",
        StaleVersionError,
    ),
    (
        "uid-mismatch",
        409,
        "Conflict",
        'Operation cannot be fulfilled on pods/binding "x": Precondition failed: UID in precondition: a, '
        "UID in object meta: b",
        UidMismatchError,
    ),
    ("already-bound", 409, "Conflict", 'pod x is already assigned to node "n1"', AlreadyBoundError),
    ("expired", 410, "Expired", "too old resource version: 1 (5)", ExpiredError),
    ("gone", 410, "Gone", "gone", ExpiredError),
    ("throttled", 429, "TooManyRequests", "slow down", TransientError),
    ("internal", 500, "InternalError", "boom", TransientError),
    ("unavailable", 503, "ServiceUnavailable", "etcd", TransientError),
    ("bad-request", 400, "BadRequest", "bad", KubeRequestError),
    ("forbidden", 403, "Forbidden", "no", KubeRequestError),
    ("invalid", 422, "Invalid", "bad field", KubeRequestError),
]


@pytest.mark.parametrize(
    ("code", "reason", "message", "cls"), [c[1:] for c in ERROR_CASES], ids=[c[0] for c in ERROR_CASES]
)
def test_error_translation(code: int, reason: str, message: str, cls: type[Exception]) -> None:
    err = error_for("get pod default/x", code, _status(code, reason, message))
    assert type(err) is cls
    assert str(err) == f"get pod default/x: {code} {reason}: {message}"


def test_expired_is_retried_at_once_and_permanent_errors_are_permanent() -> None:
    assert error_for("w", 410, b"{}").delay == 0.0  # type: ignore[attr-defined]
    assert isinstance(error_for("w", 403, b"{}"), PermanentError)


def test_already_bound_names_the_node() -> None:
    err = error_for("bind", 409, _status(409, "Conflict", 'pod p is already assigned to node "gpu-7"'))
    assert isinstance(err, AlreadyBoundError) and err.node == "gpu-7"


def test_a_body_that_is_not_a_status_is_quoted() -> None:
    err = error_for("get node n", 502, b"<html>bad gateway</html>")
    assert isinstance(err, TransientError)
    assert str(err) == "get node n: 502: <html>bad gateway</html>"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"annotations": {"a": "1", "b": None}}, {"metadata": {"annotations": {"a": "1", "b": None}}}),
        ({"labels": {"l": "v"}}, {"metadata": {"labels": {"l": "v"}}}),
        (
            {"annotations": {"hami.io/mutex.lock": None}, "resource_version": "42"},
            {"metadata": {"annotations": {"hami.io/mutex.lock": None}, "resourceVersion": "42"}},
        ),
    ],
    ids=["annotations-with-delete", "labels", "lock-release-with-rv"],
)
def test_metadata_patch_shape(args: dict[str, object], expected: dict[str, object]) -> None:
    assert metadata_patch(**args) == expected  # type: ignore[arg-type]


def test_node_lock_patch_is_byte_exact() -> None:
    body = metadata_patch({"hami.io/mutex.lock": "2025-01-23T10:00:00+08:00,default,gpu-pod-1"}, None, "7")
    assert json.dumps(body, separators=(",", ":")) == (
        '{"metadata":{"annotations":{"hami.io/mutex.lock":"2025-01-23T10:00:00+08:00,default,gpu-pod-1"},'
        '"resourceVersion":"7"}}'
    )


def test_event_body_for_a_pod_without_kind() -> None:
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u1"}}  # as kube-scheduler sends it: no kind
    body = event_body(
        "Pod",
        pod,
        reason="FilteringFailed",
        message="m",
        event_type=EventType.WARNING,
        component="hami-scheduler",
        instance="",
        now_s=1.5,
    )
    assert body["metadata"] == {"name": "p.59682f00", "namespace": "ns"}
    assert body["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "name": "p", "namespace": "ns", "uid": "u1"}
    assert body["type"] == "Warning" and body["source"] == {"component": "hami-scheduler"}
