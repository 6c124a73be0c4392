"""A family whose device plugin advertises only a count in node capacity and whose containers ask for whole devices
by that count (Kunlunxin XPUs, MetaX GPUs, Enflame GCUs): :class:`CountedVendor` reads the request, admits the
container, observes the node and writes its capacity from a :class:`Counted` description. Pure."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from vgpu_scheduler.shared.domain.model import ContainerRequest, DeviceInfo
from vgpu_scheduler.shared.vendors.base import ResourceNames
from vgpu_scheduler.shared.vendors.capacity import count_in_limits, count_registration, observe_count
from vgpu_scheduler.shared.vendors.described import DescribedVendor
from vgpu_scheduler.shared.vendors.registration import NodeView, Observation
from vgpu_scheduler.shared.vendors.simple import count_only_request


@dataclass(frozen=True, slots=True)
class Counted:
    """What a counted family's plugin and requests say about its devices.

    ``devices(node, count)``: the devices HAMi derives from ``capacity[count] == count`` (a count above ``top`` is
    invalid, ``expected`` says so); a request takes ``mem_mib`` and ``cores_pct`` of each device (the whole device
    as a memory percentage of 100 either way); ``shape`` (memory MiB, cores, slots), when set, is the only device
    the plugin can advertise (``refusal`` otherwise); ``pair_scores`` reads the node's topology from its
    annotations."""

    top: int
    expected: str
    devices: Callable[[str, int], tuple[DeviceInfo, ...]]
    mem_mib: int = 0
    cores_pct: int = 0
    shape: tuple[int, int, int] | None = None
    refusal: str = ""
    pair_scores: Callable[[Mapping[str, str]], Mapping[str, Mapping[str, int]]] | None = None


class CountedVendor(DescribedVendor):
    """A counted family (see the module docstring). A subclass sets ``description`` and ``counted`` and says
    where its count resource's name comes from (:attr:`count_name`)."""

    __slots__ = ()
    counted: Counted

    @property
    def count_name(self) -> str:
        raise NotImplementedError

    @property
    def resources(self) -> ResourceNames:
        return ResourceNames(count=self.count_name)

    def container_request(self, container: Mapping[str, Any], what: str) -> ContainerRequest:
        """HAMi's ``GenerateResourceRequests``: the count from the limits, else the requests; each device whole.
        A bad quantity is a ResourceRequestError."""
        c = self.counted
        return count_only_request(container, what, self.count_name, self.name, mem_mib=c.mem_mib, cores_pct=c.cores_pct)

    def mutate_container(self, container: dict[str, Any], where: str) -> bool:
        """HAMi's ``MutateAdmission``: no edit; ours when the count is in the limits (validated here)."""
        return count_in_limits(container, where, self.count_name, self.container_request)

    def observe(self, node: NodeView, now_local: datetime, *, reported_before: bool = False) -> Observation:
        """Registration from ``status.capacity[<count>]`` (:func:`~shared.vendors.capacity.observe_count`): absent
        → not registered; not a whole number → invalid; 0 → not registered; else that many devices, healthy.
        Cordoned devices from ``hami.io/device-cordon``."""
        del now_local, reported_before
        c = self.counted
        return observe_count(
            node,
            vendor=self.name,
            count_name=self.count_name,
            top=c.top,
            expected=c.expected,
            devices=c.devices,
            pair_scores=c.pair_scores(node.annotations) if c.pair_scores is not None else None,
        )

    def node_registration(self, devices: Sequence[DeviceInfo]) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
        """What the device plugin advertises for ``devices``: their number as the count resource."""
        return count_registration(devices, self.count_name, shape=self.counted.shape, refusal=self.counted.refusal)
