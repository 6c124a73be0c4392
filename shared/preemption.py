"""Device-aware preemption, read side: who holds devices on the candidate nodes, at which priority, and which
victims the pure core (``shared/domain/preempt.py``) would choose. Used by the extender (``/preempt`` and its own
preemption when kube-scheduler finds no victim) and by ``inspect explain`` (docs/preemption.md).

A resident is a pod the API shows on the node, not ended and not already terminating, that holds a record in the
store on that node: only those free devices when evicted. Its priority is ``spec.priority`` (what the Priority
admission plugin wrote; 0 when absent, as kube-scheduler reads it), its start ``status.startTime`` or else its
creation. PodDisruptionBudgets are read from ``policy/v1`` and spent pod by pod in eviction order.

The API is read only where eviction can help: a candidate node whose records in the store, all of them evicted,
would still not make room for the pod (or that holds no record) is judged from the store alone; only the other
nodes' pods are listed, one ``spec.nodeName`` field-selected list per node, up to :data:`PER_NODE_LISTS` nodes;
past that (a full cluster of lower-priority pods, where every node could make room), one list of every pod placed
and not ended, read a page at a time and cut to the fields read here (:func:`placed_pods`, :func:`plan_preemption`).

:func:`hold_devices` is the hold itself: the pod's quota charged, then its devices reserved with the evicted pods'
charges counted as freed. The extender's preemption and ``defrag --execute`` (``shared/defrag``) both hold so.
"""

from __future__ import annotations

import datetime
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vgpu_scheduler.shared.domain.allocation import Allocation
from vgpu_scheduler.shared.domain.model import DEFAULT_NVIDIA_CONFIG, NvidiaConfig, PodConstraints, PodRequest
from vgpu_scheduler.shared.domain.preempt import (
    NO_LOWER_PRIORITY,
    Budget,
    NoVictims,
    Resident,
    VictimSet,
    eviction_order,
    pdb_violations,
    pick_node,
    select_victims,
)
from vgpu_scheduler.shared.domain.scoring import Policies
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.domain.vendor import NVIDIA_ONLY, RuleSet
from vgpu_scheduler.shared.k8s import Api
from vgpu_scheduler.shared.k8s.objects import NOT_ENDED, KubeObject
from vgpu_scheduler.shared.store import AllocationRecord, QuotaExceeded, Reserved, ReserveResult, Store

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
PER_NODE_LISTS = 8
"""The most nodes whose pods a preemption reads one field-selected list each; past this, one list of every pod."""
PodLister = Callable[[], Awaitable[Sequence[Mapping[str, Any]]]]
PLACED = f"spec.nodeName!=,{NOT_ENDED}"
"""The field selector of the pods placed on a node and not ended: the only ones that can be victims."""


async def placed_pods(api: Api) -> list[KubeObject]:
    """Every pod placed on a node and not ended, as summaries (``objects.pod_summary``), a page at a time."""
    return await api.list_pod_summaries(field_selector=PLACED)


