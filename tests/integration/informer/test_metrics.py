"""HAMi's per-container and MIG-instance gauges, exported by the informer at scrape time (hami-wire §10.4).

Each test scrapes the informer's registry (``generate_latest``, what ``/metrics`` serves) and compares the exact
samples of the scrape-time families with the pods' allocation annotations.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.builders import gpu
from tests.integration.informer.conftest import TUNING, Harness, settings
from tests.unit.informer.builders import mig_alloc, pod
from tests.waiting import eventually
from vgpu_scheduler.services.informer.service import InformerDeps, InformerService
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec.mig import encode_mig_allocations
from vgpu_scheduler.shared.codec.register import encode_register_json

MIB = 1048576
Sample = tuple[str, frozenset[tuple[str, str]], float]

VGPU = ("hami_vgpu_memory_allocated_bytes", "hami_vgpu_core_allocated_ratio")
MIG = "hami_node_gpu_mig_instance_info"
LEGACY = ("vGPUMemoryAllocated", "vGPUCoreAllocated", "nodeGPUMigInstance")
ALL = (*VGPU, MIG, *LEGACY)


def scrape(svc: InformerService, names: tuple[str, ...] = ALL) -> set[Sample]:
    """The samples of ``names`` in one scrape of the service's registry."""
    text = generate_latest(svc.deps.registry).decode()
    return {
        (s.name, frozenset(s.labels.items()), s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name in names
    }


def families(svc: InformerService) -> set[str]:
    """The metric family names the registry exports (with or without samples)."""
    return {f.name for f in text_string_to_metric_families(generate_latest(svc.deps.registry).decode())}


def vgpu(ns: str, node: str, pod_name: str, ctr: int, uuid: str, mem_mib: int, cores: int) -> set[Sample]:
    labels = {"namespace": ns, "node": node, "pod": pod_name, "container_index": str(ctr), "device_uuid": uuid}
    labels["zone"] = "vGPU"
    key = frozenset(labels.items())
    return {(VGPU[0], key, float(mem_mib * MIB)), (VGPU[1], key, float(cores))}


def legacy_vgpu(ns: str, node: str, pod_name: str, ctr: int, uuid: str, mem_mib: int, cores: int) -> set[Sample]:
    labels = {"podnamespace": ns, "nodename": node, "podname": pod_name, "containeridx": str(ctr)}
    key = frozenset({**labels, "deviceuuid": uuid, "zone": "vGPU"}.items())
    return {(LEGACY[0], key, float(mem_mib * MIB)), (LEGACY[1], key, float(cores))}


def node(name: str, *uuids_and_indices: tuple[str, int]) -> dict[str, Any]:
    register = encode_register_json([gpu(u, index=i, mode="mig") for u, i in uuids_and_indices])
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "annotations": {keys.NODE_NVIDIA_REGISTER: register}},
    }


@contextlib.asynccontextmanager
async def running(
    harness: Harness, *, legacy: bool = False, instance: str = "informer-a"
) -> AsyncIterator[InformerService]:
    """An informer with its own registry (``legacy_metrics`` as given), run until the block ends."""
    cfg = settings(instance)
    deps = InformerDeps(
        store=harness.store,
        kube=harness.kube,
        api=harness.api,
        registry=CollectorRegistry(),
        instance_id=instance,
        clock=harness.clock,
        tuning=TUNING,
    )
    svc = InformerService(cfg, deps, legacy_metrics=legacy)
    stop = asyncio.Event()
    task = asyncio.create_task(svc.run(stop), name=f"test-informer:{instance}")
    try:
        await asyncio.wait_for(svc.ready.wait(), 10)
        yield svc
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


MIG_READY = dataclasses.replace(
    mig_alloc(0, 0, "GPU-m-0", 6, 1), mig_uuid="MIG-1111", gpu_instance_id=13, compute_instance_id=0
)


