"""Value types the store hands out: results of scripts, records, events. Conflicts are results, not exceptions."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from vgpu_scheduler.shared.domain.allocation import Allocation
from vgpu_scheduler.shared.domain.model import NVIDIA, DeviceUsage, NodeInventory
from vgpu_scheduler.shared.domain.quota import QuotaUses
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.errors import ConflictError, DecodeError, SchemaVersionError


@dataclass(frozen=True, slots=True)
class Fence:
    """Proof that a write comes from the current holder of lease ``lease``: its fencing ``token``.

    Scripts given a fence refuse the write unless ``token`` is the lease's current token.
    """

    lease: str
    token: int


class StaleFenceError(ConflictError):
    """A fenced write was refused: the lease has another holder (or none) now. The writer must stop."""

    def __init__(self, fence: Fence) -> None:
        super().__init__(f"lease {fence.lease!r}: token {fence.token} is no longer current")
        self.fence = fence


# --------------------------------------------------------------------------------------------
# Inventory and snapshots
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PutResult:
    """Outcome of writing (or deleting) a node's inventory: ``changed`` is False when the bytes were equal."""

    changed: bool
    generation: int


@dataclass(frozen=True, slots=True)
class NodeState:
    """One node as stored: inventory (None if unregistered), usage by device UUID, generation.

    ``usage`` holds only devices with something in use; a missing UUID means ``ZERO_USAGE``. ``error`` is set
    (and ``inventory`` None, ``usage`` empty) when the stored data could not be decoded, e.g. written by a newer
    release: skip the node and count it, the others are fine.
    """

    node: str
    inventory: NodeInventory | None
    usage: Mapping[str, DeviceUsage]
    generation: int
    error: DecodeError | None = None
    binds_in_flight: int = 0
    """Binds in flight on the node: the reservations there not yet confirmed by the pods' annotations, at least
    1 while its bind lock is held. HAMi's device plugin finds the pod it allocates through the node lock, so a node
    takes one bind at a time; filters prefer nodes with fewer than ``--max-binds-per-node``."""

    @property
    def bind_in_flight(self) -> bool:
        return self.binds_in_flight > 0

    def snapshot(self) -> NodeSnapshot | None:
        """The scheduling core's view of this node (None while it has no inventory)."""
        return None if self.inventory is None else NodeSnapshot(self.inventory, self.usage)


# --------------------------------------------------------------------------------------------
# Reservations
# --------------------------------------------------------------------------------------------


class ReservationState(enum.Enum):
    """Where a pod's record is in its life (design: ownership). ``reserved``: written by a ``/filter``, nobody owns
    it yet (a re-filter may move it); ``binding``: one ``/bind`` claimed it (its token, with an expiry);
    ``bound``: that bind created the Binding; ``confirmed``: the informer saw the pod's annotations. Only a
    ``reserved`` record may be replaced or released by a filter."""

    RESERVED = "reserved"
    BINDING = "binding"
    BOUND = "bound"
    CONFIRMED = "confirmed"

    @property
    def unconfirmed(self) -> bool:
        """Written by the extender and not yet seen in the pod's annotations."""
        return self is not ReservationState.CONFIRMED

    @property
    def owned(self) -> bool:
        """A decision owns the pod's devices (a bind claimed or made it, or the API shows it): never moved by a
        filter."""
        return self is not ReservationState.RESERVED


class ConflictDimension(enum.Enum):
    """Which capacity check refused a reservation."""

    NODE_UNKNOWN = "node_unknown"
    DEVICE_UNKNOWN = "device_unknown"
    UNHEALTHY = "unhealthy"
    CORDONED = "cordoned"
    MIG_MODE = "mig_mode"
    SLOTS = "slots"
    EXCLUSIVE = "exclusive"
    MEMORY = "memory"
    CORES = "cores"
    COMPUTE_EXHAUSTED = "compute_exhausted"
    MIG_PLACEMENT = "mig_placement"
    LEGACY_MIG = "legacy_mig"
    SHARE_SIZE = "share_size"
    """A device shared only by tasks of one size (``DeviceCharge.uniform``) holds tasks of another size."""
    SHARING = "sharing"
    """A device in use holds tasks the charge may not share it with, or none it needs (``DeviceCharge.refuse_tags``,
    ``need_tags``: MetaX sGPU app classes and QoS policies)."""


