"""``vgpu-scheduler simulate`` on the bundled example: the real registrar, informer and extender in-process against
the API emulator and an embedded store, driven over HTTP like kube-scheduler and HAMi's device plugin."""

from __future__ import annotations

import importlib.util
import re
import signal
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.audit import usage_from_pods
from tests.integration.simulate.conftest import run_cli, run_cli_json, spawn
from vgpu_scheduler.services.simulate.main import EXAMPLE_CLUSTER, EXAMPLE_DEVICE_CONFIG, EXAMPLE_WORKLOAD
from vgpu_scheduler.services.simulate.manifests import load_cluster, load_workload
from vgpu_scheduler.shared.codec.register import decode_register

POD_KEYS = [
    "namespace", "name", "node", "annotations", "reasons", "priority", "pod_group", "preempted_by",
    "evicted", "owner", "replaces", "replaced_by",
]  # fmt: skip
SUMMARY_KEYS = {
    "pods", "placed", "pending", "policies", "by_policy", "gpu", "fragmentation", "nodes_touched", "nodes_in_use",
    "pending_reasons", "over_capacity", "contention", "by_vendor", "preempted", "preemption", "gangs",
    "evicted", "controllers", "evictions", "defrag",
}  # fmt: skip
HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None


@pytest.fixture(scope="module")
def single() -> dict[str, Any]:
    """One run with the default policies (node binpack, GPU spread)."""
    out: dict[str, Any] = run_cli_json(
        "simulate", "--cluster", str(EXAMPLE_CLUSTER), "--workload", str(EXAMPLE_WORKLOAD),
        "--device-config-file", str(EXAMPLE_DEVICE_CONFIG), "--enable-ascend",
    )  # fmt: skip
    return out


@pytest.fixture(scope="module")
def plot_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("plots")


@pytest.fixture(scope="module")
def comparison(plot_dir: Path) -> dict[str, Any]:
    """The bundled example under node binpack and spread (GPU spread), with charts when matplotlib is there."""
    argv = ["simulate", "--compare", "--policies", "binpack/spread;spread/spread"]
    if HAS_MATPLOTLIB:
        argv += ["--plot", str(plot_dir)]
    out: dict[str, Any] = run_cli_json(*argv)
    return out


def test_the_json_output_has_exactly_the_interface_shape(single: dict[str, Any]) -> None:
    workload = load_workload(EXAMPLE_WORKLOAD)
    assert list(single) == ["pods", "summary", "replacements"]  # the keys added come after the first two
    assert single["replacements"] == []
    assert [(p["namespace"], p["name"]) for p in single["pods"]] == [
        (p["metadata"]["namespace"], p["metadata"]["name"]) for p in workload.pods
    ]
    for pod in single["pods"]:
        assert list(pod) == POD_KEYS
        assert pod["node"] is None or isinstance(pod["node"], str)
        assert all(isinstance(v, str) for v in pod["annotations"].values())
        assert all(k.startswith("hami.io/") for k in pod["annotations"])
        assert all(isinstance(v, str) and v for v in pod["reasons"].values())
    assert set(single["summary"]) == SUMMARY_KEYS
    assert single["summary"]["policies"] == {"node": "binpack", "gpu": "spread"}


def test_every_pod_is_placed_with_what_the_device_plugin_needs_or_says_why_not(single: dict[str, Any]) -> None:
    gpu_pods = 0
    for pod in single["pods"]:
        a = pod["annotations"]
        if pod["node"] is None:
            assert pod["reasons"], pod["name"]
            assert a == {}
            continue
        assert pod["reasons"] == {}
        if not a:  # the CPU-only pod: bound, nothing to allocate
            assert pod["name"] == "etl-01"
            continue
        gpu_pods += 1
        assert a["hami.io/vgpu-node"] == pod["node"]
        allocated = [k for k in a if k.endswith("-devices-allocated")]
        assert allocated, pod["name"]
        for key in allocated:  # every vendor's list the device plugin reads is the one accounting reads
            assert a[key.replace("-allocated", "-to-allocate")] == a[key] != "", (pod["name"], key)
        assert a["hami.io/bind-phase"] == "success"
        assert a["hami.io/bind-time"].isdigit() and a["hami.io/vgpu-time"].isdigit()
    summary = single["summary"]
    assert gpu_pods >= 40
    assert summary["placed"] + summary["pending"] == summary["pods"] == len(single["pods"])
    assert summary["placed"] == sum(1 for p in single["pods"] if p["node"] is not None)