def _mapping(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    v = obj.get(key)
    return v if isinstance(v, Mapping) else {}


def pod_priority(pod: Mapping[str, Any]) -> int:
    """``spec.priority`` (0 when absent or not an integer), as kube-scheduler's ``PodPriority``."""
    v = _mapping(pod, "spec").get("priority")
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def may_preempt(pod: Mapping[str, Any]) -> bool:
    """False when the pod says ``preemptionPolicy: Never``."""
    return _mapping(pod, "spec").get("preemptionPolicy") != "Never"


def _timestamp(text: object) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def start_time(pod: Mapping[str, Any]) -> float:
    """``status.startTime``, else ``metadata.creationTimestamp``, in seconds (0 when neither parses)."""
    t = _timestamp(_mapping(pod, "status").get("startTime"))
    if t is None:
        t = _timestamp(_mapping(pod, "metadata").get("creationTimestamp"))
    return t or 0.0


def pod_labels(pod: Mapping[str, Any]) -> dict[str, str]:
    """``metadata.labels`` as text."""
    labels = _mapping(_mapping(pod, "metadata"), "labels")
    return {str(k): str(v) for k, v in labels.items()}


def budget_of(pdb: Mapping[str, Any]) -> Budget | None:
    """A PodDisruptionBudget as the core reads it (None when it has no usable selector)."""
    meta = _mapping(pdb, "metadata")
    selector = _mapping(_mapping(pdb, "spec"), "selector")
    if not selector:
        return None
    exprs = []
    for e in selector.get("matchExpressions") or []:
        if isinstance(e, Mapping) and isinstance(e.get("key"), str) and isinstance(e.get("operator"), str):
            exprs.append((str(e["key"]), str(e["operator"]), tuple(str(v) for v in e.get("values") or [])))
    allowed = _mapping(pdb, "status").get("disruptionsAllowed")
    return Budget(
        namespace=str(meta.get("namespace") or ""),
        match_labels={str(k): str(v) for k, v in _mapping(selector, "matchLabels").items()},
        match_expressions=tuple(exprs),
        disruptions_allowed=allowed if isinstance(allowed, int) else 0,
    )


def pods_by_node(pods: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """Live pods (not ended, not terminating) grouped by ``spec.nodeName``."""
    out: dict[str, list[Mapping[str, Any]]] = {}
    for p in pods:
        node = _mapping(p, "spec").get("nodeName")
        if not isinstance(node, str) or not node:
            continue
        if _mapping(p, "status").get("phase") in TERMINAL_PHASES or _mapping(p, "metadata").get("deletionTimestamp"):
            continue
        out.setdefault(node, []).append(p)
    return out


def terminating_on(pods: Sequence[Mapping[str, Any]], node: str) -> list[str]:
    """``namespace/name`` of the pods on ``node`` being deleted (kube-scheduler waits for them too)."""
    return [
        f"{_mapping(p, 'metadata').get('namespace')}/{_mapping(p, 'metadata').get('name')}"
        for p in pods
        if _mapping(p, "spec").get("nodeName") == node and _mapping(p, "metadata").get("deletionTimestamp")
    ]


@dataclass(slots=True)
class Preemption:
    """What preemption would do for one pod: the chosen victim set (None: none) and, per node looked at, why it
    has no set (``NoVictims.reason``)."""

    best: VictimSet | None
    reasons: dict[str, str] = field(default_factory=dict)
    sets: dict[str, VictimSet] = field(default_factory=dict)


async def residents(
    store: Store, api_pods: Sequence[Mapping[str, Any]], node: str, budgets: Sequence[Budget]
) -> list[Resident]:
    """The pods on ``node`` that hold devices there (module docstring), with their PDB verdict."""
    out = residents_of(await store.reservations.list_by_node(node), api_pods)
    if budgets and out:
        labels = {str(_mapping(p, "metadata").get("uid") or ""): pod_labels(p) for p in api_pods}
        ordered = eviction_order(out)
        violating = pdb_violations([(r.uid, r.namespace, labels.get(r.uid, {})) for r in ordered], budgets)
        out = [Resident(**{**_fields(r), "pdb_violating": r.uid in violating}) for r in out]
    return out


def residents_of(records: Iterable[AllocationRecord], api_pods: Sequence[Mapping[str, Any]]) -> list[Resident]:
    """The pods of ``api_pods`` (one node's live pods) that hold one of the store's ``records``, in ``api_pods``'
    order: what they hold, their priority and start."""
    by_uid = {r.allocation.pod_uid: r for r in records}
    out: list[Resident] = []
    for p in api_pods:
        meta = _mapping(p, "metadata")
        uid = str(meta.get("uid") or "")
        rec = by_uid.get(uid)
        if rec is None:
            continue
        out.append(
            Resident(
                uid=uid,
                namespace=str(meta.get("namespace") or ""),
                name=str(meta.get("name") or ""),
                priority=pod_priority(p),
                start_time=start_time(p),
                charges=rec.allocation.charges,
            )
        )
    return out


def _fields(r: Resident) -> dict[str, Any]:
    return {
        "uid": r.uid,
        "namespace": r.namespace,
        "name": r.name,
        "priority": r.priority,
        "start_time": r.start_time,
        "charges": r.charges,
    }


async def read_budgets(api: Api) -> list[Budget]:
    return [b for b in (budget_of(p) for p in await api.list_pod_disruption_budgets()) if b is not None]


async def plan_preemption(
    store: Store,
    api: Api,
    request: PodRequest,
    constraints: PodConstraints,
    snapshots: Mapping[str, NodeSnapshot],
    *,
    priority: int,
    policies: Policies,
    config: NvidiaConfig = DEFAULT_NVIDIA_CONFIG,
    rules: RuleSet = NVIDIA_ONLY,
    required: Mapping[str, Collection[str]] | None = None,
    all_pods: Sequence[Mapping[str, Any]] | None = None,
    list_all: PodLister | None = None,
) -> Preemption:
    """Victim sets on every node of ``snapshots`` and the one kube-scheduler's rules pick. ``required``: per
    node, victims already chosen (kube-scheduler's, ``/preempt``); then only those nodes are looked at.

    ``all_pods``: the cluster's pods, when the caller has them. Otherwise the API is read only for the nodes where
    evicting every pod holding a record there would make room (module docstring; a node where even that does not
    help is answered from the store, without a request): one field-selected list per node, or, past
    :data:`PER_NODE_LISTS` such nodes, ``list_all()`` once (default: :func:`placed_pods`)."""
    by_node = pods_by_node(all_pods) if all_pods is not None else None
    out = Preemption(best=None)
    todo: list[tuple[str, NodeSnapshot, Collection[str]]] = []
    for node, snap in snapshots.items():
        if required is not None and node not in required:
            continue
        forced = (required or {}).get(node, ())
        if by_node is None and not forced:
            hopeless = await _hopeless(
                store, request, constraints, snap, priority=priority, policies=policies, config=config, rules=rules
            )
            if hopeless is not None:
                out.reasons[node] = hopeless
                continue
        todo.append((node, snap, forced))
    if by_node is None and len(todo) > PER_NODE_LISTS:
        by_node = pods_by_node(await (list_all() if list_all is not None else placed_pods(api)))
    budgets = await read_budgets(api) if todo else []
    for node, snap, forced in todo:
        if by_node is not None:
            node_pods = by_node.get(node, [])
        else:
            node_pods = pods_by_node(await api.list_pods(node_name=node)).get(node, [])
        found = select_victims(
            request,
            constraints,
            snap,
            await residents(store, node_pods, node, budgets),
            priority=priority,
            policies=policies,
            config=config,
            rules=rules,
            required=forced,
        )
        if isinstance(found, NoVictims):
            out.reasons[node] = found.reason
        else:
            out.sets[node] = found
    out.best = pick_node(out.sets.values())
    return out


async def _hopeless(
    store: Store,
    request: PodRequest,
    constraints: PodConstraints,
    snap: NodeSnapshot,
    *,
    priority: int,
    policies: Policies,
    config: NvidiaConfig,
    rules: RuleSet,
) -> str | None:
    """Why no victim set on ``snap``'s node can exist, judged from the store alone (None: read its pods). Every
    pod holding a record there is taken as evictable: if the pod fits without any of them, or does not fit even
    with all of them gone, no subset of lower priority can make a victim set."""
    records = await store.reservations.list_by_node(snap.name)
    if not records:
        return NO_LOWER_PRIORITY
    optimistic = [
        Resident(
            uid=r.allocation.pod_uid,
            namespace=r.allocation.namespace,
            name=r.allocation.name,
            priority=priority - 1,
            start_time=0.0,
            charges=r.allocation.charges,
        )
        for r in records
    ]
    found = select_victims(
        request, constraints, snap, optimistic, priority=priority, policies=policies, config=config, rules=rules
    )
    return found.reason if isinstance(found, NoVictims) else None


async def hold_devices(
    store: Store,
    allocation: Allocation,
    *,
    victims: Sequence[str],
    mutex: bool,
    mem_limit_factor: int,
    vendor_names: Collection[str],
    epoch: str | None = None,
    hint: str = "",
) -> ReserveResult | QuotaExceeded:
    """Hold ``allocation``'s devices for its pod while ``victims`` (pod UIDs) leave its node: the namespace's quota
    charged first when it has limits (as ``/filter`` charges it), then ``Reservations.reserve(victims=...)``. Any
    answer but :class:`Reserved` leaves nothing behind (the quota charge is refunded)."""
    namespace, uid = allocation.namespace, allocation.pod_uid
    limited = (await store.quota.get(namespace)).limited
    if limited:
        charged = await store.quota.charge(
            namespace,
            uid,
            allocation.quota_mem_mib,
            allocation.quota_cores_pct,
            mem_limit_factor=max(mem_limit_factor, 1),
            others=allocation.quota_others_of(vendor_names),
        )
        if isinstance(charged, QuotaExceeded):
            return charged
    held = await store.reservations.reserve(allocation, mutex=mutex, epoch=epoch, hint=hint, victims=victims)
    if not isinstance(held, Reserved) and limited and await store.reservations.node_of(uid) is None:
        await store.quota.refund(namespace, uid)
    return held
