"""Pieces the families registered from node capacity share (Kunlunxin's whole XPUs, MetaX GPUs, Enflame GCUs, AWS
Neuron, Moore Threads, Cambricon): their device plugin advertises extended resources in ``status.capacity`` and
HAMi's ``GetNodeDevices`` derives the devices from them, so there is no register annotation, no handshake and no node
lock (their :class:`~shared.vendors.description.Description` says so). :func:`whole_capacity`,
:func:`observe_count`, :func:`observe_capacity`, :func:`count_registration` and :func:`count_in_limits` are the
registration and admission steps several of them repeat; :class:`CoreSplit` derives devices from a node's total
cores and memory; :func:`index_in_id` reads back the index HAMi writes in the id of a device it names after its
node; :func:`slot_capacity` is the count resource of a plugin that advertises one per slot. Pure."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec._go import INT32_MAX
from vgpu_scheduler.shared.codec.quantity import parse_quantity
from vgpu_scheduler.shared.codec.resources import container_lists
from vgpu_scheduler.shared.codec.selectors import decode_cordon
from vgpu_scheduler.shared.domain.model import ContainerRequest, DeviceInfo, NodeInventory
from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.vendors import registration as reg
from vgpu_scheduler.shared.vendors.registration import NodeView, Observation


@dataclass(frozen=True, slots=True)
class CoreSplit:
    """How HAMi's ``GetNodeDevices`` splits a node's total cores and memory into devices (Cambricon, Moore Threads):
    one device per :attr:`cores` cores (rounded up), named ``<node><infix><i>``, with :attr:`cores` cores,
    :attr:`slots` slots and ``memory_total × unit_mib × cores // cores_total`` MiB each. :attr:`what` and
    :attr:`device` word the error of a memory beyond int32."""

    vendor: str
    infix: str
    unit_mib: int
    cores: int
    slots: int
    what: str
    device: str

    def devices(
        self, node: str, cores_total: int, memory_total: int, part: str, dev_type: str | None = None
    ) -> tuple[DeviceInfo, ...]:
        """The devices of ``node`` (none without cores), of type ``dev_type`` (default: the vendor). DecodeError
        (``part`` its offending value) when a device's memory does not fit in int32 (HAMi would wrap it)."""
        if cores_total <= 0:
            return ()
        devmem = memory_total * self.unit_mib * self.cores // cores_total
        if devmem > INT32_MAX:
            raise DecodeError(self.what, f"{devmem} MiB per {self.device} is beyond int32", part)
        n = -(-cores_total // self.cores)
        kind = self.vendor if dev_type is None else dev_type
        return tuple(
            DeviceInfo(
                f"{node}{self.infix}{i}", i, self.slots, devmem, self.cores, kind, 0, "", True, vendor=self.vendor
            )
            for i in range(n)
        )


def index_in_id(uuid: str, infix: str) -> int | None:
    """The index HAMi encodes in the id of a device it names after its node, ``<node><infix><index>`` (None for
    another id)."""
    _, sep, tail = uuid.rpartition(infix)
    return int(tail) if sep and tail.isascii() and tail.isdigit() else None


def whole_capacity(capacity: Mapping[str, Any], name: str, top: int, expected: str) -> int | None:
    """``capacity[name]`` as a whole number from 0 to ``top``; None when the node has no such resource. Anything
    else is a DecodeError naming ``status.capacity[name]``, with ``expected`` as its detail when the quantity
    reads but is no such number."""
    if name not in capacity:
        return None
    source = f"status.capacity[{name}]"
    q = parse_quantity(capacity[name], source)
    if q.denominator != 1 or q < 0 or q > top:
        raise DecodeError(source, expected, str(capacity[name]))
    return q.numerator


def cordoned_ids(node: NodeView, devices: Sequence[DeviceInfo]) -> frozenset[str]:
    """The ids of ``devices`` that the node's ``hami.io/device-cordon`` lists."""
    ids = {d.id for d in devices}
    return frozenset(u for u in decode_cordon(node.annotations.get(keys.DEVICE_CORDON, "")) if u in ids)


def observe_count(
    node: NodeView,
    *,
    vendor: str,
    count_name: str,
    top: int,
    expected: str,
    devices: Callable[[str, int], tuple[DeviceInfo, ...]],
    pair_scores: Mapping[str, Mapping[str, int]] | None = None,
) -> Observation:
    """Registration from one count resource (HAMi's ``GetNodeDevices`` of Kunlunxin's whole XPUs, MetaX GPUs,
    Enflame GCUs): ``capacity[count_name]`` (else the allocatable) absent → not registered; not a whole number up
    to ``top`` → invalid; 0 → not registered (HAMi's "device not found"); else ``devices(node, count)``, healthy
    (no handshake), the cordoned ones from ``hami.io/device-cordon``, with ``pair_scores`` when given."""
    capacity = node.capacity or node.allocatable
    try:
        count = whole_capacity(capacity, count_name, top, expected)
    except DecodeError as e:
        return reg.Invalid(reg.DecodeFailure.REGISTER, f"status.capacity[{count_name}]", str(capacity[count_name]), e)
    if count is None:
        return reg.NotRegistered(reg.Unregistered.ABSENT)
    if count == 0:
        return reg.NotRegistered(reg.Unregistered.NO_DEVICES)
    found = devices(node.name, count)
    cordoned = cordoned_ids(node, found)
    if pair_scores is None:
        return reg.Registered(NodeInventory(node=node.name, vendor=vendor, devices=found, cordoned=cordoned))
    inventory = NodeInventory(node=node.name, vendor=vendor, devices=found, pair_scores=pair_scores, cordoned=cordoned)
    return reg.Registered(inventory)


def slot_capacity(devices: Sequence[DeviceInfo], count_name: str) -> dict[str, str]:
    """The count resource of a device plugin that advertises one per slot: the sum of the devices' ``count``."""
    return {count_name: str(sum(max(d.count, 0) for d in devices))}


def count_registration(
    devices: Sequence[DeviceInfo], count_name: str, *, shape: tuple[int, int, int] | None = None, refusal: str = ""
) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """What a count-only device plugin advertises for ``devices``: their number as ``count_name`` (nothing for
    none). With ``shape`` (memory MiB, cores, slots), a device of another shape cannot survive the round trip:
    ValueError(``refusal``)."""
    if shape is not None and any((d.devmem_mib, d.devcore, d.count) != shape for d in devices):
        raise ValueError(refusal)
    if not devices:
        return {}, {}, {}
    return {}, {count_name: str(len(devices))}, {}


def count_in_limits(
    container: dict[str, Any], where: str, count_name: str, request: Callable[[dict[str, Any], str], ContainerRequest]
) -> bool:
    """HAMi's ``MutateAdmission`` of a count-only family: no edit; the container is the family's when the count is
    in its limits, and its request is validated then (``request`` raises ResourceRequestError)."""
    limits, _ = container_lists(container, where)
    if count_name not in limits:
        return False
    request(container, where)
    return True


def observe_capacity(
    node: NodeView,
    vendor: str,
    count_name: str,
    other_name: str,
    *,
    whole: Callable[[Mapping[str, Any], str], int | None],
    devices: Callable[[int, int], tuple[DeviceInfo, ...] | Observation],
) -> Observation:
    """Registration of a family whose plugin advertises a count and a second total in ``status.capacity`` (AWS
    Neuron: devices and cores; Moore Threads: cores and memory), in order: no ``capacity[count_name]`` (else the
    allocatable) → not registered; either total not a whole quantity (``whole`` refuses it) → invalid;
    ``allocatable[count_name]`` not a quantity → invalid; a count of 0 → not registered; ``devices(count,
    other)`` (``other`` 0 when absent) returns an Observation → that; ``allocatable[count_name]`` ≤ 0 (the device
    plugin is gone) → not registered; else registered, healthy, the cordoned devices from ``hami.io/device-cordon``
    (HAMi's ``CheckHealth`` always says healthy)."""
    capacity = node.capacity or node.allocatable
    try:
        count = whole(capacity, count_name)
        if count is None:
            return reg.NotRegistered(reg.Unregistered.ABSENT)
        other = whole(capacity, other_name) or 0
    except DecodeError as e:
        return reg.Invalid(reg.DecodeFailure.REGISTER, e.what, e.part or "", e)
    quantity = reg.allocatable_quantity(node.allocatable, count_name)
    if isinstance(quantity, reg.Invalid):
        return quantity
    live = quantity > 0
    if count == 0:
        return reg.NotRegistered(reg.Unregistered.NO_DEVICES)
    found = devices(count, other)
    if not isinstance(found, tuple):
        return found
    if not live:
        return reg.NotRegistered(reg.Unregistered.NO_ALLOCATABLE)
    return reg.Registered(
        NodeInventory(node=node.name, vendor=vendor, devices=found, cordoned=cordoned_ids(node, found))
    )
