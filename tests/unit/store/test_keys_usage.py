"""Key names (prefix, hash tags, refusals) and decoding of the usage-counter hash."""

from __future__ import annotations

import re

import pytest

from vgpu_scheduler.shared.domain.model import DeviceCharge, DeviceUsage, MigPlacement
from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.store import Keys, charges_json, parse_usage


def _tag(key: str) -> str:
    """The part of a key Redis Cluster hashes (between the first { and the next })."""
    m = re.search(r"\{([^}]*)\}", key)
    assert m is not None, key
    return m.group(1)


def test_per_node_keys_share_one_hash_tag() -> None:
    k = Keys()
    node_keys = [
        k.inventory("gpu-1"),
        k.capacity("gpu-1"),
        k.generation("gpu-1"),
        k.usage("gpu-1"),
        k.pod_charges("gpu-1"),
        k.allocations("gpu-1"),
        k.node_lock("gpu-1"),
        k.node_lock_epoch("gpu-1"),
    ]
    assert k.inventory("gpu-1") == "vgpu:{node:gpu-1}:inv"
    assert {_tag(key) for key in node_keys} == {"node:gpu-1"}
    assert len(set(node_keys)) == len(node_keys)


def test_quota_and_lease_keys_share_their_tags() -> None:
    k = Keys("prod")
    assert {_tag(k.quota("team-a")), _tag(k.quota_pods("team-a"))} == {"ns:team-a"}
    assert {_tag(k.lease("informer")), _tag(k.lease_epoch("informer"))} == {"lease:informer"}
    assert k.quota("team-a") == "prod:{ns:team-a}:quota"


def test_prefix_separates_deployments() -> None:
    a, b = Keys("a"), Keys("b")
    for name in ("changes", "meta", "pod_index", "inventory_nodes", "allocation_nodes", "quota_namespaces"):
        assert getattr(a, name)().startswith("a:")
        assert getattr(a, name)() != getattr(b, name)()


@pytest.mark.parametrize(
    "bad", ["", "a{b", "a}b", "a b", "a\nb"], ids=["empty", "open-brace", "close-brace", "space", "newline"]
)
def test_names_that_would_break_the_layout_are_refused(bad: str) -> None:
    with pytest.raises(DecodeError, match="node name"):
        Keys().inventory(bad)
    with pytest.raises(DecodeError, match="key prefix"):
        Keys(bad)


def test_parse_usage() -> None:
    fields = {
        b"u|GPU-a": b"2,3000,50,0",
        b"u|GPU-m": b"3,14592,45,0",
        b"p|GPU-m|0|1": b"1",
        b"p|GPU-m|4|2": b"2",
        b"u|GPU-l": b"2,10000,28,0",
        b"l|GPU-l|1|0": b"1",
        b"l|GPU-l|1|2": b"1",
    }
    assert parse_usage(fields) == {
        "GPU-a": DeviceUsage(used=2, used_mem_mib=3000, used_cores=50),
        "GPU-m": DeviceUsage(
            used=3,
            used_mem_mib=14592,
            used_cores=45,
            mig_in_use=(MigPlacement(0, 1), MigPlacement(4, 2), MigPlacement(4, 2)),
        ),
        "GPU-l": DeviceUsage(
            used=2, used_mem_mib=10000, used_cores=28, legacy_geometry=1, legacy_slots=frozenset({0, 2})
        ),
    }


def test_uuid_with_separator_survives() -> None:
    assert parse_usage({b"p|odd|uuid|0|1": b"1"})["odd|uuid"].mig_in_use == (MigPlacement(0, 1),)


@pytest.mark.parametrize(
    "fields",
    [{b"u|GPU-a": b"1,2"}, {b"u|GPU-a": b"x,1,1,0"}, {b"p|GPU-a|zero|1": b"1"}, {b"q|GPU-a": b"1"}],
    ids=["short", "not-a-number", "bad-placement", "unknown-field"],
)
def test_corrupt_usage_is_a_decode_error(fields: dict[bytes, bytes]) -> None:
    with pytest.raises(DecodeError, match="usage hash"):
        parse_usage(fields)


def test_charges_json_is_compact_and_checked() -> None:
    charge = DeviceCharge("GPU-a", 1, 100, 10, True, (MigPlacement(0, 1),), ((1, 2),))
    assert charges_json([charge]) == '[{"u":"GPU-a","n":1,"m":100,"c":10,"x":1,"p":[[0,1]],"l":[[1,2]]}]'
    with pytest.raises(DecodeError, match="appears twice"):
        charges_json([charge, charge])
    with pytest.raises(DecodeError, match="negative"):
        charges_json([DeviceCharge("GPU-a", 1, -1, 0)])
    with pytest.raises(DecodeError, match="placement"):
        charges_json([DeviceCharge("GPU-a", 1, 1, 0, mig_placements=(MigPlacement(0, 0),))])
