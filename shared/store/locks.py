"""Lease and node-lock primitives: our own scripts with fencing tokens (never redis-py's ``Lock``, whose token
lives in thread-local storage shared by every asyncio task). ``shared.coord`` builds the behaviour on top."""

from __future__ import annotations

from collections.abc import Sequence

from vgpu_scheduler.shared.store._base import StoreContext, as_int, text
from vgpu_scheduler.shared.store.types import LeaseAcquired, LeaseInfo, LockAcquired, LockHeld, LockInfo, LockResult


def _ms(seconds: float) -> int:
    ms = int(seconds * 1000)
    if ms <= 0:
        raise ValueError(f"a ttl must be positive, got {seconds}s")
    return ms


class LeaseStore:
    """``SET NX PX`` leases whose every acquisition takes a fresh token from an ``INCR`` epoch."""

    def __init__(self, ctx: StoreContext) -> None:
        self._ctx = ctx

    async def acquire(self, name: str, holder: str, ttl_s: float) -> LeaseAcquired | LeaseInfo:
        """Take the lease if free (or extend it if ``holder`` already has it); else who holds it."""
        k = self._ctx.keys
        async with self._ctx.translated("acquire lease"):
            reply = await self._ctx.scripts.lease_acquire(
                keys=[k.lease(name), k.lease_epoch(name)], args=[holder, _ms(ttl_s)]
            )
        if reply[0] == b"acquired":
            return LeaseAcquired(token=as_int(reply[1]), ttl_ms=as_int(reply[2]))
        return LeaseInfo(holder=text(reply[1]), token=as_int(reply[2]), ttl_ms=as_int(reply[3]))

    async def renew(self, name: str, holder: str, token: int, ttl_s: float) -> bool:
        """Extend the lease if ``holder`` still holds it with ``token``; False means it is lost."""
        async with self._ctx.translated("renew lease"):
            reply = await self._ctx.scripts.lease_renew(
                keys=[self._ctx.keys.lease(name)], args=[holder, token, _ms(ttl_s)]
            )
        return as_int(reply) == 1

    async def release(self, name: str, holder: str, token: int) -> bool:
        """Give the lease up if it is still ours."""
        async with self._ctx.translated("release lease"):
            reply = await self._ctx.scripts.lease_release(keys=[self._ctx.keys.lease(name)], args=[holder, token])
        return as_int(reply) == 1

    async def inspect(self, name: str) -> LeaseInfo | None:
        """Who holds the lease now, with which token and for how long; None if nobody."""
        async with self._ctx.translated("inspect lease"):
            value, ttl = await self._ctx.scripts.lease_inspect(keys=[self._ctx.keys.lease(name)])
        if not value:
            return None
        token, _, holder = value.partition(b"|")
        return LeaseInfo(holder=text(holder), token=int(token), ttl_ms=as_int(ttl))


def _lock_info(node: str, fields: tuple[bytes, bytes, bytes, bytes, bytes]) -> LockInfo:
    """``fields`` = (token, expires_ms, acquired_ms, owner, now_ms) as the scripts return them."""
    token, expires, acquired, owner, now = fields
    return LockInfo(
        node=node,
        owner=text(owner),
        token=int(token),
        acquired_ms=int(acquired),
        expires_ms=int(expires),
        now_ms=int(now),
    )


