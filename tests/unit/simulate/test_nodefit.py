"""kube-scheduler's NodeResourcesFit as the driver plays it: the pod's request (``computePodResourceRequest``), the
fit against allocatable with kube-scheduler's reason strings, and the ``FitError`` summary."""

from __future__ import annotations

from typing import Any

from vgpu_scheduler.shared.k8s.nodefit import (
    Ledger,
    Resources,
    fit_error,
    insufficient,
    node_capacity,
    pod_request,
)


def container(name: str, requests: dict[str, str] | None = None, **more: Any) -> dict[str, Any]:
    return {"name": name, "image": "x", "resources": {"requests": requests or {}, **more}, **more.pop("extra", {})}


def pod(containers: list[dict[str, Any]], init: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"containers": containers, **spec}
    if init is not None:
        body["initContainers"] = init
    return {"metadata": {"name": "p", "namespace": "default"}, "spec": body}


def node(name: str, allocatable: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"allocatable": allocatable}}


def test_containers_are_summed_and_init_containers_taken_as_a_maximum() -> None:
    # kube-scheduler's own example: init 2 cpu/1G and 2 cpu/3G, containers 2 cpu/1G and 1 cpu/1G -> 3 cpu, 3G
    p = pod(
        [container("c1", {"cpu": "2", "memory": "1G"}), container("c2", {"cpu": "1", "memory": "1G"})],
        [container("i1", {"cpu": "2", "memory": "1G"}), container("i2", {"cpu": "2", "memory": "3G"})],
    )
    r = pod_request(p)
    assert (r.milli_cpu, r.memory) == (3000, 3 * 10**9)


def test_a_sidecar_adds_to_the_sum_and_to_later_init_containers() -> None:
    sidecar = {"name": "s", "image": "x", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}}
    p = pod([container("c", {"cpu": "1"})], [sidecar, container("i", {"cpu": "2500m"})])
    assert pod_request(p).milli_cpu == 3500  # max(1 + 1, 1 + 2.5)


def test_limits_default_requests_and_overhead_is_added() -> None:
    c = {"name": "c", "image": "x", "resources": {"limits": {"hygon.com/dcunum": "2", "cpu": "1"}}}
    r = pod_request(pod([c], overhead={"cpu": "250m"}))
    assert r.milli_cpu == 1250 and r.scalar == {"hygon.com/dcunum": 2}


def test_reasons_come_in_kube_schedulers_order_and_managed_resources_are_left_to_the_extender() -> None:
    cap = node_capacity(node("n", {"cpu": "1", "memory": "1Gi", "pods": "1", "nvidia.com/gpu": "0"}))
    cap.pods = 1
    request = Resources.of({"cpu": "2", "memory": "2Gi", "nvidia.com/gpu": "1", "example.com/fpga": "1"})
    assert insufficient(request, cap, frozenset({"nvidia.com/gpu"})) == [
        "Too many pods",
        "Insufficient cpu",
        "Insufficient memory",
        "Insufficient example.com/fpga",
    ]


def test_resources_a_node_leaves_out_are_unlimited_for_cpu_memory_pods_but_zero_for_extended() -> None:
    cap = node_capacity(node("n", {"nvidia.com/gpu": "10"}))
    request = Resources.of({"cpu": "100", "memory": "1Ti", "hygon.com/dcunum": "1"})
    assert insufficient(request, cap, frozenset()) == ["Insufficient hygon.com/dcunum"]


def test_the_ledger_counts_bound_and_assumed_pods_and_forgets_a_failed_bind() -> None:
    n = node("n", {"cpu": "2", "pods": "10"})
    running = pod([container("c", {"cpu": "1"})], nodeName="n")
    running["metadata"]["name"] = "running"
    done = pod([container("c", {"cpu": "2"})], nodeName="n")
    done["metadata"]["name"] = "done"
    done["status"] = {"phase": "Succeeded"}
    ledger = Ledger([n], [running, done])
    new = pod([container("c", {"cpu": "1"})])
    assert ledger.filter(new, ["n"], frozenset()) == (["n"], {})
    ledger.assume(new, "n")
    other = pod([container("c", {"cpu": "500m"})])
    other["metadata"]["name"] = "other"
    assert ledger.filter(other, ["n"], frozenset()) == ([], {"n": ["Insufficient cpu"]})
    ledger.forget(new)
    assert ledger.filter(other, ["n"], frozenset()) == (["n"], {})


def test_fit_error_counts_each_reason_over_the_nodes_sorted_as_strings() -> None:
    reasons = {
        "a": "Insufficient cpu, Insufficient memory",
        "b": "Insufficient memory",
        "c": "2/4 CardInsufficientMemory, 2/4 CardNotHealth",  # the extender's message counts whole
        "d": "node(s) didn't match Pod's node affinity/selector",
    }
    assert fit_error(reasons) == (
        "0/4 nodes are available: 1 2/4 CardInsufficientMemory, 2/4 CardNotHealth, 1 Insufficient cpu, "
        "1 node(s) didn't match Pod's node affinity/selector, 2 Insufficient memory."
    )
    assert fit_error(
        {"n": "Insufficient hygon.com/dcunum"} | {f"m{i}": "Insufficient hygon.com/dcunum" for i in (1, 2)}
    ) == ("0/3 nodes are available: 3 Insufficient hygon.com/dcunum.")
