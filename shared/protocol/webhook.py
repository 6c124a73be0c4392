"""The mutating admission webhook's decision, as a pure function of the pod (hami-wire §5.3, §1.3, §8).

:func:`mutate_pod` does what HAMi's ``webhook.Handle`` + ``NvidiaGPUDevices.MutateAdmission`` do, in order:

1. no containers → denied ``pod has no containers``;
2. a pod meant for another scheduler is allowed untouched;
3. a managed resource with a bad value (negative, fractional, a unit that makes no sense, out of range; the
   rules of :mod:`shared.codec.resources`) → denied with what to write instead, every container's problems at
   once (HAMi errors with HTTP 500 on a bad ``gpumem-percentage`` only and lets the rest through);
4. every init container, then every container: ``CUDA_TASK_PRIORITY`` env from ``limits[priority]``;
   ``GPU_CORE_UTILIZATION_POLICY`` env when the policy is not ``default``; ``limits[gpu] = defaultGPUNum`` when
   only cores/memory/percentage are in limits; the exclusive default ``limits[gpucores] = 100``;
   ``runtimeClassName``; ``NVIDIA_VISIBLE_DEVICES=none`` with ``overwriteEnv``;
5. a pod asking for a managed resource whose scheduling annotations ``/filter`` cannot read (an unknown policy,
   bad scoring weights, a selector naming nothing; :mod:`shared.protocol.constraints`, the decoding ``/filter``
   uses) → denied with what to write instead (HAMi admits it: an unknown policy is ignored there, bad weights fail
   the pod at every Filter);
6. a privileged (init) container in a pod with a HAMi resource → denied ``container <name> is privileged``;
7. set ``spec.schedulerName``; a pod with ``spec.nodeName`` → denied ``pod has node assigned``;
8. quota pre-check → denied ``exceeding resource quota``;
9. allowed with the JSONPatch from the original to the mutated pod, and a warning for each request accepted but
   adjusted the way HAMi adjusts it without a word (``nvidia.com/gpucores: 120`` is scheduled as 100).

Other enabled vendors (``vendors``) validate their requests in step 3 and edit each container after NVIDIA in
step 4 (``Vendor.mutate_container``); a container asking for any vendor's devices counts in steps 6 and 7.

No I/O: the caller passes the namespace's :class:`QuotaState` (or ``None`` to skip step 8).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Final, Protocol, runtime_checkable

from vgpu_scheduler.shared.codec.quantity import parse_quantity
from vgpu_scheduler.shared.codec.resources import (
    ResourceRequestError,
    capped_cores_warning,
    container_request,
    pod_request,
)
from vgpu_scheduler.shared.domain.hooks import implements
from vgpu_scheduler.shared.domain.model import NVIDIA, ContainerRequest, NvidiaConfig
from vgpu_scheduler.shared.domain.quota import QuotaState
from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.protocol import gojson
from vgpu_scheduler.shared.protocol.admission import HTTP_BAD_REQUEST, AdmissionOutcome
from vgpu_scheduler.shared.protocol.constraints import SchedulingAnnotationError, pod_constraints
from vgpu_scheduler.shared.protocol.jsonpatch import apply_patch, create_patch
from vgpu_scheduler.shared.vendors.base import admission_warnings
from vgpu_scheduler.shared.vendors.pods import vendors_pod_request

if TYPE_CHECKING:
    from vgpu_scheduler.shared.vendors.base import Vendor
    from vgpu_scheduler.shared.vendors.registry import Vendors


@runtime_checkable
class PodMutation(Protocol):
    """Optional vendor hook: the pod-level part of its ``MutateAdmission`` (edits ``pod`` in place), run after
    every container's edits. A ResourceRequestError denies the pod with its message."""

    def mutate_pod(self, pod: dict[str, Any], where: str) -> None: ...


