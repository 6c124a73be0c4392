"""What ``vgpu-scheduler defrag plan`` does once it reaches a store and an API server (the live ones, or a simulated
cluster's, :mod:`.offline`): read the state (``shared/defragread.py``), build the goal, run the pure planner
(``shared/domain/defrag.py``) under the extender's policies and device config. A replacement (and the ``--for``
pod) goes only to the nodes kube-scheduler's own NodeUnschedulable and node selector filters leave it (the same
filters ``simulate`` plays, ``services/simulate/nodefit.py``). Reserves nothing, evicts nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vgpu_scheduler.services.inspect.connect import store_warning
from vgpu_scheduler.services.simulate.nodefit import candidate_names
from vgpu_scheduler.shared.config import InspectSettings
from vgpu_scheduler.shared.defragread import NotPlannable, nodes_selected, pod_goal, read_state
from vgpu_scheduler.shared.domain.defrag import FreeCards, FreeNodes, Goal, Placement, plan_defrag
from vgpu_scheduler.shared.domain.defragmodel import Cannot, DefragPlan
from vgpu_scheduler.shared.domain.scoring import Policies
from vgpu_scheduler.shared.k8s import Api
from vgpu_scheduler.shared.store import Store
from vgpu_scheduler.shared.vendors.catalog import enabled_vendors


@dataclass(frozen=True, slots=True)
class PlanAsk:
    """The question, as the flags put it: one of ``for_pod`` (namespace, name), ``free_cards``, ``free_nodes``;
    for the last two, which cards (``card_type``) on which nodes (``nodes`` by name, or a label ``selector``)."""

    for_pod: tuple[str, str] | None = None
    free_cards: int | None = None
    free_nodes: int | None = None
    card_type: str | None = None
    nodes: frozenset[str] | None = None
    selector: str | None = None

    @property
    def label(self) -> str:
        """What the plan is for, in words (the text output's first line)."""
        if self.for_pod is not None:
            return f"pod {self.for_pod[0]}/{self.for_pod[1]}"
        if self.free_cards is not None:
            kind = f" {self.card_type}" if self.card_type else ""
            return f"{self.free_cards} idle{kind} card{'s' if self.free_cards != 1 else ''}"
        return f"{self.free_nodes} idle node{'s' if self.free_nodes != 1 else ''}"


@dataclass(frozen=True, slots=True)
class PlanOutcome:
    """The plan or why none, what it was asked for, and what may make it incomplete."""

    ask: PlanAsk
    result: DefragPlan | Cannot
    warnings: tuple[str, ...] = field(default=())


async def make_plan(settings: InspectSettings, store: Store, api: Api, ask: PlanAsk) -> PlanOutcome:
    """Read, then plan (module docstring)."""
    common = settings.common
    vendors = enabled_vendors(common.nvidia, common.device_sections, common.enable_flags)
    warnings: list[str] = []
    stale = store_warning(await store.meta.status())
    if stale:
        warnings.append(stale)
    node_objects = await api.list_nodes()

    def where(pod: Mapping[str, Any]) -> frozenset[str]:
        return frozenset(candidate_names(pod, node_objects))

    state = await read_state(store, api, vendors, where=where)
    warnings += state.warnings
    registered = {s.name for s in state.snapshots}
    nodes = ask.nodes
    if ask.selector is not None:
        nodes = await nodes_selected(api, ask.selector)
    warnings += [f"node {n} is not a registered GPU node" for n in sorted((ask.nodes or frozenset()) - registered)]
    goal: Goal
    if ask.for_pod is not None:
        try:
            goal = await pod_goal(store, api, *ask.for_pod, vendors, where=where)
        except NotPlannable as e:
            return PlanOutcome(ask, Cannot(str(e)), tuple(warnings))
    elif ask.free_cards is not None:
        goal = FreeCards(ask.free_cards, ask.card_type, nodes)
    else:
        assert ask.free_nodes is not None
        goal = FreeNodes(ask.free_nodes, nodes)
    result = plan_defrag(
        goal,
        state.snapshots,
        state.candidates,
        placement=Placement(Policies(settings.node_policy, settings.gpu_policy), common.nvidia, vendors.rules),
        allowances=state.allowances,
    )
    return PlanOutcome(ask, result, tuple(warnings))
