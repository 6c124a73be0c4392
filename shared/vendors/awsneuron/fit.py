"""AWS Neuron ``Fit``: core masks, contiguous device runs on ring instances (the topology), and :class:`AWSNeuronRules`.
Pure."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from vgpu_scheduler.shared.domain.diagnosis import NearestMiss
from vgpu_scheduler.shared.domain.model import (
    ZERO_USAGE,
    ContainerRequest,
    DeviceCharge,
    DeviceInfo,
    DeviceUsage,
    NodeInventory,
    PodConstraints,
    Reason,
)
from vgpu_scheduler.shared.domain.vendor import DeviceRules, Take
from vgpu_scheduler.shared.vendors.awsneuron.keys import (
    _ID_INFIX,
    CORE_TAG,
    MAX_CORES_PER_DEVICE,
    NAME,
    RING_GROUPS,
    TRAINIUM_SIZES,
)
from vgpu_scheduler.shared.vendors.capacity import index_in_id
from vgpu_scheduler.shared.vendors.simple import UuidOnlyRules


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
    return index_in_id(uuid, _ID_INFIX)


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
