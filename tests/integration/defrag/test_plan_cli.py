"""``vgpu-scheduler defrag plan`` as a real process: against the API emulator and the real redis-server (live), and
on a simulate cluster and workload file (offline); its text and JSON output and its exit status."""

from __future__ import annotations

from pathlib import Path

from tests.integration.defrag.planbuild import A, fragmented, pod_obj
from tests.integration.inspect.cli import run_cli
from vgpu_scheduler.shared.emulator import Emulator
from vgpu_scheduler.shared.store import Store


def live(redis_url: str, emulator: Emulator) -> list[str]:
    return ["--redis-url", redis_url, "--key-prefix", "t", "--kube-server", emulator.url]


async def test_a_plan_in_text_and_json(redis_url: str, store: Store, emulator: Emulator) -> None:
    await fragmented(store, emulator)
    emulator.put(pod_obj("whole", 0, whole=True))
    ran = await run_cli("defrag", "plan", "--for", "whole", "-n", "default", *live(redis_url, emulator))
    assert ran.code == 0, ran.err
    lines = ran.out.splitlines()
    assert lines[0] == "plan for pod default/whole:"
    assert lines[1].startswith(f"move default/a2  {A} [GPU-{A}-1] -> ")
    assert lines[1].endswith("4000 MiB  (priority 0)")
    assert lines[2] == f"target: default/whole on {A} [GPU-{A}-1]"
    assert lines[3] == "total: 1 move, 4000 MiB of GPU memory moved"
    assert lines[4:] == ["left: default/a0: not needed", "left: default/a1: not needed"]
    out = (await run_cli("defrag", "plan", "--for", "default/whole", "-o", "json", *live(redis_url, emulator))).json()
    assert out["feasible"] is True and out["memory_moved_mib"] == 4000
    assert out["moves"][0]["pod"] == "default/a2" and out["moves"][0]["from"] == {"node": A, "devices": [f"GPU-{A}-1"]}
    assert out["target"] == {"pod": "default/whole", "uid": "uid-whole", "node": A, "devices": [[f"GPU-{A}-1"]]}


async def test_cannot_exits_1(redis_url: str, store: Store, emulator: Emulator) -> None:
    await fragmented(store, emulator)
    ran = await run_cli("defrag", "plan", "--free-nodes", "2", *live(redis_url, emulator))
    assert ran.code == 1, ran.out + ran.err
    assert ran.out.startswith("cannot: only 1 of 2 nodes can be made idle")
    assert "left: default/b0: not owned by a controller (nothing would recreate it)" in ran.out
    ran = await run_cli("defrag", "plan", "--free-nodes", "2", "-o", "json", *live(redis_url, emulator))
    assert ran.code == 1 and '"feasible": false' in ran.out


CLUSTER = """apiVersion: v1
kind: NodePool
metadata: {name: gpu}
spec:
  nodes: 2
  devices:
  - {vendor: NVIDIA, count: 2, memory: 8000, type: "NVIDIA A100"}
"""

SMALL = """apiVersion: v1
kind: Pod
metadata:
  name: small-{i}
  namespace: default
  ownerReferences: [{{apiVersion: apps/v1, kind: ReplicaSet, name: small, uid: rs-uid, controller: true}}]
spec:
  containers:
  - name: main
    image: x
    resources:
      limits: {{nvidia.com/gpu: "1", nvidia.com/gpumem: "2000"}}
"""

WHOLE = """apiVersion: v1
kind: Pod
metadata: {name: whole, namespace: default}
spec:
  containers:
  - name: main
    image: x
    resources:
      limits: {nvidia.com/gpu: "1", nvidia.com/gpumem-percentage: "100", nvidia.com/gpucores: "100"}
"""


async def test_offline_on_a_simulated_cluster(tmp_path: Path) -> None:
    """Seven 2000 MiB pods spread over four 8000 MiB cards leave none idle: the whole-card pod stays pending until
    one pod moves."""
    cluster, workload = tmp_path / "cluster.yaml", tmp_path / "workload.yaml"
    cluster.write_text(CLUSTER)
    workload.write_text("---\n".join([*(SMALL.format(i=i) for i in range(7)), WHOLE]))
    files = ["--cluster", str(cluster), "--workload", str(workload), "--gpu-scheduler-policy", "spread"]
    ran = await run_cli("defrag", "plan", "--for", "default/whole", *files)
    assert ran.code == 0, ran.out + ran.err
    assert ran.out.startswith("plan for pod default/whole:\nmove default/small-")
    assert "total: 1 move, 2000 MiB of GPU memory moved" in ran.out
