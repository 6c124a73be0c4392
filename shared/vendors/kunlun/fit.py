"""Kunlunxin ``Fit``: the board's selection and score for whole XPUs and vXPUs (:class:`KunlunRules`,
:class:`VxpuRules`), and their UUID selectors. Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from vgpu_scheduler.shared.codec._go import fail
from vgpu_scheduler.shared.domain.model import (
    ContainerRequest,
    DeviceInfo,
    NodeInventory,
    NodePolicy,
    PodConstraints,
    PodDevices,
    Reason,
    Selectors,
)
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.domain.vendor import DeviceRules, Take
from vgpu_scheduler.shared.vendors.kunlun.keys import NAME, VXPU_NAME, WING
from vgpu_scheduler.shared.vendors.kunlun.topology import (
    _OTHER_STEP_SCORE,
    _STEP_SCORES,
    _bubble,
    _count_bubble,
    graph_select,
    score_node,
)
from vgpu_scheduler.shared.vendors.simple import UuidOnlyRules


def _both_uuid_lists(annotations: Mapping[str, str], pairs: Sequence[tuple[str, str]]) -> Selectors:
    """UUID selectors from several (use, nouse) annotation pairs, all applying: the use lists intersect, the nouse
    lists add up. A use list that names nothing, or use lists that share no UUID, match no device: DecodeError."""
    use: frozenset[str] | None = None
    nouse: set[str] = set()
    for use_key, nouse_key in pairs:
        for key in (use_key, nouse_key):
            value = annotations.get(key)
            if value is not None and not isinstance(value, str):
                fail(key, f"annotation value must be a string, got {type(value).__name__}")
        raw = annotations.get(use_key)
        if raw is not None:
            ids = frozenset(u.strip() for u in raw.split(",") if u.strip())
            if raw.strip() and not ids:
                fail(use_key, "list holds no UUID, so no device could ever match", raw)
            if ids:
                if use is not None and not use & ids:
                    fail(use_key, f"shares no UUID with the other use list ({','.join(sorted(use))})", raw)
                use = ids if use is None else use & ids
        raw = annotations.get(nouse_key)
        if raw is not None:
            nouse |= {u.strip() for u in raw.split(",") if u.strip()}
    return Selectors(use_uuids=use or frozenset(), nouse_uuids=frozenset(nouse))


@dataclass(frozen=True, slots=True)
class BoardRules(UuidOnlyRules):
    """What both halves' ``Fit`` share: the common checks (health, cordon, UUID, slots, ``mutex``), then the
    half's own test of an XPU (:meth:`device_fits`, silent), and the set chosen by :func:`graph_select` among the
    XPUs that passed. No set: ``NumaNotFit`` once, when no XPU gave a reason of its own. Whole XPUs by default."""

    set_miss_reason: Reason = Reason.NUMA_NOT_FIT

    @property
    def selects_sets(self) -> bool:
        return True

    def device_fits(self, dev: DeviceInfo, req: ContainerRequest, used: int, used_mem_mib: int) -> bool:
        del dev, req, used_mem_mib
        return used == 0

    def take(self, dev: DeviceInfo, req: ContainerRequest, used_mem_mib: int) -> Take:
        del req, used_mem_mib
        return Take(dev.devmem_mib, dev.devcore)

    def select(
        self, candidates: Sequence[DeviceInfo], nums: int, inventory: NodeInventory
    ) -> Sequence[DeviceInfo] | None:
        free = {d.id for d in candidates}
        board = [d for d in inventory.devices if d.vendor == self.name]
        chosen = graph_select([(d.index, d.id in free) for d in board], nums)
        by_index = {d.index: d for d in board if d.id in free}
        picked = [by_index[i] for i in chosen if i in by_index]
        return picked if chosen and len(picked) == nums else None


def score_range(snap: NodeSnapshot, requests: Sequence[ContainerRequest]) -> tuple[float, float]:
    """The least and the most :func:`score_node` can give a pod of ``requests`` (its whole-XPU entries) on
    ``snap``, whatever XPUs it gets there: 0 and 0 on a node with another family's device; else the
    :func:`score_fragmentation` of every way to place between the largest container's count and the pod's total
    count of XPUs on the node's idle XPUs (so many in the left wing, the rest in the right), against its busy ones.
    Cheap (one pass over the node's devices), and sound whatever the selectors, cordons or health leave free; 0
    and 0 when no placement is possible (the pod does not fit there)."""
    devices = snap.inventory.devices
    wants = [r.nums for r in requests if r.type == NAME and not r.empty]
    if not wants or any(NAME not in d.type for d in devices):
        return 0.0, 0.0
    busy: set[int] = set()
    idle: set[int] = set()
    board: list[int] = []
    for d, u in zip(devices, snap.usages, strict=True):
        if u.used > 0:
            busy.add(d.index)
        elif d.vendor == NAME:
            idle.add(d.index)
        if d.vendor == NAME:
            board.append(d.index)
    left = sum(1 for i in idle if i < WING)
    right = len(idle) - left
    # distinct indexes: a container of n XPUs covers n of them (HAMi's board), fewer only on a malformed one
    fewest = max(wants) if len(set(board)) == len(board) else 1
    before = _count_bubble(sorted(busy))
    terms = [
        _STEP_SCORES.get(_bubble(lw, count - lw) - before, _OTHER_STEP_SCORE)
        for count in range(fewest, min(sum(wants), left + right) + 1)
        for lw in range(max(0, count - right), min(left, count) + 1)
    ]
    return (min(terms), max(terms)) if terms else (0.0, 0.0)


@dataclass(frozen=True, slots=True)
class KunlunRules(BoardRules):
    """Whole-XPU ``Fit``: an XPU passes only when idle (HAMi's ``FitXPU``) and is taken whole. The node's score
    gets HAMi's ``ScoreNode`` term for the XPUs the pod gets there (:meth:`pod_score`), bounded per node by
    :meth:`pod_score_bound`, so the plan fits only the nodes that could still win."""

    def pod_score(
        self, snap: NodeSnapshot, devices: PodDevices, policy: NodePolicy, constraints: PodConstraints
    ) -> float:
        """:func:`score_node` of the node's devices before the pod and the pod's XPUs (0 when it got none), added
        under either node policy (HAMi's spread takes the lowest sum, so there the node that fragments most)."""
        del policy, constraints
        inventory = snap.inventory
        index = {d.id: d.index for d in inventory.devices}
        mine = [[(d.type, index[d.uuid]) for d in ctr if d.type == self.name and d.uuid in index] for ctr in devices]
        if not any(mine):
            return 0.0
        previous = [(d.type, d.index, u.used) for d, u in zip(inventory.devices, snap.usages, strict=True)]
        return score_node(previous, mine)

    def pod_score_bound(
        self, snap: NodeSnapshot, requests: Sequence[ContainerRequest], policy: NodePolicy, constraints: PodConstraints
    ) -> float:
        """The most :meth:`pod_score` can move the node ahead (:func:`score_range`): binpack, which ranks the
        highest total first, the largest term; spread, the lowest first, minus the least term (at most 0: the
        term only ever moves a node back there)."""
        del constraints
        low, high = score_range(snap, requests)
        return high if policy is NodePolicy.BINPACK else -low


@dataclass(frozen=True, slots=True)
class VxpuRules(BoardRules):
    """vXPU ``Fit``: an XPU passes when its memory holds the request and it is idle or holds vXPUs of exactly the
    requested size (HAMi's ``FitVXPU``: the average of what it holds); the vXPU takes its memory and cores. No
    node score (HAMi's is 0). Its charges are ``uniform``, so the atomic reserve re-checks the size rule against
    a reservation another replica made meanwhile."""

    uniform_share: bool = True

    def device_fits(self, dev: DeviceInfo, req: ContainerRequest, used: int, used_mem_mib: int) -> bool:
        if req.mem_mib + used_mem_mib > dev.devmem_mib:
            return False
        return used == 0 or used_mem_mib // used == req.mem_mib

    def take(self, dev: DeviceInfo, req: ContainerRequest, used_mem_mib: int) -> Take:
        del dev, used_mem_mib
        return Take(req.mem_mib, req.cores_pct)


KUNLUN_RULES: DeviceRules = KunlunRules(NAME)
VXPU_RULES: DeviceRules = VxpuRules(VXPU_NAME)
