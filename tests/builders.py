"""Builders for test data: devices, nodes, snapshots, requests, pods. Short names, sensible defaults.

Device UUIDs are ``GPU-<node>-<index>`` unless given. Add builders here for other areas as needed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from vgpu_scheduler.shared.domain.model import (
    MEM_PCT_UNSET,
    NVIDIA,
    ContainerRequest,
    DeviceInfo,
    DeviceUsage,
    MigPlacement,
    MigProfile,
    NodeInventory,
    PodRequest,
)
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot


def gpu(
    uuid: str = "GPU-0",
    *,
    index: int = 0,
    count: int = 10,
    mem: int = 8000,
    core: int = 100,
    type: str = "NVIDIA-Tesla V100-PCIE-32GB",
    numa: int = 0,
    mode: str = "hami-core",
    health: bool = True,
    mig_profiles: tuple[MigProfile, ...] = (),
) -> DeviceInfo:
    """One registered GPU (defaults: 10 slots, 8000 MiB, 100 cores, healthy, hami-core, NUMA 0)."""
    return DeviceInfo(
        id=uuid,
        index=index,
        count=count,
        devmem_mib=mem,
        devcore=core,
        type=type,
        numa=numa,
        mode=mode,
        health=health,
        mig_profiles=mig_profiles,
    )


def gpus(node: str, n: int, **kw: object) -> tuple[DeviceInfo, ...]:
    """``n`` identical GPUs ``GPU-<node>-0`` … with indices 0..n-1 (keyword arguments as for ``gpu``)."""
    return tuple(gpu(f"GPU-{node}-{i}", index=i, **kw) for i in range(n))  # type: ignore[arg-type]


def inventory(
    name: str,
    devices: Iterable[DeviceInfo] | None = None,
    *,
    n: int = 4,
    pair_scores: Mapping[str, Mapping[str, int]] | None = None,
    cordoned: Iterable[str] = (),
    **gpu_kw: object,
) -> NodeInventory:
    """A node's NVIDIA inventory: the given devices, or ``n`` identical GPUs built with ``gpu_kw``."""
    devs = tuple(devices) if devices is not None else gpus(name, n, **gpu_kw)
    return NodeInventory(
        node=name, vendor=NVIDIA, devices=devs, pair_scores=pair_scores or {}, cordoned=frozenset(cordoned)
    )


def use(
    used: int = 1,
    mem: int = 0,
    cores: int = 0,
    *,
    mig: Iterable[MigPlacement] = (),
    legacy_geometry: int | None = None,
    legacy_slots: Iterable[int] = (),
) -> DeviceUsage:
    """A device usage: ``used`` tasks, ``mem`` MiB, ``cores`` %."""
    return DeviceUsage(
        used=used,
        used_mem_mib=mem,
        used_cores=cores,
        mig_in_use=tuple(mig),
        legacy_geometry=legacy_geometry,
        legacy_slots=frozenset(legacy_slots),
    )


def snap(
    name: str = "node1",
    devices: Iterable[DeviceInfo] | None = None,
    *,
    usage: Mapping[int | str, DeviceUsage] | None = None,
    n: int = 4,
    pair_scores: Mapping[str, Mapping[str, int]] | None = None,
    cordoned: Iterable[str] = (),
    **gpu_kw: object,
) -> NodeSnapshot:
    """A node snapshot. ``usage`` keys are device UUIDs or positions in the device list."""
    inv = inventory(name, devices, n=n, pair_scores=pair_scores, cordoned=cordoned, **gpu_kw)
    by_uuid: dict[str, DeviceUsage] = {}
    for k, u in (usage or {}).items():
        by_uuid[inv.devices[k].id if isinstance(k, int) else k] = u
    return NodeSnapshot(inv, by_uuid)


def req(nums: int = 1, mem: int = 0, pct: int = MEM_PCT_UNSET, cores: int = 0) -> ContainerRequest:
    """One container's NVIDIA request: ``nums`` GPUs, ``mem`` MiB or ``pct`` % memory each, ``cores`` %."""
    return ContainerRequest(nums=nums, mem_mib=mem, mem_pct=pct, cores_pct=cores)


NONE = ContainerRequest(nums=0)
"""A container that requests no GPU."""


def pod(*containers: ContainerRequest, init: Iterable[ContainerRequest] = ()) -> PodRequest:
    """A pod: init containers (``init=``) first, then the app containers."""
    inits = tuple(init)
    return PodRequest(containers=(*inits, *containers), init_count=len(inits))
