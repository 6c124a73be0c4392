"""The informer's Prometheus metrics, registered on the injected registry (never the global one).

Besides its own counters and gauges (:class:`InformerMetrics`), the informer exports HAMi's per-container gauges
(``hami_vgpu_*``) and ``hami_node_gpu_mig_instance_info`` (hami-wire §10.4): :class:`PodAllocationCollector`
computes them at scrape time from the leader's in-memory view (the allocations its term recorded, the GPU indices
read from the node watch). No I/O at scrape time; a standby exports none of them.
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

from vgpu_scheduler.shared.codec.register import decode_register
from vgpu_scheduler.shared.domain.allocation import Allocation
from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.metrics import (
    HAMI_ZONE,
    LabelledGaugeFamily,
    SampleLines,
    TextGaugeFamily,
    escape_label_value,
    gauge_header,
)

MIB = 1 << 20


class LockCause(enum.Enum):
    """Why the informer released a node lock (label ``cause`` of ``vgpu_informer_locks_released_total``)."""

    BIND_SUCCESS = "bind_success"  # the device plugin set hami.io/bind-phase: success
    BIND_FAILED = "bind_failed"  # ... or failed
    ANNOTATION_REMOVED = "annotation_removed"  # the device plugin removed hami.io/mutex.lock
    POD_DELETED = "pod_deleted"  # the holder no longer exists (HAMi #1130, #1271)
    POD_TERMINATED = "pod_terminated"  # the holder is Succeeded/Failed (HAMi #3047)
    NODE_DELETED = "node_deleted"
    TIMEOUT = "timeout"  # --node-lock-timeout passed; an allocating holder was marked failed first (#3096)


class RepairKind(enum.Enum):
    """What a reconcile pass repaired (label ``kind`` of ``vgpu_informer_reconcile_repairs_total``)."""

    MISSING_ALLOCATION = "missing_allocation"  # a pod holds devices, Redis had no record of it
    CHANGED_ALLOCATION = "changed_allocation"  # Redis had a different record (node, devices)
    EXTRA_ALLOCATION = "extra_allocation"  # Redis had a confirmed record of a pod that holds nothing
    USAGE_COUNTERS = "usage_counters"  # a node's usage counters differed from its per-pod charges (fields)
    QUOTA_USAGE = "quota_usage"  # a pod's quota charge was missing, different or orphaned
    QUOTA_LIMITS = "quota_limits"  # a namespace's limits differed from its ResourceQuotas


class Malformed(enum.Enum):
    """What could not be read (label ``kind`` of ``vgpu_informer_malformed_total``)."""

    POD_ALLOCATION = "pod_allocation"
    QUOTA_LIMIT = "quota_limit"
    NODE_LOCK = "node_lock"


class UndecodableReason(enum.Enum):
    """Why a stored allocation record is unreadable (label ``reason`` of ``vgpu_informer_undecodable_records``)."""

    NEWER_VERSION = "newer_version"  # a newer replica's envelope version (rolling upgrade): left to that replica
    CORRUPT = "corrupt"  # any other decode failure


class InformerMetrics:
    """Every metric of the informer; counters are pre-initialised for each label value so they export 0."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.leader = Gauge(
            "vgpu_informer_leader", "1 while this instance holds the informer lease, else 0.", registry=registry
        )
        self.pods_tracked = Gauge(
            "vgpu_informer_pods_tracked", "Pods whose allocation is recorded in Redis.", registry=registry
        )
        self.locks_held = Gauge(
            "vgpu_informer_locks_held", "Node locks held (Redis or annotation) at the last sweep.", registry=registry
        )
        self.locks_released = Counter(
            "vgpu_informer_locks_released",
            "Node locks released by the informer, by cause.",
            ["cause"],
            registry=registry,
        )
        self.pods_marked_failed = Counter(
            "vgpu_informer_pods_marked_failed",
            "Pods set to hami.io/bind-phase: failed because their node lock timed out while allocating.",
            registry=registry,
        )
        self.reservations_expired = Counter(
            "vgpu_informer_reservations_expired",
            "Reservations released because no pod annotation confirmed them within --reservation-grace, or made for a "
            "pod already deleted.",
            registry=registry,
        )
        self.reconcile_repairs = Counter(
            "vgpu_informer_reconcile_repairs",
            "Differences between Redis and the API repaired by reconcile (drift), by kind.",
            ["kind"],
            registry=registry,
        )
        self.reconciles = Counter(
            "vgpu_informer_reconciles",
            "Reconcile passes by mode: rebuild (the store was empty or flushed) or reconcile.",
            ["mode"],
            registry=registry,
        )
        self.reconcile_duration = Histogram(
            "vgpu_informer_reconcile_duration_seconds",
            "Duration of a reconcile pass.",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=registry,
        )
        self.quota_namespaces = Gauge(
            "vgpu_informer_quota_namespaces",
            "Namespaces with an honoured GPU memory or cores limit.",
            registry=registry,
        )
        self.malformed = Counter(
            "vgpu_informer_malformed",
            "Objects skipped or entries ignored because a value could not be read, by kind.",
            ["kind"],
            registry=registry,
        )
        self.pod_labels_added = Counter(
            "vgpu_informer_pod_labels_added",
            "hami.io/vgpu-node labels the informer added to bound pods: the API server did not copy them from the "
            "Binding (before v1.35, or PodTopologyLabelsAdmission off).",
            registry=registry,
        )
        self.store_flushes = Counter(
            "vgpu_informer_store_flushes_detected",
            "Times the leader found the store flushed (epoch changed) and rebuilt it.",
            registry=registry,
        )
        for cause in LockCause:
            self.locks_released.labels(cause.value)
        for kind in RepairKind:
            self.reconcile_repairs.labels(kind.value)
        for mode in ("rebuild", "reconcile"):
            self.reconciles.labels(mode)
        for m in Malformed:
            self.malformed.labels(m.value)
        # undecodable allocation records (set by each reconcile pass)
        self.undecodable_records = Gauge(
            "vgpu_informer_undecodable_records",
            "Stored allocation records the last reconcile pass could not decode and left as they are, by reason.",
            ["reason"],
            registry=registry,
        )
        for r in UndecodableReason:
            self.undecodable_records.labels(r.value)