async def test_per_container_series_mig_instances_and_deletion(harness: Harness) -> None:
    em = harness.emulator
    em.put(node("n-mig", ("GPU-m-1", 0), ("GPU-m-0", 3)))
    # init container 0 on GPU-a; app container 1 on GPU-a and GPU-b (multi-GPU); app container 2 without GPU
    em.put(
        pod(
            "multi",
            "team-a",
            node="n1",
            init=[[("GPU-a", 2000, 20)]],
            app=[[("GPU-a", 3000, 30), ("GPU-b", 3000, 0)], []],
        )
    )
    em.put(pod("mig", "team-b", node="n-mig", app=[[("GPU-m-0", 4864, 15)]], mig=[mig_alloc(0, 0, "GPU-m-0", 6, 1)]))
    expected_vgpu = (
        vgpu("team-a", "n1", "multi", 0, "GPU-a", 2000, 20)
        | vgpu("team-a", "n1", "multi", 1, "GPU-a", 3000, 30)
        | vgpu("team-a", "n1", "multi", 1, "GPU-b", 3000, 0)
        | vgpu("team-b", "n-mig", "mig", 0, "GPU-m-0", 4864, 15)
    )
    async with running(harness) as svc:
        await asyncio.wait_for(svc.synced.wait(), 10)
        # the device plugin has not created the MIG instance yet: no instance series
        await eventually(lambda: scrape(svc) == expected_vgpu, what="per-container series")
        assert {*VGPU, MIG} <= families(svc) and not set(LEGACY) & families(svc)

        # the device plugin writes the runtime identity back
        em.patch(
            "pods",
            "team-b",
            "mig",
            {"metadata": {"annotations": {keys.MIG_ALLOCATIONS: encode_mig_allocations([MIG_READY])}}},
        )
        instance = {
            "node": "n-mig",
            "device_uuid": "GPU-m-0",
            "device_index": "3",
            "mig_uuid": "MIG-1111",
            "profile": "1g.5gb",
            "gpu_instance_id": "13",
            "compute_instance_id": "0",
            "placement_start": "6",
            "placement_size": "1",
            "zone": "vGPU",
        }
        expected = expected_vgpu | {(MIG, frozenset(instance.items()), 1.0)}
        await eventually(lambda: scrape(svc) == expected, what="MIG instance series")

        # a deleted pod's series disappear
        em.delete("pods", "team-a", "multi")
        expected -= vgpu("team-a", "n1", "multi", 0, "GPU-a", 2000, 20)
        expected -= vgpu("team-a", "n1", "multi", 1, "GPU-a", 3000, 30)
        expected -= vgpu("team-a", "n1", "multi", 1, "GPU-b", 3000, 0)
        await eventually(lambda: scrape(svc) == expected, what="the deleted pod's series gone")
        em.delete("pods", "team-b", "mig")
        await eventually(lambda: scrape(svc) == set(), what="every series gone")
        await harness.assert_audit()


async def test_legacy_names_with_legacy_labels(harness: Harness) -> None:
    em = harness.emulator
    em.put(node("n-mig", ("GPU-m-0", 2)))
    em.put(pod("mig", "team-b", node="n-mig", app=[[("GPU-m-0", 4864, 15)]], mig=[MIG_READY]))
    em.put(pod("plain", node="n1", app=[[("GPU-a", 1000, 10)]]))
    async with running(harness, legacy=True) as svc:
        await asyncio.wait_for(svc.synced.wait(), 10)
        legacy_mig = {"nodeid": "n-mig", "deviceuuid": "GPU-m-0", "deviceidx": "2", "migname": "1g.5gb-13"}
        expected = (
            legacy_vgpu("team-b", "n-mig", "mig", 0, "GPU-m-0", 4864, 15)
            | legacy_vgpu("default", "n1", "plain", 0, "GPU-a", 1000, 10)
            | {(LEGACY[2], frozenset({**legacy_mig, "zone": "vGPU"}.items()), 1.0)}
        )
        await eventually(lambda: scrape(svc, LEGACY) == expected, what="legacy series")
        # the current names are exported alongside
        assert scrape(svc, VGPU) == vgpu("team-b", "n-mig", "mig", 0, "GPU-m-0", 4864, 15) | vgpu(
            "default", "n1", "plain", 0, "GPU-a", 1000, 10
        )
        assert len(scrape(svc, (MIG,))) == 1


async def test_mig_instance_on_an_unregistered_gpu_is_not_exported(harness: Harness) -> None:
    em = harness.emulator
    em.put(node("n-mig", ("GPU-other", 0)))  # the register annotation does not list GPU-m-0
    em.put(pod("mig", "team-b", node="n-mig", app=[[("GPU-m-0", 4864, 15)]], mig=[MIG_READY]))
    async with running(harness) as svc:
        await asyncio.wait_for(svc.synced.wait(), 10)
        await eventually(lambda: scrape(svc, VGPU) == vgpu("team-b", "n-mig", "mig", 0, "GPU-m-0", 4864, 15))
        assert scrape(svc, (MIG,)) == set()
        # the node registers the GPU: the instance appears, with its index
        em.put(node("n-mig", ("GPU-other", 0), ("GPU-m-0", 1)))
        await eventually(lambda: len(scrape(svc, (MIG,))) == 1, what="instance after the node registers the GPU")
        ((_, labels, _),) = scrape(svc, (MIG,))
        assert dict(labels)["device_index"] == "1"


async def test_a_standby_exports_none(harness: Harness) -> None:
    em = harness.emulator
    em.put(pod("plain", node="n1", app=[[("GPU-a", 1000, 10)]]))
    async with running(harness, instance="informer-a") as leader:
        await asyncio.wait_for(leader.synced.wait(), 10)
        await eventually(lambda: scrape(leader) == vgpu("default", "n1", "plain", 0, "GPU-a", 1000, 10))
        async with running(harness, legacy=True, instance="informer-b") as standby:
            assert not standby.leading
            assert scrape(standby) == set()
            assert {*VGPU, MIG, *LEGACY} <= families(standby)  # the families exist, empty
    # the leader stopped: it no longer leads, so it exports none either
    assert scrape(leader) == set()
