"""The fragmentation gauge, computed at scrape time from one view of the snapshot cache:
``vgpu_fragmentation_ratio{vendor, device_type}``, the free GPU memory stranded on cards that already hold a pod over
all free memory (``shared/domain/fragmentation.py``, the definition ``usage`` and ``simulate`` report), per vendor
(the device's common word, as on the ``hami_*`` device gauges) and device type (the pool a whole-card request
is placed in). Usable devices only: healthy and not cordoned."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from vgpu_scheduler.shared.domain.fragmentation import fragmentation
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot

NAME = "vgpu_fragmentation_ratio"
HELP = "Free GPU memory stranded on devices that hold a pod, over all free GPU memory (0: none free or none stranded)"
LABELS = ["vendor", "device_type"]


@dataclass(frozen=True, slots=True)
class _Load:
    """One device as ``fragmentation`` reads it."""

    usable: bool
    used: int
    free_mem_mib: int


def fragmentation_by_pool(nodes: Iterable[NodeSnapshot]) -> dict[tuple[str, str], float]:
    """The fragmentation ratio of the devices of ``nodes``, per (vendor, device type)."""
    pools: defaultdict[tuple[str, str], list[_Load]] = defaultdict(list)
    for snap in nodes:
        cordoned = snap.inventory.cordoned
        for dev, u in zip(snap.inventory.devices, snap.usages, strict=True):
            usable = dev.health and dev.id not in cordoned
            pools[dev.vendor, dev.type].append(_Load(usable, u.used, max(dev.devmem_mib - u.used_mem_mib, 0)))
    return {pool: fragmentation(loads).ratio for pool, loads in sorted(pools.items())}


class FragmentationCollector(Collector):
    """:data:`NAME` for the snapshots ``nodes`` returns (module docstring)."""

    def __init__(self, nodes: Callable[[], Mapping[str, NodeSnapshot]]) -> None:
        self._nodes = nodes

    def describe(self) -> Iterable[Metric]:
        return [GaugeMetricFamily(NAME, HELP, labels=LABELS)]

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(NAME, HELP, labels=LABELS)
        for (vendor, kind), ratio in fragmentation_by_pool(self._nodes().values()).items():
            family.add_metric([vendor, kind], ratio)
        yield family
