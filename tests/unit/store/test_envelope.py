"""Envelopes: golden bytes (the stored format must not drift), round trips, upgrades and clear refusals."""

from __future__ import annotations

import contextlib
from types import MappingProxyType
from typing import Any

import msgpack  # type: ignore[import-untyped]
import pytest
from hypothesis import given
from hypothesis import strategies as st

from vgpu_scheduler.shared.codec.envelope import (
    STANDARD_REGISTRY,
    EnvelopeRegistry,
    Kind,
    KindCodec,
    decode_allocation,
    decode_inventory,
    decode_quota_limits,
    encode_allocation,
    encode_inventory,
    encode_quota_limits,
)
from vgpu_scheduler.shared.domain.allocation import Allocation
from vgpu_scheduler.shared.domain.model import (
    ContainerDevice,
    DeviceCharge,
    DeviceInfo,
    MigAllocation,
    MigPlacement,
    MigProfile,
    NodeInventory,
)
from vgpu_scheduler.shared.domain.quota import QuotaLimits
from vgpu_scheduler.shared.errors import DecodeError, SchemaVersionError

INVENTORY = NodeInventory(
    node="gpu-1",
    vendor="NVIDIA",
    devices=(
        DeviceInfo(
            id="GPU-a",
            index=0,
            count=7,
            devmem_mib=40960,
            devcore=100,
            type="NVIDIA A100-PCIE-40GB",
            numa=1,
            mode="mig",
            health=True,
            mig_profiles=(MigProfile("1g.5gb", 4864, 15, 1, (MigPlacement(0, 1), MigPlacement(6, 1))),),
        ),
    ),
    pair_scores={"GPU-b": {"GPU-a": 20}, "GPU-a": {"GPU-b": 20}},
    cordoned=frozenset({"GPU-z", "GPU-b"}),
)
INVENTORY_HEX = (
    "83a16bae6e6f64652d696e76656e746f7279a17601a16485a46e6f6465a56770752d31a676656e646f72a64e5649444941a7646576"
    "69636573918aa26964a54750552d61a5696e64657800a5636f756e7407aa6465766d656d5f6d6962cda000a7646576636f726564a4"
    "74797065b54e564944494120413130302d504349452d34304742a46e756d6101a46d6f6465a36d6967a66865616c7468c3ac6d6967"
    "5f70726f66696c65739185a46e616d65a631672e356762aa6d656d6f72795f6d6962cd1300a8636f72655f7063740fab736c696365"
    "5f636f756e7401aa706c6163656d656e747392920001920601ab706169725f73636f72657382a54750552d6181a54750552d6214a5"
    "4750552d6281a54750552d6114a8636f72646f6e656492a54750552d62a54750552d7a"
)

ALLOCATION = Allocation(
    pod_uid="uid-1",
    namespace="ns",
    name="pod",
    node="gpu-1",
    devices=((ContainerDevice("GPU-a", 4864, 15),), (ContainerDevice("GPU-b", 1000, 0, legacy_mig=(2, 0)),)),
    charges=(
        DeviceCharge("GPU-a", 1, 4864, 15, False, (MigPlacement(6, 1),)),
        DeviceCharge("GPU-b", 1, 1000, 0, False, (), ((2, 0),)),
    ),
    mig=(MigAllocation(0, 0, "GPU-a", "1g.5gb", MigPlacement(6, 1)),),
)
ALLOCATION_HEX = (
    "83a16baa616c6c6f636174696f6ea17601a16487a7706f645f756964a57569642d31a96e616d657370616365a26e73a46e616d65a3"
    "706f64a46e6f6465a56770752d31a764657669636573929185a475756964a54750552d61a474797065a64e5649444941ac75736564"
    "5f6d656d5f6d6962cd1300aa757365645f636f7265730faa6c65676163795f6d6967c09185a475756964a54750552d62a474797065"
    "a64e5649444941ac757365645f6d656d5f6d6962cd03e8aa757365645f636f72657300aa6c65676163795f6d6967920200a7636861"
    "726765739287a475756964a54750552d61a5736c6f747301a76d656d5f6d6962cd1300a9636f7265735f7063740fa96578636c7573"
    "697665c2ae6d69675f706c6163656d656e747391920601aa6c65676163795f6d69679087a475756964a54750552d62a5736c6f7473"
    "01a76d656d5f6d6962cd03e8a9636f7265735f70637400a96578636c7573697665c2ae6d69675f706c6163656d656e747390aa6c65"
    "676163795f6d696791920200a36d69679188af636f6e7461696e65725f696e64657800ac6465766963655f696e64657800a8677075"
    "5f75756964a54750552d61a770726f66696c65a631672e356762a9706c6163656d656e74920601a86d69675f75756964c0af677075"
    "5f696e7374616e63655f6964c0b3636f6d707574655f696e7374616e63655f6964c0"
)

