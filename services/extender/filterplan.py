"""Planning for ``POST /filter``: the scheduling core's decision for a pod over the process-local snapshot of its
candidate nodes (:mod:`services.extender.snapshot`), in the snapshot's order of preference.

A decision is found by walking the ranked nodes only as far as the first that fits; the full plan (every candidate,
for the reasons of a failure) runs only when none does. With ``--bind-aware-placement`` nodes without a bind in
flight come first. Nothing here reads or writes the store: the commit is :mod:`services.extender.filtercommit`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from vgpu_scheduler.services.extender.filterpod import FilterPod
from vgpu_scheduler.services.extender.snapshot import SnapshotCache
from vgpu_scheduler.shared.domain.model import NvidiaConfig
from vgpu_scheduler.shared.domain.plan import Decision, Failure, plan_ranked, plan_tiers
from vgpu_scheduler.shared.domain.quota import QuotaState
from vgpu_scheduler.shared.domain.scoring import Policies, effective_policy
from vgpu_scheduler.shared.domain.vendor import RuleSet


@dataclass(frozen=True, slots=True)
class Planner:
    """Plans pods on ``cache`` with the extender's policies, NVIDIA config and the enabled vendors' ``rules``."""

    cache: SnapshotCache
    policies: Policies
    nvidia: NvidiaConfig
    rules: RuleSet
    bind_aware: bool

    def plan(
        self, pod: FilterPod, names: Sequence[str], quota: QuotaState | None
    ) -> tuple[Decision | Failure, list[str]]:
        """Plan on the snapshot of ``names``: nodes without a bind in flight first (``--bind-aware-placement``).
        Also returns the candidates missing from the snapshot (only with a failure: a decision needs none)."""
        decision = self._ranked(pod, names, quota)
        if isinstance(decision, Decision):
            return decision, []
        none_fit = decision  # every candidate was walked: only the reasons remain to be found
        if self.bind_aware:
            free, busy, missing = self.cache.lookup_tiers(names)
            tiers = (free, busy) if busy else (free,)
        else:
            snaps, missing = self.cache.lookup(names)
            tiers = (snaps,)
        result = plan_tiers(
            pod.request,
            pod.constraints,
            tiers,
            policies=self.policies,
            quota=quota,
            config=self.nvidia,
            none_fit=none_fit,
            rules=self.rules,
        )
        return result, missing

    def _ranked(self, pod: FilterPod, names: Sequence[str], quota: QuotaState | None) -> Decision | bool:
        """``plan``'s decision found by walking the cache's nodes in order of preference, as far as the first that
        fits (no per-request sort, no lookup of every name). Otherwise whether every candidate was walked: True
        when none fits (``plan`` then only looks for the reasons), False when ``names`` repeats a name (``plan``
        counts repeats in ``passed_over``: it plans them itself)."""
        candidates = set(names)
        if len(candidates) != len(names):
            return False
        policy = effective_policy(self.policies, pod.constraints).node

        def walk(busy: bool | None) -> Decision | None:
            ranked = self.cache.ranked(policy, candidates, busy)
            return plan_ranked(
                pod.request,
                pod.constraints,
                ranked,
                policies=self.policies,
                quota=quota,
                config=self.nvidia,
                rules=self.rules,
            )

        if not self.bind_aware or self.cache.busy.isdisjoint(candidates):
            return walk(None) or True
        free = walk(False)
        if free is not None:
            return free
        taken = walk(True)
        if taken is None:
            return True
        passed = sum(1 for _ in self.cache.ranked(policy, candidates, False))  # as plan_tiers counts the free tier
        return replace(taken, passed_over=taken.passed_over + passed)
