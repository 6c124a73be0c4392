"""Per-device usage of nodes, and the node snapshots the extender schedules from.

Usage is kept as **maintained counters** in one hash per node, updated by the same script that stores or
removes a pod's charges, so reading a node's usage is O(devices on the node) and never touches pods.
The per-pod charges stay stored beside them: :meth:`UsageRepo.recount` recomputes the counters from them
and repairs any difference (which would be a bug; the count is returned so callers can report it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.exceptions import NoScriptError

from vgpu_scheduler.shared.codec.envelope import decode_inventory
from vgpu_scheduler.shared.domain.model import DeviceUsage, MigPlacement, NodeInventory
from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.store._base import ScriptCall, StoreContext, as_int, check_fenced, fence_args, flat_pairs
from vgpu_scheduler.shared.store.types import Fence, NodeState, UsageAudit


@dataclass(slots=True)
class _Acc:
    used: int = 0
    mem: int = 0
    cores: int = 0
    placements: list[MigPlacement] = field(default_factory=list)
    legacy: dict[int, set[int]] = field(default_factory=dict)
    tags: dict[str, int] = field(default_factory=dict)


def parse_usage(fields: Mapping[bytes, bytes]) -> dict[str, DeviceUsage]:
    """Decode a node's usage hash into ``DeviceUsage`` by UUID (devices with nothing in use are absent).

    Legacy MIG: ``legacy_geometry`` is the geometry in use (the lowest, should records ever disagree) and
    ``legacy_slots`` its occupied slots.
    """
    acc: dict[str, _Acc] = {}
    try:
        for raw_f, raw_v in fields.items():
            f = raw_f.decode()
            if f.startswith("u|"):
                n, m, c, _x = (int(x) for x in raw_v.split(b","))
                a = acc.setdefault(f[2:], _Acc())
                a.used, a.mem, a.cores = n, m, c
            elif f.startswith("p|"):
                uuid, start_s, size_s = f[2:].rsplit("|", 2)
                count = int(raw_v)
                acc.setdefault(uuid, _Acc()).placements.extend([MigPlacement(int(start_s), int(size_s))] * count)
            elif f.startswith("l|"):
                uuid, geo_s, slot_s = f[2:].rsplit("|", 2)
                if int(raw_v) > 0:
                    acc.setdefault(uuid, _Acc()).legacy.setdefault(int(geo_s), set()).add(int(slot_s))
            elif f.startswith("g|"):
                uuid, tag = f[2:].rsplit("|", 1)
                if int(raw_v) > 0:
                    acc.setdefault(uuid, _Acc()).tags[tag] = int(raw_v)
            else:
                raise DecodeError("usage hash", "unknown field", f)
    except (ValueError, UnicodeDecodeError) as e:
        raise DecodeError("usage hash", f"malformed counters: {e}") from e
    out: dict[str, DeviceUsage] = {}
    for uuid, a in acc.items():
        geometry = min(a.legacy) if a.legacy else None
        out[uuid] = DeviceUsage(
            used=a.used,
            used_mem_mib=a.mem,
            used_cores=a.cores,
            mig_in_use=tuple(sorted(a.placements, key=lambda p: (p.start, p.size))),
            legacy_geometry=geometry,
            legacy_slots=frozenset(a.legacy[geometry]) if geometry is not None else frozenset(),
            tags=tuple(sorted(a.tags.items())),
        )
    return out


def _as_fields(reply: Any) -> dict[bytes, bytes]:
    if isinstance(reply, dict):
        return reply
    return flat_pairs(reply)


class UsageRepo:
    """Reads usage counters; ``recount`` is the informer's repair tool."""

    def __init__(self, ctx: StoreContext) -> None:
        self._ctx = ctx

    async def node_usage(self, node: str) -> dict[str, DeviceUsage]:
        """Usage of ``node``'s devices by UUID, O(devices). Absent UUID = nothing in use."""
        async with self._ctx.translated("read usage"):
            fields = await self._ctx.client.hgetall(self._ctx.keys.usage(node))
        return parse_usage(_as_fields(fields))

    async def raw(self, node: str) -> dict[bytes, bytes]:
        """The node's usage hash as stored (for audits and metrics)."""
        async with self._ctx.translated("read usage"):
            fields = await self._ctx.client.hgetall(self._ctx.keys.usage(node))
        return _as_fields(fields)

    async def recount(self, node: str, fence: Fence | None = None) -> UsageAudit:
        """Recompute ``node``'s counters from its stored per-pod charges; repair and count differing fields."""
        k = self._ctx.keys
        extra_keys, token = fence_args(k, fence)
        keys = [k.usage(node), k.pod_charges(node), k.generation(node), k.changes()]
        async with self._ctx.translated("recount usage"):
            reply = await self._ctx.scripts.recount_usage(
                keys=keys + extra_keys, args=[token, node, self._ctx.stream_maxlen]
            )
        check_fenced(reply, fence)
        return UsageAudit(node=node, drift=as_int(reply[1]), generation=as_int(reply[2]))


class SnapshotRepo:
    """Loads (inventory, usage, generation) for many nodes in one pipelined round trip; each node atomic.

    Decoded inventories are kept per node with their bytes and reused while the bytes are unchanged (inventories
    change rarely, usage often), so a reload mostly costs the usage counters.
    """

    def __init__(self, ctx: StoreContext) -> None:
        self._ctx = ctx
        self._decoded: dict[str, tuple[bytes, NodeInventory]] = {}

    def _inventory(self, node: str, blob: bytes) -> NodeInventory | None:
        if not blob:
            self._decoded.pop(node, None)
            return None
        cached = self._decoded.get(node)
        if cached is not None and cached[0] == blob:
            return cached[1]
        inv = decode_inventory(blob)
        self._decoded[node] = (blob, inv)
        return inv

    async def load(self, nodes: Sequence[str]) -> dict[str, NodeState]:
        """The stored state of ``nodes``, each read atomically by a script. A node whose data does not decode
        comes back with ``error`` set instead of failing the whole load."""
        if not nodes:
            return {}
        k = self._ctx.keys
        script = self._ctx.scripts.node_snapshot
        calls = [
            ScriptCall(script, [k.inventory(n), k.usage(n), k.generation(n), k.pod_charges(n), k.node_lock(n)], [])
            for n in nodes
        ]
        # Queued as EVALSHA (ScriptCall): a Script object in a pipeline makes redis-py check SCRIPT EXISTS first, one
        # more round trip on every load. A Redis that lost its script cache (restarted, SCRIPT FLUSH) answers
        # NOSCRIPT: load the script and read again.
        for attempt in range(2):
            async with self._ctx.pipeline("load snapshots") as pipe:
                for call in calls:
                    call.queue(pipe)
                try:
                    replies = await pipe.execute()
                except NoScriptError:
                    if attempt:
                        raise
                    await self._ctx.client.script_load(script.script)
                    continue
            break
        out: dict[str, NodeState] = {}
        for n, (blob, flat, gen, busy) in zip(nodes, replies, strict=True):
            try:
                out[n] = NodeState(
                    node=n,
                    inventory=self._inventory(n, blob),
                    usage=parse_usage(flat_pairs(flat)),
                    generation=as_int(gen),
                    binds_in_flight=as_int(busy),
                )
            except DecodeError as e:
                out[n] = NodeState(node=n, inventory=None, usage={}, generation=as_int(gen), error=e)
        return out
