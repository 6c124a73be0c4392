"""The text form of ``vgpu-scheduler explain``'s :class:`~services.inspect.explain.Explanation`: the pod's state and
requests, its policies and quota, one row per node (verdict, reason, nearest miss or placement), what it would get
now, its gang, preemption and devices. Formatting only: every figure comes from :mod:`.explain`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vgpu_scheduler.services.inspect.explain import Explanation, devices_json
from vgpu_scheduler.shared.vendors import awsneuron


def _request_text(c: Mapping[str, Any]) -> str:
    kind = "init container" if c["init"] else "container"
    if c.get("type") == awsneuron.NAME:  # whole devices or NeuronCores (a core mask), no memory
        devices = f"{c['gpus']} Neuron device" + ("s" if c["gpus"] != 1 else "")
        return f"{kind} {c['name']}: {devices}, {c['cores_pct']} NeuronCore" + (
            "s each" if c["cores_pct"] != 1 else " each"
        )
    parts = [f"{c['gpus']} GPU" + ("s" if c["gpus"] != 1 else "")]
    if c["mem_mib"] is not None:
        parts.append(f"{c['mem_mib']:,} MiB each")
    elif c["mem_pct"] is not None:
        parts.append(f"{c['mem_pct']}% of the memory each")
    parts.append(f"{c['cores_pct']}% cores each")
    kind = "init container" if c["init"] else "container"
    return f"{kind} {c['name']}: " + ", ".join(parts)


def _placement_text(devices: Sequence[Sequence[Mapping[str, Any]]]) -> str:
    flat = [d for c in devices for d in c]
    return ", ".join(f"{d['uuid']} ({d['mem_mib']:,} MiB, {d['cores_pct']}%)" for d in flat) or "no device"


def _table(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return ["  ".join([*(c.ljust(w) for c, w in zip(r[:-1], widths, strict=True)), r[-1]]).rstrip() for r in rows]


def render_text(e: Explanation) -> str:
    lines = [f"Pod {e.namespace}/{e.name}: {_state_text(e)}"]
    for c in e.containers:
        lines.append(f"  requests: {_request_text(c)}")
    if e.policies:
        lines.append(f"  policies: node {e.policies['node']}, GPU {e.policies['gpu']}")
    if e.quota is not None:
        lines.append(f"  {_quota_text(e.quota)}")
    if e.nodes:
        rows = [["NODE", "VERDICT", "REASON", "NEAREST MISS / PLACEMENT"]]
        for v in e.nodes:
            if v.fits:
                rows.append([v.node, "fits", "-", "would use " + _placement_text(devices_json(v.devices))])
            else:
                rows.append([v.node, "no fit", v.reason, (v.miss or {}).get("text", "")])
        lines += ["", *_table(rows), ""]
        if e.would_get is not None:
            lines.append(f"Would get now: {e.would_get['node']}, on {_placement_text(e.would_get['devices'])}")
        else:
            lines.append("Would get now: no node; the nearest misses above say what is missing")
        lines.append(
            "(GPU checks only, as the extender sees them; kube-scheduler may also rule nodes out for taints, "
            "selectors or CPU/memory)"
        )
    if e.gang is not None:
        g = e.gang
        lines.append(
            f"  gang: member of PodGroup {g['pod_group']}"
            + ("" if g["placed_whole_now"] else f"; waiting for its group: {g['why_not']}")
        )
    if e.preemption is not None:
        lines.append(_preemption_text(e.preemption))
    if e.allocation is not None:
        lines.append(f"  devices ({e.allocation['state']}): {_placement_text(e.allocation['devices'])}")
    if e.devices:
        rows = [["DEVICE", "MEMORY USED", "CORES USED", "SLOTS", "PODS ON DEVICE"]]
        for d in e.devices:
            rows.append(
                [
                    d.uuid,
                    f"{d.mem_used_mib:,}/{d.mem_mib:,} MiB",
                    f"{d.cores_used}/{d.cores}%",
                    f"{d.slots_used}/{d.slots}",
                    ", ".join(f"{p.key} ({p.mem_mib:,} MiB, {p.cores_pct}%)" for p in d.pods) or "-",
                ]
            )
        lines += ["", *_table(rows)]
    lines += [f"warning: {w}" for w in e.warnings]
    return "\n".join(lines)


def _preemption_text(p: Mapping[str, Any]) -> str:
    if p["state"] == "holding":
        return (
            f"  preemption: devices held on {p['node']}; waiting for {p['waiting_for_victims']} preempted pod(s) "
            "to terminate"
        )
    if p["state"] == "would preempt":
        victims = ", ".join(f"{v['pod']} (priority {v['priority']})" for v in p["victims"])
        extra = f", {p['pdb_violations']} PodDisruptionBudget violation(s)" if p["pdb_violations"] else ""
        return f"  preemption: would evict {victims} on {p['node']}{extra}"
    reasons = "; ".join(f"{n}: {r}" for n, r in list(p["reasons"].items())[:5])
    return f"  preemption: no victim set ({reasons})"


def _state_text(e: Explanation) -> str:
    if e.state == "ended":
        return f"{e.phase}; an ended pod holds no GPU"
    if e.state == "no-gpu":
        return f"{e.phase or 'Unknown'}; requests no GPU resource vgpu-scheduler manages"
    if e.state == "foreign":
        return f"bound to {e.node} without vgpu-scheduler's allocation annotations (another scheduler placed it)"
    if e.state == "reserved":
        return f"reserved on {e.node} by /filter, waiting for /bind (phase {e.phase or 'Pending'})"
    if e.state == "bound":
        return f"placed on {e.node} (phase {e.phase or 'unknown'})"
    return f"{e.phase or 'Pending'}; not placed"


def _quota_text(q: Mapping[str, Any]) -> str:
    parts = []
    if q["mem_left_mib"] is not None:
        parts.append(
            f"{q['mem_left_mib']:,} MiB of {q['memory_resource'].removeprefix('limits.')} left "
            f"(limit {q['mem_limit_mib']:,}, used {q['mem_used_mib']:,})"
        )
    if q["cores_left_pct"] is not None:
        parts.append(
            f"{q['cores_left_pct']}% of {q['cores_resource'].removeprefix('limits.')} left "
            f"(limit {q['cores_limit_pct']}, used {q['cores_used_pct']})"
        )
    return f"quota: namespace {q['namespace']} has " + "; ".join(parts)
