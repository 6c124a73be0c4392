"""Pods and ResourceQuotas as the API serves them, with allocation annotations written by the real codec
(exactly what the extender's ``/bind`` patches)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vgpu_scheduler.shared.codec.podannotations import allocation_labels
from vgpu_scheduler.shared.domain.model import ContainerDevice, MigAllocation, MigPlacement
from vgpu_scheduler.shared.vendors.pods import allocation_annotations

Dev = tuple[str, int, int]  # (uuid, mem MiB, cores %)


def devices(*containers: Sequence[Dev]) -> tuple[tuple[ContainerDevice, ...], ...]:
    return tuple(tuple(ContainerDevice(uuid=u, used_mem_mib=m, used_cores=c) for u, m, c in ctr) for ctr in containers)


def container(name: str, gpus: int = 0) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    return {"name": name, "image": "busybox", "resources": {"limits": limits}}


def pod(
    name: str,
    namespace: str = "default",
    *,
    uid: str | None = None,
    node: str | None = None,
    app: Sequence[Sequence[Dev]] = (),
    init: Sequence[Sequence[Dev]] = (),
    mig: Sequence[MigAllocation] = (),
    phase: str = "Pending",
    bind_phase: str | None = None,
    bind_time: int = 1_700_000_000,
    app_count: int | None = None,
    extra_annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pod with ``init`` + ``app`` containers; with ``node``, the allocation annotations of that placement.

    Each entry of ``app``/``init`` is one container's device list (empty: no GPU). ``app_count`` adds
    GPU-less app containers beyond ``app``'s."""
    n_app = max(len(app), app_count or 0, 1)
    app_lists = list(app) + [()] * (n_app - len(app))
    spec: dict[str, Any] = {
        "schedulerName": "vgpu-scheduler",
        "initContainers": [container(f"init-{i}", len(d)) for i, d in enumerate(init)],
        "containers": [container(f"app-{i}", len(d)) for i, d in enumerate(app_lists)],
    }
    if not init:
        del spec["initContainers"]
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "annotations": {}, "labels": {}}
    if uid is not None:
        meta["uid"] = uid
    if node is not None:
        annos = allocation_annotations(node, devices(*init, *app_lists), tuple(mig), bind_time)
        if bind_phase is not None:
            annos["hami.io/bind-phase"] = bind_phase
        meta["annotations"].update(annos)
        meta["labels"].update(allocation_labels(node))
        spec["nodeName"] = node
    meta["annotations"].update(extra_annotations or {})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": phase}}


def mig_alloc(container_index: int, device_index: int, gpu: str, start: int, size: int) -> MigAllocation:
    return MigAllocation(
        container_index=container_index,
        device_index=device_index,
        gpu_uuid=gpu,
        profile=f"{size}g.{5 * size}gb",
        placement=MigPlacement(start, size),
    )


def quota(name: str, namespace: str, hard: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"hard": hard},
    }
