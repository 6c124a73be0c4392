"""Defragmentation, read side: the nodes' snapshots, the pods holding devices on them with whether each may ever
move, and what the PodDisruptionBudgets still allow; the pending pod a plan ``--for`` helps. The pure planner is
``shared/domain/defrag.py``; ``vgpu-scheduler defrag plan`` reads through here (docs/defrag.md).

A candidate is a preemption resident (:func:`shared.preemption.residents_of`): a live pod the API shows on the node
that holds a record in the store there. Whether it may ever move is read from the pod (:func:`owner_verdict`):

* its controller owner reference (``controller: true``) is a ReplicaSet, StatefulSet, Job or ReplicationController:
  the controller recreates it and the scheduler places the replacement: it may move;
* a DaemonSet: its replacement is created for the same node, so moving it frees nothing: never;
* a Node (a static pod's mirror: the kubelet runs it from a file on that node): never;
* any other kind: not known to recreate its pods elsewhere (an operator may, or may fail the workload): never;
* no controller at all (a bare pod): nothing would recreate it: never;
* annotated ``vgpu-scheduler.io/defrag: "false"`` (or ``"never"``): opted out, never;
* requests or annotations the scheduler cannot read: never (its replacement could not be placed either).

The priority rule (never above the helped pod's) is the planner's. Where a replacement (or the ``--for`` pod) may go
beyond its devices is the caller's ``where`` (``shared/defrag/reading.py``: kube-scheduler's NodeUnschedulable and node
selector filters). Every PodDisruptionBudget of the pod's
namespace whose selector selects it is named ``namespace/name`` on the candidate, and ``status.disruptionsAllowed``
is that budget's allowance; the planner spends it move by move.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vgpu_scheduler.shared.domain.defrag import Candidate, ForPod
from vgpu_scheduler.shared.domain.defragmodel import OPT_OUT_ANNOTATION
from vgpu_scheduler.shared.domain.defragwork import BARE_POD, DAEMON_SET, OPTED_OUT
from vgpu_scheduler.shared.domain.model import NO_CONSTRAINTS, PodRequest
from vgpu_scheduler.shared.domain.preempt import Budget, selects
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.errors import DecodeError, NotFoundError
from vgpu_scheduler.shared.k8s import Api
from vgpu_scheduler.shared.preemption import (
    TERMINAL_PHASES,
    budget_of,
    pod_labels,
    pod_priority,
    pods_by_node,
    residents_of,
)
from vgpu_scheduler.shared.protocol.constraints import pod_constraints
from vgpu_scheduler.shared.store import AllocationRecord, Store, UndecodableRecord
from vgpu_scheduler.shared.vendors.pods import vendors_pod_request
from vgpu_scheduler.shared.vendors.registry import Vendors

MOVABLE_OWNERS = frozenset({"ReplicaSet", "StatefulSet", "Job", "ReplicationController"})
"""Controllers that recreate an evicted pod and let the scheduler place it anywhere."""
STATIC_POD = "a static pod (the kubelet runs it on this node)"
OPT_OUT_VALUES = frozenset({"false", "never"})


def _mapping(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    v = obj.get(key)
    return v if isinstance(v, Mapping) else {}


def _controller(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    refs = _mapping(pod, "metadata").get("ownerReferences")
    for ref in refs if isinstance(refs, list) else []:
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            return ref
    return None


def owner_verdict(pod: Mapping[str, Any]) -> str | None:
    """Why the pod may never move, read from its owner and its opt-out annotation (module docstring); None: it
    may."""
    annotations = _mapping(_mapping(pod, "metadata"), "annotations")
    if str(annotations.get(OPT_OUT_ANNOTATION, "")).strip().lower() in OPT_OUT_VALUES:
        return OPTED_OUT
    ref = _controller(pod)
    if ref is None:
        return BARE_POD
    kind = str(ref.get("kind") or "")
    if kind in MOVABLE_OWNERS:
        return None
    if kind == "DaemonSet":
        return DAEMON_SET
    if kind == "Node":
        return STATIC_POD
    return f"owned by a {kind or 'controller of no kind'} (not known to recreate its pods elsewhere)"


@dataclass(frozen=True, slots=True)
class NamedBudget:
    """A PodDisruptionBudget as the planner names it (``namespace/name``) and as preemption reads it."""

    key: str
    budget: Budget


def named_budgets(pdbs: Iterable[Mapping[str, Any]]) -> list[NamedBudget]:
    """The PodDisruptionBudgets with a usable selector (:func:`shared.preemption.budget_of`), named."""
    out = []
    for pdb in pdbs:
        b = budget_of(pdb)
        if b is not None:
            out.append(NamedBudget(f"{b.namespace}/{_mapping(pdb, 'metadata').get('name') or ''}", b))
    return out


def budgets_of(pod: Mapping[str, Any], budgets: Sequence[NamedBudget]) -> tuple[str, ...]:
    """The names of the budgets that select ``pod`` (its namespace, its labels)."""
    namespace = str(_mapping(pod, "metadata").get("namespace") or "")
    labels = pod_labels(pod)
    return tuple(b.key for b in budgets if b.budget.namespace == namespace and selects(b.budget, labels))


Where = Callable[[Mapping[str, Any]], frozenset[str] | None]
"""The nodes kube-scheduler's own filters leave a pod (None: every node); the caller's (``reading.py``)."""


def everywhere(pod: Mapping[str, Any]) -> frozenset[str] | None:
    del pod
    return None


def candidates_on(
    node: str,
    records: Iterable[AllocationRecord],
    node_pods: Sequence[Mapping[str, Any]],
    budgets: Sequence[NamedBudget],
    vendors: Vendors,
    *,
    where: Where = everywhere,
) -> list[Candidate]:
    """The candidates of one node: its live pods holding one of the store's ``records`` (module docstring), each
    with the nodes its replacement may go to (``where``)."""
    by_uid = {str(_mapping(p, "metadata").get("uid") or ""): p for p in node_pods}
    out = []
    for r in residents_of(records, node_pods):
        pod = by_uid[r.uid]
        verdict = owner_verdict(pod)
        try:
            request = vendors_pod_request(pod, vendors)
            constraints = pod_constraints(
                {str(k): str(v) for k, v in _mapping(_mapping(pod, "metadata"), "annotations").items()}, vendors
            )
        except DecodeError as e:
            request, constraints = PodRequest((), 0), NO_CONSTRAINTS
            verdict = verdict or f"its requests cannot be read ({e})"
        out.append(
            Candidate(
                r, node, request, constraints, unmovable=verdict, budgets=budgets_of(pod, budgets), nodes=where(pod)
            )
        )
    return out


@dataclass(slots=True)
class DefragState:
    """What a plan is made from: the registered nodes' snapshots, the candidates on them, each budget's allowance,
    and what could not be read."""

    snapshots: list[NodeSnapshot] = field(default_factory=list)
    candidates: list[Candidate] = field(default_factory=list)
    allowances: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


async def read_state(store: Store, api: Api, vendors: Vendors, *, where: Where = everywhere) -> DefragState:
    """Read every registered node, every pod and every PodDisruptionBudget once (module docstring); ``where`` says
    where each candidate's replacement may go."""
    out = DefragState()
    names = await store.inventory.list_nodes()
    states = await store.snapshots.load(sorted(names))
    for n in sorted(states):
        st = states[n]
        snap = st.snapshot() if st.error is None else None
        if snap is None:
            out.warnings.append(f"node {n}: stored data unreadable ({st.error}); left out")
            continue
        out.snapshots.append(snap)
    by_node = pods_by_node(await api.list_pods())
    undecodable: list[UndecodableRecord] = []
    records = await store.reservations.list_all(undecodable)
    out.warnings += [
        f"the allocation record of pod {e.pod_uid} on {e.node} cannot be read ({e.error}); left out"
        for e in undecodable
    ]
    budgets = named_budgets(await api.list_pod_disruption_budgets())
    out.allowances = {b.key: b.budget.disruptions_allowed for b in budgets}
    for snap in out.snapshots:
        out.candidates += candidates_on(
            snap.name, records.get(snap.name, ()), by_node.get(snap.name, []), budgets, vendors, where=where
        )
    return out


