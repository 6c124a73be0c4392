"""``vgpu-scheduler explain`` and ``usage`` as real processes against the emulated system: the API emulator, the
real registrar, informer and extender, the simulated device plugin, the real redis-server.

Expected figures are recomputed from the pods' allocation annotations (what the device plugin reads), never taken
from the store the commands read; ``explain``'s "would get now" is checked against the node ``/filter`` then gives.
"""

from __future__ import annotations

import asyncio
import os
from collections import defaultdict
from typing import Any

from tests.e2e.cluster import Cluster, ClusterSpec, eventually, running_cluster
from tests.e2e.driver import PodSpec, SchedulerDriver
from tests.integration.inspect.cli import columns, row, run_cli
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec.podannotations import decode_allocation
from vgpu_scheduler.shared.domain.accounting import collapse

MEM = 16384
QUOTA = {"team-a": {"limits.nvidia.com/gpumem": "12000"}}


def flags(c: Cluster, redis_url: str, *, kube: bool = True) -> list[str]:
    out = ["--redis-url", redis_url, "--key-prefix", "e2e"]
    return [*out, "--kube-server", c.em.url] if kube else out


def usage_from_annotations(c: Cluster) -> dict[str, dict[str, Any]]:
    """uuid → {mem, cores, slots, pods} from every pod holding devices."""
    out: dict[str, dict[str, Any]] = defaultdict(lambda: {"mem": 0, "cores": 0, "slots": 0, "pods": set()})
    for pod in c.pods():
        if keys.VGPU_NODE not in (pod["metadata"].get("annotations") or {}):
            continue
        decoded = decode_allocation(pod)
        assert decoded is not None
        for ch in collapse(decoded[0], 0, decoded[1]):
            u = out[ch.uuid]
            u["mem"] += ch.mem_mib
            u["cores"] += ch.cores_pct
            u["slots"] += ch.slots
            u["pods"].add(f"{pod['metadata']['namespace']}/{pod['metadata']['name']}")
    return out


async def create_raw(c: Cluster, name: str, namespace: str, mem: int, cores: int) -> None:
    """A pod created as it is (no admission), already pointed at our scheduler."""
    spec = PodSpec(name, namespace=namespace, gpus=1, mem_mib=mem, cores=cores)
    pod = spec.manifest()
    pod["spec"]["schedulerName"] = "vgpu-scheduler"
    for ctr in pod["spec"]["containers"]:
        ctr["resources"]["requests"] = dict(ctr["resources"]["limits"])
    async with c.http.post(f"{c.em.url}/api/v1/namespaces/{namespace}/pods", json=pod) as r:
        assert r.status == 201, await r.text()


