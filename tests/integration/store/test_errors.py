"""Failures surface as the project's error tree: unreachable Redis is transient, corrupt data a decode error."""

from __future__ import annotations

import socket

import msgpack  # type: ignore[import-untyped]
import pytest

from tests.integration.store.conftest import alloc, gpu, node
from vgpu_scheduler.shared.errors import DecodeError, SchemaVersionError, TransientError
from vgpu_scheduler.shared.store import ConnectionSettings, Store, connect


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_unreachable_redis_is_transient() -> None:
    settings = ConnectionSettings(socket_timeout_s=0.5, connect_timeout_s=0.5)
    store = Store.create(connect(f"redis://127.0.0.1:{_closed_port()}/0", settings))
    try:
        with pytest.raises(TransientError, match="ping"):
            await store.meta.ping()
        with pytest.raises(TransientError, match="unavailable"):
            await store.reservations.reserve(alloc("p1", "n1", (("GPU-a", 1, 1),)))
    finally:
        await store.aclose()


async def test_corrupt_inventory_is_a_decode_error(store: Store) -> None:
    await store.inventory.put(node("n1", gpu("GPU-a")))
    await store.client.set(store.keys.inventory("n1"), b"\xc1garbage")
    with pytest.raises(DecodeError, match="node-inventory"):
        await store.inventory.get("n1")
    await store.inventory.put(node("n2", gpu("GPU-b")))
    states = await store.snapshots.load(["n1", "n2"])
    assert isinstance(states["n1"].error, DecodeError) and states["n1"].inventory is None
    assert states["n1"].snapshot() is None
    assert states["n2"].error is None and states["n2"].inventory is not None


async def test_inventory_from_a_newer_writer_is_a_schema_version_error(store: Store) -> None:
    newer = msgpack.packb({"k": "node-inventory", "v": 99, "d": {}}, use_bin_type=True)
    await store.client.set(store.keys.inventory("n1"), newer)
    with pytest.raises(SchemaVersionError):
        await store.inventory.get("n1")
    assert isinstance((await store.snapshots.load(["n1"]))["n1"].error, SchemaVersionError)
