"""Choosing a multi-card set among the cards a container may take (the last step of ``fit.fit_container``).

Pure. The candidates arrive in the walk's order of preference (``fit``, HAMi's order); each is anything with the
card's inventory position as ``pos``, and the chosen ones are returned in that same order (or the set's own order
for a vendor that asks for it):

* :func:`select_set`: a vendor that chooses a multi-card request as a set (Ascend's card rules, MetaX sGPU's
  MetaLink zones, AWS Neuron's device runs) picks among all candidates;
* :func:`select_topology`: NVIDIA's ``topology-aware`` policy narrows the candidates by pair score
  (:mod:`shared.domain.topology`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, TypeVar

from vgpu_scheduler.shared.domain import topology
from vgpu_scheduler.shared.domain.model import ContainerRequest, PodConstraints
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.domain.vendor import DeviceRules


class Candidate(Protocol):
    @property
    def pos(self) -> int: ...


C = TypeVar("C", bound=Candidate)


def select_set(
    candidates: Sequence[C], req: ContainerRequest, rules: DeviceRules, snap: NodeSnapshot, constraints: PodConstraints
) -> list[C] | None:
    """The vendor's set among ``candidates`` (None: no set of ``req.nums`` cards). A vendor whose choice depends on
    the request (MetaX sGPU: whole cards by MetaLink zone, online pods by the pods on the cards) has the optional
    ``select_for(candidates, req, snapshot, constraints)``; the others ``select(candidates, nums, inventory)``."""
    nums = req.nums
    if len(candidates) < nums:
        return None
    devices = snap.inventory.devices
    devs = [devices[c.pos] for c in candidates]
    select_for = getattr(rules, "select_for", None)
    if select_for is not None:
        chosen = select_for(devs, req, snap, constraints)
    else:
        chosen = rules.select(devs, nums, snap.inventory)
    if chosen is None or len(chosen) != nums:
        return None
    if getattr(rules, "keeps_selected_order", False):  # optional: the set's own order (Neuron's device runs)
        by_id = {devices[c.pos].id: c for c in candidates}
        return [by_id[d.id] for d in chosen]
    chosen_ids = {d.id for d in chosen}
    return [c for c in candidates if devices[c.pos].id in chosen_ids]


def select_topology(candidates: Sequence[C], nums: int, snap: NodeSnapshot) -> list[C] | None:
    """``topology-aware``: exactly ``nums`` candidates are taken as they are; more are narrowed by pair score."""
    if len(candidates) == nums:
        return list(candidates)
    if len(candidates) < nums:
        return None
    devices = snap.inventory.devices
    infos = [devices[c.pos] for c in candidates]
    scores: Mapping[str, Mapping[str, int]] = snap.inventory.pair_scores
    if nums == 1:
        chosen_ids = {topology.select_single(infos, scores).id}
    else:
        chosen = topology.select_set(infos, nums, scores)
        if chosen is None:
            return None
        chosen_ids = {d.id for d in chosen}
    return [c for c in candidates if devices[c.pos].id in chosen_ids]
