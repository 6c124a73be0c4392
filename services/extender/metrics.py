"""Every metric the extender exports, against the injected registry (never the default one).

Counters and histograms are updated on the request paths (``ExtenderMetrics``). The HAMi-compatible allocation
gauges are not stored at all: :class:`AllocationCollector` computes them at scrape time from the snapshot cache
(one consistent view per scrape), plus the namespace quotas read by an async ``before_scrape`` hook. Every HAMi
series carries ``zone="vGPU"`` (hami-wire §10.4). Memory is in bytes (MiB × 1048576).
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from vgpu_scheduler.shared.domain.quota import QuotaState
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.metrics import (
    HAMI_ZONE,
    LabelledGaugeFamily,
    SampleLines,
    TextGaugeFamily,
    escape_label_value,
    gauge_header,
)

MIB = 1 << 20

# Filter latency must be visible well below a millisecond; bind waits on the API server and the node lock.
_REQUEST_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)
_LOCK_WAIT_BUCKETS = (0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Verb(enum.Enum):
    """The ``verb`` label of the request histogram: one per extender endpoint."""

    FILTER = "filter"
    BIND = "bind"
    WEBHOOK = "webhook"
    PREEMPT = "preempt"


class FilterOutcome(enum.Enum):
    """How a ``/filter`` call ended (``vgpu_filter_outcomes_total{outcome}``)."""

    PASSTHROUGH = "passthrough"
    """The pod asks for no managed resource: candidates echoed."""
    SCHEDULED = "scheduled"
    """A node was chosen and the devices reserved."""
    UNSCHEDULABLE = "unschedulable"
    """No candidate fits: every node listed with its reason."""
    INVALID_REQUEST = "invalid_request"
    """A managed resource with a bad value (``gpumem: 20Gi``): every node refused with what to write instead."""
    QUOTA_EXCEEDED = "quota_exceeded"
    """The namespace quota refused the charge."""
    SIMULATED = "simulated"
    """Full ``Nodes`` (autoscaler simulation): evaluated, nothing reserved."""
    NOT_READY = "not_ready"
    """The snapshot is not loaded or the store is not synced: an Error answer."""
    BAD_REQUEST = "bad_request"
    """A malformed body or pod: an Error answer."""
    KEPT = "kept"
    """The pod already holds devices on a candidate node (a re-filter, a duplicate from another scheduler or a
    retry): that node is answered again, nothing re-planned or moved."""
    OWNED_ELSEWHERE = "owned_elsewhere"
    """The pod's devices belong to a bind (claimed, bound or confirmed) on a node not among the candidates: an
    Error answer, nothing moved."""
    CONFLICTS = "conflicts"
    """Every reservation attempt lost a race: an Error answer (kube-scheduler retries the pod)."""
    ERROR = "error"
    """An internal or store failure: an Error answer."""


@dataclass(frozen=True, slots=True)
class QuotaView:
    """The namespace quotas as last read from the store, for the quota gauges."""

    by_namespace: Mapping[str, QuotaState]


class ExtenderMetrics:
    """The extender's counters and histograms. Helper B's handlers use ``bind_outcomes``, ``node_lock_wait``
    and ``webhook_outcomes``; ``request_duration`` is observed by the app for every verb."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.policy_info = Gauge(
            "vgpu_extender_policy_info",
            "Always 1: the default node and GPU scheduler policies of this replica (--node-scheduler-policy, "
            "--gpu-scheduler-policy), as labels.",
            ["node_scheduler_policy", "gpu_scheduler_policy"],
            registry=registry,
        )
        self.request_duration = Histogram(
            "vgpu_extender_request_duration_seconds",
            "Time to answer one extender request, by verb.",
            ["verb"],
            buckets=_REQUEST_BUCKETS,
            registry=registry,
        )
        self.unauthenticated_requests = Counter(
            "vgpu_extender_unauthenticated_requests_total",
            "Requests to /filter or /bind refused for want of a client certificate (--client-ca-file), by verb.",
            ["verb"],
            registry=registry,
        )
        self.filter_outcomes = Counter(
            "vgpu_filter_outcomes_total", "Filter calls by outcome.", ["outcome"], registry=registry
        )
        self.filter_reasons = Counter(
            "vgpu_filter_reasons_total",
            "Candidate nodes refused by a filter call, by reason type (a node with two reasons counts twice).",
            ["reason"],
            registry=registry,
        )
        self.reservation_conflicts = Counter(
            "vgpu_reservation_conflicts_total",
            "Reservations refused by the store's capacity check (another replica or pod took the room first).",
            registry=registry,
        )
        self.reservation_retries = Counter(
            "vgpu_reservation_retries_total",
            "Re-plans after a reservation conflict.",
            registry=registry,
        )
        self.bind_outcomes = Counter(
            "vgpu_bind_outcomes_total", "Bind calls by outcome.", ["outcome"], registry=registry
        )
        self.binds_per_node_limit = Gauge(
            "vgpu_binds_per_node_limit",
            "Binds in flight that make /filter pass over a node: --max-binds-per-node at most, lowered while binds "
            "wait too long for node locks.",
            registry=registry,
        )
        self.node_lock_wait = Histogram(
            "vgpu_node_lock_wait_seconds",
            "Time a bind waited for the node lock.",
            buckets=_LOCK_WAIT_BUCKETS,
            registry=registry,
        )
        self.webhook_outcomes = Counter(
            "vgpu_webhook_outcomes_total", "Admission reviews by outcome.", ["outcome"], registry=registry
        )
        self.snapshot_reloads = Counter(
            "vgpu_extender_snapshot_reloads_total",
            "Full reloads of the process-local snapshot, by reason.",
            ["reason"],
            registry=registry,
        )
        self.snapshot_node_reads = Counter(
            "vgpu_extender_snapshot_node_reads_total",
            "Nodes re-read from Redis into the snapshot after a change event or a conflict.",
            registry=registry,
        )
        self.snapshot_nodes = Gauge(
            "vgpu_extender_snapshot_nodes", "Registered nodes in the process-local snapshot.", registry=registry
        )
        self.events_dropped = Counter(
            "vgpu_extender_events_dropped_total",
            "Kubernetes Events not posted (queue full, or the API refused them).",
            registry=registry,
        )
        self.events_posted = Counter(
            "vgpu_extender_events_posted_total", "Kubernetes Events posted.", registry=registry
        )
        self.events_sampled_out = Counter(
            "vgpu_extender_events_sampled_out_total",
            "Normal Kubernetes Events not posted because they exceeded --success-event-rate.",
            registry=registry,
        )
        # Children bound once: ``labels()`` takes a lock and builds a key on every call (once per /filter).
        self._filter_outcome_children = {
            outcome: self.filter_outcomes.labels(outcome.value) for outcome in FilterOutcome
        }
        for verb in Verb:
            self.request_duration.labels(verb.value)

    def filter_outcome(self, outcome: FilterOutcome) -> None:
        self._filter_outcome_children[outcome].inc()


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