async def test_explain_and_usage_against_the_emulated_system(redis_url: str) -> None:
    stuck = frozenset({"node-002"})
    # the node policy alone (no bind-aware placement), so that the nodes below are predictable
    spec = ClusterSpec(
        nodes=3, gpus_per_node=2, mem_mib=MEM, replicas=1, quotas=QUOTA, stuck_nodes=stuck, bind_aware=False
    )
    async with running_cluster(redis_url, spec) as c:
        driver = SchedulerDriver(c, workers=1)
        placed = [PodSpec(f"p{i}", gpus=1, mem_mib=10000, cores=30) for i in range(4)]
        placed.append(PodSpec("q1", namespace="team-a", gpus=1, mem_mib=10000, cores=30))
        report = await driver.run(placed)
        assert sorted(report.bound) == ["p0", "p1", "p2", "p3", "q1"]
        # binpack fills node-000 and node-001 (two 10,000 MiB pods each), q1 goes to node-002, whose device plugin
        # never answers: its node lock stays held
        assert report.bound["q1"] == "node-002"

        async def locked() -> bool:
            return await c.store.locks.inspect("node-002") is not None

        await eventually(locked, what="node-002's lock held")

        async def recorded() -> bool:
            return sum(len(v) for v in (await c.store.reservations.list_all()).values()) == 5

        await eventually(recorded, what="five allocations recorded")

        # --- a pod too big for any GPU ---------------------------------------------------------------------------
        big = await driver.admit_and_create(PodSpec("big", gpus=1, mem_mib=20000, cores=10))
        assert big is not None
        ran = await run_cli("explain", *flags(c, redis_url), "default/big")
        assert ran.code == 0, ran.err
        used = usage_from_annotations(c)
        lines = ran.out.splitlines()
        assert lines[0] == "Pod default/big: Pending; not placed"
        assert "  requests: container main: 1 GPU, 20,000 MiB each, 10% cores each" in lines
        assert "  policies: node binpack, GPU spread" in lines
        for node in ("node-000", "node-001", "node-002"):
            free = {f"GPU-{node}-{i}": MEM - used.get(f"GPU-{node}-{i}", {"mem": 0})["mem"] for i in range(2)}
            best = max(free, key=lambda u: (free[u], -int(u[-1])))
            assert row(ran.out, node, start=True) == [
                node,
                "no fit",
                "2/2 CardInsufficientMemory",
                f"needs 20,000 MiB on one GPU; the most free on {node} is {free[best]:,} MiB on {best}",
            ]
        assert "Would get now: no node; the nearest misses above say what is missing" in lines
        big_json = (await run_cli("explain", *flags(c, redis_url), "big", "-n", "default", "-o", "json")).json()
        assert big_json["pod"]["state"] == "pending" and big_json["would_get"] is None
        assert {v["node"]: v["nearest_miss"]["available"] for v in big_json["nodes"]} == {
            "node-000": 6384,
            "node-001": 6384,
            "node-002": MEM,
        }

        # --- the namespace quota ----------------------------------------------------------------------------------
        await create_raw(c, "q2", "team-a", 5000, 10)
        ran = await run_cli("explain", *flags(c, redis_url), "team-a/q2")
        assert ran.code == 0, ran.err
        assert (
            "  quota: namespace team-a has 2,000 MiB of nvidia.com/gpumem left (limit 12,000, used 10,000)"
            in ran.out.splitlines()
        )
        for line in ran.out.splitlines():
            if line.startswith("node-"):
                assert columns(line)[1:] == [
                    "no fit",
                    "2/2 ResourceQuotaNotFit",
                    "quota: namespace team-a has 2,000 MiB of nvidia.com/gpumem left; "
                    "this container asks for 5,000 MiB",
                ]

        # --- a pod that fits: explain's answer is the node /filter then gives ---------------------------------------
        small = PodSpec("small", gpus=1, mem_mib=1000, cores=10)
        assert await driver.admit_and_create(small) is not None
        before = (await run_cli("explain", *flags(c, redis_url), "default/small", "-o", "json")).json()
        assert before["would_get"] is not None
        assert {v["node"]: v["verdict"] for v in before["nodes"]} == dict.fromkeys(
            ("node-000", "node-001", "node-002"), "fits"
        )
        created = c.em.get("Pod", "default", "small")
        assert created is not None
        # kube-scheduler's part: /filter (all nodes), then /bind to the node it answered
        nodes = spec.node_names()
        filtered = await driver._post("/filter", {"Pod": created, "Nodes": None, "NodeNames": nodes})
        assert filtered["Error"] == "" and filtered["NodeNames"] == [before["would_get"]["node"]]
        bind = {"PodName": "small", "PodNamespace": "default", "PodUID": created["metadata"]["uid"]}
        bound = await driver._post("/bind", {**bind, "Node": before["would_get"]["node"]})
        assert bound["Error"] == ""
        pod = c.em.get("Pod", "default", "small")
        assert pod is not None
        annotated = decode_allocation(pod)
        assert annotated is not None
        assert [[d.uuid for d in ctr] for ctr in annotated[0]] == [
            [d["uuid"] for d in ctr] for ctr in before["would_get"]["devices"]
        ]

        # --- a bound pod: its devices and their current usage -------------------------------------------------------
        await eventually(recorded_n(c, 6), what="six allocations recorded")
        ran = await run_cli("explain", *flags(c, redis_url), "default/p0", "-o", "json")
        got = ran.json()
        assert got["pod"]["state"] == "bound" and got["pod"]["node"] == "node-000"
        used = usage_from_annotations(c)
        (device,) = got["devices"]
        u = used[device["uuid"]]
        assert device["memory_mib"] == {"used": u["mem"], "capacity": MEM}
        assert device["cores_pct"] == {"used": u["cores"], "capacity": 100}
        assert {f"{p['namespace']}/{p['name']}" for p in device["pods"]} == u["pods"]
        text = (await run_cli("explain", *flags(c, redis_url), "default/p0")).out
        assert text.splitlines()[0] == "Pod default/p0: placed on node-000 (phase Pending)"  # no kubelet here

        # --- usage ------------------------------------------------------------------------------------------------
        await c.api.patch_node_metadata("node-001", annotations={"hami.io/device-cordon": "GPU-node-001-1"})

        async def cordoned() -> bool:
            inv = await c.store.inventory.get("node-001")
            return inv is not None and inv.cordoned == frozenset({"GPU-node-001-1"})

        await eventually(cordoned, what="the registrar stored the cordon")
        base = flags(c, redis_url, kube=False)
        as_json, as_text, only, team, other, wide = await asyncio.gather(
            run_cli("usage", *base, "-o", "json"),
            run_cli("usage", *base),
            run_cli("usage", *base, "--node", "node-002", "-o", "json"),
            run_cli("usage", *base, "-n", "team-a", "-o", "json"),
            run_cli("usage", *base, "--vendor", "AMD", "-o", "json"),
            run_cli("usage", *base, "-o", "wide", "--node", "node-000"),
        )
        report_json = as_json.json()
        used = usage_from_annotations(c)
        devices = {d["uuid"]: (n["node"], d) for n in report_json["nodes"] for d in n["devices"]}
        assert len(devices) == 6
        for uuid, (_, d) in devices.items():
            u = used.get(uuid, {"mem": 0, "cores": 0, "slots": 0, "pods": set()})
            assert d["memory_mib"] == {"used": u["mem"], "capacity": MEM}
            assert d["cores_pct"] == {"used": u["cores"], "capacity": 100}
            assert d["slots"] == {"used": u["slots"], "capacity": 10}
            assert {f"{p['namespace']}/{p['name']}" for p in d["pods"]} == u["pods"]
            assert d["cordoned"] == (uuid == "GPU-node-001-1")
        locks = {n["node"]: n["lock"] for n in report_json["nodes"]}
        assert locks["node-000"] is None and locks["node-001"] is None
        assert locks["node-002"]["owner"] == "team-a/q1" and not locks["node-002"]["expired"]
        usable = [d for _, d in devices.values() if d["usable"]]
        free = sum(MEM - d["memory_mib"]["used"] for d in usable)
        stranded = sum(MEM - d["memory_mib"]["used"] for d in usable if d["slots"]["used"] > 0)
        s = report_json["summary"]
        assert s["fragmentation"] == {
            "free_memory_mib": free,
            "stranded_memory_mib": stranded,
            "ratio": round(stranded / free, 4),
            "idle_devices": sum(1 for d in usable if d["slots"]["used"] == 0),
        }
        assert (s["nodes"], s["devices"], s["usable_devices"], s["cordoned_devices"]) == (3, 6, 5, 1)
        assert s["pods"] == 6 and s["node_locks"] == 1
        assert s["memory_allocated_mib"] == sum(d["memory_mib"]["used"] for d in usable)

        assert as_text.code == 0, as_text.err
        lines = as_text.out.splitlines()
        assert columns(lines[0]) == ["NODE", "DEVICE", "TYPE", "MEMORY MiB", "MEM%", "CORES", "SLOTS", "STATE", "PODS"]
        # p2 took node-001's last card (equal idle cards are walked from the last, as HAMi does), p3 the other
        assert row(as_text.out, "GPU-node-001-1")[-2:] == ["cordoned", "default/p2"]
        assert any(line.startswith("lock on node-002: held by team-a/q1 for ") for line in lines)
        summary = "Cluster: 3 nodes, 6 GPUs (5 usable, 0 unhealthy, 1 cordoned), 6 pods, 1 node lock held"
        assert summary in lines

        # filters
        assert [n["node"] for n in only.json()["nodes"]] == ["node-002"]
        assert [(n["node"], [d["uuid"] for d in n["devices"]]) for n in team.json()["nodes"]] == [
            ("node-002", ["GPU-node-002-1"])
        ]
        namespace_summary = {"name": "team-a", "pods": 1, "memory_mib": 10000, "cores_pct": 30}
        assert team.json()["summary"]["namespace"] == namespace_summary
        assert other.json()["nodes"] == []
        assert "default/p0 (10,000 MiB, 30%)" in wide.out