class NodeLockStore:
    """One lock per node. The logical expiry is part of the value and judged on the server clock, so an
    expired lock is *reported* to the next contender rather than silently handed over (difference 5)."""

    def __init__(self, ctx: StoreContext) -> None:
        self._ctx = ctx

    async def acquire(self, node: str, owner: str, ttl_s: float, hard_ttl_s: float | None = None) -> LockResult:
        """Take ``node``'s lock for ``owner`` (re-entrant). ``hard_ttl_s`` lets Redis drop a forgotten key."""
        k = self._ctx.keys
        hard = 0 if hard_ttl_s is None else _ms(hard_ttl_s)
        async with self._ctx.translated("acquire node lock"):
            reply = await self._ctx.scripts.lock_acquire(
                keys=[k.node_lock(node), k.node_lock_epoch(node), k.generation(node), k.changes(), k.pod_charges(node)],
                args=[owner, _ms(ttl_s), hard, self._ctx.stream_maxlen, node],
            )
        if reply[0] == b"acquired":
            _, token, expires, acquired, reentered, now = reply
            return LockAcquired(
                info=_lock_info(node, (token, expires, acquired, owner.encode(), now)), reentered=reentered == b"1"
            )
        _, token, expires, acquired, holder, now = reply
        return LockHeld(info=_lock_info(node, (token, expires, acquired, holder, now)))

    async def release(self, node: str, owner: str, token: int | None = None) -> bool:
        """Release if ``owner`` holds it (and, if given, with ``token``). False if someone else does."""
        if not owner:
            raise ValueError("releasing a node lock needs the owner; use force_release to override")
        return await self._release(node, owner, token)

    async def force_release(self, node: str, token: int | None = None) -> bool:
        """Release whoever holds it, or only the acquisition ``token`` (safe against a newer holder)."""
        return await self._release(node, "", token)

    async def _release(self, node: str, owner: str, token: int | None) -> bool:
        k = self._ctx.keys
        async with self._ctx.translated("release node lock"):
            reply = await self._ctx.scripts.lock_release(
                keys=[k.node_lock(node), k.generation(node), k.changes(), k.pod_charges(node)],
                args=[owner, "" if token is None else token, self._ctx.stream_maxlen, node],
            )
        return as_int(reply) == 1

    async def release_settled(
        self, node: str, owner: str, latest_acquired_ms: int | None
    ) -> tuple[bool, LockInfo | None]:
        """Release the lock if ``owner`` holds it and took it no later than ``latest_acquired_ms`` (server clock;
        None = whenever), in one round trip. Returns whether it was released and the lock as it was (what
        :meth:`inspect` would have answered just before: None if free), so a caller whose guess was wrong decides
        on it without reading it again."""
        if not owner:
            raise ValueError("releasing a node lock needs the owner")
        k = self._ctx.keys
        bound = "" if latest_acquired_ms is None else str(int(latest_acquired_ms))
        async with self._ctx.translated("release node lock"):
            released, value, now = await self._ctx.scripts.lock_release_settled(
                keys=[k.node_lock(node), k.generation(node), k.changes(), k.pod_charges(node)],
                args=[owner, bound, self._ctx.stream_maxlen, node],
            )
        return as_int(released) == 1, _parse_lock(node, value, now)

    async def inspect(self, node: str) -> LockInfo | None:
        """The node's lock, with the server time so ``expired`` is judged on one clock; None if free."""
        async with self._ctx.translated("inspect node lock"):
            value, now = await self._ctx.scripts.lock_inspect(keys=[self._ctx.keys.node_lock(node)])
        return _parse_lock(node, value, now)

    async def inspect_many(self, nodes: Sequence[str]) -> dict[str, LockInfo]:
        """The held locks among ``nodes`` and the server time, in one round trip: ``TIME`` and one ``MGET`` per
        :data:`_MGET_CHUNK` nodes, in a transaction (every value read at that one time; a script per node would
        cost Redis and this client about ten times as much for a sweep over 1,000 nodes).

        For sweeps over every node (the informer's lock-timeout check); free nodes are absent from the result.
        """
        if not nodes:
            return {}
        keys = self._ctx.keys
        async with self._ctx.translated("inspect node locks"), self._ctx.client.pipeline(transaction=True) as pipe:
            pipe.time()
            for i in range(0, len(nodes), _MGET_CHUNK):
                pipe.mget([keys.node_lock(n) for n in nodes[i : i + _MGET_CHUNK]])
            replies = await pipe.execute()
        secs, micros = replies[0]
        now = str(int(secs) * 1000 + int(micros) // 1000).encode()
        values = [v for chunk in replies[1:] for v in chunk]
        out: dict[str, LockInfo] = {}
        for n, value in zip(nodes, values, strict=True):
            info = _parse_lock(n, value, now)
            if info is not None:
                out[n] = info
        return out


_MGET_CHUNK = 1000
"""Lock keys per ``MGET`` of :meth:`NodeLockStore.inspect_many`."""


def _parse_lock(node: str, value: bytes | None, now: bytes) -> LockInfo | None:
    if not value:
        return None
    token, expires, acquired, owner = value.split(b"|", 3)
    return _lock_info(node, (token, expires, acquired, owner, now))
