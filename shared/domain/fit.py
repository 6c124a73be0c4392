"""NVIDIA ``Fit`` for one pod on one node (hami-wire §5.1 step 5.3, §5.4, §6.4, §7, §8).

``evaluate_node`` fits every container of a pod on one node the way HAMi's ``scoreNode`` does: init containers
one at a time, each against the node as it was before the pod; app containers cumulatively, each seeing the
usage the previous ones added. Each container runs the checks of HAMi's ``Fit`` in HAMi's order, counting a
reason for every device that fails one. The result is the pod's device list, its MIG allocations and its
collapsed per-device charges, or a ``NodeRejection``.

Devices are visited in HAMi's order (difference 8). HAMi sorts one list of the node's devices in place, once per
request, with a sort that keeps equal devices in the order it finds them (Go's ``sort.Sort`` is an insertion sort
up to 12 elements), and ``Fit`` walks it from the end. So equal devices are tried last-registered first, and an
app container finds them in the order the previous app container's sort left; each init container starts again
from the registration order. ``_NodeEval`` keeps that order per device type: a stable sort of the previous
order by ``scoring.device_sort_key``, the first one of the registration order reversed.

Where we differ from HAMi, on purpose:

* a container that takes several MIG instances of one GPU sees its own earlier instances in that GPU's usage,
  and MIG placements are distinct across the whole pod, so a decision never over-commits a device;
* the quota check collapses the pod's hypothetical device list over init/app containers (§8).

When that greedy walk refuses a pod of several device entries, ``assignment.search`` tries other cards for the
earlier entries (the same walk, steered away from cards it took) before the refusal stands.

What every node's evaluation of one pod shares (the normalized requests, the policies) is ``context.PodContext``;
the quick order-free test that lets ``plan`` pass over a node is ``prefilter.may_fit``.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

from vgpu_scheduler.shared.domain import assignment, choice, mig
from vgpu_scheduler.shared.domain.accounting import collapse
from vgpu_scheduler.shared.domain.context import PodContext
from vgpu_scheduler.shared.domain.hooks import implements
from vgpu_scheduler.shared.domain.mig import LegacyMigChoice
from vgpu_scheduler.shared.domain.model import (
    NVIDIA,
    ContainerDevice,
    ContainerRequest,
    DeviceCharge,
    DeviceMode,
    DeviceUsage,
    MigAllocation,
    MigPlacement,
    MigProfile,
    PodDevices,
    Reason,
)
from vgpu_scheduler.shared.domain.quota import QuotaState
from vgpu_scheduler.shared.domain.reasons import NodeRejection
from vgpu_scheduler.shared.domain.scoring import device_scorer
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.domain.vendor import DeviceRules, EntryType

_MIG = DeviceMode.MIG.value


class _Pick(NamedTuple):
    """One device accepted for the current container."""

    pos: int
    quota_mem_mib: int
    """The request's memory on this card (what HAMi's quota check counts for the partial list)."""
    mem_mib: int
    """What the device entry records: the request, or the MIG profile/template memory."""
    cores: int
    profile: MigProfile | None = None
    placement: MigPlacement | None = None
    legacy: LegacyMigChoice | None = None


@dataclass(slots=True)
class _Work:
    """Mutable per-device usage (by inventory position) while one node is evaluated."""

    used: list[int]
    mem: list[int]
    cores: list[int]

    def copy(self) -> _Work:
        return _Work(self.used.copy(), self.mem.copy(), self.cores.copy())


@dataclass(frozen=True, slots=True)
class NodeFit:
    """A pod fitted on one node: the device list (init first), MIG allocations and the collapsed charges."""

    devices: PodDevices
    mig: tuple[MigAllocation, ...]
    charges: tuple[DeviceCharge, ...]


_Demand = tuple[str, int, int]
"""A quota check's vendor (common word), memory MiB and cores %."""