def recorded_n(c: Cluster, n: int) -> Any:
    async def check() -> bool:
        return sum(len(v) for v in (await c.store.reservations.list_all()).values()) == n

    return check


async def test_one_line_errors(redis_url: str, tmp_path: Any) -> None:
    dead = "redis://127.0.0.1:1/0"
    no_api = "http://127.0.0.1:1"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}  # no KUBECONFIG, no ~/.kube/config, not in a cluster
    runs = await asyncio.gather(
        run_cli("usage", "--redis-url", dead),
        run_cli("explain", "--redis-url", dead, "--kube-server", no_api, "default/x"),
        run_cli("explain", "--redis-url", redis_url, "--kube-server", no_api, "default/x"),
        run_cli("explain", "--redis-url", redis_url, "default/x", env={**env, "PYTHONPATH": os.getcwd()}),
        run_cli("explain", "--redis-url", redis_url, "--kube-server", no_api, "a/b/c"),
        run_cli("usage"),
    )
    redis_down, explain_redis_down, api_down, no_config, bad_target, no_url = runs
    assert (redis_down.code, redis_down.out) == (1, "")
    assert redis_down.err.startswith("vgpu-scheduler usage: error: cannot reach Redis at redis://127.0.0.1:1/0: ")
    assert explain_redis_down.code == 1
    assert explain_redis_down.err.startswith("vgpu-scheduler explain: error: cannot reach Redis")
    # Redis answers, the API server does not
    assert api_down.code == 1 and api_down.err.startswith("vgpu-scheduler explain: error: get pod default/x: ")
    for ran in (redis_down, explain_redis_down, api_down):
        assert ran.err.count("\n") == 1, ran.err
    assert (no_config.code, no_config.err) == (
        2,
        "vgpu-scheduler: error: no Kubernetes configuration: give --kubeconfig or --kube-server, set KUBECONFIG, "
        "or run inside a cluster\n",
    )
    assert (bad_target.code, bad_target.err) == (
        1,
        "vgpu-scheduler explain: error: expected NAMESPACE/POD or POD, got 'a/b/c'\n",
    )
    assert no_url.code == 2 and "--redis-url is required by usage" in no_url.err