def test_unschedulable_pods_carry_the_reasons_of_each_kind(single: dict[str, Any]) -> None:
    by_name = {p["name"]: p for p in single["pods"]}
    assert by_name["privileged-01"]["reasons"] == {"*": "admission denied: container trainer is privileged"}
    assert by_name["notebook-06"]["reasons"] == {"*": "admission denied: exceeding resource quota"}
    assert by_name["bad-percentage-01"]["reasons"] == {
        "*": 'admission denied: container "worker": nvidia.com/gpumem-percentage is a percentage of one GPU: "150" is '
        "more than 100; use 100 for a whole GPU"
    }
    too_big = by_name["too-big-01"]["reasons"]
    assert too_big["cpu-01"] == "node unregistered"
    assert "CardInsufficientMemory" in too_big["gpu-a100-01"]
    assert set(too_big) == {n["metadata"]["name"] for n in load_cluster(EXAMPLE_CLUSTER).nodes}


def test_audit_no_device_over_capacity(single: dict[str, Any]) -> None:
    """Usage recomputed independently from the output annotations and the cluster's running pods."""
    cluster, workload = load_cluster(EXAMPLE_CLUSTER), load_workload(EXAMPLE_WORKLOAD)
    specs = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in workload.pods}
    placed = []
    for out in single["pods"]:
        if out["node"] is None or not out["annotations"]:
            continue
        pod = dict(specs[(out["namespace"], out["name"])])
        pod["metadata"] = {**pod["metadata"], "annotations": out["annotations"]}
        placed.append(pod)
    usage = usage_from_pods([*cluster.pods, *placed])
    capacity = {
        (n["metadata"]["name"], d.id): d
        for n in cluster.nodes
        if "hami.io/node-nvidia-register" in n["metadata"].get("annotations", {})
        for d in decode_register(n["metadata"]["annotations"]["hami.io/node-nvidia-register"])
    }
    checked = 0
    for node, devices in usage.items():
        for uuid, u in devices.items():
            d = capacity[(node, uuid)]
            assert u.used <= d.count and u.used_mem_mib <= d.devmem_mib and u.used_cores <= d.devcore, (node, uuid, u)
            checked += 1
    assert checked >= 30
    assert single["summary"]["over_capacity"] == []


def test_comparison_has_one_row_per_combination_with_consistent_numbers(
    comparison: dict[str, Any], single: dict[str, Any]
) -> None:
    rows = comparison["combinations"]
    assert [(r["policies"]["node"], r["policies"]["gpu"]) for r in rows] == [
        ("binpack", "spread"),
        ("spread", "spread"),
    ]
    for r in rows:
        assert r["placed"] + r["pending"] == r["pods"] == len(single["pods"])
        assert sum(v["pods"] for v in r["by_policy"].values()) == r["pods"]
        gpu, frag = r["gpu"], r["fragmentation"]
        assert gpu["memory_utilisation"] == round(gpu["memory_allocated_mib"] / gpu["memory_mib"], 4)
        assert 0 <= frag["stranded_memory_mib"] <= frag["free_memory_mib"]
        assert r["nodes_touched"] <= r["nodes_in_use"] <= len(load_cluster(EXAMPLE_CLUSTER).nodes)
        assert r["over_capacity"] == []
        c = r["contention"]
        assert c["clock"] == "simulated"
        # kube-scheduler binds concurrently: every placed pod has one successful bind, every failed one was retried
        assert c["binds"] - c["bind_failures"] == r["placed"]
        assert c["binds_retried"] == c["bind_failures"] and c["pods_retried"] <= c["binds_retried"]
        assert c["max_binds_in_flight"] > 1 and c["lock_wait_max_s"] <= 3.0 + 0.2
    # node binpack piles pods onto few nodes: their binds queue behind the node lock
    assert rows[0]["contention"]["lock_waits"] > 0
    # a fresh emulator and store per run: the same policies give the same figures as the single run
    assert rows[0] == single["summary"]


