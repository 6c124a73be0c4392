"""Cheap proofs that a pod cannot fit a node, so that ``plan`` can pass over it without running ``Fit``.

``PodNeeds`` reads the node's ``NodeSummary`` in O(1): the largest room and the device counts a pod's containers
need (``PodNeeds.of(requests, mutex).predicate()`` is the test ``plan`` runs on every node it walks past).

``may_fit`` checks, device by device, what ``Fit`` checks in any order (health, type, UUID, room, the vendor's
``take``) on the node before the pod: False proves the pod does not fit there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from vgpu_scheduler.shared.domain.context import PodContext
from vgpu_scheduler.shared.domain.model import MEM_PCT_UNSET, NVIDIA, ContainerRequest
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot, NodeSummary

_NO_NEED = -(1 << 62)


@dataclass(frozen=True, slots=True)
class PodNeeds:
    """What a node's ``NodeSummary`` must reach for the pod to possibly fit there.

    Each figure is a necessary condition of NVIDIA ``Fit`` on the node before the pod: every device a container
    takes must be usable and have the room on its own, so some usable device must have the largest memory,
    percentage and cores any container asks for, and at least as many usable (idle for ``mutex`` and whole-card
    requests, not core-full for 0-core requests) devices as a container wants. Later app containers see more
    usage, never less, so checking each container against the node before the pod is sound. MIG nodes are
    always viable (one GPU may give a container several instances).
    """

    devices: int
    mem_mib: int = _NO_NEED
    mem_pct: int = _NO_NEED
    cores: int = _NO_NEED
    exclusive: int = _NO_NEED
    zero_core: int = _NO_NEED
    idle: int = _NO_NEED

    @classmethod
    def of(cls, requests: Sequence[ContainerRequest], mutex: bool) -> PodNeeds:
        """The needs of a pod's (normalized) requests; ``mutex`` when the GPU policy contains ``mutex``."""
        every = [r for r in requests if not r.empty]
        devices = max((r.nums for r in every), default=0)
        # memory and cores as NVIDIA's Fit reads them; other vendors take what their rules say (a vNPU template…)
        wanted = [r for r in every if r.type == NVIDIA]
        return cls(
            devices=devices,
            mem_mib=max((r.mem_mib for r in wanted if r.mem_mib > 0), default=_NO_NEED),
            mem_pct=max((r.mem_pct for r in wanted if r.mem_mib <= 0 and r.mem_pct != MEM_PCT_UNSET), default=_NO_NEED),
            cores=max((r.cores_pct for r in wanted), default=_NO_NEED),
            exclusive=max((r.nums for r in wanted if r.cores_pct == 100), default=_NO_NEED),
            zero_core=max((r.nums for r in wanted if r.cores_pct == 0), default=_NO_NEED),
            idle=devices if mutex else _NO_NEED,
        )

    def predicate(self) -> Callable[[NodeSummary], bool]:
        """``viable(summary)``: whether a node's summary reaches every need (the node is worth evaluating).

        It runs for every node the fast path walks past: one expression of plain comparisons.
        """
        d, m, p, c = self.devices, self.mem_mib, self.mem_pct, self.cores
        ex, z, idle = self.exclusive, self.zero_core, self.idle

        def viable(x: NodeSummary) -> bool:
            # the counts that only some pods need (whole cards, mutex) first: they reject the most nodes
            return x.has_mig or (
                x.exclusive_ok_count >= ex
                and x.idle_count >= idle
                and x.usable_count >= d
                and x.max_free_mem_mib >= m
                and x.max_free_cores >= c
                and x.max_fit_pct >= p
                and x.zero_core_ok_count >= z
            )

        return viable

    def hopeless(self, summary: NodeSummary) -> bool:
        """True when the summary proves the pod cannot fit on the node."""
        return not self.predicate()(summary)


def may_fit(ctx: PodContext, snap: NodeSnapshot) -> bool:
    """A quick necessary condition, device by device: can each container find enough devices that pass every
    check of ``Fit`` that does not depend on order, NUMA runs, quota or MIG placement, on the node before the pod?

    False proves the pod does not fit (later app containers only see more usage). MIG nodes always pass.
    """
    devices, usages = snap.inventory.devices, snap.usages
    if snap.summary.has_mig:
        return True
    cordoned = snap.inventory.cordoned
    constraints, mutex = ctx.constraints, ctx.policy.mutex
    for req in ctx.requests:
        if req.empty:
            continue
        rules = ctx.rules.get(req.type)
        if rules is None:
            return False
        candidate, type_ok, uuid_ok, take = rules.candidate, rules.type_ok, rules.uuid_ok, rules.take
        take_on = getattr(rules, "take_on", None)
        fits = getattr(rules, "device_fits", None)
        found = 0
        for dev, u in zip(devices, usages, strict=True):
            used = u.used
            if not candidate(dev, req) or not dev.health or used >= dev.count or (mutex and used > 0):
                continue
            if fits is not None and not fits(dev, req, used, u.used_mem_mib):
                continue
            took = (
                take(dev, req, u.used_mem_mib)
                if take_on is None
                else take_on(dev, req, u.used_mem_mib, u.used_cores, u)
            )
            cores = took.cores
            if (
                took.reason is not None
                or dev.devmem_mib - u.used_mem_mib < took.mem_mib
                or dev.devcore - u.used_cores < cores
                or (cores == 100 and used > 0 and dev.devcore == 100)
                or (cores == 0 and dev.devcore != 0 and u.used_cores == dev.devcore)
                or dev.id in cordoned
                or not type_ok(dev, req, constraints)
                or not uuid_ok(dev, constraints)
            ):
                continue
            found += 1
            if found >= req.nums:
                break
        if found < req.nums:
            return False
    return True
