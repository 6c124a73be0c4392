"""Leases for the single-active services (registrar, informer), with fencing tokens (docs/store.md, Coordination).

A :class:`Lease` is taken with ``SET NX PX`` and a fresh token from an ``INCR`` epoch; every write the holder
makes passes ``lease.fence`` so Redis refuses it once somebody else holds the lease. A :class:`LeaseKeeper`
renews in the background and sets ``lost`` the moment renewal fails for good.
"""

from __future__ import annotations

import asyncio
import logging
from types import TracebackType

from vgpu_scheduler.shared.errors import TransientError
from vgpu_scheduler.shared.store import Fence, LeaseAcquired, LeaseInfo, LeaseStore

logger = logging.getLogger(__name__)


async def _wait(event: asyncio.Event, timeout_s: float) -> bool:
    """Wait for ``event`` at most ``timeout_s``; True if it is set."""
    try:
        async with asyncio.timeout(timeout_s):
            await event.wait()
    except TimeoutError:
        pass
    return event.is_set()


class LeaseNotHeldError(RuntimeError):
    """``fence`` was asked of a lease this process does not hold."""


class Lease:
    """One named lease, wanted or held by ``holder_id`` (unique per process, e.g. ``<hostname>-<pid>``)."""

    def __init__(self, store: LeaseStore, name: str, holder_id: str, ttl_s: float) -> None:
        if ttl_s <= 0:
            raise ValueError(f"lease ttl must be positive, got {ttl_s}")
        self._store = store
        self.name = name
        self.holder_id = holder_id
        self.ttl_s = ttl_s
        self._token: int | None = None

    @property
    def token(self) -> int | None:
        """Our fencing token while we (believe we) hold the lease."""
        return self._token

    @property
    def fence(self) -> Fence:
        """What to pass to fenced writes. Raises LeaseNotHeldError if we never took the lease."""
        if self._token is None:
            raise LeaseNotHeldError(f"lease {self.name!r} is not held by {self.holder_id}")
        return Fence(lease=self.name, token=self._token)

    async def try_acquire(self) -> bool:
        """Take the lease if it is free (or already ours). Returns whether we hold it now."""
        result = await self._store.acquire(self.name, self.holder_id, self.ttl_s)
        if isinstance(result, LeaseAcquired):
            if self._token != result.token:
                logger.info("lease acquired", extra={"lease": self.name, "token": result.token})
            self._token = result.token
            return True
        self._token = None
        return False

    async def acquire(self, stop: asyncio.Event, retry_s: float | None = None) -> bool:
        """Wait until we hold the lease (standby), checking every ``retry_s`` (default ttl/3).

        Returns False if ``stop`` is set first. Redis outages are retried, not raised.
        """
        delay = retry_s if retry_s is not None else self.ttl_s / 3
        while not stop.is_set():
            try:
                if await self.try_acquire():
                    return True
            except TransientError as e:
                logger.warning("lease acquire failed", extra={"lease": self.name, "error": str(e)})
            await _wait(stop, delay)
        return False

    async def renew(self) -> bool:
        """Extend the lease if it is still ours. False means lost (another holder, or it expired)."""
        if self._token is None:
            return False
        ok = await self._store.renew(self.name, self.holder_id, self._token, self.ttl_s)
        if not ok:
            logger.warning("lease lost", extra={"lease": self.name, "token": self._token})
            self._token = None
        return ok

    async def release(self) -> bool:
        """Give the lease up if it is still ours, so a standby takes over without waiting for the ttl."""
        token, self._token = self._token, None
        if token is None:
            return False
        return await self._store.release(self.name, self.holder_id, token)

    async def current(self) -> LeaseInfo | None:
        """The lease as Redis has it now (any holder)."""
        return await self._store.inspect(self.name)

    async def current_token(self) -> int | None:
        """The token of whoever holds the lease now, or None if nobody does."""
        info = await self._store.inspect(self.name)
        return None if info is None else info.token


class LeaseKeeper:
    """Keeps a held lease renewed (every ``renew_every_s``, default ttl/3) and sets ``lost`` when it is gone.

    Transient Redis errors are retried until the lease would have expired since the last good renewal; then
    the lease counts as lost. Use as ``async with LeaseKeeper(lease) as keeper:`` (renews in a task named
    ``lease-keeper:<name>``, releases the lease on exit) or run :meth:`run` as a supervised root task.
    """

    def __init__(self, lease: Lease, *, renew_every_s: float | None = None) -> None:
        self.lease = lease
        self.renew_every_s = renew_every_s if renew_every_s is not None else lease.ttl_s / 3
        self.lost = asyncio.Event()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def run(self) -> None:
        """Renew until :meth:`stop` is called or the task is cancelled, or the lease is lost (``lost`` set).

        Any unexpected error also sets ``lost`` (the lease state is unknown) before propagating.
        """
        loop = asyncio.get_running_loop()
        last_ok = loop.time()
        try:
            while not self._stop.is_set():
                if await _wait(self._stop, self.renew_every_s):
                    return
                try:
                    if not await self.lease.renew():
                        self.lost.set()
                        return
                    last_ok = loop.time()
                except TransientError as e:
                    if loop.time() - last_ok >= self.lease.ttl_s:
                        logger.warning("lease expired during redis outage", extra={"lease": self.lease.name})
                        self.lost.set()
                        return
                    logger.warning("lease renew failed, retrying", extra={"lease": self.lease.name, "error": str(e)})
        except Exception:
            self.lost.set()
            raise

    def stop(self) -> None:
        """Ask :meth:`run` to return at its next wake-up (immediately if waiting)."""
        self._stop.set()

    async def __aenter__(self) -> LeaseKeeper:
        self._task = asyncio.create_task(self.run(), name=f"lease-keeper:{self.lease.name}")
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
        if self._task is not None:
            try:
                await self._task
            finally:
                self._task = None
        if not self.lost.is_set():
            try:
                await self.lease.release()
            except TransientError as e:
                logger.warning("lease release failed", extra={"lease": self.lease.name, "error": str(e)})
