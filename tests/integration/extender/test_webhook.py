"""/webhook over HTTP on a real extender replica: v1 and v1beta1 reviews, the JSONPatch, denials, the quota
pre-check against the real redis-server (and without Redis), and malformed reviews answered like controller-runtime."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import pytest

from tests.integration.extender.bindkit import pod_obj
from tests.integration.extender.filter_harness import Replica, running_extender, seed, wire_doc
from vgpu_scheduler.services.extender import webhook as webhook_module
from vgpu_scheduler.services.extender.webhook import QUOTA_READ_TIMEOUT_S, Admitter, WebhookOutcome
from vgpu_scheduler.shared.domain.model import NvidiaConfig
from vgpu_scheduler.shared.domain.quota import QuotaLimits, QuotaState
from vgpu_scheduler.shared.k8s import Api
from vgpu_scheduler.shared.protocol.admission import AdmissionOutcome, parse_admission_review
from vgpu_scheduler.shared.protocol.jsonpatch import apply_patch
from vgpu_scheduler.shared.store import QuotaRepo, Store, connect

pytestmark = pytest.mark.usefixtures("redis_url")


def review(
    pod: dict[str, Any] | None,
    *,
    version: str = "admission.k8s.io/v1",
    uid: str = "3d2a-uid",
    operation: str = "CREATE",
    namespace: str = "default",
    resource: str = "pods",
) -> dict[str, Any]:
    request: dict[str, Any] = {
        "uid": uid,
        "kind": {"group": "", "version": "v1", "kind": "Pod" if resource == "pods" else "ConfigMap"},
        "resource": {"group": "", "version": "v1", "resource": resource},
        "namespace": namespace,
        "operation": operation,
        "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
        "dryRun": False,
    }
    if pod is not None:
        request["object"] = pod
    return {"apiVersion": version, "kind": "AdmissionReview", "request": request}


def gpu_pod(name: str = "train", *, limits: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    """A pod as the API server sends it to admission: no schedulerName chosen by the user."""
    pod = pod_obj(name, gpus=0)
    pod["metadata"]["namespace"] = "team-a"
    pod["spec"].pop("schedulerName")
    pod["spec"]["containers"][0]["resources"] = {"limits": limits if limits is not None else {"nvidia.com/gpu": "1"}}
    pod["spec"].update(spec)
    return pod


@pytest.fixture
async def replica(store: Store, api: Api) -> AsyncIterator[Replica]:
    await seed(store)
    async with running_extender(store, api) as r:
        yield r


async def admit(replica: Replica, body: dict[str, Any] | bytes | str) -> dict[str, Any]:
    raw = json.dumps(body) if isinstance(body, dict) else body
    status, answer = await replica.post("/webhook", raw)
    assert status == 200, (status, answer)
    assert isinstance(answer, dict) and answer["kind"] == "AdmissionReview"
    return answer


def patch_of(answer: dict[str, Any]) -> list[dict[str, Any]]:
    ops: list[dict[str, Any]] = json.loads(base64.b64decode(answer["response"]["patch"]))
    return ops


@pytest.mark.parametrize("version", ["admission.k8s.io/v1", "admission.k8s.io/v1beta1"])
async def test_a_bare_gpu_pod_gets_the_exclusive_default_and_our_scheduler(replica: Replica, version: str) -> None:
    pod = gpu_pod()
    answer = await admit(replica, review(pod, version=version))
    assert answer["apiVersion"] == version
    response = answer["response"]
    assert response["uid"] == "3d2a-uid" and response["allowed"] is True and response["patchType"] == "JSONPatch"
    mutated = apply_patch(pod, patch_of(answer))
    assert mutated["spec"]["schedulerName"] == "vgpu-scheduler"
    assert mutated["spec"]["containers"][0]["resources"]["limits"] == {
        "nvidia.com/gpu": "1",
        "nvidia.com/gpucores": "100",
    }
    assert replica.service.metrics.webhook_outcomes.labels("mutated")._value.get() == 1


@pytest.mark.parametrize(
    "pod, message",
    [
        pytest.param(gpu_pod(nodeName="n1"), "pod has node assigned", id="node-assigned"),
        pytest.param(gpu_pod(containers=[]), "pod has no containers", id="no-containers"),
    ],
)
async def test_denials_carry_hamis_messages(replica: Replica, pod: dict[str, Any], message: str) -> None:
    response = (await admit(replica, review(pod)))["response"]
    assert response["allowed"] is False
    assert response["status"] == {"metadata": {}, "message": message, "reason": "Forbidden", "code": 403}


@pytest.mark.parametrize(
    ("annotations", "hint"),
    [
        pytest.param({"hami.io/gpu-scheduler-policy": "foo"}, 'write "binpack", "spread"', id="gpu-policy"),
        pytest.param(
            {"hami.io/device-scoring-weights": "memory=x"}, 'write "slot=<n>,core=<n>,memory=<n>"', id="weights"
        ),
        pytest.param({"hami.io/node-scheduler-policy": "fill"}, 'write "binpack" or "spread"', id="node-policy"),
        pytest.param({"nvidia.com/use-gputype": ","}, "write a comma-separated list", id="use-gputype"),
    ],
)
async def test_a_bad_scheduling_annotation_is_denied_with_what_filter_would_answer(
    replica: Replica, annotations: dict[str, str], hint: str
) -> None:
    """Issue 23 item 3: denied at creation with what to write instead, in the very words /filter answers a pod that
    bypassed the webhook (one decoding for both)."""
    pod = gpu_pod()
    pod["metadata"]["annotations"] = annotations
    response = (await admit(replica, review(pod)))["response"]
    assert response["allowed"] is False and response["status"]["code"] == 403
    message = response["status"]["message"]
    key = next(iter(annotations))
    assert message.startswith(f"{key}: ") and f"; {hint}" in message, message
    assert replica.service.metrics.webhook_outcomes.labels("denied")._value.get() == 1
    bypassed = wire_doc("001-filter.json")
    bypassed["Pod"]["metadata"]["annotations"] = annotations
    status, answer = await replica.post("/filter", json.dumps(bypassed).encode())
    assert status == 200 and answer["Error"] == message


async def test_a_pod_without_gpus_and_another_schedulers_pod_are_left_alone(replica: Replica) -> None:
    plain = gpu_pod(limits={"cpu": "1"})
    assert "patch" not in (await admit(replica, review(plain)))["response"]
    other = gpu_pod(schedulerName="volcano")
    response = (await admit(replica, review(other)))["response"]
    assert response["allowed"] is True and "patch" not in response


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(review(gpu_pod(), operation="UPDATE"), id="update"),
        pytest.param(review(gpu_pod(), operation="DELETE"), id="delete"),
        pytest.param(review({"metadata": {"name": "cm"}}, resource="configmaps"), id="configmap"),
    ],
)
async def test_other_operations_and_resources_are_ignored(replica: Replica, body: dict[str, Any]) -> None:
    response = (await admit(replica, body))["response"]
    assert response == {"uid": "3d2a-uid", "allowed": True}


# ---- quota pre-check -----------------------------------------------------------------------------------


async def test_the_quota_pre_check_denies_a_pod_over_the_namespace_limit(replica: Replica, store: Store) -> None:
    await store.quota.set_limits("team-a", QuotaLimits(mem_mib=8000, cores_pct=None))
    await store.quota.charge("team-a", "running-pod", 6000, 50)
    fits = gpu_pod(limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2000"})
    assert (await admit(replica, review(fits, namespace="team-a")))["response"]["allowed"] is True
    over = gpu_pod(limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"})
    response = (await admit(replica, review(over, namespace="team-a")))["response"]
    assert response["allowed"] is False and response["status"]["message"] == "exceeding resource quota"


def _admitter(
    quota: QuotaRepo, *, nvidia: NvidiaConfig | None = None, quota_timeout_s: float = QUOTA_READ_TIMEOUT_S
) -> Admitter:
    """The webhook's decision with the quota pre-check, NVIDIA only, as the extender builds it."""
    return Admitter(
        nvidia=nvidia if nvidia is not None else NvidiaConfig(),
        scheduler_name="vgpu-scheduler",
        force_overwrite_default_scheduler=True,
        quota=quota,
        quota_timeout_s=quota_timeout_s,
    )


