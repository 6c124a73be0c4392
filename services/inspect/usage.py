"""``vgpu-scheduler usage``: GPU usage per node and device, as the extender sees it.

Reads the store only (Redis): every registered node's inventory and usage counters, every allocation record (which
pod holds what on which device, reserved or confirmed), the node locks held, and the quota namespaces. The summary's
stranded memory is :func:`shared.domain.fragmentation.fragmentation`, the definition ``simulate`` reports.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from vgpu_scheduler.services.inspect.connect import one_line, store_warning
from vgpu_scheduler.services.inspect.devices import DeviceRow, device_rows, pct, ratio, shares_by_device, short_uuid
from vgpu_scheduler.shared.domain.fragmentation import fragmentation
from vgpu_scheduler.shared.store import LockInfo, Store, UndecodableRecord


@dataclass(frozen=True, slots=True)
class Filters:
    nodes: frozenset[str] = frozenset()
    namespace: str | None = None
    vendor: str | None = None


@dataclass(frozen=True, slots=True)
class NodeRow:
    node: str
    vendor: str
    devices: tuple[DeviceRow, ...]
    lock: LockInfo | None

    def lock_json(self) -> dict[str, Any] | None:
        if self.lock is None:
            return None
        return {
            "owner": self.lock.owner,
            "token": self.lock.token,
            "age_s": round((self.lock.now_ms - self.lock.acquired_ms) / 1000, 1),
            "expires_in_s": round((self.lock.expires_ms - self.lock.now_ms) / 1000, 1),
            "expired": self.lock.expired,
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "vendor": self.vendor,
            "lock": self.lock_json(),
            "devices": [d.to_json() for d in self.devices],
        }


@dataclass(slots=True)
class UsageReport:
    nodes: list[NodeRow] = field(default_factory=list)
    filters: Filters = field(default_factory=Filters)
    warnings: list[str] = field(default_factory=list)

    def devices(self) -> list[DeviceRow]:
        return [d for n in self.nodes for d in n.devices]

    def summary(self) -> dict[str, Any]:
        devices = self.devices()
        usable = [d for d in devices if d.usable]
        mem_total = sum(d.mem_mib for d in usable)
        mem_used = sum(min(d.mem_used_mib, d.mem_mib) for d in usable)
        cores_total = sum(d.cores for d in usable)
        cores_used = sum(min(d.cores_used, d.cores) for d in usable)
        pods = {p.uid for d in devices for p in d.pods}
        out: dict[str, Any] = {
            "nodes": len(self.nodes),
            "devices": len(devices),
            "usable_devices": len(usable),
            "unhealthy_devices": sum(1 for d in devices if not d.health),
            "cordoned_devices": sum(1 for d in devices if d.cordoned),
            "memory_mib": mem_total,
            "memory_allocated_mib": mem_used,
            "memory_utilisation": ratio(mem_used, mem_total),
            "cores": cores_total,
            "cores_allocated": cores_used,
            "core_utilisation": ratio(cores_used, cores_total),
            "slots": sum(d.slots for d in usable),
            "slots_used": sum(min(d.slots_used, d.slots) for d in usable),
            "pods": len(pods),
            "node_locks": sum(1 for n in self.nodes if n.lock is not None),
            "fragmentation": fragmentation(devices).to_json(),
        }
        if self.filters.namespace is not None:
            mine = [p for d in devices for p in d.pods if p.namespace == self.filters.namespace]
            out["namespace"] = {
                "name": self.filters.namespace,
                "pods": len({p.uid for p in mine}),
                "memory_mib": sum(p.mem_mib for p in mine),
                "cores_pct": sum(p.cores_pct for p in mine),
            }
        return out

    def to_json(self) -> dict[str, Any]:
        f = self.filters
        return {
            "filters": {"nodes": sorted(f.nodes), "namespace": f.namespace, "vendor": f.vendor},
            "nodes": [n.to_json() for n in self.nodes],
            "summary": self.summary(),
            "warnings": self.warnings,
        }


async def collect(store: Store, filters: Filters) -> UsageReport:
    """Read the store and build the report (filters applied)."""
    report = UsageReport(filters=filters)
    warning = store_warning(await store.meta.status())
    if warning:
        report.warnings.append(warning)
    names = sorted(await store.inventory.list_nodes())
    if filters.nodes:
        unknown = sorted(filters.nodes - set(names))
        if unknown:
            report.warnings.append(f"not registered in the store: {', '.join(unknown)}")
        names = [n for n in names if n in filters.nodes]
    states = await store.snapshots.load(names)
    errors: list[UndecodableRecord] = []
    records = await store.reservations.list_all(errors)
    for bad in errors:
        report.warnings.append(f"allocation of pod {bad.pod_uid} on {bad.node} unreadable: {one_line(bad.error)}")
    shares = shares_by_device(r for recs in records.values() for r in recs)
    locks = await store.locks.inspect_many(names)
    for n in names:
        st = states[n]
        if st.error is not None:
            report.warnings.append(f"node {n}: stored data unreadable ({one_line(st.error)}); left out")
            continue
        snap = st.snapshot()
        if snap is None:
            continue
        if filters.vendor is not None and snap.inventory.vendor.lower() != filters.vendor.lower():
            continue
        rows = device_rows(snap, shares)
        if filters.namespace is not None:
            ns = filters.namespace
            rows = [
                dataclasses.replace(r, pods=tuple(p for p in r.pods if p.namespace == ns))
                for r in rows
                if any(p.namespace == ns for p in r.pods)
            ]
            if not rows:
                continue
        report.nodes.append(NodeRow(n, snap.inventory.vendor, tuple(rows), locks.get(n)))
    return report


# --------------------------------------------------------------------------------------------
# Text
# --------------------------------------------------------------------------------------------


def _table(rows: Sequence[Sequence[str]], right: frozenset[int] = frozenset()) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for r in rows:
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))]
        out.append("  ".join(cells).rstrip())
    return out


def _state(d: DeviceRow) -> str:
    flags = [] if d.health else ["unhealthy"]
    if d.cordoned:
        flags.append("cordoned")
    return ",".join(flags) or "ok"


def _lock_text(row: NodeRow) -> str:
    info = row.lock_json()
    assert info is not None
    when = "expired" if info["expired"] else f"expires in {info['expires_in_s']:g}s"
    return f"lock on {row.node}: held by {info['owner']} for {info['age_s']:g}s, {when}"


def _n(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def render_text(report: UsageReport, *, wide: bool = False) -> str:
    head = ["NODE", "DEVICE", "TYPE", "MEMORY MiB", "MEM%", "CORES", "SLOTS", "STATE", "PODS"]
    if wide:
        head[2:2] = ["IDX", "MODE", "NUMA"]
    rows: list[list[str]] = [head]
    for n in report.nodes:
        for i, d in enumerate(n.devices):
            pods = ", ".join(
                f"{p.key} ({p.mem_mib:,} MiB, {p.cores_pct}%{', reserved' if p.state == 'reserved' else ''})"
                if wide
                else p.key
                for p in d.pods
            )
            row = [
                n.node if i == 0 else "",
                d.uuid if wide else short_uuid(d.uuid),
                d.type,
                f"{d.mem_used_mib:,}/{d.mem_mib:,}",
                pct(ratio(d.mem_used_mib, d.mem_mib)),
                f"{d.cores_used}/{d.cores}%",
                f"{d.slots_used}/{d.slots}",
                _state(d),
                pods or "-",
            ]
            if wide:
                row[2:2] = [str(d.index), d.mode, str(d.numa)]
            rows.append(row)
    right = frozenset({6, 7, 8, 9}) if wide else frozenset({3, 4, 5, 6})
    lines = (
        _table(rows, right)
        if len(rows) > 1
        else ["no GPU node matches" if report.filters != Filters() else "no GPU node is registered"]
    )
    locks = [_lock_text(n) for n in report.nodes if n.lock is not None]
    if locks:
        lines += ["", *locks]
    s = report.summary()
    frag = s["fragmentation"]
    lines += [
        "",
        f"Cluster: {_n(s['nodes'], 'node')}, {_n(s['devices'], 'GPU')} ({s['usable_devices']} usable, "
        f"{s['unhealthy_devices']} unhealthy, {s['cordoned_devices']} cordoned), {_n(s['pods'], 'pod')}, "
        f"{_n(s['node_locks'], 'node lock')} held",
        f"  memory {s['memory_allocated_mib']:,}/{s['memory_mib']:,} MiB allocated "
        f"({pct(s['memory_utilisation'])}), cores {s['cores_allocated']:,}/{s['cores']:,}% "
        f"({pct(s['core_utilisation'])}), slots {s['slots_used']}/{s['slots']}",
        f"  stranded {frag['stranded_memory_mib']:,} of {frag['free_memory_mib']:,} MiB free "
        f"({pct(frag['ratio'])}) is on GPUs already shared, {_n(frag['idle_devices'], 'idle GPU')}",
    ]
    if "namespace" in s:
        ns = s["namespace"]
        lines.append(f"  namespace {ns['name']}: {ns['pods']} pods, {ns['memory_mib']:,} MiB, {ns['cores_pct']}% cores")
    lines += [f"warning: {w}" for w in report.warnings]
    return "\n".join(lines)