def _same_devices(a: NodeSnapshot, b: NodeSnapshot) -> bool:
    """Whether two snapshots of one node give the same device series (their devices and usage are equal)."""
    return a.inventory.devices == b.inventory.devices and a.usages == b.usages


def _samples_of(families: Callable[[], Sequence[Metric]], i: int) -> list[Sample]:
    return families()[i].samples


class AllocationCollector(Collector):
    """HAMi's allocation gauges, computed at scrape time from one view of the snapshot cache.

    ``nodes`` returns the current snapshots (name → NodeSnapshot); ``quotas`` the last quota view (may be
    empty); ``resource_names`` gives the quota ``quota_name`` labels (memory resource, core resource).

    The device families (several series per device: most of a scrape) are yielded as
    :class:`~vgpu_scheduler.shared.metrics.TextGaugeFamily`, their text rendered per node and kept with the node's
    snapshot: a scrape re-renders only the nodes whose snapshot changed since the last one (snapshots are immutable
    and replaced on every change; one of equal devices and usage, as a reload installs, keeps its lines), and
    reuses the whole text when none did. A removed node's lines go
    with it. Their ``samples`` (built only if something reads them) are computed from the same view the slow way.
    Scrapes may run in worker threads at once: each reads the cache and replaces it in one assignment (two at once
    may both render a node; neither sees lines of another view).
    """

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
        families = self._families()[:-2]
        legacy_families = self._legacy_families()[:-1] if legacy else ()
        self._device_families = (*families, *legacy_families)
        """The families rendered per node: the current device families, then (``legacy``) HAMi's old ones."""
        self._formats = tuple(SampleLines(f.name, f.labelnames) for f in self._device_families)
        self._headers = tuple(gauge_header(f.name, f.documentation) for f in self._device_families)
        self._state: tuple[dict[str, tuple[NodeSnapshot, tuple[str, ...]]], tuple[bytes, ...] | None] = ({}, None)
        """Per node, the snapshot last rendered and its lines of each device family; and each device family's
        whole text for those nodes (None before the first scrape)."""

    def describe(self) -> Iterable[Metric]:
        return [*self._families(), *(self._legacy_families() if self._legacy else ())]

    def collect(self) -> Iterable[Metric]:
        nodes = dict(self._nodes())  # one view for the text and for the samples, should they be asked for
        texts = self._device_texts(nodes)
        by_samples = functools.cache(lambda: self._sample_families(nodes))
        quota_used, quota_limit = self._families()[-2:]
        legacy_quota = self._legacy_families()[-1] if self._legacy else None
        for ns, state in sorted(self._quotas().by_namespace.items()):
            for quota_name, limit, used in (
                (self._mem_name, state.limits.mem_mib, state.used_mem_mib),
                (self._core_name, state.limits.cores_pct, state.used_cores_pct),
            ):
                if limit is None:
                    continue
                quota_used.add_metric([ns, quota_name, str(limit), HAMI_ZONE], float(used))
                quota_limit.add_metric([ns, quota_name, HAMI_ZONE], float(limit))
                if legacy_quota is not None:
                    legacy_quota.add_metric([ns, quota_name, str(limit), HAMI_ZONE], float(used))
        n_current = len(self._families()) - 2
        text_families = [
            TextGaugeFamily(f.name, f.documentation, text, functools.partial(_samples_of, by_samples, i))
            for i, (f, text) in enumerate(zip(self._device_families, texts, strict=True))
        ]
        yield from text_families[:n_current]
        yield quota_used
        yield quota_limit
        if legacy_quota is not None:
            yield from text_families[n_current:]
            yield legacy_quota

    def _device_texts(self, nodes: Mapping[str, NodeSnapshot]) -> tuple[bytes, ...]:
        """Each device family's text for ``nodes``, re-rendering only the nodes whose snapshot changed."""
        previous, texts = self._state
        rendered: dict[str, tuple[NodeSnapshot, tuple[str, ...]]] = {}
        changed = texts is None or len(nodes) != len(previous)
        for name, snap in nodes.items():
            entry = previous.get(name)
            if entry is None or (entry[0] is not snap and not _same_devices(entry[0], snap)):
                entry = (snap, self._node_lines(name, snap))
                changed = True
            elif entry[0] is not snap:
                entry = (snap, entry[1])  # a new snapshot of the same devices and usage (a reload): same lines
            rendered[name] = entry
        if changed or texts is None:
            chunks = [rendered[name][1] for name in sorted(rendered)]
            texts = tuple((header + "".join([c[i] for c in chunks])).encode() for i, header in enumerate(self._headers))
        self._state = (rendered, texts)  # one assignment: a concurrent scrape sees the old pair or the new one
        return texts

    def _node_lines(self, name: str, snap: NodeSnapshot) -> tuple[str, ...]:
        """One node's sample lines of each device family (in ``_device_families`` order), devices in inventory
        order: the same labels and values as :meth:`_sample_families`."""
        lines: list[list[str]] = [[] for _ in self._formats]
        current, legacy = self._formats[:7], self._formats[7:]
        node, zone = escape_label_value(name), HAMI_ZONE
        for dev, u in zip(snap.inventory.devices, snap.usages, strict=True):
            uuid, kind, vendor = map(escape_label_value, (dev.id, dev.type, dev.vendor))
            idx, used_cores, used_bytes = str(dev.index), str(u.used_cores), float(u.used_mem_mib * MIB)
            mem_ratio = u.used_mem_mib / dev.devmem_mib if dev.devmem_mib > 0 else 0.0
            base = (node, uuid, idx, kind, vendor, zone)
            rows = (
                (base, float(dev.devmem_mib * MIB)),
                (base, float(dev.devcore)),
                ((node, uuid, idx, used_cores, kind, vendor, zone), used_bytes),
                (base, float(u.used)),
                (base, float(u.used_cores)),
                ((node, uuid, idx, used_cores, str(dev.devmem_mib), kind, vendor, zone), used_bytes),
                (base, mem_ratio),
            )
            for out, fmt, (labels, value) in zip(lines[:7], current, rows, strict=True):
                out.append(fmt.escaped_line(labels, value))
            if legacy:
                # HAMi's old names have no vendor label, and their ratio no device type either.
                old = (node, uuid, idx, kind, zone)
                legacy_rows = (
                    (old, float(dev.devmem_mib * MIB)),
                    (old, float(dev.devcore)),
                    ((node, uuid, idx, used_cores, kind, zone), used_bytes),
                    (old, float(u.used)),
                    (old, float(u.used_cores)),
                    ((node, uuid, idx, used_cores, str(dev.devmem_mib), kind, zone), used_bytes),
                    ((node, uuid, idx, zone), mem_ratio),
                )
                for out, fmt, (labels, value) in zip(lines[7:], legacy, legacy_rows, strict=True):
                    out.append(fmt.escaped_line(labels, value))
        return tuple("".join(out) for out in lines)

    def _sample_families(self, nodes: Mapping[str, NodeSnapshot]) -> tuple[GaugeMetricFamily, ...]:
        """The device families of ``nodes`` as prometheus_client sample objects, in ``_device_families`` order
        (what ``samples`` of the text families gives; slow: one object per series)."""
        families = self._families()[:-2]
        legacy = self._legacy_families()[:-1] if self._legacy else ()
        for name, snap in sorted(nodes.items()):
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
                for family, (labels, value) in zip(families, rows, strict=True):
                    family.add_metric([*labels[:-1], dev.vendor, labels[-1]], value)
                if legacy:
                    rows[-1] = ([name, dev.id, idx, HAMI_ZONE], mem_ratio)  # HAMi's old ratio had no device type
                    for family, (labels, value) in zip(legacy, rows, strict=True):
                        family.add_metric(labels, value)
        return (*families, *legacy)

    @staticmethod
    def _legacy_families() -> tuple[LabelledGaugeFamily, ...]:
        """HAMi's pre-rename names, exported too with ``--legacy-metrics`` (hami-wire §10.4)."""
        dev = ["nodeid", "deviceuuid", "deviceidx", "devicetype", "zone"]
        allocated = ["nodeid", "deviceuuid", "deviceidx", "devicecores", "devicetype", "zone"]
        overview = ["nodeid", "deviceuuid", "deviceidx", "devicecores", "devicememorylimit", "devicetype", "zone"]
        return (
            LabelledGaugeFamily("GPUDeviceMemoryLimit", "Device memory limit for a certain GPU", dev),
            LabelledGaugeFamily("GPUDeviceCoreLimit", "Device core limit for a certain GPU", dev),
            LabelledGaugeFamily("GPUDeviceMemoryAllocated", "Device memory allocated for a certain GPU", allocated),
            LabelledGaugeFamily("GPUDeviceSharedNum", "Number of containers sharing this GPU", dev),
            LabelledGaugeFamily("GPUDeviceCoreAllocated", "Device core allocated for a certain GPU", dev),
            LabelledGaugeFamily("nodeGPUOverview", "GPU overview on a certain node", overview),
            LabelledGaugeFamily(
                "nodeGPUMemoryPercentage",
                "GPU Memory Allocated Percentage on a certain GPU",
                ["nodeid", "deviceuuid", "deviceidx", "zone"],
            ),
            LabelledGaugeFamily(
                "QuotaUsed",
                "ResourceQuota usage for a certain device",
                ["quotanamespace", "quotaName", "limit", "zone"],
            ),
        )

    @staticmethod
    def _families() -> tuple[LabelledGaugeFamily, ...]:
        g = LabelledGaugeFamily

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
