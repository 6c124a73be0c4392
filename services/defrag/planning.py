"""What ``vgpu-scheduler defrag plan`` does once it reaches a store and an API server (the live ones, or a simulated
cluster's, :mod:`.offline`): build the goal from the flags, read the state and run the pure planner under the
extender's policies and device config (:mod:`.reading`, which the extender's automatic mode shares).
Reserves nothing, evicts nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vgpu_scheduler.services.inspect.connect import store_warning
from vgpu_scheduler.shared.config import InspectSettings
from vgpu_scheduler.shared.defrag.read import DefragState, Where, nodes_selected, pod_goal
from vgpu_scheduler.shared.defrag.reading import plan_live
from vgpu_scheduler.shared.domain.defrag import FreeCards, FreeNodes, Goal, Placement
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
    stale = store_warning(await store.meta.status())
    unknown: list[str] = []

    async def goal(where: Where, state: DefragState) -> Goal:
        registered = {s.name for s in state.snapshots}
        nodes = ask.nodes
        if ask.selector is not None:
            nodes = await nodes_selected(api, ask.selector)
        unknown.extend(
            f"node {n} is not a registered GPU node" for n in sorted((ask.nodes or frozenset()) - registered)
        )
        if ask.for_pod is not None:
            return await pod_goal(store, api, *ask.for_pod, vendors, where=where)
        if ask.free_cards is not None:
            return FreeCards(ask.free_cards, ask.card_type, nodes)
        assert ask.free_nodes is not None
        return FreeNodes(ask.free_nodes, nodes)

    placement = Placement(Policies(settings.node_policy, settings.gpu_policy), common.nvidia, vendors.rules)
    planned = await plan_live(store, api, vendors, placement, goal)
    warnings = ([stale] if stale else []) + planned.state.warnings + unknown
    return PlanOutcome(ask, planned.result, tuple(warnings))
