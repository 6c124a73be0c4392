"""Cheap proofs that a pod cannot fit a node, so that ``plan`` can pass over it without running ``Fit``.

``may_fit`` checks, device by device, what ``Fit`` checks in any order (health, type, UUID, room, the vendor's
``take``) on the node before the pod: False proves the pod does not fit there.
"""

from __future__ import annotations

from vgpu_scheduler.shared.domain.context import PodContext
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot


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
