"""A pod's placement on one node as the store keeps it (``Allocation``): the device list it was given, its
collapsed per-device charges and MIG allocations, and what those charges count against its namespace's quota,
per vendor (``domain.quota``).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from vgpu_scheduler.shared.domain.model import NVIDIA, DeviceCharge, MigAllocation, PodDevices
from vgpu_scheduler.shared.domain.quota import QuotaUse, QuotaUses, is_quota_word


@dataclass(frozen=True, slots=True)
class Allocation:
    """A pod's placement on one node: the device list it was given and its collapsed per-device charges."""

    pod_uid: str
    namespace: str
    name: str
    node: str
    devices: PodDevices
    charges: tuple[DeviceCharge, ...]
    mig: tuple[MigAllocation, ...] = ()

    def _quota_sums(self) -> dict[str, tuple[int, int]]:
        """Memory and cores the pod's charges hold on each vendor's devices (device type = the vendor's common
        word), in one pass. Types that could not be a common word are left out (no quota can name them)."""
        type_of = {d.uuid: d.type for ctr in self.devices for d in ctr}
        sums: dict[str, tuple[int, int]] = {}
        for c in self.charges:
            word = type_of.get(c.uuid)
            if word is None or not is_quota_word(word):
                continue
            m, k = sums.get(word, (0, 0))
            sums[word] = (m + c.mem_mib, k + c.cores_pct)
        return sums

    @property
    def quota_mem_mib(self) -> int:
        """What the namespace quota's NVIDIA fields (``nvidia.com/gpumem``) count: the NVIDIA devices' memory."""
        return self._quota_sums().get(NVIDIA, (0, 0))[0]

    @property
    def quota_cores_pct(self) -> int:
        """What ``nvidia.com/gpucores`` counts: the NVIDIA devices' cores."""
        return self._quota_sums().get(NVIDIA, (0, 0))[1]

    @property
    def quota_others(self) -> QuotaUses:
        """The pod's quota charge per other vendor, sorted by common word; a vendor whose charge is zero in both
        dimensions is left out."""
        sums = self._quota_sums()
        return tuple((w, QuotaUse(m, k)) for w, (m, k) in sorted(sums.items()) if w != NVIDIA and (m or k))

    def quota_others_of(self, vendors: Collection[str]) -> QuotaUses:
        """:attr:`quota_others` restricted to ``vendors`` (the enabled common words): a device type no enabled
        vendor has is charged nowhere."""
        return tuple((w, u) for w, u in self.quota_others if w in vendors)
