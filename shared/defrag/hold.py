"""The hold of a defragmentation plan: the helped pod's devices reserved on its node before the first eviction.

It is the preemption hold (docs/preemption.md, :func:`~shared.preemption.hold_devices`): the pod's reservation is
made on the plan's node and cards with the charges of the pods moved off that node counted as freed, while they
stay in the node's usage until the informer releases each one as it goes. No pod filtered meanwhile (a moved pod's
replacement included) can take the room, and ``/filter`` answers the pod "waiting for N preempted pod(s)" until the
moved pods have left, then its reserved node.

The devices are chosen again here, by the scheduler's own :func:`~shared.domain.plan.plan` on the node's current
snapshot with the moved pods' charges released and every card but the plan's set aside (marked cordoned): the
reservation then carries exactly the charges ``/filter`` would have computed, and a node that changed since the
plan so that the pod no longer fits on those cards refuses the hold before anything is evicted.

A plan that frees cards (no pod waits for them) holds them too while it runs (:func:`prepare_card_holds`): per
node, a reservation for a stand-in pod asking for each freed card whole (all of its memory and cores), under a
UID and name of its own (``defrag-cards-<token>``, in the namespace of the node's first move), so that the moved
pods' replacements cannot land back on them. The run releases it when it ends; a run that dies leaves it to the
informer's ``--reservation-grace`` expiry (no such pod exists).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from vgpu_scheduler.shared.domain.allocation import Allocation
from vgpu_scheduler.shared.domain.defragmodel import Move, Target
from vgpu_scheduler.shared.domain.model import (
    NVIDIA,
    ContainerRequest,
    DeviceCharge,
    NvidiaConfig,
    PodConstraints,
    PodRequest,
)
from vgpu_scheduler.shared.domain.plan import Decision, plan
from vgpu_scheduler.shared.domain.preempt import release_charges
from vgpu_scheduler.shared.domain.scoring import Policies, effective_policy
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.domain.vendor import RuleSet
from vgpu_scheduler.shared.errors import DecodeError, NotFoundError
from vgpu_scheduler.shared.k8s import Api
from vgpu_scheduler.shared.k8s.objects import annotations_of, uid_of
from vgpu_scheduler.shared.preemption import TERMINAL_PHASES, hold_devices
from vgpu_scheduler.shared.store import Owned, QuotaExceeded, ReserveConflict, Reserved, ReserveResult, Store
from vgpu_scheduler.shared.vendors.pods import decode_vendor_constraints, vendors_pod_request
from vgpu_scheduler.shared.vendors.registry import Vendors


@dataclass(frozen=True, slots=True)
class Hold:
    """The helped pod's devices on ``node``, and the moved pods (UIDs) whose charges there count as freed."""

    namespace: str
    name: str
    uid: str
    node: str
    devices: tuple[str, ...]
    victims: tuple[str, ...]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Placement:
    """What the hold needs to know about the cluster: the vendors, the NVIDIA config and the policies the
    scheduler runs with (the extender's ``--node-scheduler-policy`` and ``--gpu-scheduler-policy``)."""

    vendors: Vendors
    nvidia: NvidiaConfig
    policies: Policies


def fit_on_cards(
    request: PodRequest,
    constraints: PodConstraints,
    snapshot: NodeSnapshot,
    freed: Sequence[DeviceCharge],
    cards: Collection[str],
    *,
    policies: Policies,
    config: NvidiaConfig,
    rules: RuleSet,
) -> Decision | str:
    """Where the pod goes on ``snapshot``'s node once ``freed`` charges are gone, using only ``cards`` (the
    module docstring); the node's failure reason when it does not fit."""
    released = release_charges(snapshot, freed)
    inventory = released.inventory
    aside = frozenset(d.id for d in inventory.devices if d.id not in cards)
    only = NodeSnapshot(dataclasses.replace(inventory, cordoned=inventory.cordoned | aside), released.usage)
    result = plan(request, constraints, [only], policies=policies, config=config, rules=rules)
    if isinstance(result, Decision):
        return result
    return result.reasons.get(snapshot.name, "does not fit")


async def prepare_hold(
    target: Target, moves: Sequence[Move], *, api: Api, store: Store, placement: Placement, reserve: bool
) -> Hold | str:
    """Check that ``target`` still waits and fits on its cards once ``moves`` are made; with ``reserve`` hold the
    cards for it (:func:`~shared.preemption.hold_devices`). A string says why not; then nothing is held."""
    key = f"{target.namespace}/{target.name}"
    try:
        pod = await api.get_pod(target.namespace, target.name)
    except NotFoundError:
        return f"pod {key} no longer exists"
    if target.uid and uid_of(pod) != target.uid:
        return f"pod {key} was re-created since the plan (uid {uid_of(pod)}, planned {target.uid})"
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    if spec.get("nodeName"):
        return f"pod {key} is already bound to node {spec['nodeName']}"
    if status.get("phase") in TERMINAL_PHASES:
        return f"pod {key} has ended ({status.get('phase')})"
    try:
        request = vendors_pod_request(pod, placement.vendors)
        constraints = decode_vendor_constraints(
            {str(k): str(v) for k, v in annotations_of(pod).items()}, placement.vendors
        )
    except DecodeError as e:
        return f"pod {key}: {e}"
    cards = tuple(sorted({uuid for ctr in target.devices for uuid in ctr}))
    victims = tuple(m.uid for m in moves if m.source == target.node)
    hold = Hold(target.namespace, target.name, uid_of(pod), target.node, cards, victims)
    mutex = effective_policy(placement.policies, constraints).mutex
    why = await _place(hold, request, constraints, store=store, placement=placement, mutex=mutex, reserve=reserve)
    if why is not None:
        return f"pod {key} {why}"
    return hold


