"""AWS Neuron devices from node capacity and the reading of a container's device and core resources. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from vgpu_scheduler.shared.codec.quantity import parse_quantity
from vgpu_scheduler.shared.domain.model import DeviceInfo
from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.vendors.awsneuron.fit import core_mask
from vgpu_scheduler.shared.vendors.awsneuron.keys import _ID_INFIX, MAX_CORES_PER_DEVICE, MAX_DEVICES, NAME
from vgpu_scheduler.shared.vendors.capacity import whole_capacity


def devices_from_capacity(node: str, count: int, cores_total: int, instance_type: str) -> tuple[DeviceInfo, ...]:
    """HAMi's ``GetNodeDevices``: ``count`` devices of ``cores_total / count`` slots and the capped core mask.
    DecodeError when the cores do not divide evenly over the devices, or a device would have none."""
    if count <= 0:
        return ()
    if cores_total <= 0 or cores_total % count:
        raise DecodeError(
            "awsneuron capacity",
            f"{cores_total} NeuronCores cannot be split evenly over {count} Neuron devices",
            f"{cores_total}/{count}",
        )
    per_device = cores_total // count
    if per_device > MAX_DEVICES:
        raise DecodeError("awsneuron capacity", f"{per_device} NeuronCores per device is beyond int32", str(per_device))
    mask = core_mask(per_device)
    return tuple(
        DeviceInfo(f"{node}{_ID_INFIX}{i}", i, per_device, 0, mask, NAME, 0, instance_type, True, vendor=NAME)
        for i in range(count)
    )


def _whole(capacity: Mapping[str, Any], name: str) -> int | None:
    return whole_capacity(capacity, name, MAX_DEVICES * 2**32, "expected a whole number of devices or cores")


# ------------------------------------------------------------------------------------------------------------
# Requests
# ------------------------------------------------------------------------------------------------------------


def _validated(raw: Any, name: str, top: int, problems: list[str], label: str) -> int | None:
    """HAMi's ``validateResourceRequest``: an integer, greater than 0, at most ``top``."""
    try:
        q: Fraction = parse_quantity(raw, name)
    except DecodeError:
        problems.append(f"{label}: {name}: {raw!r} is not a number")
        return None
    if q.denominator != 1:
        problems.append(f"{label}: {name} must be an integer")
        return None
    if q <= 0:
        problems.append(f"{label}: {name} must be greater than 0")
        return None
    if q > top:
        problems.append(f"{label}: {name} must not exceed {top}")
        return None
    return q.numerator


def split_cores(cores: int, core_name: str) -> tuple[int, int]:
    """HAMi's ``splitCoreRequest``: ``(devices, cores per device)`` of a NeuronCore request. Up to
    :data:`MAX_CORES_PER_DEVICE` cores fit one device; more must fill whole devices. ValueError otherwise."""
    if cores <= MAX_CORES_PER_DEVICE:
        return 1, cores
    if cores % MAX_CORES_PER_DEVICE:
        raise ValueError(f"{core_name} must be 1 or a multiple of {MAX_CORES_PER_DEVICE}, got {cores}")
    nums = cores // MAX_CORES_PER_DEVICE
    if nums > MAX_DEVICES:
        raise ValueError(f"{core_name} needs {nums} devices, which exceeds the maximum of {MAX_DEVICES}")
    return nums, MAX_CORES_PER_DEVICE
