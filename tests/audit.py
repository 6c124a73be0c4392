"""The accounting audit: what Redis *should* hold, recomputed from the API's pods alone (difference 10).

Independent of the informer's code: it uses only the codecs and ``shared.domain.accounting.collapse``, so a test
that compares it with the store checks the informer (and the extender's reservations) end to end::

    pods = emulator.list("pods")
    assert await store_usage(store) == usage_from_pods(pods)
    assert await store_quota_usage(store) == quota_usage_from_pods(pods)

A pod counts when it carries ``hami.io/vgpu-node`` and is not ``Succeeded``/``Failed`` (deleted pods are not in
the list). Its ``hami.io/vgpu-devices-allocated`` (+ ``hami.io/vgpu-mig-allocations``) is collapsed over init and
app containers (§5.4). Devices with nothing in use are absent, as in the store.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from vgpu_scheduler.shared.codec.podannotations import decode_allocation
from vgpu_scheduler.shared.codec.resources import pod_containers
from vgpu_scheduler.shared.domain.accounting import collapse
from vgpu_scheduler.shared.domain.model import DeviceCharge, DeviceUsage, MigPlacement
from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.store import Store

NodeUsage = dict[str, dict[str, DeviceUsage]]
"""node → device UUID → usage (only devices with something in use)."""

_TERMINAL = ("Succeeded", "Failed")


@dataclass
class _Acc:
    used: int = 0
    mem: int = 0
    cores: int = 0
    placements: list[MigPlacement] = field(default_factory=list)
    legacy: dict[int, set[int]] = field(default_factory=dict)


def _holding(pod: Mapping[str, Any]) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return phase not in _TERMINAL


def _charged_pods(
    pods: Iterable[Mapping[str, Any]], skip_unreadable: bool
) -> Iterator[tuple[Mapping[str, Any], tuple[DeviceCharge, ...]]]:
    """Each holding pod with an allocation, and its per-device charges collapsed over init and app containers.
    DecodeError on an unreadable allocation unless ``skip_unreadable`` (then the pod is left out)."""
    for pod in pods:
        if not _holding(pod):
            continue
        try:
            decoded = decode_allocation(pod)
        except DecodeError:
            if skip_unreadable:
                continue
            raise
        if decoded is None:
            continue
        devices, mig = decoded
        init, _ = pod_containers(pod)
        yield pod, collapse(devices, len(init), mig)


def usage_from_pods(pods: Iterable[Mapping[str, Any]], *, skip_unreadable: bool = False) -> NodeUsage:
    """Per-node, per-device usage the API's pods amount to. Raises DecodeError on an unreadable pod unless
    ``skip_unreadable`` (then that pod is left out)."""
    acc: dict[str, dict[str, _Acc]] = {}
    for pod, charges in _charged_pods(pods, skip_unreadable):
        node = pod["metadata"]["annotations"]["hami.io/vgpu-node"]
        for ch in charges:
            a = acc.setdefault(node, {}).setdefault(ch.uuid, _Acc())
            a.used += ch.slots
            a.mem += ch.mem_mib
            a.cores += ch.cores_pct
            a.placements.extend(ch.mig_placements)
            for g, s in ch.legacy_mig:
                a.legacy.setdefault(g, set()).add(s)
    out: NodeUsage = {}
    for node, devs in acc.items():
        for uuid, a in devs.items():
            geometry = min(a.legacy) if a.legacy else None
            usage = DeviceUsage(
                used=a.used,
                used_mem_mib=a.mem,
                used_cores=a.cores,
                mig_in_use=tuple(sorted(a.placements, key=lambda p: (p.start, p.size))),
                legacy_geometry=geometry,
                legacy_slots=frozenset(a.legacy[geometry]) if geometry is not None else frozenset(),
            )
            if usage != DeviceUsage():
                out.setdefault(node, {})[uuid] = usage
    return out


def quota_usage_from_pods(
    pods: Iterable[Mapping[str, Any]], *, skip_unreadable: bool = False
) -> dict[str, tuple[int, int]]:
    """Per namespace, (memory MiB, cores %) summed over the collapsed charges of its holding pods (§8); namespaces
    with zero usage left out."""
    out: dict[str, tuple[int, int]] = {}
    for pod, charges in _charged_pods(pods, skip_unreadable):
        if not charges:
            continue
        ns = pod["metadata"]["namespace"]
        mem, cores = out.get(ns, (0, 0))
        out[ns] = (mem + sum(c.mem_mib for c in charges), cores + sum(c.cores_pct for c in charges))
    return {ns: v for ns, v in out.items() if v != (0, 0)}


async def store_usage(store: Store, nodes: Iterable[str] = ()) -> NodeUsage:
    """The usage Redis holds for every node with allocations (plus ``nodes``), empty nodes left out."""
    names = set(nodes) | set(await store.reservations.list_all()) | set(await store.inventory.list_nodes())
    out: NodeUsage = {}
    for n in sorted(names):
        usage = await store.usage.node_usage(n)
        if usage:
            out[n] = usage
    return out


async def store_quota_usage(store: Store) -> dict[str, tuple[int, int]]:
    """Per namespace, the quota usage Redis holds (namespaces with zero usage left out)."""
    out: dict[str, tuple[int, int]] = {}
    for ns in await store.quota.namespaces():
        state = await store.quota.get(ns)
        if state.used_mem_mib or state.used_cores_pct:
            out[ns] = (state.used_mem_mib, state.used_cores_pct)
    return out