QUOTA = QuotaLimits(mem_mib=0)
QUOTA_HEX = "83a16bac71756f74612d6c696d697473a17601a16482a76d656d5f6d696200a9636f7265735f706374c0"


@pytest.mark.parametrize(
    ("encode", "decode", "value", "golden"),
    [
        pytest.param(encode_inventory, decode_inventory, INVENTORY, INVENTORY_HEX, id="inventory"),
        pytest.param(encode_allocation, decode_allocation, ALLOCATION, ALLOCATION_HEX, id="allocation"),
        pytest.param(encode_quota_limits, decode_quota_limits, QUOTA, QUOTA_HEX, id="quota-limits"),
    ],
)
def test_golden_bytes(encode: Any, decode: Any, value: Any, golden: str) -> None:
    assert encode(value).hex() == golden
    assert decode(bytes.fromhex(golden)) == value


def test_inventory_encoding_ignores_map_and_set_order() -> None:
    shuffled = NodeInventory(
        node=INVENTORY.node,
        vendor=INVENTORY.vendor,
        devices=INVENTORY.devices,
        pair_scores={"GPU-a": {"GPU-b": 20}, "GPU-b": {"GPU-a": 20}},
        cordoned=frozenset(["GPU-b", "GPU-z"]),
    )
    assert encode_inventory(shuffled) == encode_inventory(INVENTORY)


MIXED = NodeInventory(
    node="mixed-1",
    vendor="NVIDIA,DCU",
    devices=(
        DeviceInfo("GPU-a", 0, 10, 16384, 100, "NVIDIA-Tesla T4", 0, "hami-core", True),
        DeviceInfo("DCU-a", 0, 4, 65520, 100, "DCU-Z100", 0, "hami-core", True, vendor="DCU"),
    ),
    pair_scores={"GPU-a": {}},
    cordoned=frozenset({"DCU-a"}),
)


def test_nvidia_only_inventory_is_written_in_the_first_format() -> None:
    """Unchanged bytes for NVIDIA nodes: readers that predate vendors keep reading them."""
    body = msgpack.unpackb(encode_inventory(INVENTORY))
    assert body["v"] == 1
    assert "vendor" not in body["d"]["devices"][0]


def test_inventory_with_another_vendor_is_version_2_with_per_device_vendors() -> None:
    body = msgpack.unpackb(encode_inventory(MIXED))
    assert body["v"] == 2
    assert [d["vendor"] for d in body["d"]["devices"]] == ["NVIDIA", "DCU"]
    got = decode_inventory(encode_inventory(MIXED))
    assert got == MIXED
    assert [d.vendor for d in got.devices] == ["NVIDIA", "DCU"]


def test_a_reader_of_version_1_refuses_a_mixed_inventory() -> None:
    old = EnvelopeRegistry(
        MappingProxyType({Kind.NODE_INVENTORY: KindCodec(Kind.NODE_INVENTORY, 1, lambda i: {}, lambda d: None)})
    )
    with pytest.raises(SchemaVersionError):
        old.decode(Kind.NODE_INVENTORY, encode_inventory(MIXED))


def test_version_1_devices_read_as_nvidia() -> None:
    fields = msgpack.unpackb(bytes.fromhex(INVENTORY_HEX))["d"]
    fields["vendor"] = "something-else"  # the node-level field is taken as written; devices default to NVIDIA
    got = decode_inventory(_packed({"k": "node-inventory", "v": 1, "d": fields}))
    assert [d.vendor for d in got.devices] == ["NVIDIA"]
    assert got.vendor == "something-else"


def test_version_2_device_without_vendor_is_refused() -> None:
    body = msgpack.unpackb(encode_inventory(MIXED))
    del body["d"]["devices"][1]["vendor"]
    with pytest.raises(DecodeError, match="missing field 'vendor'"):
        decode_inventory(_packed(body))
    body["d"]["devices"][1]["vendor"] = 7
    with pytest.raises(DecodeError, match="field 'vendor' must be a string"):
        decode_inventory(_packed(body))


