"""The extender's allocation gauges rendered by our text renderer give exactly what prometheus_client rendered
before (issue 24): the same bytes and the same parsed families and samples, scrape after scrape while nodes
change, are reloaded and disappear; with several vendors, shared and whole devices, cordoned and unhealthy ones,
and label values that need escaping. ``BeforeCollector`` is the collector as it was, kept verbatim as the
reference."""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable, Iterable, Mapping

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from tests.builders import gpu, inventory, use
from tests.fakevendor import fake_devices, mixed_inventory
from vgpu_scheduler.services.extender.metrics import MIB, AllocationCollector, ExtenderMetrics, QuotaView
from vgpu_scheduler.shared.domain.model import NodeInventory
from vgpu_scheduler.shared.domain.quota import QuotaLimits, QuotaState
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.metrics import HAMI_ZONE, SampleLines, TextGaugeFamily, render_text

_DEVICE_LABELS = ["node", "device_uuid", "device_index", "device_type", "vendor", "zone"]
_ALLOCATED_LABELS = ["node", "device_uuid", "device_index", "device_cores", "device_type", "vendor", "zone"]
_OVERVIEW_LABELS = [
    "node",
    "device_uuid",
    "device_index",
    "device_cores",
    "device_memory_limit",
    "device_type",
    "vendor",
    "zone",
]
_RATIO_LABELS = ["node", "device_uuid", "device_index", "device_type", "vendor", "zone"]
_QUOTA_USED_LABELS = ["namespace", "quota_name", "limit", "zone"]
_QUOTA_LIMIT_LABELS = ["namespace", "quota_name", "zone"]


class BeforeCollector(Collector):
    """The allocation collector as it was before the scrape was made cheap (issue 24), kept verbatim as the
    reference: every series a ``GaugeMetricFamily`` sample, rendered by prometheus_client."""

    def __init__(
        self,
        nodes: Callable[[], Mapping[str, NodeSnapshot]],
        quotas: Callable[[], QuotaView],
        resource_names: tuple[str, str] = ("nvidia.com/gpumem", "nvidia.com/gpucores"),
        *,
        legacy: bool = False,
    ) -> None:
        self._nodes = nodes
        self._quotas = quotas
        self._mem_name, self._core_name = resource_names
        self._legacy = legacy

    def describe(self) -> Iterable[Metric]:
        return [*self._families(), *(self._legacy_families() if self._legacy else ())]

    def collect(self) -> Iterable[Metric]:
        families = self._families()
        device_families, (quota_used, quota_limit) = families[:-2], families[-2:]
        legacy = self._legacy_families() if self._legacy else ()
        for name, snap in sorted(self._nodes().items()):
            for dev, u in zip(snap.inventory.devices, snap.usages, strict=True):
                idx, used_cores, used_bytes = str(dev.index), str(u.used_cores), float(u.used_mem_mib * MIB)
                base = [name, dev.id, idx, dev.type, HAMI_ZONE]
                mem_ratio = u.used_mem_mib / dev.devmem_mib if dev.devmem_mib > 0 else 0.0
                # One row per device family, in the order of _families() and _legacy_families(); the current
                # names add the device's vendor (its common word) before the zone, the legacy ones do not.
                rows = [
                    (base, float(dev.devmem_mib * MIB)),
                    (base, float(dev.devcore)),
                    ([name, dev.id, idx, used_cores, dev.type, HAMI_ZONE], used_bytes),
                    (base, float(u.used)),
                    (base, float(u.used_cores)),
                    ([name, dev.id, idx, used_cores, str(dev.devmem_mib), dev.type, HAMI_ZONE], used_bytes),
                    (base, mem_ratio),
                ]
                for family, (labels, value) in zip(device_families, rows, strict=True):
                    family.add_metric([*labels[:-1], dev.vendor, labels[-1]], value)
                if legacy:
                    rows[-1] = ([name, dev.id, idx, HAMI_ZONE], mem_ratio)  # HAMi's old ratio had no device type
                    for family, (labels, value) in zip(legacy[:-1], rows, strict=True):
                        family.add_metric(labels, value)
        for ns, state in sorted(self._quotas().by_namespace.items()):
            for quota_name, limit, used in (
                (self._mem_name, state.limits.mem_mib, state.used_mem_mib),
                (self._core_name, state.limits.cores_pct, state.used_cores_pct),
            ):
                if limit is None:
                    continue
                quota_used.add_metric([ns, quota_name, str(limit), HAMI_ZONE], float(used))
                quota_limit.add_metric([ns, quota_name, HAMI_ZONE], float(limit))
                if legacy:
                    legacy[-1].add_metric([ns, quota_name, str(limit), HAMI_ZONE], float(used))
        yield from families
        yield from legacy

    @staticmethod
    def _legacy_families() -> tuple[GaugeMetricFamily, ...]:
        """HAMi's pre-rename names, exported too with ``--legacy-metrics`` (hami-wire §10.4)."""
        dev = ["nodeid", "deviceuuid", "deviceidx", "devicetype", "zone"]
        allocated = ["nodeid", "deviceuuid", "deviceidx", "devicecores", "devicetype", "zone"]
        overview = ["nodeid", "deviceuuid", "deviceidx", "devicecores", "devicememorylimit", "devicetype", "zone"]
        return (
            GaugeMetricFamily("GPUDeviceMemoryLimit", "Device memory limit for a certain GPU", labels=dev),
            GaugeMetricFamily("GPUDeviceCoreLimit", "Device core limit for a certain GPU", labels=dev),
            GaugeMetricFamily(
                "GPUDeviceMemoryAllocated", "Device memory allocated for a certain GPU", labels=allocated
            ),
            GaugeMetricFamily("GPUDeviceSharedNum", "Number of containers sharing this GPU", labels=dev),
            GaugeMetricFamily("GPUDeviceCoreAllocated", "Device core allocated for a certain GPU", labels=dev),
            GaugeMetricFamily("nodeGPUOverview", "GPU overview on a certain node", labels=overview),
            GaugeMetricFamily(
                "nodeGPUMemoryPercentage",
                "GPU Memory Allocated Percentage on a certain GPU",
                labels=["nodeid", "deviceuuid", "deviceidx", "zone"],
            ),
            GaugeMetricFamily(
                "QuotaUsed",
                "ResourceQuota usage for a certain device",
                labels=["quotanamespace", "quotaName", "limit", "zone"],
            ),
        )

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, ...]:
        def g(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=labels)

        return (
            g("hami_gpu_memory_limit_bytes", "Device memory limit for a certain GPU", _DEVICE_LABELS),
            g("hami_gpu_core_limit_ratio", "Device core limit for a certain GPU", _DEVICE_LABELS),
            g("hami_gpu_memory_allocated_bytes", "Device memory allocated for a certain GPU", _ALLOCATED_LABELS),
            g("hami_gpu_shared_count", "Number of containers sharing this GPU", _DEVICE_LABELS),
            g("hami_gpu_core_allocated_ratio", "Device core allocated for a certain GPU", _RATIO_LABELS),
            g("hami_node_gpu_overview", "GPU overview on a certain node", _OVERVIEW_LABELS),
            g(
                "hami_node_gpu_memory_allocated_ratio",
                "GPU memory allocated percentage on a certain GPU",
                _RATIO_LABELS,
            ),
            g("hami_resource_quota_used", "ResourceQuota usage tracked by the scheduler", _QUOTA_USED_LABELS),
            g("hami_resource_quota_limit", "ResourceQuota limit honoured by the scheduler", _QUOTA_LIMIT_LABELS),
        )