class _NodeEval:
    """The evaluation of one pod on one node. Holds the pod-wide state (chosen devices, MIG placements)."""

    __slots__ = (
        "app_order",
        "ban",
        "bans",
        "ctx",
        "devices",
        "failed",
        "picked",
        "pod_devs",
        "pod_legacy",
        "pod_mig",
        "snap",
        "typed_cache",
    )

    def __init__(self, ctx: PodContext, snap: NodeSnapshot, bans: assignment.Bans | None = None) -> None:
        self.ctx = ctx
        self.bans = bans or {}
        """``assignment.search``'s steering: per entry, the cards it may not take (None: the entry is left out)."""
        self.ban: frozenset[int] = frozenset()
        self.picked: list[tuple[int, tuple[int, ...]]] = []
        self.failed = -1
        self.snap = snap
        self.devices = snap.inventory.devices
        self.pod_devs: list[tuple[ContainerDevice, ...]] = [() for _ in range(ctx.pod.container_count)]
        self.pod_mig: dict[int, list[MigPlacement]] = {}
        self.pod_legacy: dict[int, tuple[int, set[int]]] = {}
        self.typed_cache: dict[str, list[int]] = {}
        self.app_order: dict[str, list[int]] = {}
        """Per device type, the order the last app container's sort left (HAMi's list, walked from its end)."""

    def stuck(self) -> assignment.Stuck:
        """Where a failed walk stopped: the entry that did not fit and the cards each earlier entry took."""
        return assignment.Stuck(failed=self.failed, picked=tuple(self.picked))

    def typed(self, req: ContainerRequest, rules: DeviceRules) -> list[int]:
        """Positions of the devices of the request's family (NVIDIA: lower-cased type contains the request type)."""
        got = self.typed_cache.get(req.type)
        if got is None:
            got = [p for p, d in enumerate(self.devices) if rules.candidate(d, req)]
            self.typed_cache[req.type] = got
        return got

    def run(self) -> NodeFit | NodeRejection:
        ctx = self.ctx
        usages = self.snap.usages
        base = _Work([u.used for u in usages], [u.used_mem_mib for u in usages], [u.used_cores for u in usages])
        app = base.copy()
        init_count = ctx.pod.init_count
        mig_allocs: list[MigAllocation] = []
        pod = ctx.pod
        for ei, req in enumerate(ctx.requests):
            if req.empty or (ban := self.bans.get(ei, frozenset())) is None:
                continue
            ci = pod.owner(ei)
            work = base if ci < init_count else app
            self.ban = ban
            picks = self.fit_container(ci, req, work)
            if isinstance(picks, NodeRejection):
                self.failed = ei
                return replace(picks, entry_index=ei) if pod.owners else picks
            self.picked.append((ei, tuple(pk.pos for pk in picks)))
            entries: list[ContainerDevice] = list(self.pod_devs[ci])
            offset = len(entries)
            vendor_rules = ctx.rules.get(req.type)
            shown = vendor_rules.entry_type if implements(vendor_rules, EntryType) else None  # type: ignore[type-abstract]
            for di, pk in enumerate(picks, start=offset):
                dev = self.devices[pk.pos]
                legacy = (pk.legacy.geometry, pk.legacy.slot) if pk.legacy is not None else None
                entries.append(
                    ContainerDevice(
                        uuid=dev.id,
                        used_mem_mib=pk.mem_mib,
                        used_cores=pk.cores,
                        type=req.type,
                        legacy_mig=legacy,
                        shown_type=shown(dev) if shown is not None else "",
                    )
                )
                if pk.profile is not None and pk.placement is not None:
                    self.pod_mig.setdefault(pk.pos, []).append(pk.placement)
                    mig_allocs.append(
                        MigAllocation(
                            container_index=ci,
                            device_index=di,
                            gpu_uuid=dev.id,
                            profile=pk.profile.name,
                            placement=pk.placement,
                        )
                    )
                if pk.legacy is not None:
                    self.pod_legacy.setdefault(pk.pos, (pk.legacy.geometry, set()))[1].add(pk.legacy.slot)
                if work is app:
                    app.used[pk.pos] += 1
                    app.mem[pk.pos] += pk.mem_mib
                    app.cores[pk.pos] += pk.cores
            self.pod_devs[ci] = tuple(entries)
        devices = tuple(self.pod_devs)
        mig = tuple(mig_allocs)
        used_ids = {d.uuid for c in devices for d in c}
        totals = {d.id: d.devcore for d in self.devices if d.id in used_ids}
        charges = collapse(devices, init_count, mig, device_totals=totals)
        uniform = ctx.uniform_types
        if uniform:  # a vendor whose devices are shared only by tasks of one size: the reserve re-checks it
            kinds = {d.uuid: d.type for c in devices for d in c}
            charges = tuple(replace(c, uniform=True) if kinds.get(c.uuid) in uniform else c for c in charges)
        terms = ctx.charge_terms
        if terms:  # a vendor whose sharing rule depends on the tasks a device holds: tags and the reserve's rule
            kinds = {d.uuid: d.type for c in devices for d in c}
            by_id = {d.id: (d, u) for d, u in zip(self.devices, self.snap.usages, strict=True)}
            charges = tuple(
                terms[kinds[c.uuid]](c, *by_id[c.uuid], ctx.constraints)
                if kinds.get(c.uuid) in terms and c.uuid in by_id
                else c
                for c in charges
            )
        return NodeFit(devices=devices, mig=mig, charges=charges)

    # ----------------------------------------------------------------------------------------------------

    def fit_container(self, ci: int, req: ContainerRequest, work: _Work) -> list[_Pick] | NodeRejection:
        """HAMi's ``fitInDevices`` + NVIDIA ``Fit`` for one container (§6.4)."""
        ctx = self.ctx
        devices = self.devices
        constraints = ctx.constraints
        policy = ctx.policy
        rules = ctx.rules.get(req.type)
        if rules is None:
            return NodeRejection(node=self.snap.name, plain=Reason.NODE_INSUFFICIENT_DEVICE, container_index=ci)
        typed = self.typed(req, rules)
        total = len(typed)
        if req.nums > total and not self._is_mig_request(req, typed):
            return NodeRejection(node=self.snap.name, plain=Reason.NODE_INSUFFICIENT_DEVICE, container_index=ci)
        node_mode = getattr(rules, "node_mode_reason", None)  # optional: the node's mode refuses the request
        if node_mode is not None and (why := node_mode([devices[p] for p in typed], req, constraints)) is not None:
            return NodeRejection(node=self.snap.name, counts={why: 1}, total=total, container_index=ci)

        key, score = ctx.key, device_scorer(req, policy.weights)
        used, mem, cores = work.used, work.mem, work.cores
        app = ci >= ctx.pod.init_count
        start = self.app_order.get(req.type) if app else None
        order = sorted(
            reversed(typed) if start is None else start,
            key=lambda p: key(score(devices[p], used[p], mem[p], cores[p]), devices[p], used[p]),
        )
        if app:
            self.app_order[req.type] = order
        if self.ban:  # assignment.search steers this entry away from cards (HAMi's list order is kept above)
            order = [p for p in order if p not in self.ban]

        cordoned = self.snap.inventory.cordoned
        # numa-bind and topology-aware are NVIDIA's (HAMi's other vendors' Fit ignores both)
        nvidia = req.type == NVIDIA
        numa_bind, mutex = policy.numa_bind and nvidia, policy.mutex
        sets = rules.selects_sets
        topology = (policy.topology and nvidia) or sets
        quota = ctx.quota.for_vendor(req.type) if ctx.quota is not None and ctx.quota_active else None
        if quota is not None and not quota.limited:
            quota = None  # this vendor has no limit in the namespace
        quota_unit = ctx.config.memory_factor if nvidia else 1  # other vendors' limits are in MiB already
        type_ok, uuid_ok, take = rules.type_ok, rules.uuid_ok, rules.take
        take_for = getattr(rules, "take_for", None)  # optional: a take that reads the pod's annotations
        if take_for is not None:
            take = functools.partial(take_for, constraints=constraints)
        take_on = getattr(rules, "take_on", None)  # optional: a take that sees the cores in use and the usage (Neuron)
        pod_ok = getattr(rules, "pod_device_ok", None)  # optional: a vendor's rule on the pod's earlier devices
        earlier = [d for c in self.pod_devs for d in c if d.type == req.type] if pod_ok is not None else []
        group_of = getattr(rules, "mutex_group", None) if mutex else None  # optional: devices busy as a group
        fits = getattr(rules, "device_fits", None)  # optional: the vendor's own test of a device, a silent miss
        in_use_ok = getattr(rules, "in_use_ok", None)  # optional: a vendor's rule on a device already in use
        unhealthy = getattr(rules, "unhealthy_reason", Reason.CARD_NOT_HEALTH)  # optional: the vendor's words
        slots_full = getattr(rules, "slots_full_reason", Reason.CARD_TIME_SLICING_EXHAUSTED)
        snap_usages = self.snap.usages
        busy_groups = {group_of(devices[q]) for q in typed if used[q] > 0} - {None} if group_of is not None else set()
        counts: defaultdict[Reason, int] = defaultdict(int)  # a Counter costs ~10x more to make, per node
        partial: list[_Pick] = []
        remaining = req.nums
        prev_numa: int | None = None
        i = 0
        while i < len(order):
            p = order[i]
            dev = devices[p]
            i += 1
            if not dev.health:
                counts[unhealthy] += 1
                continue
            if dev.id in cordoned:
                counts[Reason.CARD_CORDONED] += 1
                continue
            if not type_ok(dev, req, constraints):
                counts[Reason.CARD_TYPE_MISMATCH] += 1
                continue
            if numa_bind and dev.numa != prev_numa:
                if partial:
                    counts[Reason.NUMA_NOT_FIT] += len(partial)
                partial = []
                remaining = req.nums
                prev_numa = dev.numa
            if not uuid_ok(dev, constraints):
                counts[Reason.CARD_UUID_MISMATCH] += 1
                continue
            is_mig = dev.mode == _MIG
            d_used, d_mem, d_cores = used[p], mem[p], cores[p]
            if is_mig:  # a MIG device may be revisited: count this container's own instances on it
                for pk in partial:
                    if pk.pos == p:
                        d_used += 1
                        d_mem += pk.mem_mib
                        d_cores += pk.cores
            if dev.count <= d_used:
                counts[slots_full] += 1
                continue
            if mutex and (d_used > 0 or (busy_groups and group_of is not None and group_of(dev) in busy_groups)):
                counts[Reason.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT] += 1
                continue
            if (
                in_use_ok is not None
                and d_used > 0
                and (refusal := in_use_ok(dev, snap_usages[p], d_used - snap_usages[p].used, req, constraints))
                is not None
            ):
                counts[refusal] += 1
                continue
            if fits is not None and not fits(dev, req, d_used, d_mem):
                continue
            took = take(dev, req, d_mem) if take_on is None else take_on(dev, req, d_mem, d_cores, snap_usages[p])
            if took.reason is not None:
                counts[took.reason] += 1
                continue
            memreq = took.mem_mib
            coresreq = took.cores
            if quota is not None and not self._quota_ok(
                quota, quota_unit, (ci, partial), dev.id, (req.type, memreq, coresreq)
            ):
                counts[Reason.RESOURCE_QUOTA_NOT_FIT] += 1
                continue
            if dev.devmem_mib - d_mem < memreq:
                counts[Reason.CARD_INSUFFICIENT_MEMORY] += 1
                continue
            if took.cores_checked:
                if dev.devcore - d_cores < coresreq:
                    counts[Reason.CARD_INSUFFICIENT_CORE] += 1
                    continue
                if dev.devcore == 100 and coresreq == 100 and d_used > 0:
                    counts[Reason.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT] += 1
                    continue
                if dev.devcore != 0 and d_cores == dev.devcore and coresreq == 0:
                    counts[Reason.CARD_COMPUTE_UNITS_EXHAUSTED] += 1
                    continue
            if pod_ok is not None and not pod_ok(dev, earlier):
                counts[Reason.CARD_NOT_FOUND_CUSTOM_FILTER_RULE] += 1
                continue
            pick = _Pick(pos=p, quota_mem_mib=memreq, mem_mib=memreq, cores=coresreq)
            if is_mig:
                mig_pick = self._mig_pick(p, partial, memreq, (d_used, d_mem, d_cores))
                if mig_pick is None:
                    counts[Reason.CARD_MIG_TOPOLOGY_INFEASIBLE] += 1
                    continue
                pick = mig_pick
            partial.append(pick)
            if topology:
                continue
            remaining -= 1
            if remaining == 0:
                return partial
            if is_mig:
                i -= 1  # several MIG instances can come from one GPU: look at it again

        if topology:
            chosen = (
                choice.select_set(partial, req, rules, self.snap, self.ctx.constraints)
                if sets
                else choice.select_topology(partial, req.nums, self.snap)
            )
            if chosen is not None:
                return chosen
            set_failure = getattr(rules, "set_failure", None) if sets else None  # optional: one node-wide reason
            if partial and set_failure is not None:
                return NodeRejection(node=self.snap.name, counts={set_failure: 1}, total=total, container_index=ci)
            miss = getattr(rules, "set_miss_reason", None) if sets else None
            if miss is not None:  # the vendor names a failed set choice once, only when no device said why
                if not counts:
                    counts[miss] = 1
                return NodeRejection(node=self.snap.name, counts=counts, total=total, container_index=ci)
        if partial:
            counts[Reason.ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = len(partial)
        return NodeRejection(node=self.snap.name, counts=counts, total=total, container_index=ci)

    # ----------------------------------------------------------------------------------------------------

    def _is_mig_request(self, req: ContainerRequest, typed: Sequence[int]) -> bool:
        """HAMi's ``isMIGRequest``: NVIDIA, vgpu-mode (if set) allows ``mig``, and some candidate is in MIG mode."""
        mode = self.ctx.constraints.vgpu_mode
        if req.type != NVIDIA or (mode is not None and _MIG not in mode):
            return False
        return any(self.devices[p].mode == _MIG for p in typed)

    def _quota_ok(
        self, quota: QuotaState, unit: int, where: tuple[int, Sequence[_Pick]], uuid: str, req: _Demand
    ) -> bool:
        """§8, Fit time: the pod's hypothetical total on this vendor's devices (earlier containers' devices of the
        vendor + chosen so far + this device), collapsed, within the vendor's limits. ``quota`` is
        :meth:`QuotaState.for_vendor`; ``unit`` scales its memory limit (NVIDIA's ``memoryFactor``, else 1)."""
        ci, partial = where
        vendor, memreq, coresreq = req
        devices = self.devices
        current = tuple(ContainerDevice(devices[pk.pos].id, pk.quota_mem_mib, pk.cores) for pk in partial)
        current += (ContainerDevice(uuid, memreq, coresreq),)
        earlier = tuple(tuple(d for d in ctr if d.type == vendor) for ctr in self.pod_devs[:ci])
        charges = collapse((*earlier, current), self.ctx.pod.init_count)
        return quota.admits(sum(c.mem_mib for c in charges), sum(c.cores_pct for c in charges), unit)

    def _mig_pick(self, p: int, partial: Sequence[_Pick], memreq: int, eff: tuple[int, int, int]) -> _Pick | None:
        """§6.4 step 14: a free MIG placement (dynamic, §7.1) or template slot (legacy, §7.2) for this request.

        ``eff`` is the device's (used, used memory, used cores) including this container's own instances.
        """
        dev = self.devices[p]
        used, mem, cores = eff
        base = self.snap.usages[p]
        mine = [pk for pk in partial if pk.pos == p]
        if dev.mig_profiles:
            occupied = [*base.mig_in_use, *self.pod_mig.get(p, ()), *(pk.placement for pk in mine if pk.placement)]
            got = mig.select_dynamic(dev, occupied, memreq)
            if got is None:
                return None
            profile, placement = got
            return _Pick(
                pos=p,
                quota_mem_mib=memreq,
                mem_mib=profile.memory_mib,
                cores=profile.core_pct,
                profile=profile,
                placement=placement,
            )
        geometry = base.legacy_geometry
        slots = set(base.legacy_slots)
        if p in self.pod_legacy:
            geometry, pod_slots = self.pod_legacy[p]
            slots |= pod_slots
        for pk in mine:
            if pk.legacy is not None:
                geometry = pk.legacy.geometry
                slots.add(pk.legacy.slot)
        usage = DeviceUsage(
            used=used,
            used_mem_mib=mem,
            used_cores=cores,
            mig_in_use=base.mig_in_use,
            legacy_geometry=geometry,
            legacy_slots=frozenset(slots),
        )
        choice = mig.select_legacy(dev, self.ctx.config.known_mig_geometries, usage, memreq)
        if choice is None:
            return None
        return _Pick(
            pos=p,
            quota_mem_mib=memreq,
            mem_mib=choice.template.memory_mib,
            cores=choice.template.core_pct,
            legacy=choice,
        )


def evaluate_node(ctx: PodContext, snap: NodeSnapshot) -> NodeFit | NodeRejection:
    """Fit every container of the pod on one node (init one at a time, app cumulatively), or say why not.

    The greedy walk's placement when it succeeds; when it fails after placing earlier entries, the bounded
    ``assignment.search`` over their other card choices; its refusal when no assignment is found."""
    walk = _NodeEval(ctx, snap)
    got = walk.run()
    if isinstance(got, NodeFit) or not walk.picked:  # nothing earlier could have chosen other cards
        return got
    return assignment.search_node(ctx, snap, got, walk.stuck(), functools.partial(_steered, ctx, snap))


def _steered(ctx: PodContext, snap: NodeSnapshot, bans: assignment.Bans) -> NodeFit | assignment.Stuck:
    """The greedy walk with ``bans``: the pod fitted, or where it stuck."""
    walk = _NodeEval(ctx, snap, bans)
    got = walk.run()
    return got if isinstance(got, NodeFit) else walk.stuck()
