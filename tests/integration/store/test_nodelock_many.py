"""``NodeLockStore.inspect_many``: the held locks of many nodes in one round trip, as ``inspect`` sees them."""

from __future__ import annotations

from vgpu_scheduler.shared.store import Store


async def test_inspect_many_reports_held_locks_only(store: Store) -> None:
    await store.locks.acquire("n1", "default/a", ttl_s=300)
    await store.locks.acquire("n3", "other/b", ttl_s=60)

    many = await store.locks.inspect_many(["n1", "n2", "n3"])

    assert sorted(many) == ["n1", "n3"]
    for node in ("n1", "n3"):
        one = await store.locks.inspect(node)
        assert one is not None
        got = many[node]
        assert (got.node, got.owner, got.token, got.acquired_ms, got.expires_ms) == (
            one.node,
            one.owner,
            one.token,
            one.acquired_ms,
            one.expires_ms,
        )
    assert many["n3"].owner == "other/b"
    assert many["n3"].expires_ms - many["n3"].acquired_ms == 60_000


async def test_inspect_many_of_nothing_is_empty(store: Store) -> None:
    assert await store.locks.inspect_many([]) == {}
    assert await store.locks.inspect_many(["free"]) == {}


async def test_inspect_many_sees_a_release(store: Store) -> None:
    await store.locks.acquire("n1", "default/a", ttl_s=300)
    assert await store.locks.release("n1", "default/a")
    assert await store.locks.inspect_many(["n1"]) == {}


async def test_inspect_many_over_several_reads_of_keys(store: Store) -> None:
    nodes = [f"n{i:04d}" for i in range(2_500)]  # more than one MGET's worth
    held = ["n0000", "n0999", "n1000", "n2499"]
    for n in held:
        await store.locks.acquire(n, f"ns/{n}", ttl_s=300)
    many = await store.locks.inspect_many(nodes)
    assert sorted(many) == held
    assert all(many[n].owner == f"ns/{n}" and not many[n].expired for n in held)
