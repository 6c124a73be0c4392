"""The AWS Neuron vendor (:class:`AWSNeuronVendor`) and ``build``. Pure."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from vgpu_scheduler.shared.codec.resources import (
    ResourceRequestError,
    container_label,
    container_lists,
    pod_containers,
    raw_value,
)
from vgpu_scheduler.shared.domain.model import (
    EMPTY_REQUEST,
    ContainerRequest,
    DeviceCharge,
    DeviceInfo,
    NodeInventory,
    PodDevices,
)
from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.vendors.awsneuron.fit import AWSNEURON_RULES, core_terms, device_index
from vgpu_scheduler.shared.vendors.awsneuron.keys import (
    ALLOC_TIME_KEY,
    ALLOCATED_FLAG_KEY,
    ALLOCATED_KEY,
    ASSIGNED_IDS_KEY,
    INSTANCE_TYPE_LABEL,
    MAX_CORES,
    MAX_CORES_PER_DEVICE,
    MAX_DEVICES,
    NAME,
    NOUSE_UUID,
    PREDICATE_NODE_KEY,
    RESOURCE_TYPE_KEY,
    USE_UUID,
    AWSNeuronConfig,
    parse_config,
)
from vgpu_scheduler.shared.vendors.awsneuron.requests import _validated, _whole, devices_from_capacity, split_cores
from vgpu_scheduler.shared.vendors.base import NodeLockKind, ResourceNames
from vgpu_scheduler.shared.vendors.capacity import observe_capacity
from vgpu_scheduler.shared.vendors.described import DescribedVendor
from vgpu_scheduler.shared.vendors.description import Description, PodLists, SelectorKeys
from vgpu_scheduler.shared.vendors.registration import DecodeFailure, Invalid, NodeView, Observation


def build(section: object) -> tuple[AWSNeuronVendor, ...]:
    """The vendor the ``awsneuron:`` section configures (``None`` or ``{}``: HAMi's defaults)."""
    return (AWSNeuronVendor(parse_config(section)),)


DESCRIPTION: Final = Description(
    NAME,
    AWSNEURON_RULES,
    PodLists(ALLOCATED_KEY),
    selectors=SelectorKeys(USE_UUID, NOUSE_UUID),
    node_lock=NodeLockKind.NONE,
)


@dataclass(frozen=True, slots=True)
class AWSNeuronVendor(DescribedVendor):
    """AWS Neuron (see the module docstring)."""

    description = DESCRIPTION

    config: AWSNeuronConfig = dataclasses.field(default_factory=AWSNeuronConfig)

    @property
    def resources(self) -> ResourceNames:
        """The count, and the core name as an extra name: HAMi v2.10 charges no NeuronCore quota in ``Fit`` (a
        device's cores are a bit mask, not an amount), so the core name is no quota resource here either."""
        c = self.config
        return ResourceNames(count=c.resource_count_name, extra=(c.resource_core_name,))

    # ---- requests ----------------------------------------------------------------------------------------------

    def container_request(self, container: Mapping[str, Any], what: str) -> ContainerRequest:
        """HAMi's ``GenerateResourceRequests``: the count (limits, else requests) takes that many whole devices
        (two cores each); else the cores are split by :func:`split_cores`. A value that is not an integer, not
        positive, too large, or a core count with no device shape is a ResourceRequestError naming it (HAMi's
        webhook refuses the same pods; its scheduler would ignore the container)."""
        c = self.config
        limits, requests = container_lists(container, what)
        label = container_label(container, what)
        problems: list[str] = []
        has_count, raw_count = raw_value(limits, requests, c.resource_count_name)
        if has_count:
            n = _validated(raw_count, c.resource_count_name, MAX_DEVICES, problems, label)
            if n is None:
                raise ResourceRequestError(problems)
            return ContainerRequest(nums=n, mem_mib=0, cores_pct=MAX_CORES_PER_DEVICE, type=NAME)
        has_core, raw_core = raw_value(limits, requests, c.resource_core_name)
        if not has_core:
            return EMPTY_REQUEST
        cores = _validated(raw_core, c.resource_core_name, MAX_CORES, problems, label)
        if cores is None:
            raise ResourceRequestError(problems)
        try:
            nums, per_device = split_cores(cores, c.resource_core_name)
        except ValueError as e:
            raise ResourceRequestError([f"{label}: {e}"]) from e
        return ContainerRequest(nums=nums, mem_mib=0, cores_pct=per_device, type=NAME)

    def mutate_container(self, container: dict[str, Any], where: str) -> bool:
        """HAMi's ``MutateAdmission``: no edit; ours when the container names the count or the cores (limits or
        requests) with a valid value (an invalid one is a ResourceRequestError: the pod is refused)."""
        return not self.container_request(container, where).empty

    def plugin_device_count(self, container: Mapping[str, Any]) -> int:
        """How many Neuron devices the device plugin serves ``container``: the devices of its request (a core
        request of 1 or 2 cores is one device), 0 when it asks for none or its request is invalid. Used by the
        simulated device plugin."""
        try:
            return self.container_request(container, "container").nums
        except ResourceRequestError:
            return 0

    def recorded_charge(self, annotations: Mapping[str, Any], charge: DeviceCharge) -> DeviceCharge:
        """A placed pod's charge on a device as the informer records it: :func:`core_terms`, as the reservation had
        it (the cores come from the pod's device list, so the annotations add nothing)."""
        del annotations
        return core_terms(charge)

    # ---- registration ------------------------------------------------------------------------------------------

    def observe(self, node: NodeView, now_local: datetime, *, reported_before: bool = False) -> Observation:
        """Registration from ``status.capacity``, in order: no ``capacity[neuron]`` → not registered; a count or
        core capacity that is not a whole quantity → invalid; ``allocatable[neuron]`` not a quantity → invalid;
        0 devices → not registered; cores that do not split evenly over the devices (or none) → invalid;
        ``allocatable[neuron]`` ≤ 0 (the device plugin is gone) → not registered. HAMi's ``CheckHealth`` always
        says healthy."""
        del now_local, reported_before
        c = self.config

        def devices(count: int, cores_total: int) -> tuple[DeviceInfo, ...] | Observation:
            if count > MAX_DEVICES:
                big = DecodeError(f"status.capacity[{c.resource_count_name}]", "beyond int32", str(count))
                return Invalid(DecodeFailure.REGISTER, big.what, big.part or "", big)
            try:
                return devices_from_capacity(node.name, count, cores_total, node.labels.get(INSTANCE_TYPE_LABEL, ""))
            except DecodeError as e:
                return Invalid(DecodeFailure.REGISTER, f"status.capacity[{c.resource_core_name}]", e.part or "", e)

        return observe_capacity(node, NAME, c.resource_count_name, c.resource_core_name, whole=_whole, devices=devices)

    def node_registration(self, devices: Sequence[DeviceInfo]) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
        """What AWS's Neuron device plugin advertises for ``devices`` (all of one geometry): the device count and
        the NeuronCores (each device's slots are its cores), plus the node's instance-type label (the devices'
        ``mode``)."""
        c = self.config
        if not devices:
            return {}, {}, {}
        per_device = {d.count for d in devices}
        types = {d.mode for d in devices}
        if len(per_device) != 1 or len(types) != 1 or next(iter(per_device)) <= 0:
            raise ValueError("the Neuron devices of a node share one core count (> 0) and one instance type")
        capacity = {
            c.resource_count_name: str(len(devices)),
            c.resource_core_name: str(next(iter(per_device)) * len(devices)),
        }
        instance_type = next(iter(types))
        return {}, capacity, ({INSTANCE_TYPE_LABEL: instance_type} if instance_type else {})

    # ---- pod device lists and the AWS annotations --------------------------------------------------------------

    def node_pod_annotations(self, node: str, devices: PodDevices) -> Mapping[str, str]:
        """``aws.amazon.com/predicate-node``: the node the pod is bound to (when it got Neuron devices)."""
        return {PREDICATE_NODE_KEY: node} if any(devices) else {}

    def bind_pod_annotations(
        self, pod: Mapping[str, Any] | None, inventory: NodeInventory | None, devices: PodDevices, now_unix: int
    ) -> Mapping[str, str]:
        """HAMi's ``PatchAnnotations`` extras: ``AWS_NEURON_IDS`` over every container with devices (in container
        order, init first): a container that asks by count lists its devices' indexes, one that asks by cores
        lists the core indexes ``stride × index + bit`` of its masks (``stride``: the device's registered cores,
        so an Inferentia1 device 1 starts at core 4) and sets ``NEURON_RESOURCE_TYPE``; then ``NEURON_ALLOC_TIME``
        (nanoseconds) and ``NEURON_ALLOCATED: "false"``. The pod tells the two kinds of container apart and the
        node's inventory gives the stride: either missing is a DecodeError (the device plugin could not use a
        guess)."""
        if not any(devices):
            return {}
        if pod is None:
            raise DecodeError(ASSIGNED_IDS_KEY, "needs the pod to tell device from core requests")
        init, app = pod_containers(pod)
        containers = [*init, *app]
        if len(containers) != len(devices):
            raise DecodeError(ASSIGNED_IDS_KEY, f"{len(devices)} device entries for {len(containers)} containers")
        stride_of = {d.id: d.count for d in inventory.devices} if inventory is not None else {}
        ids: list[str] = []
        by_cores = False
        for ci, (ctr, entry) in enumerate(zip(containers, devices, strict=True)):
            if not entry:
                continue
            limits, requests = container_lists(ctr, f"container {ci}")
            whole = raw_value(limits, requests, self.config.resource_count_name)[0]
            for d in entry:
                index = device_index(d.uuid)
                if index is None:
                    raise DecodeError(ASSIGNED_IDS_KEY, "not a Neuron device id", d.uuid)
                if whole:
                    ids.append(str(index))
                    continue
                stride = stride_of.get(d.uuid)
                if stride is None:
                    raise DecodeError(ASSIGNED_IDS_KEY, "the node's inventory does not hold the device", d.uuid)
                for bit in range(MAX_CORES_PER_DEVICE):
                    if d.used_cores & (1 << bit):
                        ids.append(str(stride * index + bit))
                        by_cores = True
        if not ids:
            return {}
        out = {
            ASSIGNED_IDS_KEY: ",".join(ids),
            ALLOC_TIME_KEY: str(now_unix * 1_000_000_000),
            ALLOCATED_FLAG_KEY: "false",
        }
        if by_cores:
            out[RESOURCE_TYPE_KEY] = self.config.resource_core_name
        return out
