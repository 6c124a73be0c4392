"""The text form of a simulation's report (``simulate`` without ``--output json``): the per-pod table, the pending
pods grouped by why they wait, and the summary figures of :func:`~services.simulate.report.summarize`.

Only formatting: every figure is computed in :mod:`services.simulate.report`.
"""

from __future__ import annotations

import re
import textwrap
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from vgpu_scheduler.services.simulate.report import ADMISSION, PodResult, reason_types
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.k8s.nodefit import fit_error, is_scheduler_reason, node_reasons


def _pct(x: float) -> str:
    return f"{x * 100:.1f}%"


ALLOCATED_SUFFIX = "-devices-allocated"
"""Every vendor's allocated pod annotation is ``hami.io/<…>-devices-allocated`` (NVIDIA's ``hami.io/vgpu-…``)."""


def _allocated_keys(annotations: Mapping[str, str]) -> list[str]:
    """The pod's allocated device lists, NVIDIA's first, then the other vendors' by key."""
    found = sorted(k for k in annotations if k.startswith("hami.io/") and k.endswith(ALLOCATED_SUFFIX))
    return sorted(found, key=lambda k: k != keys.DEVICES_ALLOCATED)


def _devices_text(annotations: Mapping[str, str]) -> str:
    """``uuid(memMiB,cores%)`` for every device of every vendor's allocated list (memory in MiB for every vendor,
    as the lists record it)."""
    parts = []
    for key in _allocated_keys(annotations):
        for container in annotations[key].split(";"):
            for dev in container.split(":"):
                fields = dev.split(",")
                if len(fields) >= 4:
                    parts.append(f"{fields[0]}({fields[2]}MiB,{fields[3]}%)")
    return " ".join(parts) if parts else "-"


def _why(reasons: Mapping[str, str]) -> str:
    if ADMISSION in reasons:
        return reasons[ADMISSION]
    if len(reasons) == 1:
        [(node, text)] = reasons.items()
        if text.startswith(KUBELET_REJECTED):  # bound, then the kubelet rejected it
            return f"{node}: {text}"
    if any(is_scheduler_reason(r) for text in reasons.values() for r in node_reasons(text)):
        return fit_error(reasons)  # kube-scheduler's own filters refused nodes: its event message
    counts: Counter[str] = Counter()
    for text in reasons.values():
        counts.update(reason_types({"n": text}))
    shown = ", ".join(f"{word} ({n} node{'s' if n != 1 else ''})" for word, n in counts.most_common(3))
    return shown or "no candidate node"


def render_pods(results: Sequence[PodResult], replacements: Sequence[PodResult] = ()) -> str:
    """One line per workload pod, then per pod a controller created in place of a deleted one: where it went and on
    which devices, or why not."""
    every = [*results, *replacements]
    width = max([len(f"{r.namespace}/{r.name}") for r in every] + [3])
    node_width = max([len(r.node or "-") for r in every] + [4])
    lines = [f"{'POD':<{width}}  {'NODE':<{node_width}}  DEVICES / WHY NOT"]
    for r in every:
        tail = _why(r.reasons)
        if r.placed:
            tail = _devices_text(r.annotations) if r.gpu else _no_device_text(r.other)
        elif r.evicted:
            [(node, text)] = list(r.reasons.items())[:1] or [("-", "evicted")]
            tail = f"{node}: {text}; it held {_devices_text(r.annotations)}"
        if r.replaced_by:
            tail += f"; replaced by {r.replaced_by}"
        if r.replaces:
            tail += f" (replaces {r.replaces})"
        lines.append(f"{r.namespace + '/' + r.name:<{width}}  {r.node or '-':<{node_width}}  {tail}")
    return "\n".join(lines)


def _no_device_text(other: Sequence[str]) -> str:
    if not other:
        return "(no GPU requested)"
    return f"(no HAMi device: {', '.join(other)} from the node's allocatable)"


