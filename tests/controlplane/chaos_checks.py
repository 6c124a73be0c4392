"""The chaos run's audit (``tests/controlplane/chaos.py``), every 30 s and at the end: the control-plane audit
(:func:`tests.controlplane.audit.audit`, from the API's pods, nodes and quotas) sorted into the figures the run
prints, plus what only Redis shows once the run has settled.

From the API, at every check: devices over capacity; pods bound without their allocation (no device list, one not
on the node, a node without devices, ``hami.io/vgpu-node`` naming another node); other correctness findings; a
namespace's quota over its limit (GPU memory summed over its holding pods); pods pending although something fits
them (the scheduling core, exhaustively, on that state). Such a pod is *stuck* once the room it fits has sat idle for
more than a minute while it waited: every check over that minute found it pending and fitting, and the nodes it
fitted on at the first of them unchanged since (the same pods on them, the same devices). A pod that every check
finds fitting while the room it fits keeps being taken by others (a backlog larger than the room churn frees: each
attempt of it finds the cluster full, and says so) is counted apart, as *waited*, and is not a finding.

At the end (settled: no pod created or deleted, the kubelets idle) also: pending pods carrying an allocation, binds
never settled, node locks left on nodes (annotations) and in Redis, records in Redis without a pod in the API
(allocations without a pod), records never confirmed (reservations left behind), and nodes whose usage in Redis
differs from the usage the API's pods amount to (:func:`tests.audit.usage_from_pods`)."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tests.audit import quota_usage_from_pods, store_usage, usage_from_pods
from tests.controlplane.audit import AuditReport, audit
from vgpu_scheduler.services.informer.quotas import read_quota
from vgpu_scheduler.shared.domain.model import DEFAULT_NVIDIA_CONFIG
from vgpu_scheduler.shared.store import Store

_BOUND_WITHOUT = ("which has no registered device", "but hami.io/vgpu-node is", "but has no", "does not decode")
_FITS = (" pending, but fits on ", " but its members fit together")
"""The liveness findings of pending work something fits (:attr:`AuditReport.fits` holds them as data)."""
_TRANSIENT = ("pending but carries an allocation", "bind-phase failed")
"""Findings that a check in the middle of a bind sees (the bind writes the pod before the Binding; a pod deleted
with its node fails its Allocate): counted at the end only."""


@dataclass
class Check:
    at_s: float
    pods: int = 0
    bound: int = 0
    pending: int = 0
    over_capacity: int = 0
    bound_without_allocation: int = 0
    quota_over: int = 0
    pending_fit: set[str] = field(default_factory=set)
    waited: int = 0
    """Pending pods every check for over a minute has found fitting somewhere (not a finding by itself)."""
    stuck: list[str] = field(default_factory=list)
    other: list[str] = field(default_factory=list)
    """Every other correctness finding (and, at the end, the liveness ones), as the audit words them."""
    redis: dict[str, int] | None = None
    """End only: ``locks``, ``allocations_without_pod``, ``reservations_left``, ``usage_drift`` (nodes)."""
    detail: list[str] = field(default_factory=list)

    def clean(self) -> bool:
        figures = (self.over_capacity, self.bound_without_allocation, self.quota_over, len(self.stuck))
        return not any(figures) and not self.other and not any((self.redis or {}).values())

    def line(self) -> str:
        redis = " ".join(f"{k} {v}" for k, v in (self.redis or {}).items())
        return (
            f"{self.at_s:>6.0f}s pods {self.pods:>5} bound {self.bound:>5} pending {self.pending:>4} | over-capacity "
            f"{self.over_capacity} bound-without-allocation {self.bound_without_allocation} quota-over "
            f"{self.quota_over} pending-fit {len(self.pending_fit)} waited>1min {self.waited} stuck>1min "
            f"{len(self.stuck)} other "
            f"{len(self.other)}" + (f" | redis: {redis}" if redis else "")
        )


@dataclass
class Waiting:
    """A pending pod (or gang) that every check since ``since`` has found fitting, and the nodes it fitted on at
    ``idle_since`` with their state then (:func:`node_states`)."""

    since: float
    idle_since: float
    rooms: dict[str, Hashable]


def node_states(pods: Sequence[Mapping[str, Any]], nodes: Sequence[Mapping[str, Any]]) -> dict[str, Hashable]:
    """Each node's state as far as room on it goes: the node object (a rebooted node is a new one), its devices
    (its registration annotations) and the pods on it."""
    on: dict[str, set[str]] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            on.setdefault(node, set()).add(pod["metadata"]["uid"])
    states: dict[str, Hashable] = {}
    for node in nodes:
        meta = node["metadata"]
        devices = tuple(sorted((k, v) for k, v in (meta.get("annotations") or {}).items() if k.endswith("-register")))
        states[meta["name"]] = (meta.get("uid"), devices, frozenset(on.get(meta["name"], ())))
    return states


def check_api(
    at_s: float,
    pods: Sequence[Mapping[str, Any]],
    nodes: Sequence[Mapping[str, Any]],
    quotas: Sequence[Mapping[str, Any]],
    *,
    waiting: dict[str, Waiting],
    now: float,
    final: bool = False,
    **audit_args: Any,
) -> Check:
    """One check from the API's objects (module docstring). ``waiting``: ``<ns>/<name>`` (a gang's ``<ns>/<group>``)
    → what earlier checks saw of the pending pods they found fitting (monotonic times, as ``now``); updated here."""
    report: AuditReport = audit(pods, nodes, quotas, **audit_args)
    check = Check(at_s, pods=report.pods, bound=report.bound, pending=report.pods - report.bound)
    for finding in report.correctness:
        if "over capacity" in finding:
            check.over_capacity += 1
        elif any(w in finding for w in _BOUND_WITHOUT):
            check.bound_without_allocation += 1
        elif final or not any(w in finding for w in _TRANSIENT):
            check.other.append(finding)
    if final:
        check.other.extend(f for f in report.liveness if not any(w in f for w in _FITS))
    states = node_states(pods, nodes)
    for key, on in report.fits.items():
        check.pending_fit.add(key)
        seen = waiting.get(key)
        if seen is None:
            seen = waiting[key] = Waiting(now, now, {n: states.get(n) for n in on})
        elif any(states.get(n) != state for n, state in seen.rooms.items()):
            seen.idle_since, seen.rooms = now, {n: states.get(n) for n in on}
        if now - seen.since > 60:
            check.waited += 1
        if now - seen.idle_since > 60:
            check.stuck.append(
                f"{key} pending for {now - seen.since:.0f}s although it fits; the room for it on "
                f"{', '.join(sorted(seen.rooms))} unused for {now - seen.idle_since:.0f}s"
            )
    for key in set(waiting) - check.pending_fit:
        del waiting[key]
    check.quota_over, over = quota_over(pods, quotas)
    check.detail.extend(over)
    return check


def quota_over(pods: Sequence[Mapping[str, Any]], quotas: Sequence[Mapping[str, Any]]) -> tuple[int, list[str]]:
    """Namespaces whose holding pods' GPU memory exceeds their quota's ``limits.nvidia.com/gpumem``."""
    used = quota_usage_from_pods(pods, skip_unreadable=True)
    out = []
    for q in quotas:
        ns = q["metadata"]["namespace"]
        limit = read_quota(q, DEFAULT_NVIDIA_CONFIG).limits.mem_mib
        if limit is not None and used.get(ns, (0, 0))[0] > limit:
            out.append(f"{ns}: GPU memory {used[ns][0]} MiB over its quota {limit}")
    return len(out), out


async def check_redis(
    store: Store, pods: Sequence[Mapping[str, Any]], nodes: Sequence[str], detail: list[str] | None = None
) -> dict[str, int]:
    """What Redis holds that it should not, once settled (module docstring); ``detail`` is told which records and
    nodes those are (pod, node, state, age in s; a node's usage in Redis against the API's)."""
    live = {p["metadata"]["uid"] for p in pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")}
    records = [r for recs in (await store.reservations.list_all()).values() for r in recs]
    locks = await store.locks.inspect_many(list(nodes))
    expected = usage_from_pods(pods, skip_unreadable=True)
    held = await store_usage(store, nodes)
    drift = sorted(n for n in set(expected) | set(held) if expected.get(n, {}) != held.get(n, {}))
    unconfirmed = [r for r in records if r.state.unconfirmed]
    orphans = [r for r in records if r.allocation.pod_uid not in live]
    if detail is not None:
        now_ms = max((r.reserved_at_ms for r in records), default=0)
        for what, recs in (("without a pod", orphans), ("unconfirmed", unconfirmed)):
            for r in recs[:10]:
                a = r.allocation
                detail.append(
                    f"redis: record {what}: {a.namespace}/{a.name} uid {a.pod_uid[:8]} on {a.node} "
                    f"{r.state.value}, reserved {(now_ms - r.reserved_at_ms) / 1000:.0f}s before the newest record"
                )
        for n in drift[:10]:
            want, got = expected.get(n, {}), held.get(n, {})
            for d in sorted(k for k in set(want) | set(got) if want.get(k) != got.get(k)):
                detail.append(f"redis: usage of {n} {d}: redis {got.get(d)} api {want.get(d)}")
    return {
        "locks": len(locks),
        "allocations_without_pod": len(orphans),
        "reservations_left": len(unconfirmed),
        "usage_drift": len(drift),
    }
