"""Read the live state and plan on it: the one path from a store and an API server to a plan, shared by
``vgpu-scheduler defrag plan`` (:mod:`.planning`) and the extender's automatic mode
(``services/extender/autodefrag.py``). A replacement (and a helped pod) goes only to the nodes kube-scheduler's own
NodeUnschedulable and node selector filters leave it (``shared/k8s/nodefit.py``, as ``simulate`` plays
them). Reads only: reserves nothing, evicts nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from vgpu_scheduler.shared.defrag.read import DefragState, NotPlannable, Where, pod_goal, read_state
from vgpu_scheduler.shared.domain.defrag import Goal, Placement, plan_defrag
from vgpu_scheduler.shared.domain.defragmodel import Cannot, DefragPlan
from vgpu_scheduler.shared.k8s import Api
from vgpu_scheduler.shared.k8s.nodefit import candidate_names
from vgpu_scheduler.shared.store import Store
from vgpu_scheduler.shared.vendors.registry import Vendors


@dataclass(frozen=True, slots=True)
class Planned:
    """A plan or why none, and the state it was made on (its warnings, its snapshots)."""

    result: DefragPlan | Cannot
    state: DefragState


async def plan_live(
    store: Store,
    api: Api,
    vendors: Vendors,
    placement: Placement,
    goal_of: Callable[[Where, DefragState], Awaitable[Goal]],
) -> Planned:
    """Read the nodes, the state (``shared/defrag/read.py``) and the goal ``goal_of`` builds on them, then plan.
    :class:`NotPlannable` from ``goal_of`` is the plan's ``Cannot``."""
    node_objects = await api.list_nodes()

    def where(pod: Mapping[str, Any]) -> frozenset[str]:
        return frozenset(candidate_names(pod, node_objects))

    state = await read_state(store, api, vendors, where=where)
    try:
        goal = await goal_of(where, state)
    except NotPlannable as e:
        return Planned(Cannot(str(e)), state)
    result = plan_defrag(goal, state.snapshots, state.candidates, placement=placement, allowances=state.allowances)
    return Planned(result, state)


async def plan_for_pod(store: Store, api: Api, vendors: Vendors, placement: Placement, pod: tuple[str, str]) -> Planned:
    """The plan that lets the pending pod ``pod`` (namespace, name) fit (``defrag plan --for``)."""

    async def goal(where: Where, _state: DefragState) -> Goal:
        return await pod_goal(store, api, *pod, vendors, where=where)

    return await plan_live(store, api, vendors, placement, goal)
