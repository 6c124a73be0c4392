"""Container resources → requests: one case per rule (hami-wire §1.2), and every bad form of every managed
resource refused with what to write instead."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.builders import req
from vgpu_scheduler.shared.codec.resources import (
    QuantityKind,
    RequestReader,
    ResourceRequestError,
    container_request,
    pod_request,
    pod_requests_managed_resource,
)
from vgpu_scheduler.shared.domain.model import DEFAULT_NVIDIA_CONFIG, EMPTY_REQUEST, ContainerRequest, NvidiaConfig
from vgpu_scheduler.shared.errors import DecodeError

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
    # the count
    pytest.param(ctr(), CFG, EMPTY_REQUEST, id="no-resources"),
    pytest.param({"name": "c"}, CFG, EMPTY_REQUEST, id="no-resources-key"),
    pytest.param(ctr({"cpu": "1"}), CFG, EMPTY_REQUEST, id="other-resources-only"),
    pytest.param(gpu("1"), CFG, req(pct=100), id="bare-gpu-asks-100-percent"),
    pytest.param(ctr(requests={"nvidia.com/gpu": "2"}), CFG, req(2, pct=100), id="count-from-requests"),
    pytest.param(
        ctr({"nvidia.com/gpu": "2"}, {"nvidia.com/gpu": "1"}), CFG, req(2, pct=100), id="limits-win-over-requests"
    ),
    pytest.param(
        ctr({"nvidia.com/gpu": "1"}, {"nvidia.com/gpu": "-1"}), CFG, req(pct=100), id="only-the-effective-value-counts"
    ),
    pytest.param(gpu("0"), CFG, EMPTY_REQUEST, id="zero-count-asks-for-none"),
    pytest.param(gpu("0", cores="100"), CFG, EMPTY_REQUEST, id="zero-count-with-the-webhook-core-default"),
    pytest.param(gpu("0", mem="0"), CFG, EMPTY_REQUEST, id="zero-count-zero-memory"),
    pytest.param(gpu(8), CFG, req(8, pct=100), id="count-as-json-number"),
    pytest.param(gpu("2k"), CFG, req(2000, pct=100), id="count-with-decimal-suffix-as-the-api-serves-it"),
    pytest.param(ctr({"nvidia.com/gpumem": "1k"}), CFG, req(mem=1000), id="no-count-takes-default-gpu-num"),
    pytest.param(
        ctr({"nvidia.com/gpucores": "30"}), replace(CFG, default_gpu_num=2), req(2, pct=100, cores=30), id="default-2"
    ),
    pytest.param(ctr({"nvidia.com/priority": "1"}), CFG, EMPTY_REQUEST, id="priority-alone-asks-for-no-gpu"),
    # memory
    pytest.param(gpu(mem="3k"), CFG, req(mem=3000), id="gpumem-3k"),
    pytest.param(gpu(mem=3000), CFG, req(mem=3000), id="gpumem-int"),
    pytest.param(gpu(mem=3000.0), CFG, req(mem=3000), id="gpumem-float-whole"),
    pytest.param(gpu(mem="2147483647"), CFG, req(mem=2**31 - 1), id="gpumem-maxint32"),
    pytest.param(gpu(mem="0"), CFG, req(pct=100), id="gpumem-zero-falls-to-default"),
    pytest.param(gpu(mem="1000"), replace(CFG, memory_factor=3), req(mem=3000), id="memory-factor-scales"),
    pytest.param(gpu(mem="1000"), replace(CFG, memory_factor=0), req(mem=1000), id="memory-factor-zero-is-one"),
    pytest.param(
        gpu(mem=str((2**31 - 1) // 2)), replace(CFG, memory_factor=2), req(mem=2**31 - 2), id="factor-bound-ok"
    ),
    # percentage
    pytest.param(gpu(pct="50"), CFG, req(pct=50), id="pct-50"),
    pytest.param(gpu(pct="100"), CFG, req(pct=100), id="pct-100"),
    pytest.param(gpu(pct="0"), CFG, req(pct=100), id="pct-zero-is-unset-then-default"),
    pytest.param(gpu(mem="3000", pct="50"), CFG, req(mem=3000, pct=50), id="mem-and-pct-both-kept"),
    # defaults
    pytest.param(gpu(), replace(CFG, default_memory=2048), req(mem=2048), id="default-memory"),
    pytest.param(
        gpu(), replace(CFG, default_memory=1000, memory_factor=2), req(mem=1000), id="default-memory-not-scaled"
    ),
    pytest.param(gpu(pct="0"), replace(CFG, default_memory=1024), req(mem=1024), id="pct-zero-then-default-mem"),
    # cores
    pytest.param(gpu(cores="30"), CFG, req(pct=100, cores=30), id="cores"),
    pytest.param(gpu(cores="0"), CFG, req(pct=100, cores=0), id="cores-zero"),
    pytest.param(gpu(cores="100"), CFG, req(pct=100, cores=100), id="cores-100"),
    pytest.param(gpu(), replace(CFG, default_cores=10), req(pct=100, cores=10), id="default-cores"),
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


CUSTOM = replace(
    CFG,
    resource_count_name="example.com/vgpu",
    resource_memory_name="example.com/vmem",
    resource_memory_percentage_name="example.com/vmem-pct",
    resource_core_name="example.com/vcores",
    resource_priority_name="example.com/prio",
)

# Every bad form of every managed resource, with the message the operator reads (what to write instead).
REFUSED = [
    # the count
    pytest.param(
        gpu("-1"), CFG, 'nvidia.com/gpu cannot be negative: got "-1"; write a whole number of GPUs', id="count-neg"
    ),
    pytest.param(gpu("1.5"), CFG, 'nvidia.com/gpu counts whole GPUs: "1.5" is 1.5; to share a GPU', id="count-frac"),
    pytest.param(gpu("500m"), CFG, '"500m" is 0.5; to share a GPU, ask for nvidia.com/gpu: 1 with', id="count-milli"),
    pytest.param(
        ctr({"nvidia.com/gpu": "1500m"}, {"nvidia.com/gpu": "1"}), CFG, '"1500m" is 1.5', id="count-limits-key-wins"
    ),
    pytest.param(
        gpu("1Ki"),
        CFG,
        'nvidia.com/gpu counts GPUs and takes no unit: "1Ki" would be 1024 GPUs; did you mean 1?',
        id="count-unit",
    ),
    pytest.param(
        gpu(str(2**31)), CFG, 'nvidia.com/gpu: "2147483648" is too large (at most 2147483647)', id="count-huge"
    ),
    pytest.param(
        gpu("abc"), CFG, 'nvidia.com/gpu: "abc" is not a number; write a whole number of GPUs', id="count-nan"
    ),
    pytest.param(gpu(True), CFG, "nvidia.com/gpu: true is not a number", id="count-boolean"),
    # memory
    pytest.param(
        gpu(mem="20Gi"),
        CFG,
        'nvidia.com/gpumem is in MiB: "20Gi" would be 21474836480 MiB; did you mean 20480?',
        id="mem-20Gi",
    ),
    pytest.param(
        gpu(mem="1Gi"),
        CFG,
        'nvidia.com/gpumem is in MiB: "1Gi" would be 1073741824 MiB; did you mean 1024?',
        id="mem-binary-unit-in-int32-range",
    ),
    pytest.param(gpu(mem="4Ki"), CFG, '"4Ki" would be 4096 MiB, a unit does not belong here', id="mem-Ki"),
    pytest.param(
        gpu(mem="20G"), CFG, '"20G" would be 20000000000 MiB; did you mean 19073?', id="mem-decimal-beyond-int32"
    ),
    pytest.param(
        gpu(mem="20GiB"), CFG, 'nvidia.com/gpumem is in MiB: "20GiB" is not a number; did you mean 20480?', id="mem-GiB"
    ),
    pytest.param(
        gpu(mem="3 k"), CFG, 'nvidia.com/gpumem: "3 k" is not a number; write a whole number of MiB', id="mem-nan"
    ),
    pytest.param(gpu(mem="-100"), CFG, 'nvidia.com/gpumem cannot be negative: got "-100"', id="mem-neg"),
    pytest.param(gpu(mem=-100), CFG, "nvidia.com/gpumem cannot be negative: got -100", id="mem-neg-number"),
    pytest.param(
        gpu(mem="100.5"),
        CFG,
        'nvidia.com/gpumem is a whole number of MiB: "100.5" is 100.5; did you mean 101?',
        id="mem-frac",
    ),
    pytest.param(gpu(mem="500m"), CFG, '"500m" is 0.5; did you mean 1?', id="mem-milli"),
    pytest.param(
        gpu(mem=str((2**31 - 1) // 2 + 1)),
        replace(CFG, memory_factor=2),
        "nvidia.com/gpumem is in units of 2 MiB (memoryFactor 2)",
        id="mem-factor-bound",
    ),
    pytest.param(
        gpu("0", mem="1000"),
        CFG,
        "nvidia.com/gpu is 0 but nvidia.com/gpumem asks for GPU memory",
        id="mem-on-zero-gpus",
    ),
    pytest.param(
        ctr({"nvidia.com/gpumem": "1000"}),
        replace(CFG, default_gpu_num=0),
        "nvidia.com/gpumem needs nvidia.com/gpu, the number of GPUs: add nvidia.com/gpu: 1",
        id="mem-without-count-and-no-default",
    ),
    # percentages
    pytest.param(
        gpu(pct="150"),
        CFG,
        'nvidia.com/gpumem-percentage is a percentage of one GPU: "150" is more than 100',
        id="pct-over-100",
    ),
    pytest.param(gpu(pct="-5"), CFG, 'nvidia.com/gpumem-percentage cannot be negative: got "-5"', id="pct-neg"),
    pytest.param(gpu(pct="50m"), CFG, '"50m" is 0.05; did you mean 1?', id="pct-milli"),
    pytest.param(gpu(pct="50Ki"), CFG, '"50Ki" would be 51200%; did you mean 50?', id="pct-unit"),
    pytest.param(
        gpu("0", pct="50"), CFG, "nvidia.com/gpu is 0 but nvidia.com/gpumem-percentage", id="pct-on-zero-gpus"
    ),
    pytest.param(gpu(cores="-1"), CFG, 'nvidia.com/gpucores cannot be negative: got "-1"', id="cores-neg"),
    pytest.param(gpu(cores="500m"), CFG, 'nvidia.com/gpucores must be a whole number: "500m" is 0.5', id="cores-frac"),
    pytest.param(
        gpu(cores="1Gi"), CFG, "nvidia.com/gpucores is a percentage of one GPU and takes no unit", id="cores-unit"
    ),
    # priority
    pytest.param(ctr({"nvidia.com/priority": "-1"}), CFG, "nvidia.com/priority cannot be negative", id="priority-neg"),
    pytest.param(
        ctr({"nvidia.com/priority": "0.5"}), CFG, "nvidia.com/priority must be a whole number", id="prio-frac"
    ),
    # names from the device config
    pytest.param(ctr({"example.com/vgpu": "-1"}), CUSTOM, "example.com/vgpu cannot be negative", id="custom-count"),
    pytest.param(
        ctr({"example.com/vgpu": "1", "example.com/vmem": "20Gi"}),
        CUSTOM,
        'example.com/vmem is in MiB: "20Gi" would be 21474836480 MiB; did you mean 20480?',
        id="custom-mem",
    ),
    pytest.param(
        ctr({"example.com/vgpu": "1", "example.com/vmem-pct": "101"}),
        CUSTOM,
        "example.com/vmem-pct is a percentage",
        id="custom-pct",
    ),
    pytest.param(
        ctr({"example.com/vgpu": "1", "example.com/vcores": "-5"}),
        CUSTOM,
        "example.com/vcores cannot be negative",
        id="custom-cores",
    ),
    pytest.param(ctr({"example.com/prio": "x"}), CUSTOM, 'example.com/prio: "x" is not a number', id="custom-prio"),
    pytest.param(
        ctr({"example.com/vgpu": "1", "nvidia.com/gpumem": "20Gi"}), CUSTOM, None, id="default-names-not-managed"
    ),
]


@pytest.mark.parametrize(("container", "cfg", "message"), REFUSED)
def test_bad_values_are_refused_with_what_to_write(
    container: dict[str, Any], cfg: NvidiaConfig, message: str | None
) -> None:
    if message is None:  # a name this configuration does not manage is not ours to judge
        container_request(container, cfg)
        return
    with pytest.raises(ResourceRequestError) as e:
        container_request(container, cfg)
    assert str(e.value).startswith('container "c": ')
    assert message in str(e.value)


def test_every_problem_of_a_pod_is_reported_at_once() -> None:
    pod = {
        "spec": {
            "initContainers": [{"name": "setup", "resources": {"limits": {"nvidia.com/gpu": "-1"}}}],
            "containers": [
                {"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "20Gi"}}},
                {"name": "side", "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "-150"}}},
            ],
        }
    }
    with pytest.raises(ResourceRequestError) as e:
        pod_request(pod, CFG)
    assert [p.split(":")[0] for p in e.value.problems] == [
        'init container "setup"',
        'container "main"',
        'container "side"',
    ]
    assert str(e.value) == "; ".join(e.value.problems)
    assert isinstance(e.value, DecodeError)  # callers that only know DecodeError still refuse the pod


@pytest.mark.parametrize(
    ("container", "what"),
    [
        pytest.param({"resources": []}, "container.resources", id="resources-not-object"),
        pytest.param({"resources": {"limits": "x"}}, "container.resources.limits", id="limits-not-object"),
    ],
)
def test_container_request_rejects_malformed_containers(container: dict[str, Any], what: str) -> None:
    with pytest.raises(DecodeError) as e:
        container_request(container, CFG)
    assert not isinstance(e.value, ResourceRequestError)
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
    pod = {"spec": {"containers": [ctr(), {"resources": {"limits": {"nvidia.com/gpu": "x"}}}]}}
    with pytest.raises(ResourceRequestError) as e:
        pod_request(pod, CFG)
    assert str(e.value).startswith("spec.containers[1]: nvidia.com/gpu")


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


def _reads_alike(raw: Any, kind: QuantityKind, factor: int) -> None:
    cfg = replace(CFG, memory_factor=factor)
    quick, full = RequestReader(cfg, "c"), RequestReader(cfg, "c")
    full._plain = lambda raw, kind: None  # type: ignore[method-assign]
    got = quick.read({"x": raw}, {}, "x", kind)
    want = full.read({"x": raw}, {}, "x", kind)
    assert (got, type(got), quick.problems) == (want, type(want), full.problems)


_EDGES: list[Any] = ["0", "007", "100", "101", "715827882", "715827883", "2147483647", "2147483648", "99999999999"]
_EDGES += ["", "1k", "1Ki", "+1", "1.0", "1e2", " 1", "\u0661", "\u00b2", 100, 101, -1, 2147483648, True, 1.0]


@pytest.mark.parametrize("factor", [0, 1, 3])
@pytest.mark.parametrize("kind", list(QuantityKind))
@pytest.mark.parametrize("raw", _EDGES)
def test_plain_whole_numbers_read_as_the_full_parse_reads_them(raw: Any, kind: QuantityKind, factor: int) -> None:
    """The shortcut for plain whole numbers gives what the exact parse gives, value and problems alike."""
    _reads_alike(raw, kind, factor)


@given(
    raw=st.one_of(st.integers(min_value=-5, max_value=2**33), st.text(alphabet="0123456789", max_size=12)),
    kind=st.sampled_from(QuantityKind),
    factor=st.sampled_from([0, 1, 3, 1024]),
)
def test_any_whole_number_reads_as_the_full_parse_reads_it(raw: Any, kind: QuantityKind, factor: int) -> None:
    _reads_alike(raw, kind, factor)