@dataclass(frozen=True, slots=True)
class Reserved:
    """The reservation is in place. ``changed`` is False when an identical one already was."""

    pod_uid: str
    node: str
    generation: int
    changed: bool


@dataclass(frozen=True, slots=True)
class ReserveConflict:
    """The node cannot take the pod right now: ``device`` failed ``dimension`` (``needed`` vs ``free``).

    The extender re-scores with fresh usage. ``device`` is empty for ``NODE_UNKNOWN``.
    """

    pod_uid: str
    node: str
    dimension: ConflictDimension
    device: str
    needed: int
    free: int
    detail: str


@dataclass(frozen=True, slots=True)
class Owned:
    """The pod's record on ``node`` belongs to a decision (``state`` is not ``reserved``): a reserve or a
    conditional release left it exactly as it was."""

    pod_uid: str
    node: str
    state: ReservationState


ReserveResult = Reserved | ReserveConflict | Owned


@dataclass(frozen=True, slots=True)
class Unsettled:
    """A fresh reserve found that the pod already holds a record (``node``; None: the namespace has a quota
    envelope instead) and reserved nothing: read the pod's context and reserve as usual."""

    pod_uid: str
    node: str | None


@dataclass(frozen=True, slots=True)
class Claimed:
    """This bind now owns the pod's record: ``allocation`` is what it must write (read in the same atomic step).
    ``previous`` is the state before the claim; ``took_over`` is True when another bind's expired claim was
    replaced. ``hint`` is the record's bind hint (written by the reservation; empty: none)."""

    allocation: Allocation
    previous: ReservationState
    took_over: bool
    hint: str = ""


@dataclass(frozen=True, slots=True)
class ClaimRefused:
    """No claim: ``reason`` is ``absent`` (no record), ``elsewhere`` (the record is on ``node``, not the one asked),
    ``busy`` (another bind holds a live claim for ``remaining_ms`` more) or, for a claim of a plain reservation
    only, ``owned`` (the record is already ``state``)."""

    reason: str
    node: str = ""
    remaining_ms: int = 0
    state: str = ""


@dataclass(frozen=True, slots=True)
class RecordResult:
    """Outcome of recording an observed allocation: whether usage or the stored record changed."""

    generation: int
    usage_changed: bool
    record_changed: bool


@dataclass(frozen=True, slots=True)
class AllocationRecord:
    """A stored allocation with its state and when it was (last) reserved or recorded, server clock, ms."""

    allocation: Allocation
    state: ReservationState
    reserved_at_ms: int


@dataclass(frozen=True, slots=True)
class UndecodableRecord:
    """A stored allocation a listing could not read: left out of the listing, left as it is in Redis.

    ``error`` is a :class:`~shared.errors.SchemaVersionError` when a newer replica wrote it (``newer_version``:
    leave it to that replica) and another :class:`~shared.errors.DecodeError` when the value is corrupt.
    """

    pod_uid: str
    node: str
    error: DecodeError

    @property
    def newer_version(self) -> bool:
        """Whether the record was written in an envelope version newer than this reader knows."""
        return isinstance(self.error, SchemaVersionError)


# --------------------------------------------------------------------------------------------
# Change feed
# --------------------------------------------------------------------------------------------


class ChangeKind(enum.Enum):
    """What changed on a node."""

    INVENTORY = "inventory"
    DELETED = "deleted"
    USAGE = "usage"


@dataclass(frozen=True, slots=True)
class ChangeEvent:
    """One entry of the change stream: ``node`` reached ``generation`` through a change of ``kind``;
    ``lock_released`` when the change was the release of the node's bind lock, ``lock_taken`` its acquisition.
    ``binds_in_flight`` is set when the change moved only the node's binds in flight (a lock taken or released, a
    reservation confirmed), to that new count: the node's inventory and usage are those of ``generation - 1``."""

    id: str
    node: str
    generation: int
    kind: ChangeKind
    lock_released: bool = False
    binds_in_flight: int | None = None
    lock_taken: bool = False
    """The change was a fresh acquisition of the node's bind lock (its release follows as ``lock_released``)."""


