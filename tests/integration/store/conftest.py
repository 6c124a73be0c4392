"""Every store test runs twice: against the real redis-server fixture and against the embedded fakeredis."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from vgpu_scheduler.shared.domain.accounting import collapse
from vgpu_scheduler.shared.domain.allocation import Allocation
from vgpu_scheduler.shared.domain.model import ContainerDevice, DeviceInfo, MigAllocation, MigPlacement, NodeInventory
from vgpu_scheduler.shared.store import Store, connect


@pytest.fixture(params=["redis", "fake"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def store(backend: str, request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    url = request.getfixturevalue("redis_url") if backend == "redis" else None
    s = Store.create(connect(url), prefix="t")
    try:
        yield s
    finally:
        await s.aclose()


def gpu(
    uuid: str,
    *,
    index: int = 0,
    count: int = 10,
    mem: int = 16384,
    cores: int = 100,
    mode: str = "hami-core",
    health: bool = True,
) -> DeviceInfo:
    return DeviceInfo(
        id=uuid,
        index=index,
        count=count,
        devmem_mib=mem,
        devcore=cores,
        type="NVIDIA-T4",
        numa=0,
        mode=mode,
        health=health,
    )


def node(name: str, *devices: DeviceInfo, cordoned: frozenset[str] = frozenset()) -> NodeInventory:
    return NodeInventory(node=name, vendor="NVIDIA", devices=devices, cordoned=cordoned)


def alloc(
    uid: str,
    node_name: str,
    *containers: tuple[tuple[str, int, int], ...],
    namespace: str = "default",
    init_count: int = 0,
    mig: tuple[MigAllocation, ...] = (),
    legacy: dict[str, tuple[int, int]] | None = None,
) -> Allocation:
    """An allocation from per-container (uuid, mem, cores) entries, charged through the real collapse()."""
    legacy = legacy or {}
    devices = tuple(
        tuple(ContainerDevice(uuid=u, used_mem_mib=m, used_cores=c, legacy_mig=legacy.get(u)) for u, m, c in ctr)
        for ctr in containers
    )
    return Allocation(
        pod_uid=uid,
        namespace=namespace,
        name=f"pod-{uid}",
        node=node_name,
        devices=devices,
        charges=collapse(devices, init_count, mig),
        mig=mig,
    )


def mig_alloc(uid: str, node_name: str, gpu_uuid: str, *placements: tuple[int, int], mem: int = 4864) -> Allocation:
    migs = tuple(
        MigAllocation(
            container_index=0, device_index=i, gpu_uuid=gpu_uuid, profile="1g.5gb", placement=MigPlacement(s, z)
        )
        for i, (s, z) in enumerate(placements)
    )
    return alloc(uid, node_name, tuple((gpu_uuid, mem, 15) for _ in placements), mig=migs)
