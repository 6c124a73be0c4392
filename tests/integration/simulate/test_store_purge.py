"""``Store.purge()``: a scratch keyspace is removed whole, and only it (simulate's runs on a real Redis)."""

from __future__ import annotations

import pytest

from vgpu_scheduler.shared.store import Store, connect
from vgpu_scheduler.shared.store.keys import Keys


@pytest.mark.parametrize("prefix", ["sim-a", "odd*[pre]?fix"])
async def test_purge_deletes_exactly_the_prefix(redis_url: str, prefix: str) -> None:
    client = connect(redis_url)
    store, other = Store.create(client, prefix=prefix), Store.create(client, prefix=prefix + "x")
    try:
        for s in (store, other):
            await s.meta.ensure_epoch()
            await client.set(s.keys.node_lock("n1"), b"1")
            await client.set(s.keys.inventory(f"node-{s.keys.prefix}"), b"x")
        await client.set("unrelated", b"1")
        assert await store.purge(batch=2) == 3
        assert await client.keys(Keys(prefix).everything()) == []
        assert len(await client.keys(other.keys.everything())) == 3
        assert await client.get("unrelated") == b"1"
        assert await store.purge() == 0
    finally:
        await client.aclose()