WRAP = 116
"""Width of the wrapped summary lines."""
_INVALID = re.compile(r'^Pod "[^"]*" is invalid: ')
KUBELET_REJECTED = "UnexpectedAdmissionError: "
"""How the reason of a pod the kubelet rejected after its bind starts (the device plugin's Allocate failed)."""
_GROUPS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("admission denied", re.compile(r"^admission denied: ")),
    ("refused by the API server's validation", _INVALID),
    ("the extender's /filter answered an error", re.compile(r"^filter error: ")),
    ("bound, then rejected by the kubelet (UnexpectedAdmissionError)", re.compile("^" + KUBELET_REJECTED)),
)


def pending_lines(pending_reasons: Mapping[str, int]) -> list[str]:
    """``pending because:`` and the reasons, identical ones once with their count of pods, most frequent first:
    the scheduler's reason words on wrapped lines, then each group of long messages (admission denials, API
    validation) under its own heading, one message a line. Empty when nothing is pending."""
    if not pending_reasons:
        return []
    words: list[str] = []
    groups: dict[str, list[str]] = {}
    order = sorted(pending_reasons.items(), key=lambda kv: (-kv[1], kv[0]))
    for reason, n in order:
        for heading, pattern in _GROUPS:
            if pattern.match(reason):
                message = pattern.sub("", reason) if pattern is not _INVALID else reason
                groups.setdefault(heading, []).append(f"{n}× {message}")
                break
        else:
            words.append(f"{reason} ({n})")
    lines = ["pending because (pods per reason; a pod may have several):"]
    line = ""
    for i, word in enumerate(words):
        piece = word + ("," if i < len(words) - 1 else "")
        if line and len(line) + 1 + len(piece) > WRAP:
            lines.append(line)
            line = ""
        line = f"{line} {piece}" if line else f"  {piece}"
    if line:
        lines.append(line)
    for heading, items in groups.items():
        total = sum(int(item.split("×", 1)[0]) for item in items)
        lines.append(f"  {heading} ({total}):")
        for item in items:
            lines += textwrap.wrap(item, WRAP, initial_indent="    ", subsequent_indent="       ")
    return lines


def _vendor_lines(summary: Mapping[str, Any]) -> list[str]:
    """One line per vendor under the device line, when the cluster has devices of more than one vendor."""
    by_vendor = summary.get("by_vendor") or {}
    if len(by_vendor) < 2:
        return []
    width = max(len(name) for name in by_vendor)
    return [
        f"  {name:<{width}}  memory {v['memory_allocated_mib']}/{v['memory_mib']} MiB "
        f"({_pct(v['memory_utilisation'])}), cores {v['cores_allocated']}/{v['cores']} "
        f"({_pct(v['core_utilisation'])}), {v['devices_used']}/{v['devices']} devices in use, "
        f"fragmentation {_pct(v['fragmentation']['ratio'])}"
        for name, v in by_vendor.items()
    ]


def _disruption_lines(summary: Mapping[str, Any]) -> list[str]:
    """``controllers:`` (owned pods deleted, recreated, where the replacements ended, and those not recreated),
    ``evictions:`` (requests through the Eviction API, each refusal with the API server's message) and ``defrag:``
    (the moves the extender made by itself)."""
    lines = []
    c = summary.get("controllers") or {}
    if c.get("deleted"):
        ended = ", ".join(f"{n} {k}" for k, n in c["replacements"].items() if n)
        lines.append(
            f"controllers: {c['deleted']} owned pod(s) deleted, {c['recreated']} recreated"
            + (f" (replacements: {ended})" if ended else "")
        )
        lines += [
            f"  not recreated: {r['pod']} ({r['owner']}): {r['skipped']}" for r in c["recreations"] if r["skipped"]
        ]
    e = summary.get("evictions") or {}
    if e.get("requested"):
        lines.append(
            f"evictions (Eviction API): {e['requested']} requested, {e['evicted']} evicted, {e['refused']} refused"
        )
        lines += [f"  {r['pod']} at {r['at_s']:g} s: {r['message']}" for r in e["requests"] if not r["evicted"]]
    d = summary.get("defrag") or {}
    if d.get("moves"):
        lines.append(f"defrag (--auto-defrag): {d['moved']} pod(s) moved")
        lines += [
            f"  {m['pod']} {m['from']['node']} -> {m['to']['node']} for {m['for']}"
            + (f" (replacement {m['replacement']})" if m["replacement"] else "")
            for m in d["moves"]
        ]
    return lines


