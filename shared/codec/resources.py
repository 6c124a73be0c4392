"""Container resources → NVIDIA device requests, HAMi's ``GenerateResourceRequests`` (hami-wire §1.2).

Input is the Kubernetes API JSON of a container / pod (camelCase, quantities as the API serves them, e.g.
``"3k"``, or plain numbers in hand-written specs). Each resource is taken from ``limits``, else ``requests``.

1. ``n`` = the count resource. Absent, not a whole number, or ≤ 0 → the empty request (no NVIDIA request).
2. Memory: must be a whole number in ``0 ..= MaxInt32 // max(memoryFactor, 1)``, else the **whole request is
   empty** (HAMi's contract: such a container silently asks for no GPU). Then × memoryFactor.
3. Memory percentage: starts at the sentinel 101 (unset); > 100 is clamped to 100; ≤ 0 or not a whole number is
   ignored (stays 101).
4. Percentage unset and memory 0: ``defaultMemory`` if non-zero (not scaled), else 100 %.
5. Cores: ``defaultCores``, overridden by the core resource when it is a whole number (clamping > 100 happens
   at fit time, as in HAMi).

Where HAMi would wrap a number through ``int32(...)`` we refuse instead: a count above 2³¹−1 or cores outside
``0 ..= 2³¹−1`` is a DecodeError (the API server never produces these: extended resources are non-negative
integers). A value that is not a Kubernetes quantity at all is a DecodeError too (HAMi could never receive it).
"Whole number in int64 range" stands for Go's ``Quantity.AsInt64()`` on the canonical forms the API serves.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from shared.codec._go import INT32_MAX, fail
from shared.codec.quantity import parse_quantity, whole_int64
from shared.domain.fit import default_memory
from shared.domain.model import EMPTY_REQUEST, MEM_PCT_UNSET, NVIDIA, ContainerRequest, NvidiaConfig, PodRequest

_NO_RESOURCES: Mapping[str, Any] = {}


def _mapping(v: Any, what: str) -> Mapping[str, Any]:
    if v is None:
        return _NO_RESOURCES
    if not isinstance(v, Mapping):
        fail(what, f"expected an object, got {type(v).__name__}")
    return v


def _lists(container: Any, what: str) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    c = _mapping(container, what)
    res = _mapping(c.get("resources"), f"{what}.resources")
    return _mapping(res.get("limits"), f"{what}.resources.limits"), _mapping(
        res.get("requests"), f"{what}.resources.requests"
    )


def _whole(limits: Mapping[str, Any], requests: Mapping[str, Any], name: str, what: str) -> tuple[bool, int | None]:
    """(present, value as int64 when it is a whole number). Limits win over requests by key presence."""
    if name in limits:
        source, raw = "limits", limits[name]
    elif name in requests:
        source, raw = "requests", requests[name]
    else:
        return False, None
    return True, whole_int64(parse_quantity(raw, f"{what}.resources.{source}[{name}]"))


def container_request(container: Mapping[str, Any], cfg: NvidiaConfig, what: str = "container") -> ContainerRequest:
    """One container's NVIDIA request (``nums == 0`` when it asks for none). ``what`` prefixes error locations."""
    limits, requests = _lists(container, what)
    present, n = _whole(limits, requests, cfg.resource_count_name, what)
    if not present or n is None or n <= 0:
        return EMPTY_REQUEST
    if n > INT32_MAX:
        fail(f"{what}.resources[{cfg.resource_count_name}]", f"GPU count {n} exceeds 2^31-1")

    factor = max(cfg.memory_factor, 1)
    mem_mib = 0
    present, mem = _whole(limits, requests, cfg.resource_memory_name, what)
    if present:
        if mem is None or mem < 0 or mem > INT32_MAX // factor:
            return EMPTY_REQUEST  # HAMi: not a plain int32-range integer → no request at all
        mem_mib = mem * factor

    mem_pct = MEM_PCT_UNSET
    present, pct = _whole(limits, requests, cfg.resource_memory_percentage_name, what)
    if present and pct is not None:
        pct = min(pct, 100)
        mem_pct = pct if pct > 0 else MEM_PCT_UNSET

    mem_mib, mem_pct = default_memory(mem_mib, mem_pct, cfg)

    cores = cfg.default_cores
    present, core = _whole(limits, requests, cfg.resource_core_name, what)
    if present and core is not None:
        if not 0 <= core <= INT32_MAX:
            fail(f"{what}.resources[{cfg.resource_core_name}]", f"cores {core} outside 0..2^31-1")
        cores = core
    return ContainerRequest(nums=n, mem_mib=mem_mib, mem_pct=mem_pct, cores_pct=cores, type=NVIDIA)


def _containers(spec: Mapping[str, Any], key: str) -> Sequence[Any]:
    v = spec.get(key)
    if v is None:
        return ()
    if not isinstance(v, list | tuple):
        fail(f"spec.{key}", f"expected a list, got {type(v).__name__}")
    return v


def _spec(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    p = _mapping(pod, "pod")
    spec = p.get("spec")
    if spec is None:
        fail("pod.spec", "pod has no spec")
    return _mapping(spec, "pod.spec")


def pod_containers(pod: Mapping[str, Any]) -> tuple[Sequence[Any], Sequence[Any]]:
    """(initContainers, containers) of a pod's JSON; missing lists are empty."""
    spec = _spec(pod)
    return _containers(spec, "initContainers"), _containers(spec, "containers")


def pod_request(pod: Mapping[str, Any], cfg: NvidiaConfig) -> PodRequest:
    """Every container's request, init containers first (difference 2); ``init_count`` marks the split."""
    init, app = pod_containers(pod)
    reqs = [container_request(c, cfg, f"spec.initContainers[{i}]") for i, c in enumerate(init)]
    reqs += [container_request(c, cfg, f"spec.containers[{i}]") for i, c in enumerate(app)]
    return PodRequest(containers=tuple(reqs), init_count=len(init))


def pod_requests_managed_resource(pod: Mapping[str, Any], cfg: NvidiaConfig) -> bool:
    """Whether any (init) container names one of the vendor's resources (``cfg.resource_names``) in its limits
    or requests, whatever the value: what makes a pod "ours" for the extender and the webhook."""
    names = cfg.resource_names
    init, app = pod_containers(pod)
    for i, c in enumerate([*init, *app]):
        limits, requests = _lists(c, f"container {i}")
        if any(n in limits or n in requests for n in names):
            return True
    return False
