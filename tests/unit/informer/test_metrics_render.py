"""The informer's per-container gauges rendered by our text renderer give exactly what prometheus_client rendered
before (issue 24): the same bytes and parsed families, scrape after scrape while pods come, change, are
re-recorded and go, with MIG instances, legacy names, many containers, a UUID listed twice and a pod recorded
twice under one name. ``BeforeCollector`` is the collector as it was, kept verbatim as the reference."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from tests.unit.informer.builders import devices, mig_alloc
from vgpu_scheduler.services.informer.metrics import (
    _LEGACY_MIG_LABELS,
    _LEGACY_VGPU_LABELS,
    _MIG_LABELS,
    _VGPU_LABELS,
    MIB,
    AllocationView,
    PodAllocationCollector,
    mig_series,
    vgpu_series,
)
from vgpu_scheduler.shared.domain.accounting import collapse
from vgpu_scheduler.shared.domain.allocation import Allocation
from vgpu_scheduler.shared.domain.model import MigAllocation
from vgpu_scheduler.shared.metrics import HAMI_ZONE, TextGaugeFamily, render_text


class BeforeCollector(Collector):
    """The collector as it was before the scrape was made cheap (issue 24), kept verbatim as the reference."""

    def __init__(self, view: Callable[[], AllocationView | None], *, legacy: bool = False) -> None:
        self._view = view
        self._legacy = legacy

    def describe(self) -> Iterable[Metric]:
        return self._families()

    def collect(self) -> Iterable[Metric]:
        families = self._families()
        view = self._view()
        if view is not None:
            self._fill(families, view)
        yield from families

    def _fill(self, families: tuple[GaugeMetricFamily, ...], view: AllocationView) -> None:
        mem, core, mig = families[:3]
        legacy = families[3:]
        allocations = tuple(view.allocations.values())  # one pass over a copy: the term may change it later
        for key, (mem_mib, cores_pct) in sorted(vgpu_series(allocations).items()):
            labels = [*key, HAMI_ZONE]
            mem.add_metric(labels, float(mem_mib * MIB))
            core.add_metric(labels, float(cores_pct))
            if legacy:
                legacy[0].add_metric(labels, float(mem_mib * MIB))
                legacy[1].add_metric(labels, float(cores_pct))
        for m in sorted(mig_series(allocations, view.device_indices)):
            mig.add_metric([*m, HAMI_ZONE], 1.0)
            if legacy:
                node, uuid, index, _, profile, gi = m[:6]
                legacy[2].add_metric([node, uuid, index, f"{profile}-{gi}", HAMI_ZONE], 1.0)

    def _families(self) -> tuple[GaugeMetricFamily, ...]:
        families = (
            GaugeMetricFamily(
                "hami_vgpu_memory_allocated_bytes", "vGPU memory allocated from a container", labels=_VGPU_LABELS
            ),
            GaugeMetricFamily(
                "hami_vgpu_core_allocated_ratio", "vGPU core allocated from a container", labels=_VGPU_LABELS
            ),
            GaugeMetricFamily(
                "hami_node_gpu_mig_instance_info", "MIG instance created on a GPU (value 1)", labels=_MIG_LABELS
            ),
        )
        if not self._legacy:
            return families
        return (
            *families,
            GaugeMetricFamily(
                "vGPUMemoryAllocated", "vGPU memory allocated from a container", labels=_LEGACY_VGPU_LABELS
            ),
            GaugeMetricFamily("vGPUCoreAllocated", "vGPU core allocated from a container", labels=_LEGACY_VGPU_LABELS),
            GaugeMetricFamily(
                "nodeGPUMigInstance",
                "MIG instance created on a GPU (value 1)",
                labels=_LEGACY_MIG_LABELS,
            ),
        )


def alloc(
    uid: str, name: str, node: str, *containers: list[tuple[str, int, int]], mig: tuple[MigAllocation, ...] = ()
) -> Allocation:
    devs = devices(*containers)
    return Allocation(
        pod_uid=uid, namespace="team", name=name, node=node, devices=devs, charges=collapse(devs, 0), mig=mig
    )


def recorded() -> dict[str, Allocation]:
    created = dataclasses.replace(
        mig_alloc(0, 0, "GPU-m", 4, 2), mig_uuid="MIG-7", gpu_instance_id=7, compute_instance_id=0
    )
    many = [[("GPU-b-1", 100 * k, k)] for k in range(12)]  # container indices 0..11: "10" sorts before "2"
    pods = [
        alloc("u1", "train-0", "node-b", [("GPU-b-0", 4096, 20)], [], [("GPU-b-0", 2048, 10), ("GPU-b-1", 2048, 0)]),
        alloc("u2", "twice", "node-a", [("GPU-a-0", 1000, 10), ("GPU-a-0", 500, 5)]),  # one UUID twice: summed
        alloc("u3", "many", "node-a", *many),
        alloc("u4", "no-uuid", "node-a", [("", 1000, 10), ("GPU-a-1", 3000, 30)]),  # an empty UUID is skipped
        alloc("u5", "mig", "node-m", [("GPU-m", 9000, 28)], mig=(created,)),
        alloc("u6", "again", "node-a", [("GPU-a-2", 1000, 10)]),
        alloc("u7", "again", "node-a", [("GPU-a-2", 2000, 20)]),  # the same name re-created: the series sum
        alloc("u8", 'odd"\\name', "node-c", [("GPU-c-0", 1, 1)]),
    ]
    return {a.pod_uid: a for a in pods}


INDICES = {"node-m": {"GPU-m": 3}}


class Pair:
    def __init__(self, *, legacy: bool) -> None:
        self.view: AllocationView | None = AllocationView(recorded(), INDICES)
        self.old, self.new = CollectorRegistry(), CollectorRegistry()
        self.old.register(BeforeCollector(lambda: self.view, legacy=legacy))
        self.new.register(PodAllocationCollector(lambda: self.view, legacy=legacy))

    def set(self, allocations: dict[str, Allocation]) -> None:
        self.view = AllocationView(allocations, INDICES)

    def check(self) -> bytes:
        before, after = generate_latest(self.old), render_text(self.new)
        assert after == before
        assert families(after) == families(before)
        return after


def families(text: bytes) -> list[tuple[str, str, list[tuple[str, dict[str, str], float]]]]:
    return [
        (f.name, f.type, [(s.name, s.labels, s.value) for s in f.samples])
        for f in text_string_to_metric_families(text.decode())
    ]


def pods(text: bytes) -> set[str]:
    return {s[1].get("pod", s[1].get("podname", "")) for f in families(text) for s in f[2]} - {""}


@pytest.mark.parametrize("legacy", [False, True], ids=["current-names", "legacy-metrics"])
def test_scrapes_match_the_old_rendering_while_pods_change(legacy: bool) -> None:
    pair = Pair(legacy=legacy)
    first = pair.check()
    assert pods(first) == {"train-0", "twice", "many", "no-uuid", "mig", "again", 'odd"\\name'}
    assert b"hami_node_gpu_mig_instance_info{" in first
    assert pair.check() == first  # unchanged: the cached text

    allocations = recorded()
    allocations["u1"] = alloc("u1", "train-0", "node-b", [("GPU-b-0", 8192, 40)])  # re-recorded, other devices
    pair.set(allocations)
    changed = pair.check()
    assert 'device_uuid="GPU-b-1",namespace="team",node="node-b",pod="train-0"' not in changed.decode()

    pair.set({uid: dataclasses.replace(a) for uid, a in allocations.items()})  # a reconcile's equal records
    assert pair.check() == changed

    del allocations["u7"], allocations["u2"]  # pods gone: their series go (u6 keeps its name alone)
    pair.set(allocations)
    gone = pair.check()
    assert "twice" not in pods(gone)
    assert "again" in pods(gone)

    pair.view = None  # standing by: every family empty
    assert pods(pair.check()) == set()
    pair.set(recorded())  # leading again
    assert pair.check() == first


def test_the_values_and_samples() -> None:
    pair = Pair(legacy=False)
    labels = {"namespace": "team", "node": "node-a", "pod": "again", "container_index": "0", "zone": HAMI_ZONE}
    labels["device_uuid"] = "GPU-a-2"
    assert pair.new.get_sample_value("hami_vgpu_memory_allocated_bytes", labels) == 3000 * MIB
    assert pair.new.get_sample_value("hami_vgpu_core_allocated_ratio", labels) == 30
    assert [(m.name, m.samples) for m in pair.new.collect()] == [(m.name, m.samples) for m in pair.old.collect()]
    assert any(isinstance(m, TextGaugeFamily) for m in pair.new.collect())