@dataclass(frozen=True, slots=True)
class ChangeBatch:
    """Events read after some id. ``last_id`` is where to continue; ``gap`` means events were lost (the stream
    was trimmed past the reader or Redis was flushed): reload every node before trusting the cache again."""

    events: tuple[ChangeEvent, ...]
    last_id: str
    gap: bool = False


# --------------------------------------------------------------------------------------------
# Quota
# --------------------------------------------------------------------------------------------


class QuotaDimension(enum.Enum):
    MEMORY = "memory"
    CORES = "cores"


@dataclass(frozen=True, slots=True)
class QuotaCharged:
    """The charge is in place; ``changed`` is False when the pod already had exactly this charge."""

    changed: bool


@dataclass(frozen=True, slots=True)
class QuotaExceeded:
    """The charge would exceed ``vendor``'s ``limit``: others already use ``used``, the pod needs ``needed``
    (NVIDIA's limit is raw, another vendor's memory limit is MiB)."""

    dimension: QuotaDimension
    limit: int
    used: int
    needed: int
    vendor: str = NVIDIA


QuotaChargeResult = QuotaCharged | QuotaExceeded


@dataclass(frozen=True, slots=True)
class PodQuotaCharge:
    """What one pod is charged against its namespace quota: NVIDIA's memory and cores, then every other vendor's
    by common word (sorted, non-zero only)."""

    mem_mib: int
    cores_pct: int
    others: QuotaUses = ()


# --------------------------------------------------------------------------------------------
# Meta, leases, locks
# --------------------------------------------------------------------------------------------


class SyncMarker(enum.Enum):
    """A full load a service completed in the current store epoch."""

    INVENTORY = "inventory"
    ALLOCATIONS = "allocations"
    QUOTAS = "quotas"


@dataclass(frozen=True, slots=True)
class StoreStatus:
    """The store's epoch (None after a flush, until someone re-creates it) and the loads completed in it."""

    epoch: str | None
    synced: frozenset[SyncMarker] = frozenset()

    def is_synced(self, marker: SyncMarker) -> bool:
        return self.epoch is not None and marker in self.synced


@dataclass(frozen=True, slots=True)
class LeaseAcquired:
    token: int
    ttl_ms: int


@dataclass(frozen=True, slots=True)
class LeaseInfo:
    """A held lease: its ``holder``, fencing ``token`` and remaining ``ttl_ms``. ``LeaseStore.inspect`` reports
    it; ``LeaseStore.acquire`` answers it when somebody else holds the lease."""

    holder: str
    token: int
    ttl_ms: int


@dataclass(frozen=True, slots=True)
class LockInfo:
    """A node lock: who holds it, its fencing token, and its logical expiry (server clock, ms)."""

    node: str
    owner: str
    token: int
    acquired_ms: int
    expires_ms: int
    now_ms: int

    @property
    def expired(self) -> bool:
        return self.now_ms >= self.expires_ms


@dataclass(frozen=True, slots=True)
class LockAcquired:
    """The lock is ours; ``reentered`` when this owner already held it (token and expiry unchanged)."""

    info: LockInfo
    reentered: bool = False

    @property
    def token(self) -> int:
        return self.info.token


@dataclass(frozen=True, slots=True)
class LockHeld:
    """Another owner holds the lock. If ``info.expired``, the caller must settle that owner (mark its pod
    failed) and then ``force_release(node, token=info.token)`` before taking it: never hand it on blindly."""

    info: LockInfo


LockResult = LockAcquired | LockHeld


@dataclass(frozen=True, slots=True)
class UsageAudit:
    """Result of recomputing a node's counters from its per-pod charges: ``drift`` fields were repaired."""

    node: str
    drift: int
    generation: int
