"""The node-lock arbiter of ``/bind`` (docs/store.md, Coordination, differences 4 and 5).

Replicas contend on one Redis key per node; the winner gets a fencing token and then writes HAMi's
``hami.io/mutex.lock`` annotation. An expired lock is reported, never handed on: the contender must first settle
the holder (mark its pod ``bind-phase: failed``), then force-release exactly that acquisition, then lock.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

from vgpu_scheduler.shared.store import LockAcquired, LockHeld, LockInfo, LockResult, NodeLockStore

logger = logging.getLogger(__name__)


def lock_owner(namespace: str, name: str) -> str:
    """The owner string of a pod's lock: ``<namespace>/<name>``."""
    return f"{namespace}/{name}"


def parse_lock_owner(owner: str) -> tuple[str, str] | None:
    """The (namespace, name) a :func:`lock_owner` string names; None if it is malformed."""
    namespace, sep, name = owner.partition("/")
    if not sep or not namespace or not name:
        return None
    return namespace, name


class NodeLock:
    """Acquire/release/inspect node locks; ``ttl_s`` is ``--node-lock-timeout`` (HAMi default 5 min)."""

    def __init__(self, store: NodeLockStore, ttl_s: float = 300.0, hard_ttl_s: float | None = None) -> None:
        self._store = store
        self.ttl_s = ttl_s
        self.hard_ttl_s = hard_ttl_s

    async def acquire(self, node: str, owner: str, ttl_s: float | None = None) -> LockResult:
        """``LockAcquired`` (with the token; re-entrant for the same owner) or ``LockHeld`` with the holder."""
        return await self._store.acquire(node, owner, ttl_s if ttl_s is not None else self.ttl_s, self.hard_ttl_s)

    async def acquire_settling_expired(
        self, node: str, owner: str, settle: Callable[[LockInfo], Awaitable[None]], ttl_s: float | None = None
    ) -> LockResult:
        """Like :meth:`acquire`, but an *expired* holder is first settled (``settle`` marks its pod failed),
        then exactly that acquisition is force-released, then the lock is taken. If ``settle`` raises, the
        lock stays with the old holder."""
        result = await self.acquire(node, owner, ttl_s)
        if isinstance(result, LockHeld) and result.info.expired:
            await settle(result.info)
            released = await self._store.force_release(node, token=result.info.token)
            logger.info(
                "expired node lock taken over",
                extra={"node": node, "previous_owner": result.info.owner, "released": released},
            )
            result = await self.acquire(node, owner, ttl_s)
        return result

    async def release(self, node: str, owner: str, token: int | None = None) -> bool:
        """Release if ``owner`` (and, if given, ``token``) holds it; False if somebody else does."""
        return await self._store.release(node, owner, token)

    async def force_release(self, node: str, token: int | None = None) -> bool:
        """Release regardless of owner (only acquisition ``token`` if given)."""
        return await self._store.force_release(node, token)

    async def inspect(self, node: str) -> LockInfo | None:
        """The node's lock, or None if free."""
        return await self._store.inspect(node)

    async def inspect_many(self, nodes: Sequence[str]) -> dict[str, LockInfo]:
        """The held locks among ``nodes`` in one round trip (free nodes absent)."""
        return await self._store.inspect_many(nodes)


__all__ = ["LockAcquired", "LockHeld", "LockInfo", "LockResult", "NodeLock", "lock_owner"]
