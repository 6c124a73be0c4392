"""Builders for ``defrag plan``'s integration tests: pods as the API holds them (with an owner, annotations,
priority) and their allocation records in the store, and a small fragmented cluster."""

from __future__ import annotations

from typing import Any

from tests.integration.extender.filter_harness import node, node_object, seed
from vgpu_scheduler.shared.domain.accounting import collapse
from vgpu_scheduler.shared.domain.allocation import Allocation
from vgpu_scheduler.shared.domain.model import ContainerDevice
from vgpu_scheduler.shared.emulator import Emulator
from vgpu_scheduler.shared.store import Store

A, B = "gpu-node-a", "gpu-node-b"


def owner(kind: str) -> list[dict[str, Any]]:
    return [{"apiVersion": "apps/v1", "kind": kind, "name": "owner", "uid": f"uid-{kind}", "controller": True}]


def pod_obj(
    name: str,
    mem: int,
    *,
    node_name: str | None = None,
    kind: str | None = "ReplicaSet",
    annotations: dict[str, str] | None = None,
    priority: int = 0,
    whole: bool = False,
    node_selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(mem)}
    if whole:
        limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "100", "nvidia.com/gpucores": "100"}
    meta: dict[str, Any] = {"name": name, "namespace": "default", "uid": f"uid-{name}", "labels": {"app": name}}
    if kind is not None:
        meta["ownerReferences"] = owner(kind)
    if annotations:
        meta["annotations"] = annotations
    spec: dict[str, Any] = {"priority": priority, "containers": [{"name": "main", "resources": {"limits": limits}}]}
    if node_name:
        spec["nodeName"] = node_name
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": spec,
        "status": {"phase": "Running" if node_name else "Pending"},
    }


async def place(store: Store, emulator: Emulator, name: str, node_name: str, gpu: int, mem: int, **kw: Any) -> None:
    """A running pod on ``node_name``'s card ``gpu``, in the API and in the store."""
    emulator.put(pod_obj(name, mem, node_name=node_name, **kw))
    devices = ((ContainerDevice(uuid=f"GPU-{node_name}-{gpu}", used_mem_mib=mem, used_cores=0),),)
    await store.reservations.record(
        Allocation(f"uid-{name}", "default", name, node_name, devices, collapse(devices, 0))
    )


async def gpu_nodes(
    store: Store, emulator: Emulator, *names: str, gpus: int = 2, labels: dict[str, dict[str, str]] | None = None
) -> None:
    """Nodes of ``gpus`` 16 GiB cards, registered in the store and present in the API (with ``labels`` by node)."""
    invs = [node(n, gpus) for n in names]
    await seed(store, invs)
    for inv in invs:
        obj = node_object(inv)
        obj["metadata"]["labels"] = (labels or {}).get(inv.node, {})
        emulator.put(obj)


async def fragmented(store: Store, emulator: Emulator, labels: dict[str, dict[str, str]] | None = None) -> None:
    """Two nodes of two 16 GiB cards, each card holding pods: a: 2 and 1, b: 1 (bare) and 2."""
    await gpu_nodes(store, emulator, A, B, labels=labels)
    await place(store, emulator, "a0", A, 0, 4000)
    await place(store, emulator, "a1", A, 0, 4000)
    await place(store, emulator, "a2", A, 1, 4000)
    await place(store, emulator, "b0", B, 0, 4000, kind=None)
    await place(store, emulator, "b1", B, 1, 4000)
    await place(store, emulator, "b2", B, 1, 4000)
