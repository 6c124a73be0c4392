"""Random text and random JSON never make a decoder raise anything but DecodeError."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vgpu_scheduler.shared.codec.handshake import parse_handshake
from vgpu_scheduler.shared.codec.mig import decode_mig_allocations
from vgpu_scheduler.shared.codec.nodelock import parse_node_lock
from vgpu_scheduler.shared.codec.podannotations import decode_allocation
from vgpu_scheduler.shared.codec.poddevices import align_to_containers, decode_pod_devices
from vgpu_scheduler.shared.codec.quantity import parse_quantity, parse_quantity_int
from vgpu_scheduler.shared.codec.reasons import parse_reason
from vgpu_scheduler.shared.codec.register import decode_register
from vgpu_scheduler.shared.codec.resources import container_request, pod_request, pod_requests_managed_resource
from vgpu_scheduler.shared.codec.selectors import (
    decode_cordon,
    decode_gpu_policy,
    decode_node_policy,
    decode_numa_bind,
    decode_pod_constraints,
    decode_scoring_weights,
    decode_type_list,
    decode_uuid_list,
)
from vgpu_scheduler.shared.codec.topology import decode_topology
from vgpu_scheduler.shared.domain.model import DEFAULT_NVIDIA_CONFIG
from vgpu_scheduler.shared.errors import DecodeError

TEXT_DECODERS: dict[str, Callable[[str], object]] = {
    "register": decode_register,
    "topology": decode_topology,
    "handshake": parse_handshake,
    "pod-devices": decode_pod_devices,
    "mig": decode_mig_allocations,
    "node-lock": parse_node_lock,
    "cordon": decode_cordon,
    "type-list": decode_type_list,
    "uuid-list": decode_uuid_list,
    "weights": decode_scoring_weights,
    "node-policy": decode_node_policy,
    "gpu-policy": decode_gpu_policy,
    "numa-bind": decode_numa_bind,
    "reason": parse_reason,
    "quantity": parse_quantity,
    "quantity-int": parse_quantity_int,
}

# Characters the formats are made of, so random strings often get past the first check.
_FORMAT_ALPHABET = '[]{}":,;_ .+-0123456789eEkKimMGTPnu\ttrueflsnGPU-NVIDIARqstgdRpoZT'
_FIELD_NAMES = [
    "id", "index", "count", "devmem", "devcore", "type", "numa", "mode", "health", "migProfiles", "name",
    "memoryMB", "core", "sliceCount", "placements", "start", "size", "uuid", "score", "containerIndex",
    "deviceIndex", "gpuUUID", "profile", "placement", "migUUID", "gpuInstanceID", "computeInstanceID", "ID",
]  # fmt: skip

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.sampled_from(_FIELD_NAMES) | st.text(max_size=4), children, max_size=5)
    ),
    max_leaves=20,
)

garbage = st.one_of(
    st.text(),
    st.text(alphabet=_FORMAT_ALPHABET, max_size=60),
    json_values.map(lambda v: json.dumps(v, ensure_ascii=False)),
)


def _only_decode_errors(fn: Callable[[], object]) -> None:
    with contextlib.suppress(DecodeError):
        fn()


@pytest.mark.parametrize("decoder", TEXT_DECODERS.values(), ids=TEXT_DECODERS.keys())
@settings(deadline=None, max_examples=60)
@given(value=garbage)
def test_text_decoders_raise_only_decode_error(decoder: Callable[[str], object], value: str) -> None:
    _only_decode_errors(lambda: decoder(value))


_RESOURCE_NAMES = ["nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpucores"]
quantities = st.one_of(
    st.text(alphabet=_FORMAT_ALPHABET, max_size=12),
    st.integers(-(2**40), 2**40),
    st.floats(),
    st.booleans(),
    st.none(),
    st.lists(st.integers(), max_size=2),
)
resource_lists = st.dictionaries(st.sampled_from(_RESOURCE_NAMES) | st.text(max_size=4), quantities, max_size=4)
containers = st.fixed_dictionaries(
    {},
    optional={
        "name": st.text(max_size=4),
        "resources": st.fixed_dictionaries({}, optional={"limits": resource_lists, "requests": resource_lists})
        | json_values,
    },
)
annotation_maps = st.dictionaries(
    st.sampled_from(
        [
            "hami.io/vgpu-node",
            "hami.io/vgpu-devices-allocated",
            "hami.io/vgpu-mig-allocations",
            "nvidia.com/use-gputype",
            "nvidia.com/use-gpuuuid",
            "nvidia.com/numa-bind",
            "hami.io/gpu-scheduler-policy",
            "hami.io/node-scheduler-policy",
            "hami.io/device-scoring-weights",
        ]
    ),
    garbage | json_values,
    max_size=5,
)
pods = st.fixed_dictionaries(
    {},
    optional={
        "metadata": st.fixed_dictionaries({}, optional={"annotations": annotation_maps | json_values}) | json_values,
        "spec": st.fixed_dictionaries(
            {},
            optional={
                "initContainers": st.lists(containers, max_size=2) | json_values,
                "containers": st.lists(containers, max_size=3) | json_values,
            },
        )
        | json_values,
    },
)


@settings(deadline=None, max_examples=100)
@given(pods)
def test_pod_decoders_raise_only_decode_error(pod: dict[str, Any]) -> None:
    _only_decode_errors(lambda: pod_request(pod, DEFAULT_NVIDIA_CONFIG))
    _only_decode_errors(lambda: pod_requests_managed_resource(pod, DEFAULT_NVIDIA_CONFIG))
    _only_decode_errors(lambda: decode_allocation(pod))


@settings(deadline=None, max_examples=100)
@given(containers | json_values)
def test_container_request_raises_only_decode_error(container: Any) -> None:
    _only_decode_errors(lambda: container_request(container, DEFAULT_NVIDIA_CONFIG))


@settings(deadline=None, max_examples=100)
@given(annotation_maps)
def test_pod_constraints_raise_only_decode_error(annos: dict[str, Any]) -> None:
    _only_decode_errors(lambda: decode_pod_constraints(annos))


@settings(deadline=None)
@given(garbage, st.integers(0, 6))
def test_alignment_raises_only_decode_error(value: str, count: int) -> None:
    _only_decode_errors(lambda: align_to_containers(decode_pod_devices(value), count))
