"""The store facade: every repository over one client, built once by a service's composition root."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from redis.asyncio import Redis
from redis.exceptions import NoScriptError

from vgpu_scheduler.shared.domain.allocation import Allocation
from vgpu_scheduler.shared.store._base import Durability, StoreContext, translated
from vgpu_scheduler.shared.store.allocations import Reservations
from vgpu_scheduler.shared.store.connection import aclose_client, connect, is_embedded, is_sentinel, primary_check
from vgpu_scheduler.shared.store.feed import ChangeFeed
from vgpu_scheduler.shared.store.inventory import InventoryRepo
from vgpu_scheduler.shared.store.keys import Keys
from vgpu_scheduler.shared.store.locks import LeaseStore, NodeLockStore
from vgpu_scheduler.shared.store.meta import MetaRepo
from vgpu_scheduler.shared.store.quota import QuotaRepo
from vgpu_scheduler.shared.store.scripts import Scripts
from vgpu_scheduler.shared.store.types import Fence, PodQuotaCharge, RecordResult
from vgpu_scheduler.shared.store.usage import SnapshotRepo, UsageRepo

if TYPE_CHECKING:
    from vgpu_scheduler.shared.config import CommonSettings

DEFAULT_WAIT_TIMEOUT_S = 0.25


@dataclass(frozen=True, slots=True)
class Store:
    """Typed access to everything vgpu-scheduler keeps in Redis."""

    client: Redis
    keys: Keys
    inventory: InventoryRepo
    reservations: Reservations
    usage: UsageRepo
    snapshots: SnapshotRepo
    feed: ChangeFeed
    quota: QuotaRepo
    meta: MetaRepo
    leases: LeaseStore
    locks: NodeLockStore

    @classmethod
    def for_service(cls, common: CommonSettings) -> Store:
        """A long-running service's store: ``--redis-url`` (embedded when unset) with its password file, key prefix
        and replica acknowledgement (``--redis-wait-replicas``, ``--redis-wait-timeout``)."""
        return cls.create(
            connect(common.redis_url, password_file=common.redis_password_file),
            prefix=common.key_prefix,
            wait_replicas=common.redis_wait_replicas,
            wait_timeout_s=common.redis_wait_timeout_s,
        )

    @classmethod
    def create(
        cls,
        client: Redis,
        *,
        prefix: str = "vgpu",
        stream_maxlen: int = 10_000,
        retry_delay_s: float = 0.5,
        wait_replicas: int | None = None,
        wait_timeout_s: float = DEFAULT_WAIT_TIMEOUT_S,
        track_primary: bool | None = None,
    ) -> Store:
        """Register the scripts on ``client`` and build the repositories (no round trip).

        ``wait_replicas``: replicas that must acknowledge a reservation before ``/filter`` answers it (``WAIT``, up
        to ``wait_timeout_s``); None = 1 for a Sentinel client, 0 otherwise. ``track_primary``: a new primary starts
        a new store epoch (docs/store.md, failover); None = for a Sentinel client or when waiting for replicas.
        """
        sentinel = is_sentinel(client)
        replicas = (1 if sentinel else 0) if wait_replicas is None else wait_replicas
        if is_embedded(client):  # one process, no replicas: nothing to wait for, no primary to follow
            replicas, track_primary = 0, False
        ctx = StoreContext(
            client=client,
            keys=Keys(prefix),
            scripts=Scripts.register(client),
            stream_maxlen=stream_maxlen,
            retry_delay_s=retry_delay_s,
            durability=Durability(replicas, max(1, round(wait_timeout_s * 1000))) if replicas > 0 else None,
            track_primary=(sentinel or replicas > 0) if track_primary is None else track_primary,
        )
        meta = MetaRepo(ctx)
        check = primary_check(client)
        if check is not None and ctx.track_primary:
            check.on_primary = meta.follow_primary_on  # every new connection: a new primary is known before use
        return cls(
            client=client,
            keys=ctx.keys,
            inventory=InventoryRepo(ctx),
            reservations=Reservations(ctx),
            usage=UsageRepo(ctx),
            snapshots=SnapshotRepo(ctx),
            feed=ChangeFeed(ctx),
            quota=QuotaRepo(ctx),
            meta=meta,
            leases=LeaseStore(ctx),
            locks=NodeLockStore(ctx),
        )

    async def record_observed(
        self, alloc: Allocation, charge: PodQuotaCharge, fence: Fence | None = None
    ) -> tuple[RecordResult, bool]:
        """``reservations.record(alloc)`` and ``quota.record`` of ``charge`` for the same pod, in one round trip
        (a pipeline; the two are independent and each is idempotent). Returns the record's outcome and whether the
        stored quota charge changed. A Redis that does not know a script yet (first use, a restart) answers NOSCRIPT:
        both calls are then made again one by one, which loads them."""
        calls = (
            self.reservations.record_call(alloc, fence),
            self.quota.record_call(alloc.namespace, alloc.pod_uid, charge, fence),
        )
        what = "record allocation and quota"
        async with translated(what), self.client.pipeline(transaction=False) as pipe:
            for call in calls:
                call.queue(pipe)
            record_reply, quota_reply = await pipe.execute(raise_on_error=False)
        if isinstance(record_reply, NoScriptError) or isinstance(quota_reply, NoScriptError):
            result = await self.reservations.record(alloc, fence)
            changed = await self.quota.record(
                alloc.namespace, alloc.pod_uid, charge.mem_mib, charge.cores_pct, fence, others=charge.others
            )
            return result, changed
        for reply in (record_reply, quota_reply):
            if isinstance(reply, BaseException):
                async with translated(what):
                    raise reply
        changed = self.quota.recorded(quota_reply, fence)
        return await self.reservations.recorded(record_reply, alloc, fence), changed

    async def purge(self, *, batch: int = 500) -> int:
        """Delete every key under this store's prefix; returns how many. For scratch keyspaces (``simulate`` on a
        real Redis), never for a live deployment's."""
        deleted = 0
        pending: list[bytes] = []
        async with translated(f"purge of {self.keys.prefix!r}"):
            async for key in self.client.scan_iter(match=self.keys.everything(), count=batch):
                pending.append(key)
                if len(pending) >= batch:
                    deleted += await self.client.unlink(*pending)
                    pending = []
            if pending:
                deleted += await self.client.unlink(*pending)
        return deleted

    async def aclose(self) -> None:
        """Close the client's connections (and a Sentinel client's connections to the Sentinels)."""
        await aclose_client(self.client)
