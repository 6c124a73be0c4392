"""The snapshot's order of preference: the registered nodes sorted by a node policy's ``rank_key``, kept sorted as
their snapshots change, so that ``/filter`` walks nodes best first without sorting them per request
(:meth:`services.extender.snapshot.SnapshotCache.ranked`).
"""

from __future__ import annotations

import bisect

from vgpu_scheduler.shared.domain.model import NodePolicy
from vgpu_scheduler.shared.domain.plan import rank_key
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot


class NodeRanking:
    """Registered node names sorted by a node policy's ``rank_key``, kept sorted as snapshots change (a binary
    search and a C ``memmove`` per change), so that ``/filter`` walks nodes in order of preference without sorting
    them per request."""

    __slots__ = ("_key", "keys", "names")

    def __init__(self, policy: NodePolicy) -> None:
        self._key = rank_key(policy)
        self.keys: list[tuple[float, str]] = []
        self.names: list[str] = []

    def replace(self, old: NodeSnapshot | None, new: NodeSnapshot | None) -> None:
        if old is not None:
            key = self._key(old)
            i = bisect.bisect_left(self.keys, key)
            if i < len(self.keys) and self.keys[i] == key:
                del self.keys[i]
                del self.names[i]
        if new is not None:
            key = self._key(new)
            i = bisect.bisect_left(self.keys, key)
            self.keys.insert(i, key)
            self.names.insert(i, new.name)

    def clear(self) -> None:
        self.keys.clear()
        self.names.clear()