def _packed(body: Any) -> bytes:
    return bytes(msgpack.packb(body, use_bin_type=True))


def _inv_fields(**override: Any) -> dict[str, Any]:
    d: dict[str, Any] = msgpack.unpackb(bytes.fromhex(INVENTORY_HEX))["d"]
    d.update(override)
    return d


@pytest.mark.parametrize(
    ("data", "message"),
    [
        pytest.param(b"", "not msgpack", id="empty"),
        pytest.param(b"\xc1", "not msgpack", id="reserved-byte"),
        pytest.param(b"\x92\x01", "not msgpack", id="truncated"),
        pytest.param(_packed([1, 2]), "expected a map", id="not-a-map"),
        pytest.param(_packed({"k": "allocation", "v": 1, "d": {}}), "wrong kind", id="wrong-kind"),
        pytest.param(_packed({"k": "node-inventory", "v": "1", "d": {}}), "bad version", id="version-not-int"),
        pytest.param(_packed({"k": "node-inventory", "v": 0, "d": {}}), "bad version", id="version-zero"),
        pytest.param(_packed({"k": "node-inventory", "v": 1}), "missing field map", id="no-fields"),
        pytest.param(_packed({"k": "node-inventory", "v": 1, "d": {}}), "missing field 'node'", id="missing-node"),
        pytest.param(
            _packed({"k": "node-inventory", "v": 1, "d": _inv_fields(node=7)}),
            "field 'node' must be a string",
            id="node-not-str",
        ),
        pytest.param(
            _packed({"k": "node-inventory", "v": 1, "d": _inv_fields(devices=[{"id": "x"}])}),
            "missing field 'index'",
            id="device-incomplete",
        ),
        pytest.param(
            _packed({"k": "node-inventory", "v": 1, "d": _inv_fields(pair_scores={"a": {"b": "high"}})}),
            "pair score",
            id="pair-score-not-int",
        ),
        pytest.param(
            _packed({"k": "node-inventory", "v": 1, "d": _inv_fields(cordoned=[1])}),
            "cordoned",
            id="cordoned-not-str",
        ),
    ],
)
def test_garbage_is_a_decode_error(data: bytes, message: str) -> None:
    with pytest.raises(DecodeError, match=message) as info:
        decode_inventory(data)
    assert not isinstance(info.value, SchemaVersionError)
    assert info.value.what == "envelope node-inventory"


def test_bad_placement_in_allocation() -> None:
    d = msgpack.unpackb(bytes.fromhex(ALLOCATION_HEX))
    d["d"]["charges"][0]["mig_placements"] = [[6]]
    with pytest.raises(DecodeError, match="placement must be a pair of integers"):
        decode_allocation(_packed(d))


def test_bool_is_not_an_int() -> None:
    with pytest.raises(DecodeError, match="must be an integer"):
        decode_quota_limits(_packed({"k": "quota-limits", "v": 1, "d": {"mem_mib": True, "cores_pct": None}}))


@pytest.mark.parametrize("kind", list(Kind), ids=lambda k: k.value)
def test_newer_version_is_a_schema_version_error(kind: Kind) -> None:
    data = _packed({"k": kind.value, "v": STANDARD_REGISTRY.codecs[kind].version + 1, "d": {}})
    with pytest.raises(SchemaVersionError, match="newer than the newest known"):
        STANDARD_REGISTRY.decode(kind, data)


def test_older_versions_are_upgraded_step_by_step() -> None:
    # a made-up history: v1 had "mem", v2 renamed it "mem_mib", v3 added "cores_pct"
    codec = KindCodec(
        kind=Kind.QUOTA_LIMITS,
        version=3,
        encode=lambda q: {"mem_mib": q.mem_mib, "cores_pct": q.cores_pct},
        decode=lambda d: QuotaLimits(mem_mib=d["mem_mib"], cores_pct=d["cores_pct"]),
        upgraders={1: lambda d: {"mem_mib": d["mem"]}, 2: lambda d: {**d, "cores_pct": None}},
    )
    registry = EnvelopeRegistry(MappingProxyType({Kind.QUOTA_LIMITS: codec}))
    v1 = _packed({"k": "quota-limits", "v": 1, "d": {"mem": 512}})
    assert registry.decode(Kind.QUOTA_LIMITS, v1) == QuotaLimits(mem_mib=512, cores_pct=None)
    assert msgpack.unpackb(registry.encode(Kind.QUOTA_LIMITS, QuotaLimits(1, 2)))["v"] == 3