def _preemption_lines(preemption: Mapping[str, Any]) -> list[str]:
    """``preemption:`` and one line per preemptor (its victims), then evictions no preemptor was found for."""
    evictions = preemption.get("evictions") or []
    if not evictions:
        return []
    lines = [f"preemption: {len(evictions)} pod(s) evicted"]
    for pod, p in (preemption.get("preemptors") or {}).items():
        lines.append(
            f"  {pod} (priority {p['priority']}) -> {p['node'] or 'not bound'}: evicted {', '.join(p['victims'])}"
        )
    unknown = [e["pod"] for e in evictions if not e.get("by")]
    if unknown:
        lines.append(f"  deleted, no preemptor recorded: {', '.join(unknown)}")
    return lines


def render_summary(summary: Mapping[str, Any]) -> str:
    """The summary block under the pod table."""
    gpu, frag = summary["gpu"], summary["fragmentation"]
    lines = [
        f"policies: node {summary['policies']['node']}, gpu {summary['policies']['gpu']}",
        f"placed {summary['placed']}/{summary['pods']}, pending {summary['pending']}"
        + (f", preempted {summary['preempted']}" if summary.get("preempted") else "")
        + (f", evicted {summary['evicted']}" if summary.get("evicted") else ""),
        "by pod policy (node/gpu): "
        + ", ".join(f"{k} {v['placed']}/{v['pods']} placed" for k, v in summary["by_policy"].items()),
        f"GPU memory {gpu['memory_allocated_mib']}/{gpu['memory_mib']} MiB ({_pct(gpu['memory_utilisation'])}), "
        f"cores {gpu['cores_allocated']}/{gpu['cores']} ({_pct(gpu['core_utilisation'])}), "
        f"{gpu['devices_used']}/{gpu['devices']} devices in use",
        *_vendor_lines(summary),
        f"fragmentation {_pct(frag['ratio'])} ({frag['stranded_memory_mib']} of {frag['free_memory_mib']} MiB free "
        f"is on partly used cards), {frag['idle_devices']} idle devices",
        f"nodes touched {summary['nodes_touched']}, nodes in use {summary['nodes_in_use']}",
    ]
    lines += pending_lines(summary["pending_reasons"])
    lines += _preemption_lines(summary.get("preemption") or {})
    lines += _disruption_lines(summary)
    for group, g in (summary.get("gangs") or {}).items():
        whole = "whole" if g["bound"] >= g["min_count"] else ("none bound" if not g["bound"] else "PARTLY BOUND")
        lines.append(f"gang {group}: {g['bound']}/{g['members']} members bound, minCount {g['min_count']} ({whole})")
    contention = summary.get("contention")
    if contention:
        clock = "simulated" if contention["clock"] == "simulated" else "wall-clock"
        lines.append(
            f"binds {contention['binds']} ({contention['max_binds_in_flight']} at most in flight), "
            f"{contention['binds_retried']} retried after backoff ({contention['pods_retried']} pods), "
            f"{contention['lock_waits']} waited for a node lock ({contention['lock_wait_s']:.1f} s in all, "
            f"longest {contention['lock_wait_max_s']:.1f} s), {contention['extender_timeouts']} extender timeouts; "
            f"{contention['duration_s']:.1f} s {clock} time"
        )
    if summary["over_capacity"]:
        lines.append("AUDIT FAILED, devices over capacity: " + "; ".join(summary["over_capacity"]))
    return "\n".join(lines)
