"""AWS Neuron devices (Inferentia, Trainium) as a vendor (HAMi's ``pkg/device/awsneuron``): common word
``AWSNeuron``, pure.

What a Neuron pod and node look like on the wire (docs/vendors/awsneuron.md):

* resources ``aws.amazon.com/neuron`` (whole Neuron devices) and ``aws.amazon.com/neuroncore`` (NeuronCores);
  the count wins when a container names both. A core request of 1 or 2 takes that many cores of one device; more
  must be a multiple of 2 and takes whole devices (``cores / 2`` of them). A device request takes the whole device;
* registration from **node capacity** (AWS's own Neuron device plugin advertises both resources):
  ``capacity[neuron]`` devices ``<node>-AWSNeuron-<i>``, each with ``capacity[neuroncore] / capacity[neuron]``
  slots; the node's ``node.kubernetes.io/instance-type`` label (kept as the devices' ``mode``) decides how several
  devices are chosen. At most two cores of a device are addressable: a device's cores are the bit mask ``0b11``
  (``0b1`` for a one-core device), also on a four-core Inferentia1, as HAMi #2809 made it just after v2.10.0
  (v2.10.0 registers ``0b1111`` there and over-commits the device: docs/vendors/awsneuron.md, Inferentia1);
* a container's cores are a **contiguous** run of free bits of one device's mask, recorded as that mask in the
  pod's device entry (``<id>,AWSNeuron,0,<mask>:``) under ``hami.io/aws-neuron-devices-allocated`` (HAMi writes no
  to-allocate key for it). Several devices are a contiguous run by index: on an ``inf`` instance any run (a ring),
  otherwise (Trainium) only 1, 4, 8 or 16 devices, aligned on a multiple of their number;
  no run: ``NumaNotFit``;
* the AWS scheduler-extension annotations the device plugin reads: ``AWS_NEURON_IDS`` (device indexes, or core
  indexes ``stride × index + bit`` for core requests, with ``NEURON_RESOURCE_TYPE`` = the core resource),
  ``NEURON_ALLOC_TIME`` (the bind's time, nanoseconds), ``NEURON_ALLOCATED: "false"`` and
  ``aws.amazon.com/predicate-node``; **no node lock**;
* selectors ``aws.amazon.com/use-neuron-uuid`` / ``aws.amazon.com/nouse-neuron-uuid`` (both apply).

On by default, as in HAMi (:data:`ENABLE_FLAG` is None).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction
from typing import Any, Final

from vgpu_scheduler.shared.codec.quantity import parse_quantity
from vgpu_scheduler.shared.codec.resources import (
    ResourceRequestError,
    container_label,
    container_lists,
    pod_containers,
    raw_value,
)
from vgpu_scheduler.shared.domain.diagnosis import NearestMiss
from vgpu_scheduler.shared.domain.model import (
    EMPTY_REQUEST,
    ZERO_USAGE,
    ContainerRequest,
    DeviceCharge,
    DeviceInfo,
    DeviceUsage,
    NodeInventory,
    PodConstraints,
    PodDevices,
    Reason,
    Selectors,
)
from vgpu_scheduler.shared.domain.vendor import DeviceRules, Take
from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.vendors.base import NodeLockKind, ResourceNames
from vgpu_scheduler.shared.vendors.capacity import cordoned_ids, whole_capacity
from vgpu_scheduler.shared.vendors.common import names_section
from vgpu_scheduler.shared.vendors.described import DescribedVendor, Description
from vgpu_scheduler.shared.vendors.registration import (
    DecodeFailure,
    Invalid,
    NodeView,
    NotRegistered,
    Observation,
    Registered,
    Unregistered,
)
from vgpu_scheduler.shared.vendors.simple import UuidOnlyRules, uuid_selectors

SECTION: Final = "awsneuron"
ENABLE_FLAG: Final[str | None] = None
"""HAMi v2.10 initialises AWS Neuron whatever its device config holds: no flag enables it."""

NAME: Final = "AWSNeuron"
ALLOCATED_KEY: Final = "hami.io/aws-neuron-devices-allocated"
USE_UUID: Final = "aws.amazon.com/use-neuron-uuid"
NOUSE_UUID: Final = "aws.amazon.com/nouse-neuron-uuid"
ASSIGNED_IDS_KEY: Final = "AWS_NEURON_IDS"
ALLOC_TIME_KEY: Final = "NEURON_ALLOC_TIME"
RESOURCE_TYPE_KEY: Final = "NEURON_RESOURCE_TYPE"
ALLOCATED_FLAG_KEY: Final = "NEURON_ALLOCATED"
PREDICATE_NODE_KEY: Final = "aws.amazon.com/predicate-node"
INSTANCE_TYPE_LABEL: Final = "node.kubernetes.io/instance-type"
MAX_CORES_PER_DEVICE: Final = 2
"""The NeuronCores of one device we address (its core mask has two bits, also on Inferentia1, as after HAMi #2809)."""
MAX_DEVICES: Final = 2**31 - 1
MAX_CORES: Final = MAX_DEVICES * MAX_CORES_PER_DEVICE
RING_GROUPS: Final = ("inf", "Inf")
"""An instance type containing one of these is an Inferentia ring: any contiguous run of devices is connected."""
TRAINIUM_SIZES: Final = (1, 4, 8, 16)
"""How many devices a Trainium (non-``inf``) node gives one container, each run aligned on its size."""
_ID_INFIX: Final = "-" + NAME + "-"
CORE_TAG: Final = "core="
"""The usage tag of a NeuronCore a charge holds: ``core=<bit>`` (``DeviceUsage.tags``), one per bit of its mask."""


@dataclass(frozen=True, slots=True)
class AWSNeuronConfig:
    """The ``awsneuron:`` section (HAMi's ``AWSNeuronConfig``)."""

    resource_count_name: str = "aws.amazon.com/neuron"
    resource_core_name: str = "aws.amazon.com/neuroncore"


_KEYS: Mapping[str, str] = {"resourceCountName": "resource_count_name", "resourceCoreName": "resource_core_name"}


def parse_config(section: object) -> AWSNeuronConfig:
    """Validate the ``awsneuron:`` section; absent keys keep HAMi's defaults. The core name registers the devices'
    cores (node capacity), so it must not be empty either. ConfigError names the key path."""
    required = {"resourceCoreName": "the devices' cores register through it"}
    return AWSNeuronConfig(**names_section(section, SECTION, _KEYS, unit="Neuron devices", required=required))


def build(section: object) -> tuple[AWSNeuronVendor, ...]:
    """The vendor the ``awsneuron:`` section configures (``None`` or ``{}``: HAMi's defaults)."""
    return (AWSNeuronVendor(parse_config(section)),)


# ------------------------------------------------------------------------------------------------------------
# Core masks and device runs
# ------------------------------------------------------------------------------------------------------------


def core_mask(cores_per_device: int) -> int:
    """The registered core mask of a device with ``cores_per_device`` NeuronCores: one bit per addressable core,
    at most :data:`MAX_CORES_PER_DEVICE` (``0b11``)."""
    return (1 << min(max(cores_per_device, 0), MAX_CORES_PER_DEVICE)) - 1


def bits(mask: int) -> int:
    """How many cores a mask holds (HAMi's ``countMaskAvailable``)."""
    return bin(mask).count("1") if mask > 0 else 0


def free_run(available: int, used: int, cores: int) -> int | None:
    """The lowest contiguous run of ``cores`` bits that are in ``available`` and not in ``used``, as a mask; None
    when there is none (the Neuron runtime needs a contiguous core range)."""
    if cores <= 0:
        return None
    width = available.bit_length()
    run = (1 << cores) - 1
    for start in range(width - cores + 1):
        mask = run << start
        if available & mask == mask and not used & mask:
            return mask
    return None


def core_tags(mask: int) -> tuple[str, ...]:
    """The usage tags of the cores in ``mask``: ``core=<bit>`` for each bit, lowest first."""
    return tuple(f"{CORE_TAG}{b}" for b in range(max(mask, 0).bit_length()) if mask >> b & 1)


def tagged_cores(usage: DeviceUsage) -> int:
    """The cores the device's tagged holders hold (the union of their ``core=<bit>`` tags), as a mask. Exact, where
    the sum of the masks is not when two of them overlap; pods recorded without tags are not in it."""
    mask = 0
    for tag, n in usage.tags:
        if n > 0 and tag.startswith(CORE_TAG):
            bit = tag[len(CORE_TAG) :]
            if bit.isascii() and bit.isdigit() and int(bit) < MAX_CORES_PER_DEVICE:
                mask |= 1 << int(bit)
    return mask


def cores_in_use(used_cores: int, usage: DeviceUsage) -> int:
    """The cores of a device Fit treats as taken: the tagged cores (:func:`tagged_cores`) and, for holders recorded
    without tags, the sum of the masks read as a mask (the derivation before tags, exact while the masks are
    disjoint). ``used_cores`` is that sum, with the pod's own earlier containers."""
    return used_cores | tagged_cores(usage)


def core_terms(charge: DeviceCharge) -> DeviceCharge:
    """A Neuron charge with its cores as usage tags and the same tags as the atomic reserve's sharing rule: a device
    in use that already holds a task on one of these cores refuses it (``ConflictDimension.SHARING``), so two
    decisions that took the same core on stale snapshots never both reserve. The extender reserves it and the
    informer records the same from the pod's device list, so the two are equal byte for byte."""
    tags = core_tags(charge.cores_pct)
    return dataclasses.replace(charge, tags=tags, refuse_tags=tags)


def device_index(uuid: str) -> int | None:
    """The index HAMi encodes in a device id ``<node>-AWSNeuron-<i>`` (None for another id)."""
    _, sep, tail = uuid.rpartition(_ID_INFIX)
    return int(tail) if sep and tail.isascii() and tail.isdigit() else None


def is_ring(instance_type: str) -> bool:
    """Whether the node is an Inferentia instance, whose devices form a ring (HAMi: the type contains ``inf``)."""
    return any(g in instance_type for g in RING_GROUPS)


def contiguous_run(ordered: Sequence[DeviceInfo], free: frozenset[str], nums: int) -> list[DeviceInfo] | None:
    """HAMi's ``graphSelect``: ``nums`` devices in a row of ``ordered`` (the node's Neuron devices by index) that
    are all in ``free``. On an Inferentia node (the instance type in the first device's ``mode``) a run may start
    anywhere; otherwise ``nums`` must be 1, 4, 8 or 16 and the run starts on a multiple of it. None: no run."""
    if not ordered or nums <= 0:
        return None
    if is_ring(ordered[0].mode):
        step = 1
    elif nums in TRAINIUM_SIZES:
        step = nums
    else:
        return None
    for start in range(0, len(ordered) - nums + 1, step):
        run = ordered[start : start + nums]
        if all(d.id in free for d in run):
            return list(run)
    return None


@dataclass(frozen=True, slots=True)
class AWSNeuronRules(UuidOnlyRules):
    """Neuron ``Fit``: the common skeleton (health, cordon, type, UUID, slots, ``mutex``) with cores as bit masks.

    One device: a contiguous run of the request's cores among the device's free cores (the mask is what the
    device entry records; ``CardInsufficientCore`` when there is none). Several devices: whole free devices
    (their full mask), chosen as a contiguous run by index (:func:`contiguous_run`); when devices pass but no run
    exists the node's reason is HAMi's ``1/<devices> NumaNotFit``."""

    clamp_cores: bool = False

    @property
    def selects_sets(self) -> bool:
        return True

    @property
    def keeps_selected_order(self) -> bool:
        """The chosen run keeps its index order in the pod's device list (HAMi lists the run in order)."""
        return True

    @property
    def set_failure(self) -> Reason:
        """The one reason a node gets when devices passed but no allowed set exists (HAMi's ``NumaNotFit``)."""
        return Reason.NUMA_NOT_FIT

    def normalize(self, req: ContainerRequest) -> ContainerRequest:
        return req

    def take(self, dev: DeviceInfo, req: ContainerRequest, used_mem_mib: int) -> Take:
        return self.take_on(dev, req, used_mem_mib, 0)

    def take_on(
        self,
        dev: DeviceInfo,
        req: ContainerRequest,
        used_mem_mib: int,
        used_cores: int,
        usage: DeviceUsage = ZERO_USAGE,
    ) -> Take:
        """The core mask ``req`` takes on ``dev`` given the cores already in use there: ``used_cores`` (the sum of
        the holders' masks, with the pod's own earlier containers) and the device's ``usage`` before the pod, whose
        core tags say exactly which cores its tagged holders hold (:func:`cores_in_use`)."""
        del used_mem_mib
        in_use = cores_in_use(used_cores, usage)
        if req.nums > 1:
            if in_use & dev.devcore:
                return Take(0, 0, Reason.CARD_INSUFFICIENT_CORE)
            return Take(0, dev.devcore)
        mask = free_run(dev.devcore, in_use, req.cores_pct)
        if mask is None:
            return Take(0, 0, Reason.CARD_INSUFFICIENT_CORE)
        return Take(0, mask)

    def select(
        self, candidates: Sequence[DeviceInfo], nums: int, inventory: NodeInventory
    ) -> Sequence[DeviceInfo] | None:
        if nums == 1:
            return candidates[:1] if candidates else None
        ordered = sorted((d for d in inventory.devices if d.vendor == self.name), key=lambda d: d.index)
        return contiguous_run(ordered, frozenset(d.id for d in candidates), nums)

    def charge_terms(
        self, charge: DeviceCharge, dev: DeviceInfo, usage: DeviceUsage, constraints: PodConstraints
    ) -> DeviceCharge:
        """:func:`core_terms`: the charge's cores as tags, and the reserve's rule that no holder has one of them."""
        del dev, usage, constraints
        return core_terms(charge)

    def nearest_miss(
        self, reason: Reason, node: str, candidates: Sequence[tuple[DeviceInfo, DeviceUsage]], req: ContainerRequest
    ) -> NearestMiss | None:
        """``explain``'s words for the refusals the generic ones would get wrong (cores are masks, several devices
        a run): NeuronCores short on one device, no idle device, or no run of idle devices. None: the generic."""
        idle = [d for d, u in candidates if not cores_in_use(u.used_cores, u) & d.devcore]
        if reason is Reason.NUMA_NOT_FIT or (reason is Reason.CARD_INSUFFICIENT_CORE and req.nums > 1):
            rule = (
                "an Inferentia ring: any run"
                if candidates and is_ring(candidates[0][0].mode)
                else "Trainium: 1, 4, 8 or 16 devices starting on a multiple of that number"
            )
            text = (
                f"needs {req.nums} idle Neuron devices in a row by index ({rule}); {node} has "
                f"{len(idle)} idle but no such run"
            )
            return NearestMiss(reason.value, text, None, req.nums, len(idle), "Neuron devices")
        if reason is Reason.CARD_INSUFFICIENT_CORE:
            if not candidates:
                return None
            free = {d.id: bits(d.devcore & ~cores_in_use(u.used_cores, u)) for d, u in candidates}
            best = max(free, key=lambda k: free[k])
            text = (
                f"needs {req.cores_pct} NeuronCore{'s' if req.cores_pct != 1 else ''} in a row on one Neuron device; "
                f"the most free on {node} is {free[best]} on {best}"
            )
            return NearestMiss(reason.value, text, best, req.cores_pct, free[best], "NeuronCores")
        return None


AWSNEURON_RULES: DeviceRules = AWSNeuronRules(NAME)


# ------------------------------------------------------------------------------------------------------------
# Registration from node capacity
# ------------------------------------------------------------------------------------------------------------


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


# ------------------------------------------------------------------------------------------------------------
# The vendor
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AWSNeuronVendor(DescribedVendor):
    """AWS Neuron (see the module docstring)."""

    description = Description(
        name=NAME, rules=AWSNEURON_RULES, allocated_key=ALLOCATED_KEY, node_lock=NodeLockKind.NONE
    )

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

    def selectors(self, annotations: Mapping[str, str]) -> Selectors:
        return uuid_selectors(annotations, USE_UUID, NOUSE_UUID)

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
        capacity = node.capacity or node.allocatable
        try:
            count = _whole(capacity, c.resource_count_name)
            if count is None:
                return NotRegistered(Unregistered.ABSENT)
            cores_total = _whole(capacity, c.resource_core_name) or 0
        except DecodeError as e:
            return Invalid(DecodeFailure.REGISTER, e.what, e.part or "", e)
        source = f"status.allocatable[{c.resource_count_name}]"
        raw = node.allocatable.get(c.resource_count_name, 0)
        try:
            live = parse_quantity(raw, source) > 0
        except DecodeError as e:
            return Invalid(DecodeFailure.ALLOCATABLE, source, str(raw), e)
        if count == 0:
            return NotRegistered(Unregistered.NO_DEVICES)
        if count > MAX_DEVICES:
            big = DecodeError(f"status.capacity[{c.resource_count_name}]", "beyond int32", str(count))
            return Invalid(DecodeFailure.REGISTER, big.what, big.part or "", big)
        try:
            devices = devices_from_capacity(node.name, count, cores_total, node.labels.get(INSTANCE_TYPE_LABEL, ""))
        except DecodeError as e:
            return Invalid(DecodeFailure.REGISTER, f"status.capacity[{c.resource_core_name}]", e.part or "", e)
        if not live:
            return NotRegistered(Unregistered.NO_ALLOCATABLE)
        return Registered(
            NodeInventory(node=node.name, vendor=NAME, devices=devices, cordoned=cordoned_ids(node, devices))
        )

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
