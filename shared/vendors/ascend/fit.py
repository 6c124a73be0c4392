"""Ascend's part of ``Fit`` (:class:`AscendRules`): vNPU templates, the largest-network-first choice of 910 NPUs and
910C modules. Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from vgpu_scheduler.shared.domain.model import ContainerRequest, DeviceInfo, NodeInventory, PodConstraints, Reason
from vgpu_scheduler.shared.domain.vendor import Take, fit_mem_mib, selectors_uuid_ok
from vgpu_scheduler.shared.vendors.ascend.config import (
    ASCEND910C,
    NPUS_PER_910C_MODULE,
    VNPU_MODE_HAMI_CORE,
    ChipConfig,
)

# ------------------------------------------------------------------------------------------------------------
# Fit hooks
# ------------------------------------------------------------------------------------------------------------


def network_groups(inventory: NodeInventory, vendor: str) -> dict[str, frozenset[str]] | None:
    """Each of ``vendor``'s NPUs on the node → the UUIDs of its network (itself included), or None when some NPU
    reported no ``NetworkID`` (HAMi then chooses greedily).

    :meth:`AscendVendor.observe` records the NetworkIDs as ``pair_scores[a][b] = 1`` for every pair ``a, b`` of
    NPUs in one network, ``a == b`` included, so a row exists exactly for the NPUs that reported one.
    """
    out: dict[str, frozenset[str]] = {}
    for d in inventory.devices:
        if d.vendor != vendor:
            continue
        row = inventory.pair_scores.get(d.id)
        if row is None or d.id not in row:
            return None
        out[d.id] = frozenset(row)
    return out


def _by_network(candidates: Sequence[DeviceInfo], nums: int, groups: Mapping[str, frozenset[str]]) -> list[DeviceInfo]:
    """HAMi's ``computeBestCombination``: candidates grouped by network, largest group first (ties: the group of
    the more preferred candidate first), taken in order until ``nums``."""
    order: dict[frozenset[str], list[DeviceInfo]] = {}
    for d in candidates:
        order.setdefault(groups.get(d.id, frozenset({d.id})), []).append(d)
    ranked = sorted(order.values(), key=len, reverse=True)  # stable: first-seen order breaks ties
    out: list[DeviceInfo] = []
    for group in ranked:
        for d in group:
            out.append(d)
            if len(out) == nums:
                return out
    return out


def _by_module(candidates: Sequence[DeviceInfo], nums: int) -> list[DeviceInfo] | None:
    """910C: whole modules (NPUs ``2m`` and ``2m+1``) only, in order of their most preferred NPU."""
    if nums % NPUS_PER_910C_MODULE:
        return None
    modules: dict[int, list[DeviceInfo]] = {}
    for d in candidates:
        modules.setdefault(d.index // NPUS_PER_910C_MODULE, []).append(d)
    out: list[DeviceInfo] = []
    for members in modules.values():
        if len(members) == NPUS_PER_910C_MODULE:
            out.extend(members)
            if len(out) == nums:
                return out
    return None


@dataclass(frozen=True, slots=True)
class AscendRules:
    """Ascend's part of ``Fit`` (HAMi ``Devices.Fit`` in ``pkg/device/ascend/device.go``).

    The skeleton is the common one: a device is a candidate when registered by this chip's vendor, the type must
    equal the common word (HAMi's ``checkType``; there are no type selectors), the UUID selectors are the chip's
    own, cores above 100 are clamped. ``Ascend910*`` chips choose multi-NPU sets (:meth:`select`); ``Ascend310P``
    walks greedily.
    """

    chip: ChipConfig

    @property
    def name(self) -> str:
        return self.chip.common_word

    def candidate(self, dev: DeviceInfo, req: ContainerRequest) -> bool:
        del req
        return dev.vendor == self.chip.common_word

    def normalize(self, req: ContainerRequest) -> ContainerRequest:
        """Cores above 100 are clamped (HAMi's ``Fit``). Memory is not rounded here: the request parser already
        rounded it to a template, and HAMi's ``Fit`` takes the request's memory as it is."""
        if req.cores_pct > 100:
            return ContainerRequest(req.nums, req.mem_mib, req.mem_pct, 100, req.type)
        return req

    def type_ok(self, dev: DeviceInfo, req: ContainerRequest, constraints: PodConstraints) -> bool:
        if req.type != self.chip.common_word:
            return False
        return not self.soft(req, constraints) or dev.mode == VNPU_MODE_HAMI_CORE

    def soft(self, req: ContainerRequest, constraints: PodConstraints) -> bool:
        """Whether the request needs a soft-split NPU: the pod says ``huawei.com/vnpu-mode: hami-core`` (HAMi's
        ``isHAMiCore``). An AI-core percent without it is refused by the webhook, not here (HAMi's ``Fit`` takes it
        against the NPU's registered cores)."""
        del req
        return constraints.selectors(self.chip.common_word).mode == VNPU_MODE_HAMI_CORE

    def node_mode_reason(
        self, devices: Sequence[DeviceInfo], req: ContainerRequest, constraints: PodConstraints
    ) -> Reason | None:
        """HAMi's ``ModeNotFit``: a soft-split request on a node whose NPUs do not run the soft split refuses the
        whole node (one count out of the chip's NPUs, as HAMi's ``GenReason``). A request without a mode fits
        either kind of node (the mode follows the node)."""
        if self.soft(req, constraints) and not all(d.mode == VNPU_MODE_HAMI_CORE for d in devices):
            return Reason.MODE_NOT_FIT
        return None

    def uuid_ok(self, dev: DeviceInfo, constraints: PodConstraints) -> bool:
        return selectors_uuid_ok(dev, constraints.selectors(self.chip.common_word))

    def take(self, dev: DeviceInfo, req: ContainerRequest, used_mem_mib: int) -> Take:
        del used_mem_mib
        return Take(fit_mem_mib(req, dev.devmem_mib), req.cores_pct)

    @property
    def selects_sets(self) -> bool:
        return self.chip.is_910

    def select(
        self, candidates: Sequence[DeviceInfo], nums: int, inventory: NodeInventory
    ) -> Sequence[DeviceInfo] | None:
        if len(candidates) < nums or nums <= 0:
            return None
        if nums == 1:
            return candidates[:1]
        if self.chip.common_word == ASCEND910C:
            return _by_module(candidates, nums)
        groups = network_groups(inventory, self.chip.common_word)
        if groups is None or len(candidates) == nums:
            return candidates[:nums]
        return _by_network(candidates, nums, groups)

    def score_node(self, inventory: NodeInventory) -> float:
        del inventory
        return 0.0