# ---- the cluster ---------------------------------------------------------------------------------------------

QUOTAS = QuotaView(
    {
        "team-a": QuotaState(QuotaLimits(mem_mib=50_000, cores_pct=400), 24_000, 240),
        "team-b": QuotaState(QuotaLimits(mem_mib=None, cores_pct=200), 0, 30),
    }
)


def cluster() -> dict[str, NodeSnapshot]:
    """Several vendors on one node, shared and whole devices, a cordoned and an unhealthy device, a device of no
    memory, and label values that must be escaped (a quote, a backslash, a newline, non-ASCII text)."""
    t4 = inventory("gpu-a", n=4, mem=16384, type="NVIDIA-Tesla T4", cordoned=["GPU-gpu-a-2"])  # a cordoned device, used
    mixed = mixed_inventory(
        "gpu-b",
        (gpu("GPU-gpu-b-0", mem=81920, type="NVIDIA A100-SXM4-80GB", health=False),),
        fake_devices("gpu-b", "DCU", n=2),
    )
    odd = NodeInventory(
        node="gpu-c",
        vendor="MLU",
        devices=(
            *fake_devices("gpu-c", "MLU", n=1, mem=0),  # no device memory: ratio 0
            gpu('GPU-"c"\\1', index=1, mem=24576, type='Ünusual "type"\nline two'),
        ),
    )
    return {
        "gpu-a": NodeSnapshot(
            t4, {"GPU-gpu-a-0": use(3, 9000, 45), "GPU-gpu-a-1": use(1, 16384, 100), "GPU-gpu-a-2": use(1, 100, 0)}
        ),
        "gpu-b": NodeSnapshot(mixed, {"GPU-gpu-b-0": use(1, 81920, 100), "DCU-gpu-b-1": use(2, 5000, 30)}),
        "gpu-c": NodeSnapshot(odd, {"MLU-gpu-c-0": use(2, 0, 20), 'GPU-"c"\\1': use(1, 3333, 7)}),
    }


