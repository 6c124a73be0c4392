"""``simulate`` on pods whose GPU request is invalid as written (the operator's first mistakes: ``gpumem: 20Gi``,
``gpumem: -100``, ``gpumem: 100.5``, ``gpu: -1``, …): never placed, and the JSON output's ``reasons`` carry the
message saying what to write instead — from the webhook's denial, and from ``/filter`` on every node when the
webhook is bypassed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from tests.integration.simulate.conftest import run_cli, run_cli_json
from tests.integration.simulate.test_services import embedded_blocking_reads_ended, start_all_in_one
from vgpu_scheduler.services.simulate.driver import Admitted, Defaults, Driver, Extenders, KubeHttp
from vgpu_scheduler.services.simulate.main import EXAMPLE_CLUSTER
from vgpu_scheduler.services.simulate.manifests import load_cluster
from vgpu_scheduler.shared.emulator import Emulator

GPU, MEM, PCT, CORES = "nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpucores"

# (pod name, limits, the message the operator reads)
BAD: list[tuple[str, dict[str, str], str]] = [
    (
        "mem-20gi",
        {GPU: "1", MEM: "20Gi"},
        'nvidia.com/gpumem is in MiB: "20Gi" would be 21474836480 MiB; did you mean 20480?',
    ),
    (
        "mem-negative",
        {GPU: "1", MEM: "-100"},
        'nvidia.com/gpumem cannot be negative: got "-100"; write a whole number of MiB, '
        "e.g. nvidia.com/gpumem: 20480 for 20 GiB",
    ),
    (
        "mem-fraction",
        {GPU: "1", MEM: "100.5"},
        'nvidia.com/gpumem is a whole number of MiB: "100.5" is 100.5; did you mean 101?',
    ),
    (
        "count-negative",
        {GPU: "-1"},
        'nvidia.com/gpu cannot be negative: got "-1"; write a whole number of GPUs, e.g. nvidia.com/gpu: 1',
    ),
    (
        "count-fraction",
        {GPU: "0.5"},
        'nvidia.com/gpu counts whole GPUs: "0.5" is 0.5; to share a GPU, ask for '
        "nvidia.com/gpu: 1 with nvidia.com/gpumem (MiB) or nvidia.com/gpumem-percentage",
    ),
    (
        "count-unit",
        {GPU: "2Ki"},
        'nvidia.com/gpu counts GPUs and takes no unit: "2Ki" would be 2048 GPUs; did you mean 2?',
    ),
    (
        "pct-over",
        {GPU: "1", PCT: "150"},
        'nvidia.com/gpumem-percentage is a percentage of one GPU: "150" is more than 100; use 100 for a whole GPU',
    ),
    (
        "cores-negative",
        {GPU: "1", CORES: "-5"},
        'nvidia.com/gpucores cannot be negative: got "-5"; write a whole number from 0 to 100',
    ),
    (
        "cores-unit",
        {GPU: "1", CORES: "1Ki"},
        'nvidia.com/gpucores is a percentage of one GPU and takes no unit: "1Ki" would be 1024%; did you mean 1?',
    ),
]

API_REFUSES = {
    "mem-negative": "must be greater than or equal to 0",
    "count-negative": "must be greater than or equal to 0",
    "cores-negative": "must be greater than or equal to 0",
    "mem-fraction": "must be an integer",
    "count-fraction": "must be an integer",
}
"""Pods of BAD that kube-apiserver's validation refuses (after the webhook, which the bypass skips): a negative or
fractional extended resource. The others are valid to the API server and reach /filter."""


def _pod(name: str, limits: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "main", "image": "x", "resources": {"limits": limits}}]},
    }


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("invalid") / "workload.yaml"
    pods = [_pod(name, limits) for name, limits, _ in BAD] + [_pod("fine", {GPU: "1", MEM: "1000"})]
    path.write_text(yaml.safe_dump_all(pods), encoding="utf-8")
    return path


def test_the_json_output_gives_each_pod_the_message(workload: Path) -> None:
    out = run_cli_json("simulate", "--workload", str(workload))
    by_name = {p["name"]: p for p in out["pods"]}
    for name, _, message in BAD:
        pod = by_name[name]
        assert pod["node"] is None and pod["annotations"] == {}
        assert pod["reasons"] == {"*": f'admission denied: container "main": {message}'}
    assert by_name["fine"]["node"] is not None
    assert out["summary"]["pending"] == len(BAD)
    assert sum(out["summary"]["pending_reasons"].values()) == len(BAD)


def test_the_table_output_says_why_not(workload: Path) -> None:
    code, text, err = run_cli("simulate", "--workload", str(workload))
    assert code == 0, err
    line = next(x for x in text.splitlines() if x.startswith("default/mem-20gi "))
    assert "did you mean 20480?" in line


@pytest.fixture
async def seeded_emulator() -> AsyncIterator[Emulator]:
    async with Emulator() as em:
        for obj in load_cluster(EXAMPLE_CLUSTER).objects():
            em.put(obj)
        yield em


async def test_with_the_webhook_bypassed_filter_refuses_every_node_with_the_message(
    seeded_emulator: Emulator,
) -> None:
    em = seeded_emulator
    nodes = {n["metadata"]["name"] for n in load_cluster(EXAMPLE_CLUSTER).nodes}
    service, stop, task = await start_all_in_one([f"--kube-server={em.url}"])
    try:
        assert service.extender.server is not None

        async def bypass(pod: dict[str, Any]) -> Admitted:  # no webhook: the pod reaches the scheduler as written
            return Admitted(pod)

        async with aiohttp.ClientSession() as session:
            cfg = service.settings.common.nvidia
            driver = Driver(
                KubeHttp(session, em.url),
                Extenders(session, [service.extender.server.url]),
                bypass,
                cfg=cfg,
                defaults=Defaults(service.settings.extender.node_policy, service.settings.extender.gpu_policy),
            )
            for name, limits, message in BAD:
                result = await driver.schedule(_pod(name, limits))
                assert result.node is None, name
                if name in API_REFUSES:  # the API server's validation refuses it before any scheduler sees it
                    assert list(result.reasons) == ["*"], name
                    assert result.reasons["*"].startswith(f'Pod "{name}" is invalid: '), name
                    assert API_REFUSES[name] in result.reasons["*"], name
                    assert em.get("Pod", "default", name) is None
                    continue
                assert result.reasons == dict.fromkeys(nodes, f'container "main": {message}'), name
                assert em.get("Pod", "default", name)["spec"].get("nodeName") is None  # type: ignore[index]
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        await embedded_blocking_reads_ended()
    assert task.exception() is None
