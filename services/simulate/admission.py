"""Admission in the simulator (difference 16): the webhook's mutation applied as the API server would apply it.

Either computed in-process (:func:`local_admission`: the pure ``mutate_pod`` + ``apply_patch``, with the namespace's
quota and the enabled vendors) or asked of a running extender (:func:`webhook_admission`: an AdmissionReview POSTed
to its ``/webhook``). A denied pod is reported as unschedulable with the denial message.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from vgpu_scheduler.services.simulate.kubehttp import DriverError, Extenders
from vgpu_scheduler.shared.domain.model import NvidiaConfig
from vgpu_scheduler.shared.domain.quota import QuotaState
from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.protocol.admission import decode_patch
from vgpu_scheduler.shared.protocol.jsonpatch import apply_patch
from vgpu_scheduler.shared.protocol.webhook import mutate_pod
from vgpu_scheduler.shared.vendors.registry import Vendors

KubeObject = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Admitted:
    """The pod as admitted (mutated), or None with the denial/error message."""

    pod: KubeObject | None
    message: str = ""


Admit = Callable[[KubeObject], Awaitable[Admitted]]


def local_admission(
    *,
    cfg: NvidiaConfig,
    scheduler_name: str,
    force_overwrite_default_scheduler: bool,
    quota: Callable[[str], Awaitable[QuotaState | None]],
    vendors: Vendors | None = None,
) -> Admit:
    """The webhook's decision computed in-process: ``mutate_pod`` (with the namespace's quota and the enabled
    ``vendors``) + ``apply_patch``."""

    async def admit(pod: KubeObject) -> Admitted:
        ns = pod["metadata"].get("namespace") or "default"
        outcome = mutate_pod(
            pod,
            cfg=cfg,
            scheduler_name=scheduler_name,
            force_overwrite_default_scheduler=force_overwrite_default_scheduler,
            quota=await quota(ns),
            vendors=vendors,
        )
        if not outcome.allowed:
            return Admitted(None, f"admission denied: {outcome.message}")
        mutated: KubeObject = apply_patch(pod, outcome.patch_ops) if outcome.patch_ops else pod
        return Admitted(mutated)

    return admit


def webhook_admission(extenders: Extenders) -> Admit:
    """The webhook's decision from a running extender: an ``admission.k8s.io/v1`` AdmissionReview to ``/webhook``."""

    async def admit(pod: KubeObject) -> Admitted:
        ns = pod["metadata"].get("namespace") or "default"
        review = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": str(uuid.uuid4()),
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
                "requestResource": {"group": "", "version": "v1", "resource": "pods"},
                "name": pod["metadata"].get("name", ""),
                "namespace": ns,
                "operation": "CREATE",
                "userInfo": {"username": "vgpu-scheduler-simulate"},
                "object": pod,
                "oldObject": None,
                "dryRun": False,
            },
        }
        answer = await extenders.post(extenders.urls[0], "webhook", review)
        response = answer.get("response")
        if not isinstance(response, dict):
            raise DriverError("POST /webhook: the AdmissionReview answer has no response object")
        if not response.get("allowed"):
            message = str((response.get("status") or {}).get("message", "denied"))
            return Admitted(None, f"admission denied: {message}")
        try:
            ops = decode_patch(response)
            mutated: KubeObject = apply_patch(pod, ops) if ops else pod
        except DecodeError as e:
            raise DriverError(f"POST /webhook: {e}") from e
        return Admitted(mutated)

    return admit
