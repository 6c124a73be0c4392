"""The scheduling core's per-vendor hooks: what ``Fit`` asks a device family (HAMi's ``Devices.Fit`` family).

HAMi runs one ``Fit`` per vendor; they share a skeleton (health, cordon, type, NUMA, UUID, time slices,
exclusivity, memory, cores) and differ in a few places. ``DeviceRules`` names those places; the core runs the
skeleton once and asks the request's vendor (``ContainerRequest.type``, HAMi's common word) at each of them.
:data:`NVIDIA_RULES` is NVIDIA's behaviour, unchanged; other vendors live in ``shared.vendors`` and are handed to
the core through ``PodContext.rules``.

Pure: no I/O, no codecs. Every hook sees the node as it was before the pod plus what the pod already took.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from vgpu_scheduler.shared.domain.model import (
    MEM_PCT_UNSET,
    NVIDIA,
    ContainerRequest,
    DeviceInfo,
    NodeInventory,
    PodConstraints,
    Reason,
    Selectors,
)


@dataclass(frozen=True, slots=True)
class Take:
    """What one device gives a request: the memory and cores recorded in the pod's device entry.

    ``reason`` set means the device cannot serve the request at all (counted as that reason in ``FailedNodes``).
    """

    mem_mib: int
    cores: int
    reason: Reason | None = None
    cores_checked: bool = True
    """False: the device's cores do not limit the request (MetaX sGPU online pods: HAMi's Fit skips the core
    checks and records 0 cores)."""


class DeviceRules(Protocol):
    """One vendor's part of ``Fit``. Implementations are frozen and stateless (safe to share across threads).

    Optional hooks the core looks up when present: ``unhealthy_reason`` and ``slots_full_reason`` (the
    :class:`Reason` counted for an unhealthy device, and for one whose task slots are all taken, where the vendor's
    HAMi ``Fit`` words them its own way: MetaX sGPU's ``CardUnhealthy``, Enflame GCU's
    ``ExclusiveDeviceAllocateConflict``), ``pod_device_ok(dev, earlier)`` (a rule on the pod's earlier
    devices, refused as ``CardNotFoundCustomFilterRule``), ``mutex_group(dev)`` (devices busy as a group under
    ``mutex``), ``node_mode_reason(devices, req, constraints) -> Reason | None`` (the node's mode refuses the
    request as a whole, counted once out of the family's devices: Ascend's ``ModeNotFit``),
    ``take_on(dev, req, used_mem_mib, used_cores, usage)`` (a take that sees the cores in use and the device's usage
    before the pod), ``set_failure`` and ``keeps_selected_order`` (AWS Neuron: see :mod:`shared.vendors.awsneuron`),
    ``device_fits(dev, req, used, used_mem_mib)`` (the vendor's own test of a device, after the common checks; a
    device that fails it is passed over without a reason, as HAMi's Kunlunxin ``fitFn``) and ``set_miss_reason``
    (a :class:`Reason`: when :meth:`select` finds no set, the node's one reason unless some device gave one of its
    own, as HAMi's Kunlunxin ``NumaNotFit``), ``pod_score(snapshot, devices, node_policy, constraints)`` with
    ``pod_score_bound(snapshot, requests, node_policy, constraints)`` (a node-score term that depends on the devices
    the pod gets, and at least the most it can move a node ahead under the node policy: ``plan`` then fits only
    the nodes that could still win, see :mod:`shared.domain.plan`), ``uniform_share``
    (True: a device is shared only by tasks of one size; the charges say so and the atomic reserve re-checks it),
    ``in_use_ok(dev, usage, own, req, constraints) -> Reason | None`` (a rule on a device already in use, given its
    usage before the pod and the slots the pod's earlier containers took on it) and
    ``charge_terms(charge, dev, usage, constraints) -> DeviceCharge`` (the charge with the tags it adds to the
    device's usage and the sharing rule the atomic reserve re-checks: ``DeviceCharge.tags``, ``refuse_tags``,
    ``need_tags``, ``cores_unchecked``)."""

    @property
    def name(self) -> str:
        """HAMi's common word: the ``type`` of this vendor's requests and pod device entries."""
        ...

    def candidate(self, dev: DeviceInfo, req: ContainerRequest) -> bool:
        """Whether ``dev`` belongs to the request's device family at all (counts towards ``NodeInsufficientDevice``)."""
        ...

    def normalize(self, req: ContainerRequest) -> ContainerRequest:
        """Complete a request before any device is looked at (defaults, clamping); idempotent."""
        ...

    def type_ok(self, dev: DeviceInfo, req: ContainerRequest, constraints: PodConstraints) -> bool:
        """HAMi's ``CheckType`` for this vendor: the pod's type selectors (and modes) allow ``dev``."""
        ...

    def uuid_ok(self, dev: DeviceInfo, constraints: PodConstraints) -> bool:
        """HAMi's ``CheckUUID`` for this vendor."""
        ...

    def take(self, dev: DeviceInfo, req: ContainerRequest, used_mem_mib: int) -> Take:
        """The memory and cores ``req`` takes on ``dev`` (e.g. a percentage of the card, or memory rounded up to
        a vNPU template); ``used_mem_mib`` is what the device already holds. A ``reason`` refuses the device."""
        ...

    @property
    def selects_sets(self) -> bool:
        """True when a multi-device request is chosen as a set among every device that passes (like
        ``topology-aware``), through :meth:`select`; False for the greedy walk in preference order."""
        ...

    def select(
        self, candidates: Sequence[DeviceInfo], nums: int, inventory: NodeInventory
    ) -> Sequence[DeviceInfo] | None:
        """Choose ``nums`` of ``candidates`` (in preference order) as a set, or None when no allowed set exists.
        Only called when :attr:`selects_sets` is True."""
        ...

    def score_node(self, inventory: NodeInventory) -> float:
        """HAMi's ``ScoreNode`` for this vendor: added to the node's default score. Depends only on the node."""
        ...


@runtime_checkable
class EntryType(Protocol):
    """Optional part of :class:`DeviceRules`: the type a vendor writes in a pod's device entry for ``dev`` when it
    is not the vendor's common word (``ContainerDevice.shown_type``; AMD: the registered product type)."""

    def entry_type(self, dev: DeviceInfo) -> str: ...


def fit_mem_mib(req: ContainerRequest, devmem_mib: int) -> int:
    """The memory a request takes on one card (§1.2): MiB when given, else ``Totalmem × pct // 100``, else 0."""
    if req.mem_mib > 0:
        return req.mem_mib
    if req.mem_pct != MEM_PCT_UNSET:
        return devmem_mib * req.mem_pct // 100
    return 0


def selectors_type_ok(dev: DeviceInfo, sel: Selectors) -> bool:
    """Upper-cased substring match of the device type against the use / nouse type lists."""
    if sel.use_types or sel.nouse_types:
        kind = dev.type.upper()
        if sel.use_types and not any(t in kind for t in sel.use_types):
            return False
        if any(t in kind for t in sel.nouse_types):
            return False
    return True


def uuid_lists_ok(dev_id: str, use_uuids: frozenset[str], nouse_uuids: frozenset[str]) -> bool:
    """HAMi's ``CheckUUID``: both lists apply. The device must be in the use list when there is one, and never in
    the nouse list, so a card named in both is not used."""
    return (not use_uuids or dev_id in use_uuids) and dev_id not in nouse_uuids


def selectors_uuid_ok(dev: DeviceInfo, sel: Selectors) -> bool:
    """:func:`uuid_lists_ok` with a vendor's own selectors."""
    return uuid_lists_ok(dev.id, sel.use_uuids, sel.nouse_uuids)


@dataclass(frozen=True, slots=True)
class BasicRules:
    """The skeleton most vendors share: family by ``DeviceInfo.vendor``, the vendor's own selectors, memory in
    MiB or as a percentage of the card, cores as asked. Vendors with more rules subclass or wrap it."""

    name: str
    clamp_cores: bool = True

    def candidate(self, dev: DeviceInfo, req: ContainerRequest) -> bool:
        return dev.vendor == self.name

    def normalize(self, req: ContainerRequest) -> ContainerRequest:
        if self.clamp_cores and req.cores_pct > 100:
            return ContainerRequest(req.nums, req.mem_mib, req.mem_pct, 100, req.type)
        return req

    def type_ok(self, dev: DeviceInfo, req: ContainerRequest, constraints: PodConstraints) -> bool:
        return req.type == self.name and selectors_type_ok(dev, constraints.selectors(self.name))

    def uuid_ok(self, dev: DeviceInfo, constraints: PodConstraints) -> bool:
        return selectors_uuid_ok(dev, constraints.selectors(self.name))

    def take(self, dev: DeviceInfo, req: ContainerRequest, used_mem_mib: int) -> Take:
        del used_mem_mib
        return Take(fit_mem_mib(req, dev.devmem_mib), req.cores_pct)

    @property
    def selects_sets(self) -> bool:
        return False

    def select(
        self, candidates: Sequence[DeviceInfo], nums: int, inventory: NodeInventory
    ) -> Sequence[DeviceInfo] | None:
        del inventory
        return candidates[:nums] if len(candidates) >= nums else None

    def score_node(self, inventory: NodeInventory) -> float:
        del inventory
        return 0.0


@dataclass(frozen=True, slots=True)
class NvidiaRules(BasicRules):
    """NVIDIA's ``Fit`` hooks, exactly as before vendors were pluggable (hami-wire §6.4).

    A device is a candidate when its lower-cased type contains the lower-cased request type (HAMi's substring
    test, so ``NVIDIA`` matches ``NVIDIA-A100``); type selectors and ``nvidia.com/vgpu-mode`` come from the
    NVIDIA fields of :class:`PodConstraints`. Memory and cores are taken as :class:`BasicRules` takes them.
    """

    name: str = NVIDIA

    def candidate(self, dev: DeviceInfo, req: ContainerRequest) -> bool:
        return dev.vendor == NVIDIA and req.type.lower() in dev.type.lower()

    def normalize(self, req: ContainerRequest) -> ContainerRequest:
        return req  # the memory default needs the NVIDIA config: fit.normalize_request does it

    def type_ok(self, dev: DeviceInfo, req: ContainerRequest, constraints: PodConstraints) -> bool:
        if req.type != NVIDIA:
            return False
        if constraints.use_types or constraints.nouse_types:  # inline: this runs for every device Fit visits
            kind = dev.type.upper()
            if constraints.use_types and not any(t in kind for t in constraints.use_types):
                return False
            if any(t in kind for t in constraints.nouse_types):
                return False
        return constraints.vgpu_mode is None or dev.mode in constraints.vgpu_mode

    def uuid_ok(self, dev: DeviceInfo, constraints: PodConstraints) -> bool:
        return uuid_lists_ok(dev.id, constraints.use_uuids, constraints.nouse_uuids)


NVIDIA_RULES: DeviceRules = NvidiaRules()


@dataclass(frozen=True, slots=True)
class RuleSet:
    """The vendors the core knows, by common word. A request whose vendor is unknown fits nowhere."""

    by_name: Mapping[str, DeviceRules] = field(default_factory=lambda: {NVIDIA: NVIDIA_RULES})

    def get(self, name: str) -> DeviceRules | None:
        return self.by_name.get(name)

    def score_node(self, inventory: NodeInventory) -> float:
        """The sum of every present vendor's ``ScoreNode`` (each vendor scores its own devices)."""
        present = {d.vendor for d in inventory.devices}
        return sum(r.score_node(inventory) for n, r in self.by_name.items() if n in present)


NVIDIA_ONLY = RuleSet()
