"""Reading stored allocations: where the pod index places a pod, one pod's record, every record of a node or of
the whole store, the unconfirmed ones (the informer's expiry), each decoded from its envelope with its state.

``AllocationReads`` is the read side of ``allocations.Reservations`` (which adds the atomic writes); a record
that cannot be decoded raises its decoder's error naming the pod and node, or is collected in ``errors``.
"""

from __future__ import annotations

from collections.abc import Sequence

from vgpu_scheduler.shared.codec.envelope import decode_allocation
from vgpu_scheduler.shared.domain.quota import QuotaState
from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.store._base import StoreContext, text
from vgpu_scheduler.shared.store.quota import QUOTA_FIELDS, quota_state
from vgpu_scheduler.shared.store.types import AllocationRecord, ReservationState, UndecodableRecord


def _parse_record(raw: bytes, blob: bytes | None, uid: str, node: str) -> AllocationRecord | None:
    """One stored record (None: its envelope is already gone, a release racing the read). A bad value raises
    the decoder's error class (:class:`SchemaVersionError` for a newer envelope) naming the pod and the node."""
    if blob is None:
        return None
    try:
        try:
            state_s, at_s, _ = raw.split(b"|", 2)
            state = ReservationState(state_s.decode())
            reserved_at_ms = int(at_s)
        except ValueError as e:
            raise DecodeError("stored reservation", "expected <state>|<reserved_at_ms>|<charges>", repr(raw)) from e
        allocation = decode_allocation(blob)
    except DecodeError as e:
        raise type(e)(f"stored allocation of pod {uid} on node {node}", str(e)) from e
    return AllocationRecord(allocation=allocation, state=state, reserved_at_ms=reserved_at_ms)


_CONFIRMED = ReservationState.CONFIRMED.value.encode() + b"|"