class Pair:
    """The old and the new collector over one mutable view, each in its own registry."""

    def __init__(self, *, legacy: bool) -> None:
        self.view: dict[str, NodeSnapshot] = cluster()
        self.old, self.new = CollectorRegistry(), CollectorRegistry()
        self.old.register(BeforeCollector(lambda: self.view, lambda: QUOTAS, legacy=legacy))
        self.new.register(AllocationCollector(lambda: self.view, lambda: QUOTAS, legacy=legacy))

    def check(self) -> bytes:
        """Scrape both; the new text must be the old one byte for byte, and parse to the same families."""
        before, after = generate_latest(self.old), render_text(self.new)
        assert after == before
        assert families(after) == families(before)
        return after


def families(text: bytes) -> list[tuple[str, str, str, list[tuple[str, dict[str, str], float]]]]:
    return [
        (f.name, f.type, f.documentation, [(s.name, s.labels, s.value) for s in f.samples])
        for f in text_string_to_metric_families(text.decode())
    ]


def sample_names(text: bytes) -> set[str]:
    return {s[1].get("node", s[1].get("nodeid", "")) for f in families(text) for s in f[3]} - {""}


# ---- equivalence ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("legacy", [False, True], ids=["current-names", "legacy-metrics"])
def test_scrapes_match_the_old_rendering_while_nodes_change_reload_and_go(legacy: bool) -> None:
    pair = Pair(legacy=legacy)
    first = pair.check()
    assert sample_names(first) == {"gpu-a", "gpu-b", "gpu-c"}
    assert pair.check() == first  # unchanged: the cached text

    # one node changes: its new values are rendered, the others reused
    a = pair.view["gpu-a"]
    pair.view["gpu-a"] = NodeSnapshot(a.inventory, {**a.usage, "GPU-gpu-a-3": use(1, 2048, 10)})
    changed = pair.check()
    assert changed != first
    assert 'device_uuid="GPU-gpu-a-3"' in changed.decode()

    # a reload: new snapshot objects of the same devices and usage give the same text
    pair.view = {name: NodeSnapshot(s.inventory, dict(s.usage)) for name, s in pair.view.items()}
    assert pair.check() == changed

    # a node removed between scrapes: every series of it disappears
    del pair.view["gpu-b"]
    gone = pair.check()
    assert sample_names(gone) == {"gpu-a", "gpu-c"}
    assert "DCU-gpu-b-1" not in gone.decode()

    # back again, and a new node of its own
    pair.view["gpu-b"] = cluster()["gpu-b"]
    pair.view["gpu-d"] = NodeSnapshot(inventory("gpu-d", n=2, mem=40960, type="NVIDIA A100-PCIE-40GB"), {})
    assert sample_names(pair.check()) == {"gpu-a", "gpu-b", "gpu-c", "gpu-d"}

    pair.view = {}  # no node at all: the families are still described, empty
    empty = pair.check()
    assert "# TYPE hami_gpu_memory_limit_bytes gauge" in empty.decode()
    assert sample_names(empty) == set()


def test_the_values_are_hamis() -> None:
    """Spot checks against the snapshot itself (not only against the old code)."""
    text = Pair(legacy=True).check()
    got = {(s[0], tuple(sorted(s[1].items()))): s[2] for f in families(text) for s in f[3]}

    def value(name: str, **labels: str) -> float:
        return got[(name, tuple(sorted({**labels, "zone": HAMI_ZONE}.items())))]

    dcu = {"node": "gpu-b", "device_uuid": "DCU-gpu-b-1", "device_index": "1", "device_type": "DCU", "vendor": "DCU"}
    assert value("hami_gpu_memory_allocated_bytes", **dcu, device_cores="30") == 5000 * MIB
    assert value("hami_gpu_shared_count", **dcu) == 2
    odd = {"node": "gpu-c", "device_uuid": 'GPU-"c"\\1', "device_index": "1", "device_type": 'Ünusual "type"\nline two'}
    assert value("hami_node_gpu_memory_allocated_ratio", **odd, vendor="NVIDIA") == 3333 / 24576
    assert value("nodeGPUMemoryPercentage", nodeid="gpu-c", deviceuuid='GPU-"c"\\1', deviceidx="1") == 3333 / 24576
    mlu = {"node": "gpu-c", "device_uuid": "MLU-gpu-c-0", "device_index": "0", "device_type": "MLU", "vendor": "MLU"}
    assert value("hami_node_gpu_memory_allocated_ratio", **mlu) == 0.0  # no device memory
    assert value("hami_resource_quota_used", namespace="team-a", quota_name="nvidia.com/gpumem", limit="50000") == 24000