async def test_pod_not_found_and_an_empty_store(redis_url: str) -> None:
    from vgpu_scheduler.shared.emulator import Emulator

    em = Emulator(bookmark_interval_s=None)
    await em.start()
    try:
        ran = await run_cli("explain", "--redis-url", redis_url, "--kube-server", em.url, "default/nope")
        assert (ran.code, ran.err) == (1, "vgpu-scheduler explain: error: pod default/nope not found\n")
    finally:
        await em.stop()
    ran = await run_cli("usage", "--redis-url", redis_url)
    assert ran.code == 0
    assert ran.out.splitlines()[0] == "no GPU node is registered"
    assert ran.out.splitlines()[-1] == (
        "warning: the store is empty: the registrar and informer have not loaded it (are they running on this Redis?)"
    )


async def test_explain_names_a_bad_scheduling_annotation_and_what_to_write(redis_url: str) -> None:
    """The pod /filter refuses for its annotations (created before the webhook refused them, or around it):
    ``explain`` says why, with the webhook's and /filter's hint."""
    from vgpu_scheduler.shared.emulator import Emulator

    pod = PodSpec("weights", gpus=1, mem_mib=1000, cores=10).manifest()
    pod["metadata"]["namespace"] = "default"
    pod["metadata"]["annotations"] = {"hami.io/device-scoring-weights": "memory=x"}
    em = Emulator(bookmark_interval_s=None)
    await em.start()
    try:
        em.put(pod)
        ran = await run_cli("explain", "--redis-url", redis_url, "--kube-server", em.url, "default/weights")
    finally:
        await em.stop()
    assert ran.code == 1
    assert ran.err == (
        "vgpu-scheduler explain: error: pod default/weights: hami.io/device-scoring-weights: expected slot, core, "
        "and memory weights (at 'memory=x'); write \"slot=<n>,core=<n>,memory=<n>\": each of the three keys once, "
        'whole numbers of 0 or more, at least one above 0, e.g. "slot=1,core=1,memory=1" (the extender would refuse '
        "it the same way)\n"
    )
