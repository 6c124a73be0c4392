"""Reservations and allocations: per-pod charges applied to a node's usage counters atomically, keyed by pod UID.

The extender ``reserve``s (capacity-checked; a refusal is a :class:`ReserveConflict` result); the informer
``record``s what pods' annotations say (unconditional: the API is the source of truth), ``confirm``s
reservations it has seen, ``release``s ended pods and collects reservations never confirmed.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vgpu_scheduler.shared.codec.envelope import decode_allocation, encode_allocation
from vgpu_scheduler.shared.domain.allocation import Allocation
from vgpu_scheduler.shared.domain.model import DeviceCharge
from vgpu_scheduler.shared.errors import ConflictError, DecodeError, VgpuError
from vgpu_scheduler.shared.store._base import (
    ReplicationShortfall,
    ScriptCall,
    StoreContext,
    StoreEpochChanged,
    as_int,
    check_fenced,
    fence_args,
    run_script,
    text,
)
from vgpu_scheduler.shared.store.allocation_reads import AllocationReads
from vgpu_scheduler.shared.store.keys import Keys
from vgpu_scheduler.shared.store.types import (
    Claimed,
    ClaimRefused,
    ConflictDimension,
    Fence,
    Owned,
    RecordResult,
    ReservationState,
    ReserveConflict,
    Reserved,
    ReserveResult,
    Unsettled,
)

_MAX_MOVES = 3
"""How often a reservation may find the pod indexed on another node before giving up (a concurrent mover)."""
_NODE_KEYS_CACHED = 16_384
"""Nodes whose reserve-script keys are kept encoded (least recently used ones dropped beyond)."""


def _record_keys(k: Keys, node: str) -> tuple[str, ...]:
    """The keys a pod's record on ``node`` lives in and is announced by, in the order the apply script (after the
    node's capacity) and the release script take them."""
    return (
        k.usage(node),
        k.pod_charges(node),
        k.allocations(node),
        k.generation(node),
        k.changes(),
        k.allocation_nodes(),
        k.pod_index(),
        k.claims(node),
    )