# ---- HAMi's per-container and MIG-instance gauges (scrape time) ------------------------------------------------


@dataclass(frozen=True, slots=True)
class AllocationView:
    """What the leader knows at scrape time: the allocations its term recorded (by pod uid) and each node's GPU
    indices (node → UUID → index, from the register annotation)."""

    allocations: Mapping[str, Allocation]
    device_indices: Mapping[str, Mapping[str, int]]


class DeviceIndex:
    """Node → GPU UUID → index, kept from the node watch (``hami.io/node-nvidia-register``). A node's annotation is
    decoded only when its text changes; an absent or unreadable one maps nothing (the registrar reports it)."""

    def __init__(self) -> None:
        self._seen: dict[str, str] = {}
        self._indices: dict[str, dict[str, int]] = {}

    @property
    def indices(self) -> Mapping[str, Mapping[str, int]]:
        return self._indices

    def update(self, node: str, register: str | None) -> None:
        """The node's current register annotation (None: absent, or the node was deleted)."""
        if register is None:
            self._seen.pop(node, None)
            self._indices.pop(node, None)
            return
        if self._seen.get(node) == register:
            return
        self._seen[node] = register
        try:
            devices = decode_register(register)
        except DecodeError:
            self._indices.pop(node, None)
            return
        self._indices[node] = {d.id: d.index for d in devices}


_VGPU_LABELS = ["namespace", "node", "pod", "container_index", "device_uuid", "zone"]
_MIG_LABELS = [
    "node",
    "device_uuid",
    "device_index",
    "mig_uuid",
    "profile",
    "gpu_instance_id",
    "compute_instance_id",
    "placement_start",
    "placement_size",
    "zone",
]
_LEGACY_VGPU_LABELS = ["podnamespace", "nodename", "podname", "containeridx", "deviceuuid", "zone"]
_LEGACY_MIG_LABELS = ["nodeid", "deviceuuid", "deviceidx", "migname", "zone"]

_VgpuKey = tuple[str, str, str, str, str]  # namespace, node, pod, container index, device uuid
_MigKey = tuple[str, str, str, str, str, str, str, str, str]  # _MIG_LABELS without zone


def vgpu_series(allocations: Iterable[Allocation]) -> dict[_VgpuKey, tuple[int, int]]:
    """Per container and device (HAMi's label set, without ``zone``): (memory MiB, cores %), as the pod's
    ``hami.io/vgpu-devices-allocated`` lists them. ``container_index`` indexes init containers first, then app
    containers (hami-wire §3.1). A label set met twice (one UUID listed twice in a container) sums."""
    out: dict[_VgpuKey, tuple[int, int]] = {}
    for a in allocations:
        for ctr, devices in enumerate(a.devices):
            for d in devices:
                if not d.uuid:
                    continue  # HAMi skips an empty UUID too
                key = (a.namespace, a.node, a.name, str(ctr), d.uuid)
                mem, cores = out.get(key, (0, 0))
                out[key] = (mem + d.used_mem_mib, cores + d.used_cores)
    return out


