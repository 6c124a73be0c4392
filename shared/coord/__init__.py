"""Coordination: leases with fencing tokens for the single-active services, node locks for ``/bind``."""

from shared.coord.lease import Lease, LeaseKeeper, LeaseNotHeldError
from shared.coord.nodelock import NodeLock, lock_owner

__all__ = ["Lease", "LeaseKeeper", "LeaseNotHeldError", "NodeLock", "lock_owner"]