class AllocationReads:
    """The stored allocations as records (the read side of ``AllocationRepo``)."""

    def __init__(self, ctx: StoreContext) -> None:
        self._ctx = ctx

    async def node_of(self, pod_uid: str) -> str | None:
        """The node the pod index places ``pod_uid`` on, if any."""
        async with self._ctx.translated("read pod index"):
            node = await self._ctx.client.hget(self._ctx.keys.pod_index(), pod_uid)
        return None if node is None else text(node)

    async def node_and_quota(self, pod_uid: str, namespace: str) -> tuple[str | None, QuotaState]:
        """Where the pod index places ``pod_uid`` and ``namespace``'s quota, in one round trip (what the
        extender's ``/filter`` reads before planning)."""
        k = self._ctx.keys
        async with self._ctx.pipeline("read pod index and quota") as pipe:
            pipe.hget(k.pod_index(), pod_uid)
            pipe.hmget(k.quota(namespace), list(QUOTA_FIELDS))
            node, fields = await pipe.execute()
        return (None if node is None else text(node)), quota_state(fields)

    async def get(self, pod_uid: str, node: str | None = None) -> AllocationRecord | None:
        """The pod's stored allocation with its state, or None."""
        node = node or await self.node_of(pod_uid)
        if node is None:
            return None
        k = self._ctx.keys
        async with self._ctx.pipeline("get allocation") as pipe:
            pipe.hget(k.pod_charges(node), pod_uid)
            pipe.hget(k.allocations(node), pod_uid)
            raw, blob = await pipe.execute()
        if raw is None:
            return None
        return _parse_record(raw, blob, pod_uid, node)

    async def list_by_node(self, node: str, errors: list[UndecodableRecord] | None = None) -> list[AllocationRecord]:
        """Every allocation stored on ``node``, ordered by pod UID. ``errors``: see :meth:`list_all`."""
        return (await self._list_nodes([node], errors)).get(node, [])

    async def list_all(self, errors: list[UndecodableRecord] | None = None) -> dict[str, list[AllocationRecord]]:
        """Every stored allocation, by node.

        With an ``errors`` list, a record that cannot be decoded (a newer replica's envelope version during a
        rolling upgrade, a corrupt value) is left out and appended to it, so one bad record never hides the
        others; without one, the first raises its :class:`DecodeError` (strict: audits and tests).
        """
        async with self._ctx.translated("list allocation nodes"):
            nodes = sorted(text(n) for n in await self._ctx.client.smembers(self._ctx.keys.allocation_nodes()))
        return await self._list_nodes(nodes, errors)

    async def list_unconfirmed_older_than(
        self, age_s: float, errors: list[UndecodableRecord] | None = None
    ) -> list[AllocationRecord]:
        """Records still unconfirmed (reserved, binding or bound) ``age_s`` seconds after they were made (server
        clock).
        ``errors``: see :meth:`list_all`."""
        async with self._ctx.translated("read server time"):
            secs, micros = await self._ctx.client.time()
        cutoff_ms = secs * 1000 + micros // 1000 - int(age_s * 1000)
        return [
            r
            for records in (await self.list_all(errors)).values()
            for r in records
            if r.state.unconfirmed and r.reserved_at_ms <= cutoff_ms
        ]

    async def list_unconfirmed(self, errors: list[UndecodableRecord] | None = None) -> list[AllocationRecord]:
        """Every record not confirmed yet (reserved, binding or bound), read without decoding the confirmed ones:
        the states first (one pipelined read of every node's charges), then only those records' allocations.
        ``errors``: see :meth:`list_all`."""
        k = self._ctx.keys
        async with self._ctx.translated("list allocation nodes"):
            nodes = sorted(text(n) for n in await self._ctx.client.smembers(k.allocation_nodes()))
        if not nodes:
            return []
        async with self._ctx.pipeline("list reservation states") as pipe:
            for n in nodes:
                pipe.hgetall(k.pod_charges(n))
            states: list[dict[bytes, bytes]] = await pipe.execute()
        wanted = [
            (n, sorted(uid for uid, raw in charges.items() if not raw.startswith(_CONFIRMED)), charges)
            for n, charges in zip(nodes, states, strict=True)
        ]
        wanted = [w for w in wanted if w[1]]
        if not wanted:
            return []
        async with self._ctx.pipeline("list unconfirmed allocations") as pipe:
            for n, uids, _ in wanted:
                pipe.hmget(k.allocations(n), uids)
            blobs: list[list[bytes | None]] = await pipe.execute()
        out: list[AllocationRecord] = []
        for (n, uids, charges), values in zip(wanted, blobs, strict=True):
            for uid, blob in zip(uids, values, strict=True):
                try:
                    rec = _parse_record(charges[uid], blob, text(uid), n)
                except DecodeError as e:
                    if errors is None:
                        raise
                    errors.append(UndecodableRecord(pod_uid=text(uid), node=n, error=e))
                    continue
                if rec is not None and rec.state.unconfirmed:
                    out.append(rec)
        return out

    async def _list_nodes(
        self, nodes: Sequence[str], errors: list[UndecodableRecord] | None
    ) -> dict[str, list[AllocationRecord]]:
        if not nodes:
            return {}
        k = self._ctx.keys
        async with self._ctx.pipeline("list allocations") as pipe:
            for n in nodes:
                pipe.hgetall(k.pod_charges(n))
                pipe.hgetall(k.allocations(n))
            replies = await pipe.execute()
        out: dict[str, list[AllocationRecord]] = {}
        for i, n in enumerate(nodes):
            charges: dict[bytes, bytes] = replies[2 * i]
            blobs: dict[bytes, bytes] = replies[2 * i + 1]
            records = []
            for uid in sorted(charges):
                try:
                    rec = _parse_record(charges[uid], blobs.get(uid), text(uid), n)
                except DecodeError as e:
                    if errors is None:
                        raise
                    errors.append(UndecodableRecord(pod_uid=text(uid), node=n, error=e))
                    continue
                if rec is not None:
                    records.append(rec)
            if records:
                out[n] = records
        return out
