"""``POST /webhook``: the mutating admission webhook (hami-wire §5.3, differences 14 and 16).

AdmissionReview ``admission.k8s.io/v1`` or ``v1beta1`` in, the same version out, with a JSONPatch when the pod is
changed. The decision itself is :func:`shared.protocol.webhook.mutate_pod` (pure). The only I/O is the quota
pre-check: the namespace's :class:`QuotaState` is read from Redis only for a pod that would add quota usage, with a
short deadline; if Redis does not answer the pre-check is skipped (logged) rather than failing admission, because
``/filter`` charges quota atomically anyway and pod admission must not depend on Redis.

Malformed reviews are answered the way controller-runtime answers them: HTTP 200 with an AdmissionReview whose
``response`` is ``allowed: false`` with ``status.code`` 400 (413 for a body over 1 MiB) and a message naming
the problem; the ``uid`` and ``apiVersion`` are echoed when they can be read, otherwise ``uid`` is empty and the
version ``v1``. Reviews of other operations or resources than pod CREATE are allowed untouched.
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
from typing import Any, Final

from aiohttp import web

from vgpu_scheduler.services.extender.deps import ExtenderDeps
from vgpu_scheduler.services.extender.metrics import ExtenderMetrics
from vgpu_scheduler.shared.codec.resources import pod_requests_managed_resource
from vgpu_scheduler.shared.config.settings import ExtenderSettings
from vgpu_scheduler.shared.domain.model import NVIDIA, NvidiaConfig
from vgpu_scheduler.shared.domain.quota import QuotaState
from vgpu_scheduler.shared.errors import DecodeError, VgpuError
from vgpu_scheduler.shared.k8s.objects import meta, namespace_of
from vgpu_scheduler.shared.protocol.admission import (
    HTTP_BAD_REQUEST,
    HTTP_FORBIDDEN,
    AdmissionOutcome,
    AdmissionRequest,
    AdmissionVersion,
    Operation,
    error_review,
    parse_admission_review,
    review_response,
)
from vgpu_scheduler.shared.protocol.extender import MAX_BODY_BYTES
from vgpu_scheduler.shared.protocol.webhook import (
    MSG_OTHER_SCHEDULER,
    apply_patch,
    mutate_pod,
    quota_demand,
    vendor_quota_demands,
)
from vgpu_scheduler.shared.store import QuotaRepo
from vgpu_scheduler.shared.vendors.pods import vendors_manage_pod
from vgpu_scheduler.shared.vendors.registry import Vendors

logger = logging.getLogger(__name__)

HTTP_ENTITY_TOO_LARGE: Final = 413
QUOTA_READ_TIMEOUT_S: Final = 1.0
"""Deadline of the quota read; the API server's webhook timeout is 10 s (our manifests)."""
_JSON: Final = "application/json"


class WebhookOutcome(enum.Enum):
    """The ``outcome`` label of ``vgpu_webhook_outcomes_total``."""

    MUTATED = "mutated"
    """Allowed with a JSONPatch."""
    ALLOWED = "allowed"
    """Allowed untouched (no managed resource, another scheduler's pod, or nothing to change)."""
    IGNORED = "ignored"
    """Not a pod CREATE: allowed untouched."""
    DENIED = "denied"
    ERRORED = "errored"
    """The pod is malformed or invalid (HAMi's ``admission.Errored``)."""
    BAD_REQUEST = "bad_request"
    """The review itself could not be read."""


class Admitter:
    """The webhook decision for one review, with the quota lookup (separate from HTTP for tests and simulate)."""

    def __init__(
        self,
        *,
        nvidia: NvidiaConfig,
        scheduler_name: str,
        force_overwrite_default_scheduler: bool,
        quota: QuotaRepo | None,
        quota_timeout_s: float = QUOTA_READ_TIMEOUT_S,
        vendors: Vendors | None = None,
    ) -> None:
        self._nvidia = nvidia
        self._vendors = vendors
        self._scheduler_name = scheduler_name
        self._force = force_overwrite_default_scheduler
        self._quota = quota
        self._quota_timeout_s = quota_timeout_s

    async def admit(self, request: AdmissionRequest) -> tuple[WebhookOutcome, AdmissionOutcome]:
        """Decide on one parsed review."""
        if (
            request.operation is not Operation.CREATE
            or request.resource not in ("", "pods")
            or request.kind not in ("", "Pod")
            or request.object is None
        ):
            return WebhookOutcome.IGNORED, AdmissionOutcome.allow()
        pod = request.object
        outcome = self._decide(pod, None)
        if outcome.allowed and outcome.message != MSG_OTHER_SCHEDULER and self._quota is not None:
            namespace = request.namespace or namespace_of(pod)
            quota = await self._quota_for(pod, outcome, namespace)
            if quota is not None:  # limits the pod adds to (no limit: every demand fits, the first decision stands)
                outcome = self._decide(pod, quota)
        return _classify(outcome), outcome

    def _decide(self, pod: dict[str, Any], quota: QuotaState | None) -> AdmissionOutcome:
        return mutate_pod(
            pod,
            cfg=self._nvidia,
            scheduler_name=self._scheduler_name,
            force_overwrite_default_scheduler=self._force,
            quota=quota,
            vendors=self._vendors,
        )

    async def _quota_for(self, pod: dict[str, Any], outcome: AdmissionOutcome, namespace: str) -> QuotaState | None:
        """The namespace's quota limits when the (mutated) pod would add usage there; None to skip the pre-check.

        The limits are read first (one round trip) and the pod's demand worked out only when there are any: most
        namespaces have none, and the demand needs the mutated pod (a copy with the patch applied). A pod that names
        no managed resource reads nothing: the webhook adds one only beside another (a default count beside a
        memory or core request, a core default beside a count), so it cannot add usage, mutated or not (HAMi's
        ``overwrite-env`` edits every other pod)."""
        if not namespace or self._quota is None:
            return None
        try:
            if not self._names_managed_resource(pod):
                return None
        except DecodeError:
            return None  # mutate_pod reports malformed pods itself
        try:
            async with asyncio.timeout(self._quota_timeout_s):
                quota = await self._quota.get(namespace)
        except (VgpuError, TimeoutError) as e:
            logger.warning(
                "webhook: quota pre-check skipped, store unavailable", extra={"namespace": namespace, "error": str(e)}
            )
            return None
        if not quota.limited:
            return None
        try:
            mutated = apply_patch(pod, outcome.patch_ops) if outcome.patch_ops else pod
            others = tuple(v for v in self._vendors if v.name != NVIDIA) if self._vendors is not None else ()
            if quota_demand(mutated, self._nvidia).zero and not vendor_quota_demands(mutated, others):
                return None
        except DecodeError:
            return None
        return quota

    def _names_managed_resource(self, pod: dict[str, Any]) -> bool:
        if self._vendors is not None:
            return vendors_manage_pod(pod, self._vendors)
        return pod_requests_managed_resource(pod, self._nvidia)


