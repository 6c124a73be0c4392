"""Redis: key names, Lua scripts and typed repositories. The only package that imports redis/fakeredis."""

from vgpu_scheduler.shared.store._base import Durability, ReplicationShortfall, StoreEpochChanged
from vgpu_scheduler.shared.store.allocations import Reservations, charges_json
from vgpu_scheduler.shared.store.connection import ConnectionSettings, connect, is_sentinel
from vgpu_scheduler.shared.store.feed import START_ID, ChangeFeed
from vgpu_scheduler.shared.store.inventory import InventoryRepo
from vgpu_scheduler.shared.store.keys import Keys
from vgpu_scheduler.shared.store.locks import LeaseStore, NodeLockStore
from vgpu_scheduler.shared.store.meta import MetaRepo
from vgpu_scheduler.shared.store.quota import QuotaRepo
from vgpu_scheduler.shared.store.store import Store
from vgpu_scheduler.shared.store.types import (
    AllocationRecord,
    ChangeBatch,
    ChangeEvent,
    ChangeKind,
    Claimed,
    ClaimRefused,
    ConflictDimension,
    Fence,
    LeaseAcquired,
    LeaseInfo,
    LockAcquired,
    LockHeld,
    LockInfo,
    LockResult,
    NodeState,
    Owned,
    PodQuotaCharge,
    PutResult,
    QuotaCharged,
    QuotaChargeResult,
    QuotaDimension,
    QuotaExceeded,
    RecordResult,
    ReservationState,
    ReserveConflict,
    Reserved,
    ReserveResult,
    StaleFenceError,
    StoreStatus,
    SyncMarker,
    UndecodableRecord,
    Unsettled,
    UsageAudit,
)
from vgpu_scheduler.shared.store.usage import SnapshotRepo, UsageRepo, parse_usage

AllocationRepo = Reservations
"""The name the design uses for :class:`Reservations`."""
NodeSnapshot = NodeState
"""Former name of :class:`NodeState` (kept for callers written against it; the core has its own NodeSnapshot)."""

__all__ = [
    "START_ID",
    "AllocationRecord",
    "AllocationRepo",
    "ChangeBatch",
    "ChangeEvent",
    "ChangeFeed",
    "ChangeKind",
    "ClaimRefused",
    "Claimed",
    "ConflictDimension",
    "ConnectionSettings",
    "Durability",
    "Fence",
    "InventoryRepo",
    "Keys",
    "LeaseAcquired",
    "LeaseInfo",
    "LeaseStore",
    "LockAcquired",
    "LockHeld",
    "LockInfo",
    "LockResult",
    "MetaRepo",
    "NodeLockStore",
    "NodeSnapshot",
    "NodeState",
    "Owned",
    "PodQuotaCharge",
    "PutResult",
    "QuotaChargeResult",
    "QuotaCharged",
    "QuotaDimension",
    "QuotaExceeded",
    "QuotaRepo",
    "RecordResult",
    "ReplicationShortfall",
    "ReservationState",
    "Reservations",
    "ReserveConflict",
    "ReserveResult",
    "Reserved",
    "SnapshotRepo",
    "StaleFenceError",
    "Store",
    "StoreEpochChanged",
    "StoreStatus",
    "SyncMarker",
    "UndecodableRecord",
    "Unsettled",
    "UsageAudit",
    "UsageRepo",
    "charges_json",
    "connect",
    "is_sentinel",
    "parse_usage",
]