async def prepare_card_holds(
    moves: Sequence[Move], freed: Sequence[tuple[str, str]], *, store: Store, placement: Placement, token: str
) -> list[Hold] | str:
    """Hold the ``freed`` ``(node, card)`` of a plan without a waiting pod (module docstring): one stand-in pod per
    node, named ``defrag-cards-<token>``, asking for each of the node's freed cards whole. A string says why not;
    then nothing is held."""
    by_node: dict[str, set[str]] = {}
    for node, card in freed:
        by_node.setdefault(node, set()).add(card)
    holds: list[Hold] = []
    for node, cards in sorted(by_node.items()):
        namespace = next((m.namespace for m in moves if m.source == node), "default")
        victims = tuple(m.uid for m in moves if m.source == node)
        name = f"defrag-cards-{token}"
        hold = Hold(namespace, name, f"{name}-{node}", node, tuple(sorted(cards)), victims)
        state = (await store.snapshots.load([node])).get(node)
        registered = state.inventory.devices if state is not None and state.inventory is not None else ()
        vendor = next((d.vendor for d in registered if d.id in cards), NVIDIA)
        each = ContainerRequest(nums=len(cards), mem_pct=100, cores_pct=100, type=vendor)
        whole = PodRequest(containers=(each,), init_count=0)
        why = await _place(hold, whole, PodConstraints(), store=store, placement=placement, mutex=True, reserve=True)
        if why is not None:
            for done in holds:
                await release_hold(store, done)
            return f"a hold of the cards to free {why}"
        holds.append(hold)
    return holds


async def _place(
    hold: Hold,
    request: PodRequest,
    constraints: PodConstraints,
    *,
    store: Store,
    placement: Placement,
    mutex: bool,
    reserve: bool,
) -> str | None:
    """Fit ``request`` on ``hold``'s cards once its victims' charges are freed and, with ``reserve``, hold them
    (:func:`~shared.preemption.hold_devices`); why not, else None."""
    state = (await store.snapshots.load([hold.node])).get(hold.node)
    snapshot = state.snapshot() if state is not None and state.error is None else None
    if snapshot is None:
        return f"cannot be placed: node {hold.node} is not registered in the store (or its data is unreadable)"
    freed: list[DeviceCharge] = [
        c
        for r in await store.reservations.list_by_node(hold.node)
        if r.allocation.pod_uid in hold.victims
        for c in r.allocation.charges
    ]
    decision = fit_on_cards(
        request,
        constraints,
        snapshot,
        freed,
        hold.devices,
        policies=placement.policies,
        config=placement.nvidia,
        rules=placement.vendors.rules,
    )
    if not isinstance(decision, Decision):
        return f"does not fit on node {hold.node}'s cards {', '.join(hold.devices)} once moved: {decision}"
    if not reserve:
        return None
    allocation = Allocation(
        pod_uid=hold.uid,
        namespace=hold.namespace,
        name=hold.name,
        node=hold.node,
        devices=decision.devices,
        charges=decision.charges,
        mig=decision.mig,
    )
    held = await hold_devices(
        store,
        allocation,
        victims=hold.victims,
        mutex=mutex,
        mem_limit_factor=placement.nvidia.memory_factor,
        vendor_names=placement.vendors.names,
    )
    return None if isinstance(held, Reserved) else f"could not be held on node {hold.node}: {_refusal(held)}"


def _refusal(answer: ReserveResult | QuotaExceeded) -> str:
    if isinstance(answer, QuotaExceeded):
        return (
            f"the namespace's quota ({answer.vendor} {answer.dimension.value}: limit {answer.limit}, "
            f"used {answer.used}, the pod needs {answer.needed})"
        )
    if isinstance(answer, ReserveConflict):
        return f"{answer.dimension.value} of {answer.device}: needs {answer.needed}, {answer.free} free"
    if isinstance(answer, Owned):
        return f"the pod already holds devices on node {answer.node} ({answer.state.value})"
    return repr(answer)


async def release_hold(store: Store, hold: Hold) -> bool:
    """Give the hold back (its quota charge too) unless a bind has taken it; True when released."""
    released = await store.reservations.release_unowned(hold.uid, hold.node)
    if released is True:
        await store.quota.refund(hold.namespace, hold.uid)
        return True
    return False


async def moved_pods_left(store: Store, hold: Hold) -> int:
    """How many of the moved pods still hold their charges on the hold's node."""
    return await store.reservations.preemption_waiting(hold.uid, hold.node, cleanup=False)