def mig_series(allocations: Iterable[Allocation], device_indices: Mapping[str, Mapping[str, int]]) -> set[_MigKey]:
    """The MIG instances the device plugin has created (HAMi's ``RuntimeReady``: ``migUUID``, ``gpuInstanceID`` and
    ``computeInstanceID`` written back into ``hami.io/vgpu-mig-allocations``) on GPUs the node registers. An
    instance not yet created, or on a GPU missing from the node's register annotation, is not exported (HAMi
    reports instances only per registered device)."""
    out: set[_MigKey] = set()
    for a in allocations:
        indices = device_indices.get(a.node, {})
        for m in a.mig:
            if m.mig_uuid is None or m.gpu_instance_id is None or m.compute_instance_id is None:
                continue
            index = indices.get(m.gpu_uuid)
            if index is None:
                continue
            out.add(
                (
                    a.node,
                    m.gpu_uuid,
                    str(index),
                    m.mig_uuid,
                    m.profile,
                    str(m.gpu_instance_id),
                    str(m.compute_instance_id),
                    str(m.placement.start),
                    str(m.placement.size),
                )
            )
    return out


_PodEntry = tuple[Allocation, tuple[str, ...]]
"""An allocation last rendered and its lines of each per-container family."""


def _same_series(a: Allocation, b: Allocation) -> bool:
    """Whether two allocations of one pod give the same per-container series."""
    return (a.namespace, a.node, a.name, a.devices) == (b.namespace, b.node, b.name, b.devices)


def _samples_of(families: Callable[[], Sequence[Metric]], i: int) -> list[Sample]:
    return families()[i].samples