def test_binpack_touches_no_more_nodes_than_spread(comparison: dict[str, Any]) -> None:
    binpack, spread = comparison["combinations"]
    assert binpack["nodes_touched"] <= spread["nodes_touched"]


@pytest.mark.skipif(not HAS_MATPLOTLIB, reason="matplotlib (the plot extra) is not installed")
def test_plot_writes_png_charts(comparison: dict[str, Any], plot_dir: Path) -> None:
    files = sorted(p.name for p in plot_dir.iterdir())
    assert files == ["contention.png", "fragmentation.png", "nodes.png", "placement.png", "utilisation.png"]
    for name in files:
        assert (plot_dir / name).read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_text_output_lists_every_pod_and_the_summary(tmp_path: Path) -> None:
    workload = tmp_path / "w.yaml"
    pods = load_workload(EXAMPLE_WORKLOAD).pods[:3]
    workload.write_text(yaml.safe_dump_all(pods), encoding="utf-8")
    code, out, err = run_cli("simulate", "--workload", str(workload), "--gpu-scheduler-policy=binpack")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith(f"cluster {EXAMPLE_CLUSTER}: 23 nodes") and f"workload {workload}: 3 pods" in lines[0]
    assert lines[2].split() == ["POD", "NODE", "DEVICES", "/", "WHY", "NOT"]
    assert [line.split()[0] for line in lines[3:6]] == [f"inference/infer-0{i}" for i in range(3)]
    assert re.search(r" GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\(\d+MiB", lines[3]), lines[3]
    assert "policies: node binpack, gpu binpack" in out and "placed 3/3, pending 0" in out
    assert re.search(r"^binds 3 \(\d+ at most in flight\), 0 retried", out, flags=re.M), out


def test_sigint_stops_cleanly_with_partial_results() -> None:
    proc = spawn("simulate", "--cluster", str(EXAMPLE_CLUSTER), "--workload", str(EXAMPLE_WORKLOAD), "--progress")
    assert proc.stderr is not None
    try:
        for line in proc.stderr:  # progress lines: one per scheduled pod
            if " 3/" in line:
                break
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "simulation interrupted" in err
    assert "Traceback" not in err
    assert 3 <= sum(1 for line in out.splitlines() if line.startswith(("inference/", "research/", "team-"))) < 65


def test_on_a_real_redis_each_run_uses_a_scratch_keyspace_and_removes_it(redis_url: str, tmp_path: Path) -> None:
    import redis as sync_redis

    workload = tmp_path / "w.yaml"
    workload.write_text(yaml.safe_dump_all(load_workload(EXAMPLE_WORKLOAD).pods[:4]), encoding="utf-8")
    client = sync_redis.Redis.from_url(redis_url)
    try:
        client.set("vgpu:meta", b"a deployment's key")
        out = run_cli_json(
            "simulate", "--redis-url", redis_url, "--workload", str(workload), "--compare",
            "--policies", "binpack/binpack;spread/spread",
        )  # fmt: skip
        assert [r["placed"] for r in out["combinations"]] == [4, 4]
        assert client.keys("*") == [b"vgpu:meta"]
    finally:
        client.close()


@pytest.mark.slow
def test_no_arguments_compares_the_six_default_combinations_on_the_bundled_example() -> None:
    code, out, err = run_cli("simulate")
    assert code == 0, err
    rows = [line.split() for line in out.splitlines() if line.startswith(("binpack ", "spread "))]
    assert [(r[0], r[1]) for r in rows] == [
        (node, gpu) for node in ("binpack", "spread") for gpu in ("binpack", "spread", "topology-aware")
    ]
