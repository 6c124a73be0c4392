"""Every metric the extender exports, against the injected registry (never the default one).

Counters and histograms are updated on the request paths (``ExtenderMetrics``). The HAMi-compatible allocation
gauges are not stored at all: :class:`AllocationCollector` computes them at scrape time from the snapshot cache
(one consistent view per scrape), plus the namespace quotas read by an async ``before_scrape`` hook. Every HAMi
series carries ``zone="vGPU"`` (hami-wire §10.4). Memory is in bytes (MiB × 1048576).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from vgpu_scheduler.shared.domain.model import QuotaState
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.metrics import HAMI_ZONE

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


class AllocationCollector(Collector):
    """HAMi's allocation gauges, computed at scrape time from one view of the snapshot cache.

    ``nodes`` returns the current snapshots (name → NodeSnapshot); ``quotas`` the last quota view (may be
    empty); ``resource_names`` gives the quota ``quota_name`` labels (memory resource, core resource).
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