class PodAllocationCollector(Collector):
    """``hami_vgpu_memory_allocated_bytes`` (MiB × 1048576) and ``hami_vgpu_core_allocated_ratio`` (the container's
    cores %, as HAMi exports ``Usedcores``: 30 for 30 %), per container and device; ``hami_node_gpu_mig_instance_info``
    (value 1) per created MIG instance. With ``legacy``, also ``vGPUMemoryAllocated``, ``vGPUCoreAllocated`` and
    ``nodeGPUMigInstance`` (``migname`` = ``<profile>-<gpuInstanceID>``). ``view`` returns None while standing by:
    then every family is exported empty.

    The per-container families (one series per container and device: most of a scrape) are yielded as
    :class:`~vgpu_scheduler.shared.metrics.TextGaugeFamily`, their lines rendered per pod and kept with the pod's
    allocation: a scrape re-renders only the pods whose allocation changed, and reuses the whole text while none
    did. Two recorded pods of one namespace, node and name (a pod deleted and created again) share their series,
    which are summed: those are rendered together on every scrape.
    """

    def __init__(self, view: Callable[[], AllocationView | None], *, legacy: bool = False) -> None:
        self._view = view
        self._legacy = legacy
        families = self._families()
        self._text_families = (families[0], families[1], *(families[3:5] if legacy else ()))
        """The families rendered per pod: memory and cores, then (``legacy``) HAMi's old names of the two."""
        self._formats = tuple(SampleLines(f.name, f.labelnames) for f in self._text_families)
        self._headers = tuple(gauge_header(f.name, f.documentation) for f in self._text_families)
        self._state: tuple[dict[str, _PodEntry], tuple[bytes, ...] | None] = ({}, None)
        """Per pod uid, the allocation last rendered and its lines; and each text family's whole text for those
        pods (None before the first scrape). Replaced in one assignment: scrapes may run in threads at once."""

    def describe(self) -> Iterable[Metric]:
        return self._families()

    def collect(self) -> Iterable[Metric]:
        families = self._families()
        view = self._view()
        if view is None:
            self._state = ({}, None)  # standing by: nothing to keep
            yield from families
            return
        allocations = dict(view.allocations)  # one view for the text and the samples: the term may change it later
        texts = self._vgpu_texts(allocations)
        by_samples = functools.cache(lambda: self._filled(allocations, view))
        mig_families = (families[2], families[5]) if self._legacy else (families[2],)
        self._fill_mig(mig_families, tuple(allocations.values()), view)
        positions = (0, 1, 3, 4) if self._legacy else (0, 1)
        text_families = {
            k: TextGaugeFamily(f.name, f.documentation, text, functools.partial(_samples_of, by_samples, k))
            for k, f, text in zip(positions, self._text_families, texts, strict=True)
        }
        for k, family in enumerate(families):
            yield text_families.get(k, family)

    def _vgpu_texts(self, allocations: Mapping[str, Allocation]) -> tuple[bytes, ...]:
        """Each per-container family's text for ``allocations``, re-rendering only the pods that changed."""
        previous, texts = self._state
        rendered: dict[str, _PodEntry] = {}
        changed = texts is None or len(allocations) != len(previous)
        for uid, a in allocations.items():
            entry = previous.get(uid)
            if entry is None or (entry[0] is not a and not _same_series(entry[0], a)):
                entry = (a, self._lines(vgpu_series([a])))
                changed = True
            elif entry[0] is not a:
                entry = (a, entry[1])
            rendered[uid] = entry
        if changed or texts is None:
            order = sorted(((a.namespace, a.node, a.name), uid) for uid, a in allocations.items())
            chunks: list[tuple[str, ...]] = []
            k = 0
            while k < len(order):
                group, end = order[k][0], k + 1
                while end < len(order) and order[end][0] == group:
                    end += 1
                if end == k + 1:
                    chunks.append(rendered[order[k][1]][1])
                else:  # one namespace/node/name recorded twice: the series sum (vgpu_series)
                    chunks.append(self._lines(vgpu_series(allocations[uid] for _, uid in order[k:end])))
                k = end
            texts = tuple((header + "".join([c[i] for c in chunks])).encode() for i, header in enumerate(self._headers))
        self._state = (rendered, texts)
        return texts

    def _lines(self, series: Mapping[_VgpuKey, tuple[int, int]]) -> tuple[str, ...]:
        """The lines of ``series`` (one pod's, or a group's) of each text family, in label order."""
        lines: list[list[str]] = [[] for _ in self._formats]
        for key, (mem_mib, cores_pct) in sorted(series.items()):
            labels = [*map(escape_label_value, key), HAMI_ZONE]
            values = (float(mem_mib * MIB), float(cores_pct))
            for k, (out, fmt) in enumerate(zip(lines, self._formats, strict=True)):
                out.append(fmt.escaped_line(labels, values[k % 2]))
        return tuple("".join(out) for out in lines)

    def _filled(self, allocations: Mapping[str, Allocation], view: AllocationView) -> tuple[GaugeMetricFamily, ...]:
        """Every family as prometheus_client sample objects (what ``samples`` of the text families gives; slow)."""
        families = self._families()
        self._fill(families, AllocationView(allocations, view.device_indices))
        return families

    def _fill_mig(
        self, families: tuple[GaugeMetricFamily, ...], allocations: tuple[Allocation, ...], view: AllocationView
    ) -> None:
        mig, legacy = families[0], families[1:]
        for m in sorted(mig_series(allocations, view.device_indices)):
            mig.add_metric([*m, HAMI_ZONE], 1.0)
            if legacy:
                node, uuid, index, _, profile, gi = m[:6]
                legacy[0].add_metric([node, uuid, index, f"{profile}-{gi}", HAMI_ZONE], 1.0)

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

    def _families(self) -> tuple[LabelledGaugeFamily, ...]:
        families = (
            LabelledGaugeFamily(
                "hami_vgpu_memory_allocated_bytes", "vGPU memory allocated from a container", _VGPU_LABELS
            ),
            LabelledGaugeFamily("hami_vgpu_core_allocated_ratio", "vGPU core allocated from a container", _VGPU_LABELS),
            LabelledGaugeFamily(
                "hami_node_gpu_mig_instance_info", "MIG instance created on a GPU (value 1)", _MIG_LABELS
            ),
        )
        if not self._legacy:
            return families
        return (
            *families,
            LabelledGaugeFamily("vGPUMemoryAllocated", "vGPU memory allocated from a container", _LEGACY_VGPU_LABELS),
            LabelledGaugeFamily("vGPUCoreAllocated", "vGPU core allocated from a container", _LEGACY_VGPU_LABELS),
            LabelledGaugeFamily(
                "nodeGPUMigInstance",
                "MIG instance created on a GPU (value 1)",
                _LEGACY_MIG_LABELS,
            ),
        )
