"""The informer's Prometheus metrics, registered on the injected registry (never the global one)."""

from __future__ import annotations

import enum

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


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
            "Reservations released because no pod annotation confirmed them within --reservation-grace.",
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