def _classify(outcome: AdmissionOutcome) -> WebhookOutcome:
    if outcome.allowed:
        return WebhookOutcome.MUTATED if outcome.patch_ops else WebhookOutcome.ALLOWED
    if outcome.code == HTTP_FORBIDDEN:
        return WebhookOutcome.DENIED
    return WebhookOutcome.ERRORED


def _salvage(body: bytes) -> tuple[str, AdmissionVersion]:
    """The uid and apiVersion of a review we could not decode, when they are readable (else "" and v1)."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):  # RecursionError: nested too deep (the strict decoder said so already)
        return "", AdmissionVersion.V1
    if not isinstance(doc, dict):
        return "", AdmissionVersion.V1
    try:
        version = AdmissionVersion(doc.get("apiVersion"))
    except ValueError:
        version = AdmissionVersion.V1
    request = doc.get("request")
    uid = request.get("uid") if isinstance(request, dict) else None
    return (uid if isinstance(uid, str) else ""), version


class WebhookHandler:
    """``POST /webhook`` for the aiohttp app."""

    def __init__(self, settings: ExtenderSettings, deps: ExtenderDeps, metrics: ExtenderMetrics) -> None:
        self.admitter = Admitter(
            nvidia=deps.nvidia,
            scheduler_name=settings.scheduler_name,
            force_overwrite_default_scheduler=settings.force_overwrite_default_scheduler,
            quota=deps.store.quota,
            vendors=deps.vendor_set,
        )
        self._metrics = metrics

    async def handle(self, request: web.Request) -> web.Response:
        """Answer one AdmissionReview (always HTTP 200 with a review, as controller-runtime does)."""
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return self._bad(
                f"request entity is too large; limit is {MAX_BODY_BYTES} bytes", b"", code=HTTP_ENTITY_TOO_LARGE
            )
        if not body:
            return self._bad("request body is empty", body)
        if request.content_type != _JSON:
            return self._bad(f"contentType={request.headers.get('Content-Type', '')}, expected {_JSON}", body)
        try:
            review = parse_admission_review(body)
        except DecodeError as e:
            return self._bad(str(e), body)
        try:
            kind, outcome = await self.admitter.admit(review)
        except RecursionError:  # parsed (under the decoder's limit), but too deep to copy and mutate
            return self._bad("admission review: the object is nested too deeply", body)
        self._metrics.webhook_outcomes.labels(kind.value).inc()
        extra = {
            "namespace": review.namespace,
            "pod": review.name or _generate_name(review),
            "uid": review.uid,
            "outcome": kind.value,
        }
        if kind in (WebhookOutcome.DENIED, WebhookOutcome.ERRORED):
            logger.info("webhook refused pod", extra={**extra, "reason": outcome.message})
        else:
            logger.debug("webhook admitted pod", extra={**extra, "patch_ops": len(outcome.patch_ops)})
        return web.Response(body=review_response(review, outcome), content_type=_JSON)

    def _bad(self, message: str, body: bytes, *, code: int = HTTP_BAD_REQUEST) -> web.Response:
        self._metrics.webhook_outcomes.labels(WebhookOutcome.BAD_REQUEST.value).inc()
        uid, version = _salvage(body) if body else ("", AdmissionVersion.V1)
        logger.info("webhook request rejected", extra={"error": message, "uid": uid})
        return web.Response(body=error_review(message, code=code, uid=uid, api_version=version), content_type=_JSON)


def _generate_name(review: AdmissionRequest) -> str:
    name = meta(review.object or {}).get("generateName")
    return f"{name}*" if isinstance(name, str) and name else ""