def charges_json(charges: Sequence[DeviceCharge]) -> str:
    """The Lua-readable form of a pod's charges (deterministic; compared byte for byte for idempotency)."""
    seen: set[str] = set()
    out: list[dict[str, Any]] = []
    for c in charges:
        if c.uuid in seen:
            raise DecodeError("allocation charges", "a device appears twice; collapse() the device list first", c.uuid)
        seen.add(c.uuid)
        for name, v in (("slots", c.slots), ("mem_mib", c.mem_mib), ("cores_pct", c.cores_pct)):
            if v < 0:
                raise DecodeError("allocation charges", f"{name} must not be negative", f"{c.uuid}: {v}")
        for p in c.mig_placements:
            if p.start < 0 or p.size <= 0:
                raise DecodeError("allocation charges", "MIG placement needs start >= 0 and size > 0", c.uuid)
        for g, s in c.legacy_mig:
            if g < 0 or s < 0:
                raise DecodeError("allocation charges", "legacy MIG geometry and slot must be >= 0", c.uuid)
        for tag in (*c.tags, *c.refuse_tags, *c.need_tags):
            if "|" in tag:
                raise DecodeError("allocation charges", "a tag must not contain '|'", f"{c.uuid}: {tag!r}")
        out.append(
            {
                "u": c.uuid,
                "n": c.slots,
                "m": c.mem_mib,
                "c": c.cores_pct,
                "x": 1 if c.exclusive else 0,
                "p": [[p.start, p.size] for p in c.mig_placements],
                "l": [[g, s] for g, s in c.legacy_mig],
                **({"s": 1} if c.uniform else {}),
                **({"t": list(c.tags)} if c.tags else {}),
                **({"r": list(c.refuse_tags)} if c.refuse_tags else {}),
                **({"q": list(c.need_tags)} if c.need_tags else {}),
                **({"z": 1} if c.cores_unchecked else {}),
            }
        )
    return json.dumps(out, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class _Apply:
    """The apply script's options beyond the mode, the allocation and the fence (see :meth:`Reservations.reserve`)."""

    mutex: bool = False
    epoch: str | None = None
    fresh: bool = False
    hint: str = ""
    victims: tuple[str, ...] = ()


_PLAIN = _Apply()


class Reservations(AllocationReads):
    """Per-pod device charges on nodes (``AllocationRepo``): the atomic writes; the reads are
    :class:`AllocationReads`'."""

    def __init__(self, ctx: StoreContext) -> None:
        super().__init__(ctx)
        self._node_keys = functools.lru_cache(maxsize=_NODE_KEYS_CACHED)(self._apply_node_keys)

    def _apply_node_keys(self, node: str) -> tuple[bytes, ...]:
        """KEYS 1-9, 11 and 12 of the reserve script for ``node``, built and encoded once per node (every ``/filter``
        reserves on one; bytes go to Redis as they are)."""
        k = self._ctx.keys
        keys = (k.capacity(node), *_record_keys(k, node), k.meta(), k.bind_hints(node))
        return tuple(key.encode() for key in keys)

    def _apply_keys(self, alloc: Allocation, fresh: bool) -> list[str | bytes]:
        *first, meta, hints = self._node_keys(alloc.node)
        # KEYS[10] is read by a fresh reserve only (the pod's namespace quota); the pod index stands in otherwise
        return [*first, self._ctx.keys.quota(alloc.namespace) if fresh else first[7], meta, hints]

    def _apply_args(self, mode: str, alloc: Allocation, fence: Fence | None, opts: _Apply = _PLAIN) -> list[Any]:
        """ARGV of the apply script (its KEYS: :meth:`_apply_keys` and the fence's)."""
        _, token = fence_args(self._ctx.keys, fence)
        return [
            token,
            mode,
            alloc.pod_uid,
            charges_json(alloc.charges),
            encode_allocation(alloc),
            alloc.node,
            self._ctx.stream_maxlen,
            "1" if opts.mutex else "0",
            "1" if opts.fresh else "0",
            opts.epoch or "",
            opts.hint,
            json.dumps(list(opts.victims), separators=(",", ":")) if opts.victims else "",
        ]

    async def _run_apply(self, mode: str, alloc: Allocation, fence: Fence | None, opts: _Apply = _PLAIN) -> list[Any]:
        args = self._apply_args(mode, alloc, fence, opts)
        extra_keys, _ = fence_args(self._ctx.keys, fence)
        for _ in range(_MAX_MOVES):
            script_keys = self._apply_keys(alloc, opts.fresh) + extra_keys
            if mode == "reserve":  # the decision /filter answers: on the replicas too before it is acknowledged
                reply = await self._durable_reserve(alloc, script_keys, args)
            else:
                async with self._ctx.translated(f"{mode} allocation"):
                    reply = await self._ctx.scripts.apply_allocation(keys=script_keys, args=args)
            check_fenced(reply, fence)
            if reply[0] == b"epoch":
                raise StoreEpochChanged(
                    f"pod {alloc.pod_uid}: the store epoch is no longer {opts.epoch} (Redis flushed or a new primary): "
                    "nothing reserved until the store is rebuilt",
                    self._ctx.retry_delay_s,
                )
            if reply[0] != b"elsewhere":
                return reply
            # the pod still holds charges on another node: drop them there first (docs/store.md); the record
            # released there is not decoded (it may be unreadable, and nobody needs it). A reserve moves only a
            # plain reservation: one a bind owns stays, and the caller learns where it is.
            elsewhere = text(reply[1])
            released = await self._release(alloc.pod_uid, elsewhere, fence, "reserved" if mode == "reserve" else "")
            if isinstance(released, Owned):
                return [b"owned", released.state.value.encode(), elsewhere.encode()]
        raise ConflictError(f"pod {alloc.pod_uid}: its previous node kept changing while moving it to {alloc.node}")

    async def _durable_reserve(self, alloc: Allocation, script_keys: list[str | bytes], args: list[Any]) -> list[Any]:
        """The reserve script, waited for on the replicas (``StoreContext.durability``). When too few replicas
        acknowledged it, the reservation is given back (best effort: the informer's expiry collects it otherwise)
        and :class:`ReplicationShortfall` raised, so that nothing is answered on a reservation a failover
        could lose."""
        try:
            reply: list[Any] = await run_script(
                self._ctx, self._ctx.scripts.apply_allocation, "reserve allocation", script_keys, args
            )
        except ReplicationShortfall:
            with contextlib.suppress(VgpuError):
                await self._release(alloc.pod_uid, alloc.node, None, "reserved")
            raise
        return reply

    async def reserve(
        self,
        alloc: Allocation,
        fence: Fence | None = None,
        *,
        mutex: bool = False,
        epoch: str | None = None,
        hint: str = "",
        victims: Sequence[str] = (),
    ) -> ReserveResult:
        """Atomically check that ``alloc.charges`` fit on ``alloc.node`` and reserve them for ``alloc.pod_uid``.

        ``mutex``: the pod's GPU policy includes ``mutex``, so every charged device must be idle (hami-wire §6.4
        step 7; the charges alone cannot say so). Idempotent: the same content again is a no-op success; a
        different earlier reservation of the pod on this node is replaced in the same step, and one on another
        node is released first. A record a decision owns (claimed by a bind, bound, confirmed: not ``reserved``)
        is never replaced or moved: the answer is :class:`Owned` with its node and state.

        ``epoch``: the store epoch the caller planned in; when the store is in another one (flushed, or a new
        primary: docs/store.md, failover), nothing is written and :class:`StoreEpochChanged` is raised.

        ``hint``: what the bind of this reservation may use instead of reading the pod (opaque here; empty: none).
        A successful reserve stores it with the record (or clears an older one); :meth:`claim` returns it.

        ``victims``: a preemption hold (docs/preemption.md). The charges of these pods on the node (the preempted
        pods, terminating) count as freed for the checks but stay in the usage until the informer releases them,
        so nobody else takes the room they leave; :meth:`preemption_waiting` tells how many still hold it.
        """
        return self._reserve_result(
            alloc,
            await self._run_apply(
                "reserve", alloc, fence, _Apply(mutex=mutex, epoch=epoch, hint=hint, victims=tuple(victims))
            ),
        )

    async def renew(self, pod_uid: str, node: str) -> bool:
        """Restart a plain reservation's clock (a re-filter answered it again); False when there is none or a bind
        already owns it."""
        async with self._ctx.translated("renew reservation"):
            reply = await self._ctx.scripts.renew_reservation(
                keys=[self._ctx.keys.pod_charges(node)], args=["", pod_uid]
            )
        return as_int(reply) == 1

    async def begin_preemption(self, pod_uid: str, owner: str, ttl_s: float) -> bool:
        """Take the right to preempt for ``pod_uid`` for ``ttl_s`` (False: another replica has it)."""
        async with self._ctx.translated("begin preemption"):
            taken = await self._ctx.client.set(
                self._ctx.keys.preempting(pod_uid), owner, nx=True, px=max(1, round(ttl_s * 1000))
            )
        return bool(taken)

    async def renew_preemption(self, pod_uid: str, owner: str, ttl_s: float) -> bool:
        """Extend the right of :meth:`begin_preemption` to ``ttl_s`` from now, if still ours (False: it is not)."""
        key = self._ctx.keys.preempting(pod_uid)
        async with self._ctx.translated("renew preemption"):
            if text(await self._ctx.client.get(key) or b"") != owner:
                return False
            return bool(await self._ctx.client.pexpire(key, max(1, round(ttl_s * 1000))))

    async def end_preemption(self, pod_uid: str, owner: str) -> None:
        """Give back the right taken by :meth:`begin_preemption` (an attempt that evicted nobody), if still ours."""
        key = self._ctx.keys.preempting(pod_uid)
        async with self._ctx.translated("end preemption"):
            if text(await self._ctx.client.get(key) or b"") == owner:
                await self._ctx.client.delete(key)

    async def mark_gang_failed(self, namespace: str, group: str, text: str, ttl_s: float) -> None:
        """Remember for ``ttl_s`` that PodGroup ``group`` cannot be placed whole, and why (docs/gangs.md)."""
        async with self._ctx.translated("mark gang failed"):
            await self._ctx.client.set(
                self._ctx.keys.gang_failed(namespace, group), text, px=max(1, round(ttl_s * 1000))
            )

    async def note_gang_failure(self, namespace: str, group: str, member: str, window_s: float) -> set[str]:
        """Remember that ``member`` of PodGroup ``group`` fitted on no node now; return the members that did within
        the last ``window_s`` (this one included) and have not fitted since (:meth:`clear_gang_failure`)."""
        key = self._ctx.keys.gang_failing(namespace, group)
        async with self._ctx.translated("note gang failure"):
            secs, micros = await self._ctx.client.time()
            now_ms = secs * 1000 + micros // 1000
            await self._ctx.client.hset(key, member, str(now_ms))
            await self._ctx.client.pexpire(key, max(1, round(window_s * 2000)))
            raw = await self._ctx.client.hgetall(key)
        cutoff = now_ms - round(window_s * 1000)
        return {text(m) for m, t in raw.items() if int(text(t)) >= cutoff}

    async def clear_gang_failure(self, namespace: str, group: str, member: str) -> None:
        """``member`` of PodGroup ``group`` found a node: it no longer counts among the group's failures."""
        async with self._ctx.translated("clear gang failure"):
            await self._ctx.client.hdel(self._ctx.keys.gang_failing(namespace, group), member)

    async def gang_failed(self, namespace: str, group: str) -> str | None:
        """Why PodGroup ``group`` cannot be placed whole, while that is remembered (None: it may be)."""
        async with self._ctx.translated("read gang state"):
            raw = await self._ctx.client.get(self._ctx.keys.gang_failed(namespace, group))
        return None if raw is None else text(raw)

    async def preemption_waiting(self, pod_uid: str, node: str, *, cleanup: bool = True) -> int:
        """How many of the pods preempted for ``pod_uid``'s hold on ``node`` still hold charges there (0: none,
        or no hold). With ``cleanup`` the marker is dropped once they are all gone."""
        k = self._ctx.keys
        async with self._ctx.translated("read preemption hold"):
            raw = await self._ctx.client.hget(k.bind_hints(node), f"w|{pod_uid}")
            if raw is None:
                return 0
            victims = [str(v) for v in json.loads(raw)]
            if not victims:
                return 0
            present = await self._ctx.client.hmget(k.pod_charges(node), victims)
            waiting = sum(1 for v in present if v is not None)
            if waiting == 0 and cleanup:
                await self._ctx.client.hdel(k.bind_hints(node), f"w|{pod_uid}")
        return waiting

    async def reserve_fresh(
        self, alloc: Allocation, *, mutex: bool = False, epoch: str | None = None, hint: str = ""
    ) -> ReserveResult | Unsettled:
        """:meth:`reserve`, only if the pod index holds nothing for the pod and its namespace has no quota
        envelope, checked in the same atomic step: what ``/filter`` would otherwise read first (in a round trip of
        its own). Otherwise nothing is reserved and the answer is :class:`Unsettled` (with the indexed node)."""
        reply = await self._run_apply("reserve", alloc, None, _Apply(mutex=mutex, epoch=epoch, fresh=True, hint=hint))
        if reply[0] == b"unsettled":
            return Unsettled(pod_uid=alloc.pod_uid, node=text(reply[1]) or None)
        return self._reserve_result(alloc, reply)

    @staticmethod
    def _reserve_result(alloc: Allocation, reply: list[Any]) -> ReserveResult:
        if reply[0] == b"owned":
            node = text(reply[2]) if len(reply) > 2 else alloc.node
            return Owned(pod_uid=alloc.pod_uid, node=node, state=ReservationState(text(reply[1])))
        if reply[0] == b"conflict":
            return ReserveConflict(
                pod_uid=alloc.pod_uid,
                node=alloc.node,
                dimension=ConflictDimension(text(reply[1])),
                device=text(reply[2]),
                needed=as_int(reply[3]),
                free=as_int(reply[4]),
                detail=text(reply[5]),
            )
        return Reserved(
            pod_uid=alloc.pod_uid, node=alloc.node, generation=as_int(reply[1]), changed=as_int(reply[2]) == 1
        )

    async def record(self, alloc: Allocation, fence: Fence | None = None) -> RecordResult:
        """Store an allocation observed in the API (confirmed), with no capacity check: the API is the truth."""
        return self._record_result(await self._run_apply("record", alloc, fence))

    def record_call(self, alloc: Allocation, fence: Fence | None = None) -> ScriptCall:
        """:meth:`record` as one script call to send in a pipeline; its reply goes to :meth:`recorded`."""
        extra_keys, _ = fence_args(self._ctx.keys, fence)
        return ScriptCall(
            self._ctx.scripts.apply_allocation,
            [*self._apply_keys(alloc, False), *extra_keys],
            self._apply_args("record", alloc, fence),
        )

    async def recorded(self, reply: Any, alloc: Allocation, fence: Fence | None = None) -> RecordResult:
        """The outcome of a :meth:`record_call` from its reply. Raises StaleFenceError when it was fenced out; a
        pod still indexed on another node (the call recorded nothing) is moved as :meth:`record` moves it."""
        check_fenced(reply, fence)
        if reply[0] == b"elsewhere":
            return await self.record(alloc, fence)
        return self._record_result(reply)

    @staticmethod
    def _record_result(reply: list[Any]) -> RecordResult:
        return RecordResult(
            generation=as_int(reply[1]), usage_changed=as_int(reply[2]) == 1, record_changed=as_int(reply[3]) == 1
        )

    async def confirm(self, pod_uid: str, node: str | None = None, fence: Fence | None = None) -> bool:
        """Mark the pod's reservation confirmed. False if the pod holds nothing (on ``node`` or where indexed)."""
        node = node or await self.node_of(pod_uid)
        if node is None:
            return False
        extra_keys, token = fence_args(self._ctx.keys, fence)
        async with self._ctx.translated("confirm allocation"):
            k = self._ctx.keys
            reply = await self._ctx.scripts.confirm_allocation(
                keys=[k.pod_charges(node), k.generation(node), k.changes(), k.node_lock(node), *extra_keys],
                args=[token, pod_uid, self._ctx.stream_maxlen, node],
            )
        check_fenced(reply, fence)
        return bool(reply[0] == b"ok")

    async def release(self, pod_uid: str, node: str | None = None, fence: Fence | None = None) -> Allocation | None:
        """Give back what the pod holds on ``node`` (default: where the pod index says). Returns what was
        released, or None if there was nothing (a no-op) or what was released cannot be decoded (a newer
        replica's envelope, a corrupt value: the release stands, there is just nothing readable to return)."""
        node = node or await self.node_of(pod_uid)
        if node is None:
            return None
        blob = await self._release(pod_uid, node, fence)
        if not isinstance(blob, bytes):
            return None
        try:
            return decode_allocation(blob)
        except DecodeError:
            return None  # released all the same: a caller must not fail after the write succeeded

    async def release_unowned(self, pod_uid: str, node: str) -> Owned | bool:
        """Release the pod's record on ``node`` only while it is a plain reservation (a re-filter giving it back).
        True when released, False when there was nothing, :class:`Owned` (nothing written) when a bind claimed it,
        bound it or the informer confirmed it."""
        released = await self._release(pod_uid, node, None, "reserved")
        return released if isinstance(released, Owned) else isinstance(released, bytes)

    async def release_unclaimed(self, pod_uid: str, node: str, fence: Fence | None = None) -> bool:
        """Release the pod's record on ``node`` unless a bind holds a live claim on it (the informer's expiry of
        an unconfirmed record). True when something was released."""
        released = await self._release(pod_uid, node, fence, "unclaimed")
        return isinstance(released, bytes)

    async def release_claimed(self, pod_uid: str, node: str, token: str) -> bool:
        """Release the pod's record on ``node`` only while the bind holding ``token`` owns it (that bind's undo).
        True when something was released."""
        released = await self._release(pod_uid, node, None, f"claim:{token}")
        return isinstance(released, bytes)

    async def claim(
        self, pod_uid: str, node: str, token: str, ttl_s: float, *, only_reserved: bool = False
    ) -> Claimed | ClaimRefused:
        """Make the bind holding ``token`` the owner of the pod's record on ``node`` for ``ttl_s`` (design:
        ownership). The allocation returned is the one read in the same atomic step: the bind writes exactly
        that, with the record's bind hint. Another bind's live claim refuses (``busy``); an expired one is taken
        over. ``only_reserved``: claim only a plain reservation; a record already claimed, bound or confirmed is
        refused (``owned``, with its state) and nothing is written."""
        reply = await self._claim_op(
            "claim", pod_uid, node, token, ttl_s, condition="reserved" if only_reserved else ""
        )
        if reply[0] != b"ok":
            kind = text(reply[0])
            if kind == "elsewhere":
                return ClaimRefused(kind, node=text(reply[1]))
            if kind == "busy":
                return ClaimRefused(kind, node=node, remaining_ms=as_int(reply[1]))
            if kind == "owned":
                return ClaimRefused(kind, node=node, state=text(reply[1]))
            return ClaimRefused(kind, node=node)
        try:
            allocation = decode_allocation(reply[2])
        except DecodeError as e:
            raise type(e)(f"stored allocation of pod {pod_uid} on node {node}", str(e)) from e
        previous = ReservationState(text(reply[1]))
        hint = text(reply[4]) if len(reply) > 4 else ""
        return Claimed(allocation=allocation, previous=previous, took_over=as_int(reply[3]) == 1, hint=hint)

    async def check_claim(self, pod_uid: str, node: str, token: str, ttl_s: float) -> bool:
        """True while ``token`` still owns the pod's record on ``node`` (and extend the claim by ``ttl_s``)."""
        return bool((await self._claim_op("check", pod_uid, node, token, ttl_s))[0] == b"ok")

    async def finish_claim(self, pod_uid: str, node: str, token: str) -> bool:
        """The Binding exists: the record becomes ``bound`` (unless already confirmed) and the claim is dropped.
        False when ``token`` no longer owned it."""
        return bool((await self._claim_op("finish", pod_uid, node, token, 0))[0] == b"ok")

    async def _claim_op(
        self, op: str, pod_uid: str, node: str, token: str, ttl_s: float, *, condition: str = ""
    ) -> list[Any]:
        k = self._ctx.keys
        script_keys = [k.pod_charges(node), k.allocations(node), k.claims(node), k.pod_index(), k.bind_hints(node)]
        args: list[Any] = ["", op, pod_uid, node, token, int(ttl_s * 1000), condition]
        if op == "check":
            # the last word before the bind writes the pod: its claim (and the record's binding state) must be
            # on a replica too, or after a failover another bind could take the record of a pod already bound
            reply: list[Any] = await run_script(
                self._ctx, self._ctx.scripts.claim_allocation, f"{op} bind claim", script_keys, args
            )
            return reply
        async with self._ctx.translated(f"{op} bind claim"):
            reply = await self._ctx.scripts.claim_allocation(keys=script_keys, args=args)
        return reply

    async def _release(self, pod_uid: str, node: str, fence: Fence | None, condition: str = "") -> bytes | Owned | None:
        """Release the pod's charges on ``node`` if ``condition`` allows (see ``release_allocation.lua``); the
        envelope of what was released, undecoded (None: nothing there; :class:`Owned`: the condition refused)."""
        k = self._ctx.keys
        extra_keys, token = fence_args(k, fence)
        keys = [*_record_keys(k, node), k.bind_hints(node)]
        async with self._ctx.translated("release allocation"):
            reply = await self._ctx.scripts.release_allocation(
                keys=keys + extra_keys, args=[token, pod_uid, node, self._ctx.stream_maxlen, condition]
            )
        check_fenced(reply, fence)
        if reply[0] == b"owned":
            return Owned(pod_uid=pod_uid, node=node, state=ReservationState(text(reply[1])))
        if reply[0] != b"ok" or not reply[3]:
            return None
        blob: bytes = reply[3]
        return blob