__all__ = [
    "DEFAULT_SCHEDULER",
    "AdmissionOutcome",
    "QuotaDemand",
    "apply_patch",
    "fits_quota",
    "fits_vendor_quota",
    "mutate_pod",
    "quota_demand",
    "vendor_quota_demands",
]

DEFAULT_SCHEDULER: Final = "default-scheduler"
ENV_TASK_PRIORITY: Final = "CUDA_TASK_PRIORITY"
ENV_CORE_POLICY: Final = "GPU_CORE_UTILIZATION_POLICY"
ENV_VISIBLE_DEVICES: Final = "NVIDIA_VISIBLE_DEVICES"
DEFAULT_CORE_POLICY: Final = "default"

MSG_NO_CONTAINERS: Final = "pod has no containers"
MSG_OTHER_SCHEDULER: Final = "pod already has different scheduler assigned"
MSG_NODE_ASSIGNED: Final = "pod has node assigned"
MSG_QUOTA: Final = "exceeding resource quota"

_POD = "pod"


@dataclass(frozen=True, slots=True)
class QuotaDemand:
    """What a pod adds to its namespace's quota usage at admission (hami-wire §8)."""

    mem_mib: int
    cores_pct: int

    @property
    def zero(self) -> bool:
        return self.mem_mib == 0 and self.cores_pct == 0


def mutate_pod(
    pod: dict[str, Any],
    *,
    cfg: NvidiaConfig,
    scheduler_name: str,
    force_overwrite_default_scheduler: bool,
    quota: QuotaState | None = None,
    vendors: Vendors | None = None,
) -> AdmissionOutcome:
    """Decide on a pod at CREATE: allow (with a JSONPatch), deny (403) or error (400 malformed).

    ``pod`` is not modified. ``quota`` is the namespace's quota state; ``None`` skips the quota pre-check.
    ``vendors``: the enabled vendors (None: NVIDIA only). Every vendor's requests are validated; after NVIDIA's
    edits of a container, each other vendor's ``mutate_container`` runs on it (HAMi runs every device's
    ``MutateAdmission`` on every container), and a container of any vendor sends the pod to our scheduler.
    """
    others = tuple(v for v in vendors if v.name != NVIDIA) if vendors is not None else ()
    try:
        return _mutate(
            pod, cfg, scheduler_name, force_overwrite_default_scheduler, quota, vendors=vendors, others=others
        )
    except DecodeError as e:
        return AdmissionOutcome.error(str(e), HTTP_BAD_REQUEST)