class NotPlannable(Exception):
    """The pod named with ``--for`` is not one a plan can help (gone, ended, placed, asks for no device)."""


async def pod_goal(
    store: Store, api: Api, namespace: str, name: str, vendors: Vendors, *, where: Where = everywhere
) -> ForPod:
    """The pending pod ``namespace/name`` as the planner helps it: its requests and constraints as ``/filter`` reads
    them, its priority, its namespace's quota when it has limits, and the nodes it may go to (``where``)."""
    try:
        pod = await api.get_pod(namespace, name)
    except NotFoundError:
        raise NotPlannable(f"pod {namespace}/{name} not found") from None
    meta, spec = _mapping(pod, "metadata"), _mapping(pod, "spec")
    uid = str(meta.get("uid") or "")
    if _mapping(pod, "status").get("phase") in TERMINAL_PHASES:
        raise NotPlannable(f"pod {namespace}/{name} has ended")
    if spec.get("nodeName"):
        raise NotPlannable(f"pod {namespace}/{name} is already placed on node {spec['nodeName']}")
    held = await store.reservations.node_of(uid) if uid else None
    if held is not None:
        raise NotPlannable(f"pod {namespace}/{name} already holds devices on node {held} (being bound)")
    try:
        request = vendors_pod_request(pod, vendors)
        constraints = pod_constraints({str(k): str(v) for k, v in _mapping(meta, "annotations").items()}, vendors)
    except DecodeError as e:
        raise NotPlannable(f"pod {namespace}/{name}: {e} (the extender would refuse it the same way)") from e
    if not request.any:
        raise NotPlannable(f"pod {namespace}/{name} asks for no device")
    quota = await store.quota.get(namespace)
    return ForPod(
        namespace,
        name,
        uid,
        request,
        constraints,
        priority=pod_priority(pod),
        quota=quota if quota.limited else None,
        nodes=where(pod),
    )


async def nodes_selected(api: Api, selector: str) -> frozenset[str]:
    """The names of the nodes a label selector selects (the API server selects)."""
    return frozenset(
        str(_mapping(n, "metadata").get("name") or "") for n in await api.list_nodes(label_selector=selector)
    )
