"""GenerateResourceRequests semantics (hami-wire §1.2), one case per rule."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from shared.codec.resources import container_request, pod_request, pod_requests_managed_resource
from shared.domain.model import DEFAULT_NVIDIA_CONFIG, EMPTY_REQUEST, ContainerRequest, NvidiaConfig
from shared.errors import DecodeError
from tests.builders import req

CFG = DEFAULT_NVIDIA_CONFIG


def ctr(limits: dict[str, Any] | None = None, requests: dict[str, Any] | None = None) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if limits is not None:
        resources["limits"] = limits
    if requests is not None:
        resources["requests"] = requests
    return {"name": "c", "resources": resources}


def gpu(n: Any = "1", **extra: Any) -> dict[str, Any]:
    names = {"mem": "nvidia.com/gpumem", "pct": "nvidia.com/gpumem-percentage", "cores": "nvidia.com/gpucores"}
    return ctr({"nvidia.com/gpu": n, **{names[k]: v for k, v in extra.items()}})


CASES = [
    # rule 1: the count
    pytest.param(ctr(), CFG, EMPTY_REQUEST, id="no-resources"),
    pytest.param({"name": "c"}, CFG, EMPTY_REQUEST, id="no-resources-key"),
    pytest.param(ctr({"cpu": "1"}), CFG, EMPTY_REQUEST, id="other-resources-only"),
    pytest.param(gpu("1"), CFG, req(pct=100), id="bare-gpu-asks-100-percent"),
    pytest.param(ctr(requests={"nvidia.com/gpu": "2"}), CFG, req(2, pct=100), id="count-from-requests"),
    pytest.param(
        ctr({"nvidia.com/gpu": "2"}, {"nvidia.com/gpu": "1"}), CFG, req(2, pct=100), id="limits-win-over-requests"
    ),
    pytest.param(
        ctr({"nvidia.com/gpu": "1500m"}, {"nvidia.com/gpu": "1"}),
        CFG,
        EMPTY_REQUEST,
        id="limits-key-wins-even-when-not-integer",
    ),
    pytest.param(gpu("0"), CFG, EMPTY_REQUEST, id="zero-count"),
    pytest.param(gpu("-1"), CFG, EMPTY_REQUEST, id="negative-count"),
    pytest.param(gpu("1.5"), CFG, EMPTY_REQUEST, id="fractional-count"),
    pytest.param(gpu(8), CFG, req(8, pct=100), id="count-as-json-number"),
    pytest.param(gpu("2k"), CFG, req(2000, pct=100), id="count-with-suffix"),
    # rule 2: memory
    pytest.param(gpu(mem="3k"), CFG, req(mem=3000), id="gpumem-3k"),
    pytest.param(gpu(mem=3000), CFG, req(mem=3000), id="gpumem-int"),
    pytest.param(gpu(mem=3000.0), CFG, req(mem=3000), id="gpumem-float-whole"),
    pytest.param(gpu(mem="1Gi"), CFG, req(mem=2**30), id="gpumem-1Gi-fits-int32"),
    pytest.param(gpu(mem="2147483647"), CFG, req(mem=2**31 - 1), id="gpumem-maxint32"),
    pytest.param(gpu(mem="2Gi"), CFG, EMPTY_REQUEST, id="gpumem-over-int32-empties-request"),
    pytest.param(gpu(mem="500m"), CFG, EMPTY_REQUEST, id="gpumem-fraction-empties-request"),
    pytest.param(gpu(mem="-1"), CFG, EMPTY_REQUEST, id="gpumem-negative-empties-request"),
    pytest.param(gpu(mem="0"), CFG, req(pct=100), id="gpumem-zero-falls-to-default"),
    pytest.param(gpu(mem="1000"), replace(CFG, memory_factor=3), req(mem=3000), id="memory-factor-scales"),
    pytest.param(gpu(mem="1000"), replace(CFG, memory_factor=0), req(mem=1000), id="memory-factor-zero-is-one"),
    pytest.param(gpu(mem=str((2**31 - 1) // 2 + 1)), replace(CFG, memory_factor=2), EMPTY_REQUEST, id="factor-bound"),
    pytest.param(
        gpu(mem=str((2**31 - 1) // 2)), replace(CFG, memory_factor=2), req(mem=2**31 - 2), id="factor-bound-ok"
    ),
    # rule 3: percentage
    pytest.param(gpu(pct="50"), CFG, req(pct=50), id="pct-50"),
    pytest.param(gpu(pct="150"), CFG, req(pct=100), id="pct-clamped-to-100"),
    pytest.param(gpu(pct="0"), CFG, req(pct=100), id="pct-zero-ignored-then-default"),
    pytest.param(gpu(pct="-5"), CFG, req(pct=100), id="pct-negative-ignored"),
    pytest.param(gpu(pct="50m"), CFG, req(pct=100), id="pct-fraction-ignored"),
    pytest.param(gpu(mem="3000", pct="50"), CFG, req(mem=3000, pct=50), id="mem-and-pct-both-kept"),
    # rule 4: defaults
    pytest.param(gpu(), replace(CFG, default_memory=2048), req(mem=2048), id="default-memory"),
    pytest.param(
        gpu(), replace(CFG, default_memory=1000, memory_factor=2), req(mem=1000), id="default-memory-not-scaled"
    ),
    pytest.param(gpu(pct="0"), replace(CFG, default_memory=1024), req(mem=1024), id="pct-zero-then-default-mem"),
    # rule 5: cores
    pytest.param(gpu(cores="30"), CFG, req(pct=100, cores=30), id="cores"),
    pytest.param(gpu(), replace(CFG, default_cores=10), req(pct=100, cores=10), id="default-cores"),
    pytest.param(gpu(cores="150"), CFG, req(pct=100, cores=150), id="cores-over-100-kept-for-fit-to-clamp"),
    pytest.param(
        gpu(cores="500m"), replace(CFG, default_cores=10), req(pct=100, cores=10), id="cores-fraction-uses-default"
    ),
    # configurable names
    pytest.param(
        ctr({"example.com/vgpu": "2", "example.com/vmem": "4k"}),
        replace(CFG, resource_count_name="example.com/vgpu", resource_memory_name="example.com/vmem"),
        req(2, mem=4000),
        id="custom-resource-names",
    ),
]


@pytest.mark.parametrize(("container", "cfg", "expected"), CASES)
def test_container_request(container: dict[str, Any], cfg: NvidiaConfig, expected: ContainerRequest) -> None:
    assert container_request(container, cfg) == expected


@pytest.mark.parametrize(
    ("container", "what"),
    [
        pytest.param(gpu("abc"), "limits[nvidia.com/gpu]", id="count-not-a-quantity"),
        pytest.param(gpu(mem="3 k"), "limits[nvidia.com/gpumem]", id="mem-not-a-quantity"),
        pytest.param(gpu(cores="-1"), "nvidia.com/gpucores", id="negative-cores"),
        pytest.param(gpu(str(2**31)), "nvidia.com/gpu", id="count-over-int32"),
        pytest.param(gpu(True), "limits[nvidia.com/gpu]", id="boolean-quantity"),
        pytest.param({"resources": []}, "container.resources", id="resources-not-object"),
        pytest.param({"resources": {"limits": "x"}}, "container.resources.limits", id="limits-not-object"),
    ],
)
def test_container_request_rejects(container: dict[str, Any], what: str) -> None:
    with pytest.raises(DecodeError) as e:
        container_request(container, CFG)
    assert what in e.value.what


def test_pod_request_orders_init_containers_first() -> None:
    pod = {
        "spec": {
            "initContainers": [gpu("1", mem="1k"), ctr()],
            "containers": [ctr(), gpu("2", mem="2k", cores="50")],
        }
    }
    request = pod_request(pod, CFG)
    assert request.init_count == 2
    assert request.containers == (req(1, mem=1000), EMPTY_REQUEST, EMPTY_REQUEST, req(2, mem=2000, cores=50))
    assert request.is_init(1) and not request.is_init(2)


def test_pod_request_error_names_the_container() -> None:
    pod = {"spec": {"containers": [ctr(), gpu("x")]}}
    with pytest.raises(DecodeError) as e:
        pod_request(pod, CFG)
    assert e.value.what.startswith("spec.containers[1]")


@pytest.mark.parametrize(
    "pod",
    [
        pytest.param({}, id="no-spec"),
        pytest.param({"spec": []}, id="spec-not-object"),
        pytest.param({"spec": {"containers": {"a": 1}}}, id="containers-not-list"),
        pytest.param({"spec": {"containers": ["x"]}}, id="container-not-object"),
    ],
)
def test_pod_request_rejects_malformed_pods(pod: dict[str, Any]) -> None:
    with pytest.raises(DecodeError):
        pod_request(pod, CFG)


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        pytest.param({"spec": {"containers": [ctr({"cpu": "1"})]}}, False, id="no-gpu"),
        pytest.param({"spec": {"containers": [gpu()]}}, True, id="count"),
        pytest.param({"spec": {"containers": [ctr(requests={"nvidia.com/gpumem": "1k"})]}}, True, id="mem-request"),
        pytest.param({"spec": {"initContainers": [gpu()], "containers": [ctr()]}}, True, id="init-only"),
        pytest.param({"spec": {"containers": [ctr({"nvidia.com/gpu": "0"})]}}, True, id="zero-still-names-it"),
    ],
)
def test_pod_requests_managed_resource(pod: dict[str, Any], expected: bool) -> None:
    assert pod_requests_managed_resource(pod, CFG) is expected