def _mutate(
    original: dict[str, Any],
    cfg: NvidiaConfig,
    scheduler_name: str,
    force: bool,
    quota: QuotaState | None,
    *,
    vendors: Vendors | None = None,
    others: tuple[Vendor, ...] = (),
) -> AdmissionOutcome:
    if not isinstance(original, dict):
        raise DecodeError(_POD, f"expected an object, got {gojson.type_name(original)}")
    pod = copy.deepcopy(original)
    spec = _opt_dict(pod, "spec", "spec")
    if spec is None:
        spec = {}
    containers = _containers(spec, "containers")
    init_containers = _containers(spec, "initContainers")
    if not containers:
        return AdmissionOutcome.deny(MSG_NO_CONTAINERS)

    current = _opt_str(spec, "schedulerName", "spec.schedulerName")
    if current and (current != DEFAULT_SCHEDULER or not force) and (not scheduler_name or current != scheduler_name):
        return AdmissionOutcome.allow(MSG_OTHER_SCHEDULER)

    try:  # the one validation /filter and simulate apply too
        if vendors is not None:
            vendors_pod_request(pod, vendors)
        else:
            pod_request(pod, cfg)
    except ResourceRequestError as e:
        return AdmissionOutcome.deny(str(e))
    warnings = _warnings(init_containers, containers, cfg, vendors)

    privileged = next((c for _, c in _all(init_containers, containers) if _is_privileged(c)), None)
    has_resource = False
    involved: set[str] = set()  # the other vendors managing some container: only they have edits to make
    for where, container in _all(init_containers, containers):
        found = _mutate_container(container, spec, cfg, where)
        for vendor in vendors.managing(container, where) if vendors is not None else ():
            if vendor.name != NVIDIA:
                involved.add(vendor.name)
                found = vendor.mutate_container(container, where) or found
        has_resource = has_resource or found
    try:
        for vendor in others:  # pod-level edits of a vendor's MutateAdmission (Moore Threads' request-gpu-num)
            if vendor.name in involved and implements(vendor, PodMutation):  # type: ignore[type-abstract]
                vendor.mutate_pod(pod, "pod")
    except ResourceRequestError as e:  # a pod-level rule (Ascend: an AI-core percent needs the hami-core mode)
        return AdmissionOutcome.deny(str(e))

    refusal = _annotation_refusal(pod, cfg, vendors)
    if refusal is not None:
        return AdmissionOutcome.deny(refusal)
    if privileged is not None and has_resource:
        return AdmissionOutcome.deny(f"container {privileged.get('name', '')} is privileged")
    if has_resource and scheduler_name:
        spec["schedulerName"] = scheduler_name
        if _opt_str(spec, "nodeName", "spec.nodeName"):
            return AdmissionOutcome.deny(MSG_NODE_ASSIGNED)
    if quota is not None:
        demand = quota_demand(pod, cfg)
        if not demand.zero and not fits_quota(demand, quota, cfg):
            return AdmissionOutcome.deny(MSG_QUOTA)
        for word, vendor_demand in vendor_quota_demands(pod, others):
            if not fits_vendor_quota(word, vendor_demand, quota):
                return AdmissionOutcome.deny(MSG_QUOTA)
    return AdmissionOutcome.allow(patch_ops=create_patch(original, pod), warnings=warnings)


def _warnings(
    init: list[dict[str, Any]], app: list[dict[str, Any]], cfg: NvidiaConfig, vendors: Vendors | None
) -> list[str]:
    """What the pod asks for that is accepted but adjusted as HAMi adjusts it silently (a core percentage above
    100 read as 100, …): ``response.warnings``, one line per adjustment."""
    if vendors is None:
        found = (capped_cores_warning(c, cfg.resource_core_name, where) for where, c in _all(init, app))
        return [w for w in found if w]
    return admission_warnings(vendors.managing, _all(init, app))


def _annotation_refusal(pod: dict[str, Any], cfg: NvidiaConfig, vendors: Vendors | None) -> str | None:
    """Step 5: a pod ``/filter`` will place (it asks for a managed resource once mutated) must carry scheduling
    annotations ``/filter`` can read; the refusal says what to write instead (:mod:`shared.protocol.constraints`)."""
    request = vendors_pod_request(pod, vendors) if vendors is not None else pod_request(pod, cfg)
    if not request.any:
        return None
    metadata = _opt_dict(pod, "metadata", "metadata") or {}
    try:
        pod_constraints(_opt_dict(metadata, "annotations", "metadata.annotations") or {}, vendors)
    except SchedulingAnnotationError as e:
        return str(e)
    return None


# --------------------------------------------------------------------------------------------
# One container (NvidiaGPUDevices.MutateAdmission)
# --------------------------------------------------------------------------------------------


