"""Coordination: leases with fencing tokens for the single-active services, node locks for ``/bind``."""

from vgpu_scheduler.shared.coord.lease import Lease, LeaseKeeper, LeaseNotHeldError
from vgpu_scheduler.shared.coord.nodelock import NodeLock, lock_owner, parse_lock_owner
from vgpu_scheduler.shared.store.types import Fence, LockAcquired, LockHeld, LockInfo, LockResult

__all__ = [
    "Fence",
    "Lease",
    "LeaseKeeper",
    "LeaseNotHeldError",
    "LockAcquired",
    "LockHeld",
    "LockInfo",
    "LockResult",
    "NodeLock",
    "lock_owner",
    "parse_lock_owner",
]
