"""The registrar's Prometheus metrics, registered on the injected registry (never the global one).

No node names as labels: per-node detail goes to logs and Kubernetes events.
"""

from __future__ import annotations

import enum

from prometheus_client import CollectorRegistry, Counter, Gauge

UUID_COLLISION = "uuid_collision"
"""The ``reason`` of ``vgpu_registrar_decode_errors_total`` for a vendor left out of a node because its device IDs
collide with an earlier vendor's (the other reasons are :class:`~shared.vendors.registration.DecodeFailure`)."""


class WriteOp(enum.Enum):
    PUT = "put"
    DELETE = "delete"


class WriteResult(enum.Enum):
    CHANGED = "changed"
    UNCHANGED = "unchanged"


class PassTrigger(enum.Enum):
    """Why a full pass over every known node ran."""

    LEASE = "lease"  # the first list after taking the lease: Redis is rebuilt
    RELIST = "relist"  # the informer re-listed (410 Gone)
    FLUSH = "flush"  # the store's epoch or node set no longer matched what we wrote
    PERIODIC = "periodic"  # the resync timer (handshake timeouts, drift)


class StepDown(enum.Enum):
    """Why a leadership term ended."""

    STOP = "stop"
    LEASE_LOST = "lease_lost"
    STALE_FENCE = "stale_fence"
    REDIS_ERROR = "redis_error"


class HandshakeResult(enum.Enum):
    WRITTEN = "written"
    CONFLICT = "conflict"  # the node changed under us (resourceVersion guard): the next event retries
    FAILED = "failed"


class RegistrarMetrics:
    """Every series the registrar exports (prefix ``vgpu_registrar_``)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.leader = Gauge(
            "vgpu_registrar_leader", "1 while this process holds the registrar lease, else 0.", registry=registry
        )
        self.nodes_registered = Gauge(
            "vgpu_registrar_nodes_registered",
            "Nodes whose inventory this leader has in Redis, by vendor.",
            ["vendor"],
            registry=registry,
        )
        self.writes = Counter(
            "vgpu_registrar_inventory_writes_total",
            "Inventory writes to Redis: op put/delete, result changed (generation bumped) or unchanged.",
            ["op", "result"],
            registry=registry,
        )
        self.unchanged_nodes = Counter(
            "vgpu_registrar_node_updates_unchanged_total",
            "Node updates that changed nothing a vendor reads (the node-lock annotation, status only): not observed "
            "again.",
            registry=registry,
        )
        self.skipped = Counter(
            "vgpu_registrar_inventory_unchanged_skips_total",
            "Node observations whose inventory equalled what was last written, so nothing was written.",
            registry=registry,
        )
        self.decode_errors = Counter(
            "vgpu_registrar_decode_errors_total",
            "Distinct malformed node values seen (each drops that node's vendor), by vendor and reason "
            "(register, topology_score, allocatable, uuid_collision).",
            ["vendor", "reason"],
            registry=registry,
        )
        self.unregistered = Counter(
            "vgpu_registrar_unregistered_total",
            "Times a registered node's vendor was removed, by vendor and reason.",
            ["vendor", "reason"],
            registry=registry,
        )
        self.handshake_writes = Counter(
            "vgpu_registrar_handshake_writes_total",
            "Requesting_ handshake patches on nodes of <= v2.7 device plugins, by vendor and result.",
            ["vendor", "result"],
            registry=registry,
        )
        self.events = Counter(
            "vgpu_registrar_events_total",
            "Kubernetes events recorded on nodes, by reason and result (created/failed).",
            ["reason", "result"],
            registry=registry,
        )
        self.passes = Counter(
            "vgpu_registrar_full_passes_total",
            "Full passes over every known node, by trigger.",
            ["trigger"],
            registry=registry,
        )
        self.step_downs = Counter(
            "vgpu_registrar_step_downs_total",
            "Leadership terms ended, by reason.",
            ["reason"],
            registry=registry,
        )
        self.errors = Counter(
            "vgpu_registrar_transient_errors_total",
            "Redis or API server failures the registrar retried.",
            registry=registry,
        )

    def wrote(self, op: WriteOp, changed: bool) -> None:
        self.writes.labels(op.value, (WriteResult.CHANGED if changed else WriteResult.UNCHANGED).value).inc()