def _mutate_container(c: dict[str, Any], spec: dict[str, Any], cfg: NvidiaConfig, where: str) -> bool:
    """Mutate one container in place; return whether it has an NVIDIA resource."""
    limits, _ = _resource_maps(c, where)
    if limits is not None and cfg.resource_priority_name in limits:
        priority = _go_value(_quantity(limits[cfg.resource_priority_name], where, cfg.resource_priority_name))
        _append_env(c, ENV_TASK_PRIORITY, str(priority), where)
    if cfg.gpu_core_policy and cfg.gpu_core_policy != DEFAULT_CORE_POLICY:
        _append_env(c, ENV_CORE_POLICY, cfg.gpu_core_policy, where)

    has_resource = _mutate_container_resource(c, limits, cfg)
    if _default_exclusive_core(c, cfg, where):
        has_resource = True

    if has_resource and spec.get("runtimeClassName") is None and cfg.runtime_class_name:
        spec["runtimeClassName"] = cfg.runtime_class_name
    if not has_resource and cfg.overwrite_env:
        _append_env(c, ENV_VISIBLE_DEVICES, "none", where)
    return has_resource


def _mutate_container_resource(c: dict[str, Any], limits: dict[str, Any] | None, cfg: NvidiaConfig) -> bool:
    """``mutateContainerResource``: the count is in limits, or is filled in from ``defaultGPUNum``."""
    if limits is None:
        return False
    if cfg.resource_count_name in limits:
        return True
    partial = (cfg.resource_core_name, cfg.resource_memory_name, cfg.resource_memory_percentage_name)
    if any(n and n in limits for n in partial) and cfg.default_gpu_num > 0:
        limits[cfg.resource_count_name] = str(cfg.default_gpu_num)
        return True
    return False


def _default_exclusive_core(c: dict[str, Any], cfg: NvidiaConfig, where: str) -> bool:
    """``defaultExclusiveCoreIfNeeded``: a whole-card request without gpucores gets ``gpucores: 100``."""
    limits, requests = _resource_maps(c, where)
    if not cfg.resource_count_name or not _present(limits, requests, cfg.resource_count_name):
        return False
    if not cfg.resource_core_name or _present(limits, requests, cfg.resource_core_name):
        return False
    pct = _value(limits, requests, cfg.resource_memory_percentage_name, where)
    if pct is not None:
        exclusive = pct == 100
    elif not cfg.resource_memory_name:
        exclusive = True
    else:
        exclusive = not _present(limits, requests, cfg.resource_memory_name)
    if not exclusive:
        return False
    resources = c.get("resources")
    if not isinstance(resources, dict):
        resources = c["resources"] = {}
    if not isinstance(resources.get("limits"), dict):
        resources["limits"] = {}
    resources["limits"][cfg.resource_core_name] = "100"
    return True


# --------------------------------------------------------------------------------------------
# Quota pre-check (fitResourceQuota)
# --------------------------------------------------------------------------------------------


def quota_demand(pod: dict[str, Any], cfg: NvidiaConfig) -> QuotaDemand:
    """``mem = max(Σ_app Memreq·Nums, max_init Memreq·Nums)``, likewise cores (hami-wire §8): NVIDIA's.

    Percentage-only requests count 0 memory: ``Memreq`` is unknown until a device is chosen.
    """
    return _demand(pod, lambda c, _where: container_request(c, cfg))


def vendor_quota_demands(pod: dict[str, Any], others: Sequence[Vendor]) -> tuple[tuple[str, QuotaDemand], ...]:
    """:func:`quota_demand` for every other vendor (its own requests, memory in MiB), by common word; vendors whose
    demand is zero are left out. Raises :class:`ResourceRequestError` on a bad request."""
    out: list[tuple[str, QuotaDemand]] = []
    for v in others:
        demand = _demand(pod, v.container_request)
        if not demand.zero:
            out.append((v.name, demand))
    return tuple(out)


def _demand(pod: dict[str, Any], request_of: Callable[[dict[str, Any], str], ContainerRequest]) -> QuotaDemand:
    spec = _opt_dict(pod, "spec", "spec") or {}
    app_mem = app_cores = init_mem = init_cores = 0
    for i, c in enumerate(_containers(spec, "initContainers")):
        r = request_of(c, f"initContainers[{i}]")
        if not r.empty:
            init_mem = max(init_mem, r.mem_mib * r.nums)
            init_cores = max(init_cores, r.cores_pct * r.nums)
    for i, c in enumerate(_containers(spec, "containers")):
        r = request_of(c, f"containers[{i}]")
        if not r.empty:
            app_mem += r.mem_mib * r.nums
            app_cores += r.cores_pct * r.nums
    return QuotaDemand(mem_mib=max(app_mem, init_mem), cores_pct=max(app_cores, init_cores))


