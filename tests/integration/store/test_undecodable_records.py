"""Listing allocations with one unreadable record (a newer replica's envelope, corrupt bytes): the others still come
back, the bad one is reported by pod and node and left untouched in Redis."""

from __future__ import annotations

import msgpack  # type: ignore[import-untyped]
import pytest

from tests.integration.store.conftest import alloc, gpu, node
from vgpu_scheduler.shared.codec.envelope import encode_allocation
from vgpu_scheduler.shared.domain.model import DeviceUsage
from vgpu_scheduler.shared.errors import DecodeError, SchemaVersionError
from vgpu_scheduler.shared.store import ReservationState, Store, UndecodableRecord


def newer_envelope(uid: str, node_name: str) -> bytes:
    """An allocation envelope as a future replica might write it: version 99, an extra field."""
    body = msgpack.unpackb(encode_allocation(alloc(uid, node_name, (("GPU-a", 100, 10),))), raw=False)
    body["v"] = 99
    body["d"]["future_field"] = [1, 2, 3]
    packed: bytes = msgpack.packb(body, use_bin_type=True)
    return packed


BAD_BLOBS = {
    "newer-version": (newer_envelope("bad", "n1"), SchemaVersionError),
    "random-bytes": (b"\xc1\x00\xff garbage \x93", DecodeError),
    "wrong-kind": (msgpack.packb({"k": "quota-limits", "v": 1, "d": {}}), DecodeError),
}


@pytest.fixture
async def populated(store: Store) -> Store:
    await store.inventory.put(node("n1", gpu("GPU-a")))
    await store.inventory.put(node("n2", gpu("GPU-c")))
    await store.reservations.record(alloc("a", "n1", (("GPU-a", 1000, 30),)))
    await store.reservations.record(alloc("bad", "n1", (("GPU-a", 100, 10),)))
    await store.reservations.reserve(alloc("c", "n1", (("GPU-a", 500, 10),)))
    await store.reservations.record(alloc("d", "n2", (("GPU-c", 200, 20),)))
    return store


async def corrupt(store: Store, uid: str, node_name: str, blob: bytes) -> None:
    await store.client.hset(store.keys.allocations(node_name), uid, blob)


@pytest.mark.parametrize("blob_kind", list(BAD_BLOBS))
async def test_list_all_returns_the_readable_records_and_reports_the_other(populated: Store, blob_kind: str) -> None:
    s = populated
    blob, error_type = BAD_BLOBS[blob_kind]
    await corrupt(s, "bad", "n1", blob)
    usage_before = await s.usage.node_usage("n1")

    errors: list[UndecodableRecord] = []
    listed = await s.reservations.list_all(errors)

    assert {n: [r.allocation.pod_uid for r in rs] for n, rs in listed.items()} == {"n1": ["a", "c"], "n2": ["d"]}
    assert [(e.pod_uid, e.node, type(e.error)) for e in errors] == [("bad", "n1", error_type)]
    assert errors[0].newer_version is (error_type is SchemaVersionError)
    assert "pod bad on node n1" in str(errors[0].error)
    # listing wrote nothing: the record, its charges and the node's usage are as they were
    assert await s.client.hget(s.keys.allocations("n1"), "bad") == blob
    assert await s.usage.node_usage("n1") == usage_before
    assert await s.reservations.node_of("bad") == "n1"


async def test_list_by_node_and_unconfirmed_are_tolerant_too(populated: Store) -> None:
    s = populated
    await corrupt(s, "bad", "n1", newer_envelope("bad", "n1"))

    by_node: list[UndecodableRecord] = []
    assert [r.allocation.pod_uid for r in await s.reservations.list_by_node("n1", by_node)] == ["a", "c"]
    assert [(e.pod_uid, e.node) for e in by_node] == [("bad", "n1")]

    unconfirmed: list[UndecodableRecord] = []
    stale = await s.reservations.list_unconfirmed_older_than(0, unconfirmed)
    assert [(r.allocation.pod_uid, r.state) for r in stale] == [("c", ReservationState.RESERVED)]
    assert [(e.pod_uid, e.node) for e in unconfirmed] == [("bad", "n1")]


async def test_a_corrupt_state_field_is_reported_like_a_corrupt_envelope(populated: Store) -> None:
    s = populated
    await s.client.hset(s.keys.pod_charges("n2"), "d", b"no separators here")

    errors: list[UndecodableRecord] = []
    listed = await s.reservations.list_all(errors)

    assert "n2" not in listed and [r.allocation.pod_uid for r in listed["n1"]] == ["a", "bad", "c"]
    assert [(e.pod_uid, e.node, e.newer_version) for e in errors] == [("d", "n2", False)]


async def test_without_an_errors_list_listing_stays_strict(populated: Store) -> None:
    s = populated
    await corrupt(s, "bad", "n1", newer_envelope("bad", "n1"))

    with pytest.raises(SchemaVersionError, match="pod bad on node n1"):
        await s.reservations.list_all()
    with pytest.raises(SchemaVersionError, match="pod bad on node n1"):
        await s.reservations.get("bad")


async def test_recording_over_a_corrupt_record_on_another_node_moves_it(populated: Store) -> None:
    """The move releases the unreadable record on its old node without decoding it, then records the new one."""
    s = populated
    await corrupt(s, "bad", "n1", b"\xc1 garbage")
    moved = alloc("bad", "n2", (("GPU-c", 300, 30),))

    await s.reservations.record(moved)

    errors: list[UndecodableRecord] = []
    listed = await s.reservations.list_all(errors)
    assert errors == []
    assert [r.allocation.pod_uid for r in listed["n1"]] == ["a", "c"]
    assert await s.reservations.node_of("bad") == "n2"
    assert await s.usage.node_usage("n1") == {"GPU-a": DeviceUsage(used=2, used_mem_mib=1500, used_cores=40)}


@pytest.mark.parametrize("blob_kind", list(BAD_BLOBS))
async def test_releasing_an_unreadable_record_releases_it_without_raising(populated: Store, blob_kind: str) -> None:
    s = populated
    await corrupt(s, "bad", "n1", BAD_BLOBS[blob_kind][0])

    assert await s.reservations.release("bad") is None  # released, but nothing readable to hand back

    errors: list[UndecodableRecord] = []
    assert [r.allocation.pod_uid for r in (await s.reservations.list_all(errors))["n1"]] == ["a", "c"]
    assert errors == []
    assert await s.reservations.node_of("bad") is None
    assert await s.usage.node_usage("n1") == {"GPU-a": DeviceUsage(used=2, used_mem_mib=1500, used_cores=40)}
