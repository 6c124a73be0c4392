"""Node inventories: the envelope the extender decodes plus the plain capacity numbers the scripts check."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from vgpu_scheduler.shared.codec.envelope import decode_inventory, encode_inventory
from vgpu_scheduler.shared.domain.model import DeviceMode, NodeInventory
from vgpu_scheduler.shared.store._base import StoreContext, as_bytes, as_int, check_fenced, fence_args, text
from vgpu_scheduler.shared.store.types import Fence, PutResult


def capacity_value(inv: NodeInventory, device_index: int) -> str:
    """``count,devmem,devcore,mig,health,cordoned`` for one device: what the reserve script reads."""
    d = inv.devices[device_index]
    mig = 1 if d.mode == DeviceMode.MIG.value else 0
    return f"{d.count},{d.devmem_mib},{d.devcore},{mig},{1 if d.health else 0},{1 if d.id in inv.cordoned else 0}"


class InventoryRepo:
    """Written by the registrar (fenced), read by the extender."""

    def __init__(self, ctx: StoreContext) -> None:
        self._ctx = ctx

    async def put(self, inv: NodeInventory, fence: Fence | None = None) -> PutResult:
        """Store ``inv``; the node's generation moves (and a change event is appended) only if it changed."""
        k = self._ctx.keys
        extra_keys, token = fence_args(k, fence)
        args: list[str | bytes | int] = [token, inv.node, encode_inventory(inv), self._ctx.stream_maxlen]
        for i, d in enumerate(inv.devices):
            args += [d.id, capacity_value(inv, i)]
        keys = [k.inventory(inv.node), k.capacity(inv.node), k.generation(inv.node), k.changes(), k.inventory_nodes()]
        async with self._ctx.translated("put inventory"):
            reply = await self._ctx.scripts.put_inventory(keys=keys + extra_keys, args=args)
        check_fenced(reply, fence)
        return PutResult(changed=as_int(reply[2]) == 1, generation=as_int(reply[1]))

    async def delete(self, node: str, fence: Fence | None = None) -> PutResult:
        """Forget ``node``'s inventory (allocations stay until released); bumps its generation if it existed."""
        k = self._ctx.keys
        extra_keys, token = fence_args(k, fence)
        keys = [k.inventory(node), k.capacity(node), k.generation(node), k.changes(), k.inventory_nodes()]
        async with self._ctx.translated("delete inventory"):
            reply = await self._ctx.scripts.delete_inventory(
                keys=keys + extra_keys, args=[token, node, self._ctx.stream_maxlen]
            )
        check_fenced(reply, fence)
        return PutResult(changed=as_int(reply[2]) == 1, generation=as_int(reply[1]))

    async def get(self, node: str) -> NodeInventory | None:
        """The node's inventory, or None. Raises DecodeError/SchemaVersionError on a bad blob."""
        async with self._ctx.translated("get inventory"):
            blob = await self._ctx.client.get(self._ctx.keys.inventory(node))
        return None if blob is None else decode_inventory(as_bytes(blob))

    async def _get_each(self, what: str, keys: Sequence[str]) -> list[bytes | None]:
        """The value of each of ``keys`` (None where absent), in one round trip."""
        async with self._ctx.pipeline(what) as pipe:
            for key in keys:
                pipe.get(key)
            values: list[bytes | None] = await pipe.execute()
        return values

    async def get_many(self, nodes: Sequence[str]) -> dict[str, NodeInventory]:
        """The inventories of ``nodes`` that have one, in one round trip."""
        if not nodes:
            return {}
        blobs = await self._get_each("get inventories", [self._ctx.keys.inventory(n) for n in nodes])
        return {n: decode_inventory(b) for n, b in zip(nodes, blobs, strict=True) if b is not None}

    async def list_nodes(self) -> list[str]:
        """Every node with an inventory, sorted."""
        async with self._ctx.translated("list nodes"):
            members = await self._ctx.client.smembers(self._ctx.keys.inventory_nodes())
        return sorted(text(m) for m in members)

    async def generations(self, nodes: Iterable[str]) -> dict[str, int]:
        """Each node's generation (0 if it never had one), in one round trip."""
        names = list(nodes)
        if not names:
            return {}
        values = await self._get_each("get generations", [self._ctx.keys.generation(n) for n in names])
        return {n: 0 if v is None else int(v) for n, v in zip(names, values, strict=True)}