def test_missing_upgrader_is_a_decode_error() -> None:
    codec = KindCodec(Kind.QUOTA_LIMITS, 2, lambda q: {}, lambda d: QuotaLimits())
    registry = EnvelopeRegistry(MappingProxyType({Kind.QUOTA_LIMITS: codec}))
    with pytest.raises(DecodeError, match="no upgrade from version 1"):
        registry.decode(Kind.QUOTA_LIMITS, _packed({"k": "quota-limits", "v": 1, "d": {}}))


# ---- round trips ------------------------------------------------------------------------------

_names = st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=12)
_ints = st.integers(min_value=0, max_value=2**40)
_placements = st.builds(MigPlacement, st.integers(0, 7), st.integers(1, 8))

_devices = st.builds(
    DeviceInfo,
    id=_names,
    index=st.integers(0, 16),
    count=st.integers(0, 100),
    devmem_mib=_ints,
    devcore=st.integers(0, 400),
    type=_names,
    numa=st.integers(-1, 8),
    mode=st.sampled_from(["hami-core", "mig", "mps"]),
    health=st.booleans(),
    vendor=st.sampled_from(["NVIDIA", "DCU", "Ascend910B"]),
    mig_profiles=st.lists(
        st.builds(MigProfile, _names, _ints, st.integers(0, 100), st.integers(1, 8), st.tuples(_placements)),
        max_size=2,
    ).map(tuple),
)
_inventories = st.builds(
    NodeInventory,
    node=_names,
    vendor=st.sampled_from(["NVIDIA", "DCU", "NVIDIA,DCU"]),
    devices=st.lists(_devices, max_size=4).map(tuple),
    pair_scores=st.dictionaries(_names, st.dictionaries(_names, st.integers(0, 2000), max_size=3), max_size=3),
    cordoned=st.frozensets(_names, max_size=3),
)
_container_devices = st.builds(
    ContainerDevice,
    uuid=_names,
    used_mem_mib=_ints,
    used_cores=st.integers(0, 100),
    type=st.just("NVIDIA"),
    legacy_mig=st.none() | st.tuples(st.integers(0, 4), st.integers(0, 7)),
)
_allocations = st.builds(
    Allocation,
    pod_uid=_names,
    namespace=_names,
    name=_names,
    node=_names,
    devices=st.lists(st.lists(_container_devices, max_size=3).map(tuple), max_size=3).map(tuple),
    charges=st.lists(
        st.builds(
            DeviceCharge,
            uuid=_names,
            slots=st.integers(0, 10),
            mem_mib=_ints,
            cores_pct=st.integers(0, 100),
            exclusive=st.booleans(),
            mig_placements=st.lists(_placements, max_size=2).map(tuple),
            legacy_mig=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 7)), max_size=2).map(tuple),
        ),
        max_size=3,
    ).map(tuple),
    mig=st.lists(
        st.builds(
            MigAllocation,
            container_index=st.integers(0, 3),
            device_index=st.integers(0, 3),
            gpu_uuid=_names,
            profile=_names,
            placement=_placements,
            mig_uuid=st.none() | _names,
            gpu_instance_id=st.none() | st.integers(0, 10),
            compute_instance_id=st.none() | st.integers(0, 10),
        ),
        max_size=2,
    ).map(tuple),
)


@given(_inventories)
def test_inventory_round_trip(inv: NodeInventory) -> None:
    assert decode_inventory(encode_inventory(inv)) == inv


@given(_allocations)
def test_allocation_round_trip(a: Allocation) -> None:
    assert decode_allocation(encode_allocation(a)) == a


@given(st.builds(QuotaLimits, st.none() | _ints, st.none() | st.integers(0, 10_000)))
def test_quota_round_trip(q: QuotaLimits) -> None:
    assert decode_quota_limits(encode_quota_limits(q)) == q


@given(st.binary(max_size=64))
def test_random_bytes_never_crash(data: bytes) -> None:
    with contextlib.suppress(DecodeError):
        decode_allocation(data)
