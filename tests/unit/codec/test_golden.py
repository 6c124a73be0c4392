"""Golden tests: every example string of docs/hami-wire.md, decoded to what it means and re-encoded byte for byte."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec.handshake import (
    Handshake,
    HandshakeKind,
    format_deleted,
    format_requesting,
    parse_handshake,
)
from vgpu_scheduler.shared.codec.mig import decode_mig_allocations, encode_mig_allocations
from vgpu_scheduler.shared.codec.nodelock import NodeLock, encode_node_lock, parse_node_lock
from vgpu_scheduler.shared.codec.podannotations import decode_allocation
from vgpu_scheduler.shared.codec.poddevices import align_to_containers, decode_pod_devices, encode_pod_devices
from vgpu_scheduler.shared.codec.reasons import ReasonCount, gen_reason, parse_reason
from vgpu_scheduler.shared.codec.register import decode_register, encode_register_colon, encode_register_json
from vgpu_scheduler.shared.codec.resources import container_request, pod_request
from vgpu_scheduler.shared.codec.topology import decode_topology, encode_topology
from vgpu_scheduler.shared.domain.model import (
    DEFAULT_NVIDIA_CONFIG,
    MEM_PCT_UNSET,
    ContainerDevice,
    ContainerRequest,
    DeviceInfo,
    MigAllocation,
    MigPlacement,
    MigProfile,
    Reason,
)
from vgpu_scheduler.shared.vendors.pods import allocation_annotations

V100_A = "GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec"
V100_B = "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448"
V100_TYPE = "NVIDIA-Tesla V100-PCIE-32GB"

# --- §2.1 register -----------------------------------------------------------------------------

REGISTER_HEAD = (
    '[{"id":"GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec","count":10,"devmem":32768,"devcore":100,'
    '"type":"NVIDIA-Tesla V100-PCIE-32GB","mode":"hami-core","health":true},'
    '{"id":"GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448","index":1,"count":10,"devmem":32768,"devcore":100,'
    '"type":"NVIDIA-Tesla V100-PCIE-32GB","numa":1,"mode":"hami-core","health":true}]'
)
REGISTER_V28 = (
    '[{"id":"GPU-…","count":10,"devmem":81920,"devcore":100,"type":"NVIDIA A100-SXM4-80GB","mode":"hami-core",'
    '"health":true,"devicepairscore":{}}]'
)
REGISTER_MIG = (
    '[{"id":"GPU-…","count":7,"devmem":40960,"devcore":100,"type":"NVIDIA A100-PCIE-40GB","mode":"mig",'
    '"migProfiles":[{"name":"1g.5gb","memoryMB":4864,"core":15,"sliceCount":1,"placements":[{"start":0,"size":1},'
    '{"start":1,"size":1},{"start":2,"size":1},{"start":3,"size":1},{"start":4,"size":1},{"start":5,"size":1},'
    '{"start":6,"size":1}]},{"name":"3g.20gb","memoryMB":19968,"core":43,"sliceCount":3,"placements":'
    '[{"start":0,"size":4},{"start":4,"size":4}]}],"health":true}]'
)
REGISTER_COLON_9 = (
    "GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true,0,hami-core:"
    "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true,1,hami-core:"
)
REGISTER_COLON_7 = (
    "GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true:"
    "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true:"
)

V100S = (
    DeviceInfo(V100_A, 0, 10, 32768, 100, V100_TYPE, 0, "hami-core", True),
    DeviceInfo(V100_B, 1, 10, 32768, 100, V100_TYPE, 1, "hami-core", True),
)


def test_register_head_json_decodes_and_reencodes_byte_for_byte() -> None:
    assert decode_register(REGISTER_HEAD) == V100S
    assert encode_register_json(V100S) == REGISTER_HEAD


def test_register_v28_json_ignores_devicepairscore() -> None:
    (dev,) = decode_register(REGISTER_V28)
    assert dev == DeviceInfo("GPU-…", 0, 10, 81920, 100, "NVIDIA A100-SXM4-80GB", 0, "hami-core", True)
    assert encode_register_json((dev,)) == REGISTER_V28.replace(',"devicepairscore":{}', "")


def test_register_mig_json_decodes_profiles_and_reencodes() -> None:
    (dev,) = decode_register(REGISTER_MIG)
    assert dev.mode == "mig" and dev.count == 7 and dev.health
    assert dev.mig_profiles == (
        MigProfile("1g.5gb", 4864, 15, 1, tuple(MigPlacement(i, 1) for i in range(7))),
        MigProfile("3g.20gb", 19968, 43, 3, (MigPlacement(0, 4), MigPlacement(4, 4))),
    )
    assert encode_register_json((dev,)) == REGISTER_MIG


def test_register_colon_9_fields() -> None:
    devices = decode_register(REGISTER_COLON_9)
    assert devices == (
        DeviceInfo(V100_A, 0, 10, 32768, 100, V100_TYPE, 0, "hami-core", True),
        DeviceInfo(V100_B, 1, 10, 32768, 100, V100_TYPE, 0, "hami-core", True),
    )
    assert encode_register_colon(devices, 9) == REGISTER_COLON_9


def test_register_colon_7_fields_default_index_and_mode() -> None:
    devices = decode_register(REGISTER_COLON_7)
    assert [(d.index, d.mode) for d in devices] == [(0, "hami-core"), (0, "hami-core")]
    assert [d.id for d in devices] == [V100_A, V100_B]
    assert encode_register_colon(devices, 7) == REGISTER_COLON_7


# --- §2.3 topology -------------------------------------------------------------------------------

TOPOLOGY = (
    '[{"uuid":"GPU-a","score":{"GPU-b":1260,"GPU-c":20}},{"uuid":"GPU-b","score":{"GPU-a":1260,"GPU-c":20}},'
    '{"uuid":"GPU-c","score":{"GPU-a":20,"GPU-b":20}}]'
)


def test_topology_example() -> None:
    scores = decode_topology(TOPOLOGY)
    assert scores == {
        "GPU-a": {"GPU-b": 1260, "GPU-c": 20},
        "GPU-b": {"GPU-a": 1260, "GPU-c": 20},
        "GPU-c": {"GPU-a": 20, "GPU-b": 20},
    }
    assert encode_topology(scores) == TOPOLOGY


# --- §2.2 handshake ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(
            "Requesting_2025-06-13 09:07:40",
            Handshake(HandshakeKind.REQUESTING, datetime(2025, 6, 13, 9, 7, 40)),
            id="requesting",
        ),
        pytest.param(
            "Requesting_2025.06.13 09:07:40",
            Handshake(HandshakeKind.REQUESTING, datetime(2025, 6, 13, 9, 7, 40)),
            id="requesting-v2.4-layout",
        ),
        pytest.param(
            "Deleted_2025-06-13 09:07:40",
            Handshake(HandshakeKind.DELETED, datetime(2025, 6, 13, 9, 7, 40)),
            id="deleted",
        ),
        pytest.param(
            "Reported 2024-01-23 04:30:04.434037031 +0000 UTC m=+1104711.777756895",
            Handshake(HandshakeKind.REPORTED, datetime(2024, 1, 23, 4, 30, 4, 434037, tzinfo=UTC)),
            id="reported",
        ),
    ],
)
def test_handshake_examples(value: str, expected: Handshake) -> None:
    assert parse_handshake(value) == expected


def test_handshake_formats() -> None:
    assert format_requesting(datetime(2025, 6, 13, 9, 7, 40, 999)) == "Requesting_2025-06-13 09:07:40"
    assert format_deleted(datetime(2025, 6, 13, 9, 7, 40)) == "Deleted_2025-06-13 09:07:40"


# --- §3.1 pod device list -------------------------------------------------------------------------

THREE_CONTAINERS = ";GPU-aaaa…,NVIDIA,3000,30:;GPU-bbbb…,NVIDIA,5000,0:GPU-cccc…,NVIDIA,5000,0:;"
A = ContainerDevice("GPU-aaaa…", 3000, 30)
B = ContainerDevice("GPU-bbbb…", 5000, 0)
C = ContainerDevice("GPU-cccc…", 5000, 0)


def test_pod_device_list_three_containers() -> None:
    pieces = decode_pod_devices(THREE_CONTAINERS)
    assert pieces == ((), (A,), (B, C), ())  # the trailing empty piece is kept, as HAMi's decoder does
    assert align_to_containers(pieces, 3) == ((), (A,), (B, C))
    assert encode_pod_devices(((), (A,), (B, C))) == THREE_CONTAINERS


def test_pod_device_list_simplest() -> None:
    value = "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448,NVIDIA,3000,0:;"
    dev = ContainerDevice("GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448", 3000, 0)
    assert decode_pod_devices(value) == ((dev,), ())
    assert encode_pod_devices(((dev,),)) == value


def test_pod_device_list_consumed_by_device_plugin() -> None:
    consumed = ";;GPU-bbbb…,NVIDIA,5000,0:GPU-cccc…,NVIDIA,5000,0:;"
    assert align_to_containers(decode_pod_devices(consumed), 3) == ((), (), (B, C))


def test_pod_device_list_legacy_mig_suffix() -> None:
    value = "GPU-3b2f…[1-0],NVIDIA,10240,28:;"
    dev = ContainerDevice("GPU-3b2f…", 10240, 28, legacy_mig=(1, 0))
    assert decode_pod_devices(value) == ((dev,), ())
    assert encode_pod_devices(((dev,),)) == value


def test_allocation_annotations_example() -> None:
    annos = allocation_annotations("node67-4v100", ((), (A,), (B, C)), (), 1705054796)
    assert annos == {
        keys.VGPU_NODE: "node67-4v100",
        keys.VGPU_TIME: "1705054796",
        keys.DEVICES_TO_ALLOCATE: THREE_CONTAINERS,
        keys.DEVICES_ALLOCATED: THREE_CONTAINERS,
        keys.BIND_PHASE: "allocating",
        keys.BIND_TIME: "1705054796",
    }
    pod = {
        "metadata": {"annotations": annos},
        "spec": {"initContainers": [{"name": "prep"}], "containers": [{"name": "a"}, {"name": "b"}]},
    }
    assert decode_allocation(pod) == (((), (A,), (B, C)), ())


# --- §4.1 node lock ------------------------------------------------------------------------------


def test_node_lock_current_format() -> None:
    value = "2025-01-23T10:00:00+08:00,default,gpu-pod-1"
    at = datetime(2025, 1, 23, 10, 0, tzinfo=timezone(timedelta(hours=8)))
    assert parse_node_lock(value) == NodeLock(at, "default", "gpu-pod-1")
    assert encode_node_lock(at, "default", "gpu-pod-1") == value


def test_node_lock_legacy_format() -> None:
    value = "2025-01-23T02:00:00Z"
    lock = parse_node_lock(value)
    assert lock == NodeLock(datetime(2025, 1, 23, 2, 0, tzinfo=UTC)) and lock.legacy
    assert encode_node_lock(lock.at) == value


# --- §7.1 MIG allocations ------------------------------------------------------------------------

MIG_SCHEDULED = (
    '[{"containerIndex":1,"deviceIndex":0,"gpuUUID":"GPU-xxxxxxxx","profile":"2g.10gb",'
    '"placement":{"start":2,"size":2}}]'
)


def test_mig_allocations_example() -> None:
    allocs = decode_mig_allocations(MIG_SCHEDULED)
    assert allocs == (MigAllocation(1, 0, "GPU-xxxxxxxx", "2g.10gb", MigPlacement(2, 2)),)
    assert encode_mig_allocations(allocs) == MIG_SCHEDULED


def test_mig_allocations_with_runtime_identity_from_device_plugin() -> None:
    value = MIG_SCHEDULED[:-2] + ',"migUUID":"MIG-1234","gpuInstanceID":5,"computeInstanceID":0}]'
    (alloc,) = decode_mig_allocations(value)
    assert (alloc.mig_uuid, alloc.gpu_instance_id, alloc.compute_instance_id) == ("MIG-1234", 5, 0)
    assert encode_mig_allocations((alloc,)) == value


# --- §6.6 reasons -----------------------------------------------------------------------------------


def test_gen_reason_example() -> None:
    text = gen_reason({Reason.CARD_NOT_HEALTH: 2, Reason.CARD_INSUFFICIENT_MEMORY: 2}, 4)
    assert text == "2/4 CardInsufficientMemory, 2/4 CardNotHealth"
    assert parse_reason(text) == (
        ReasonCount("CardInsufficientMemory", 2, 4),
        ReasonCount("CardNotHealth", 2, 4),
    )


# --- kube-scheduler wire example 005-filter.json --------------------------------------------------


def test_wire_005_filter_pod_request() -> None:
    body = json.loads((Path(__file__).parent / "data" / "005-filter.json").read_text())
    pod = body["Pod"]
    container = pod["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpumem"] == "3k"
    expected = ContainerRequest(nums=8, mem_mib=3000, mem_pct=MEM_PCT_UNSET, cores_pct=30)
    assert container_request(container, DEFAULT_NVIDIA_CONFIG) == expected
    request = pod_request(pod, DEFAULT_NVIDIA_CONFIG)
    assert request.containers == (expected,) and request.init_count == 0