async def test_cores_added_by_the_exclusive_default_count_against_the_quota(store: Store) -> None:
    await store.quota.set_limits("team-a", QuotaLimits(mem_mib=None, cores_pct=50))
    admitter = _admitter(store.quota)
    kind, outcome = await admitter.admit(parse_admission_review(json.dumps(review(gpu_pod(), namespace="team-a"))))
    assert kind is WebhookOutcome.DENIED and outcome.message == "exceeding resource quota"


async def test_a_namespace_without_limits_is_decided_once(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Usage without a limit never refuses: the pod is not mutated a second time to check it (a namespace with
    a limit is, as the test above shows)."""
    await store.quota.charge("team-b", "running-pod", 6000, 50)
    admitter = _admitter(store.quota)
    decisions: list[object] = []
    decide = admitter._decide

    def counted(pod: dict[str, Any], quota: QuotaState | None) -> AdmissionOutcome:
        decisions.append(quota)
        return decide(pod, quota)

    monkeypatch.setattr(admitter, "_decide", counted)
    patched: list[object] = []

    def counted_patch(pod: Any, ops: Sequence[Mapping[str, Any]]) -> Any:
        patched.append(ops)
        return apply_patch(pod, ops)

    monkeypatch.setattr(webhook_module, "apply_patch", counted_patch)
    kind, outcome = await admitter.admit(parse_admission_review(json.dumps(review(gpu_pod(), namespace="team-b"))))
    assert kind is WebhookOutcome.MUTATED and outcome.allowed
    assert decisions == [None]
    assert patched == []  # nor copied to work out a demand no limit can refuse


async def test_a_pod_without_a_managed_resource_reads_no_quota(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    await store.quota.set_limits("team-a", QuotaLimits(mem_mib=8000, cores_pct=None))
    admitter = _admitter(store.quota)
    reads: list[str] = []
    get = store.quota.get

    async def counted(namespace: str) -> QuotaState:
        reads.append(namespace)
        return await get(namespace)

    monkeypatch.setattr(store.quota, "get", counted)
    plain = {"metadata": {"name": "web"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    kind, _ = await admitter.admit(parse_admission_review(json.dumps(review(plain, namespace="team-a"))))
    assert kind is WebhookOutcome.ALLOWED and reads == []
    kind, _ = await admitter.admit(parse_admission_review(json.dumps(review(gpu_pod(), namespace="team-a"))))
    assert kind is WebhookOutcome.MUTATED and reads == ["team-a"]
    # HAMi's overwrite-env edits every pod without a GPU: mutated, it still cannot add usage, and reads nothing
    env = _admitter(store.quota, nvidia=NvidiaConfig(overwrite_env=True))
    kind, _ = await env.admit(parse_admission_review(json.dumps(review(plain, namespace="team-a"))))
    assert kind is WebhookOutcome.MUTATED and reads == ["team-a"]


async def test_without_redis_the_quota_pre_check_is_skipped() -> None:
    from tests.conftest import _free_port

    dead = Store.create(connect(f"redis://127.0.0.1:{_free_port()}/0"), prefix="x")
    try:
        admitter = _admitter(dead.quota, quota_timeout_s=0.5)
        kind, outcome = await admitter.admit(parse_admission_review(json.dumps(review(gpu_pod()))))
    finally:
        await dead.aclose()
    assert kind is WebhookOutcome.MUTATED and outcome.allowed


# ---- malformed reviews ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body, uid, version, text",
    [
        pytest.param("{not json", "", "admission.k8s.io/v1", "not JSON", id="not-json"),
        pytest.param("[]", "", "admission.k8s.io/v1", "expected a JSON object", id="array"),
        pytest.param(
            json.dumps({"apiVersion": "admission.k8s.io/v2", "kind": "AdmissionReview", "request": {"uid": "x"}}),
            "x",
            "admission.k8s.io/v1",
            "unsupported apiVersion",
            id="unknown-version",
        ),
        pytest.param(
            json.dumps({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}),
            "",
            "admission.k8s.io/v1beta1",
            "missing request",
            id="no-request",
        ),
        pytest.param(
            json.dumps(review(None, uid="u-7")), "u-7", "admission.k8s.io/v1", "missing request.object", id="no-object"
        ),
        pytest.param(
            json.dumps({**review(gpu_pod()), "request": {**review(gpu_pod())["request"], "uid": 7}}),
            "",
            "admission.k8s.io/v1",
            "request.uid must be a string",
            id="uid-wrong-type",
        ),
        pytest.param(
            json.dumps(review({"metadata": {}, "spec": {"containers": "nope"}})),
            "3d2a-uid",
            "admission.k8s.io/v1",
            "spec.containers must be an array",
            id="pod-wrong-shape",
        ),
    ],
)
async def test_malformed_reviews_get_a_400_review_and_the_process_keeps_serving(
    replica: Replica, body: str, uid: str, version: str, text: str
) -> None:
    answer = await admit(replica, body)
    assert answer["apiVersion"] == version
    response = answer["response"]
    assert response["uid"] == uid and response["allowed"] is False
    assert response["status"]["code"] == 400 and text in response["status"]["message"]
    assert (await admit(replica, review(gpu_pod())))["response"]["allowed"] is True


async def test_empty_wrong_type_and_oversized_bodies(replica: Replica) -> None:
    empty = await admit(replica, b"")
    assert empty["response"]["status"] == {"metadata": {}, "message": "request body is empty", "code": 400}
    async with replica.http.post(replica.url + "/webhook", data=b"{}", headers={"Content-Type": "text/plain"}) as r:
        assert r.status == 200
        wrong = await r.json()
    assert wrong["response"]["status"]["message"] == "contentType=text/plain, expected application/json"
    huge = io.BytesIO(json.dumps(review(gpu_pod(annotations={"pad": "x" * (1 << 20)}))).encode())
    headers = {"Content-Type": "application/json"}
    async with replica.http.post(replica.url + "/webhook", data=huge, headers=headers) as r:
        assert r.status == 200
        answer = await r.json()
    assert answer["response"]["status"]["code"] == 413
    assert "too large" in answer["response"]["status"]["message"]
    assert replica.service.metrics.webhook_outcomes.labels("bad_request")._value.get() == 3