def test_samples_stay_readable_through_the_registry() -> None:
    """Readers of ``samples`` (``get_sample_value``, other exposition formats) get the same series as the text."""
    pair = Pair(legacy=False)
    labels = {
        "node": "gpu-a",
        "device_uuid": "GPU-gpu-a-0",
        "device_index": "0",
        "device_type": "NVIDIA-Tesla T4",
        "vendor": "NVIDIA",
        "zone": HAMI_ZONE,
    }
    assert pair.new.get_sample_value("hami_gpu_shared_count", labels) == 3
    old = [(m.name, m.samples) for m in pair.old.collect()]
    new = [(m.name, m.samples) for m in pair.new.collect()]
    assert new == old
    assert any(isinstance(m, TextGaugeFamily) for m in pair.new.collect())


def test_the_rest_of_the_registry_is_rendered_as_prometheus_client_does() -> None:
    """Counters, histograms and gauges around the text families, in registration order, as before."""
    pair = Pair(legacy=True)
    for registry in (pair.old, pair.new):
        metrics = ExtenderMetrics(registry)
        metrics.request_duration.labels("filter").observe(0.003)
        metrics.filter_reasons.labels('odd "reason"\\').inc()
        metrics.binds_per_node_limit.set(2)

    def without_creation_times(text: bytes) -> bytes:  # each registry's counters were created at their own time
        return b"\n".join(line for line in text.split(b"\n") if b"_created" not in line)

    text = render_text(pair.new)
    assert without_creation_times(text) == without_creation_times(generate_latest(pair.old))
    assert text.index(b"# TYPE hami_gpu_memory_limit_bytes") < text.index(b"# TYPE vgpu_filter_outcomes_total")
    assert b'vgpu_filter_reasons_total{reason="odd \\"reason\\"\\\\"} 1.0' in text


def test_concurrent_scrapes_each_see_one_view() -> None:
    """Scrapes run in worker threads, possibly at once, while the view changes: each gives the text of one of
    the views it could have read, never a mix."""
    views = [cluster()]
    for k in range(1, 6):
        a = views[-1]["gpu-a"]
        views.append({**views[-1], "gpu-a": NodeSnapshot(a.inventory, {**a.usage, "GPU-gpu-a-3": use(k, k, k)})})
    views.append({n: s for n, s in views[-1].items() if n != "gpu-c"})
    expected = set()
    for view in views:
        reference = CollectorRegistry()
        reference.register(BeforeCollector(functools.partial(dict, view), lambda: QUOTAS))
        expected.add(generate_latest(reference))
    current = {"view": views[0]}
    registry = CollectorRegistry()
    registry.register(AllocationCollector(lambda: current["view"], lambda: QUOTAS))
    seen: list[bytes] = []
    failures: list[BaseException] = []

    def scrape() -> None:
        try:
            for _ in range(40):
                seen.append(render_text(registry))
        except BaseException as e:  # reported below
            failures.append(e)

    threads = [threading.Thread(target=scrape) for _ in range(3)]
    for t in threads:
        t.start()
    for i in range(200):
        current["view"] = views[i % len(views)]
    for t in threads:
        t.join()
    assert not failures
    assert len(seen) == 120
    assert set(seen) <= expected


# ---- the line format -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        0.0,
        1.0,
        30.0,
        0.1,
        1 / 3,
        8000 * MIB,
        81920 * MIB,
        1e21,
        1234567.0,
        123456.0,
        -2.5,
        math.inf,
        -math.inf,
        math.nan,
    ],
)
def test_sample_lines_are_prometheus_clients(value: float) -> None:
    names = ["zone", "node", "a_label", "device_uuid"]
    values = ["vGPU", 'n"1\\', "line\none", "Ünïcode"]
    family = GaugeMetricFamily("some_family", "Doc with \\ and\nnewline", labels=names)
    family.add_metric(values, value)
    reference = CollectorRegistry()
    reference.register(_Fixed([family]))
    ours = SampleLines("some_family", names).line(values, value)
    expected = generate_latest(reference).decode().split("\n", 2)[2]
    assert ours == expected


def test_a_family_without_labels() -> None:
    family = GaugeMetricFamily("plain", "A plain gauge", value=2.0)
    reference = CollectorRegistry()
    reference.register(_Fixed([family]))
    assert SampleLines("plain", []).line([], 2.0) == generate_latest(reference).decode().split("\n", 2)[2]


class _Fixed(Collector):
    def __init__(self, metrics: list[Metric]) -> None:
        self._metrics = metrics

    def collect(self) -> Iterable[Metric]:
        return self._metrics