def fits_quota(demand: QuotaDemand, state: QuotaState, cfg: NvidiaConfig) -> bool:
    """``used + demand <= limit`` for memory and cores (:meth:`QuotaState.admits`); ``None`` is no limit, an
    explicit 0 blocks, the memory limit is scaled by ``memoryFactor`` like the requests are."""
    return state.admits(demand.mem_mib, demand.cores_pct, cfg.memory_factor)


def fits_vendor_quota(vendor: str, demand: QuotaDemand, state: QuotaState) -> bool:
    """:func:`fits_quota` for another vendor: its limits and usage (its memory limit is in MiB already)."""
    return state.for_vendor(vendor).admits(demand.mem_mib, demand.cores_pct, 1)


# --------------------------------------------------------------------------------------------
# Pod JSON helpers: tolerate absent/null, reject wrong types with a clear DecodeError
# --------------------------------------------------------------------------------------------


def _opt_dict(parent: dict[str, Any], key: str, where: str) -> dict[str, Any] | None:
    return gojson.optional_object(parent, key, _POD, where)


def _opt_str(parent: dict[str, Any], key: str, where: str) -> str:
    return gojson.optional_string(parent, key, _POD, where)


def _containers(spec: dict[str, Any], key: str) -> list[dict[str, Any]]:
    value = spec.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise DecodeError(_POD, f"spec.{key} must be an array, got {gojson.type_name(value)}")
    for i, c in enumerate(value):
        if not isinstance(c, dict):
            raise DecodeError(_POD, f"spec.{key}[{i}] must be an object, got {gojson.type_name(c)}")
    return value


def _all(init: list[dict[str, Any]], app: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for i, c in enumerate(init):
        yield f"spec.initContainers[{i}]", c
    for i, c in enumerate(app):
        yield f"spec.containers[{i}]", c


def _is_privileged(c: dict[str, Any]) -> bool:
    sc = c.get("securityContext")
    return isinstance(sc, dict) and sc.get("privileged") is True


def _resource_maps(c: dict[str, Any], where: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    resources = _opt_dict(c, "resources", f"{where}.resources")
    if resources is None:
        return None, None
    return (
        _opt_dict(resources, "limits", f"{where}.resources.limits"),
        _opt_dict(resources, "requests", f"{where}.resources.requests"),
    )


def _present(limits: dict[str, Any] | None, requests: dict[str, Any] | None, name: str) -> bool:
    return (limits is not None and name in limits) or (requests is not None and name in requests)


def _quantity(raw: Any, where: str, name: str) -> Fraction:
    return parse_quantity(raw, f"{where}.resources {name}")


def _go_value(q: Fraction) -> int:
    """Go ``Quantity.Value()``: the integer value rounded away from zero."""
    return math.ceil(q) if q >= 0 else -math.ceil(-q)


def _value(limits: dict[str, Any] | None, requests: dict[str, Any] | None, name: str, where: str) -> int | None:
    """HAMi ``resourceValue``: ``Value()`` of limits[name], else requests[name], else ``None``."""
    if not name:
        return None
    for m in (limits, requests):
        if m is not None and name in m:
            return _go_value(_quantity(m[name], where, name))
    return None


def _append_env(c: dict[str, Any], name: str, value: str, where: str) -> None:
    env = c.get("env")
    if env is None:
        env = c["env"] = []
    elif not isinstance(env, list):
        raise DecodeError(_POD, f"{where}.env must be an array, got {gojson.type_name(env)}")
    env.append({"name": name, "value": value})
