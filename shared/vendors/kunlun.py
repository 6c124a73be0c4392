"""Kunlunxin XPUs as vendors (HAMi's ``pkg/device/kunlun``): whole XPUs (common word ``kunlun``) and vXPUs
(common word ``XPU``), both configured by the ``kunlun:`` section, pure.

What a Kunlunxin pod and node look like on the wire (docs/vendors/kunlunxin.md):

* **whole XPUs** (``device.go``): one resource, ``kunlunxin.com/xpu`` (the number of XPUs; the section's
  ``resourceCountName``). Registration from **node capacity**: ``capacity[kunlunxin.com/xpu]`` XPUs
  ``<node>-kunlun-<i>``, type ``kunlun``, 98304 MiB, 100 cores, 100 slots, the first half on NUMA node 0 and the
  rest on NUMA node 1; no handshake (HAMi's ``CheckHealth`` always says healthy). An XPU is taken whole (its
  memory and cores in the pod's entry) and only when idle. Pod annotations ``hami.io/kunlun-allocated`` (no
  to-allocate list) and ``BAIDU_COM_DEVICE_IDX`` (the XPUs' indexes, ``,`` within a container, ``;`` between
  containers); **no node lock**; UUID selectors ``baidu.com/use-gpuuuid`` / ``nouse-gpuuuid`` and
  ``hami.io/use-xpu-uuid`` / ``no-use-xpu-uuid`` (both pairs apply).
* **vXPUs** (``vdevice.go``): ``kunlunxin.com/vxpu`` (count) and ``kunlunxin.com/vxpu-memory`` (MiB, rounded up to
  a quarter, a half or the whole 98304 MiB XPU: 24576, 49152, 98304; cores are the same share: 25, 50, 100; no
  memory: the whole XPU). Registration ``hami.io/node-register-xpu`` (HAMi's JSON), liveness through the
  ``hami.io/node-handshake-xpu`` handshake. An XPU already shared takes only vXPUs of the size it holds.
  Pod device lists ``hami.io/xpu-devices-to-allocate`` = ``hami.io/xpu-devices-allocated``, the shared node lock
  ``hami.io/mutex.lock``, selectors ``hami.io/use-xpu-uuid`` / ``hami.io/no-use-xpu-uuid``.

Both choose the XPUs of a request by the 8-XPU board's topology (HAMi's ``graghSelect``, :func:`graph_select`):
1, 2, 4 or 8 XPUs only, from the half-board (wing) whose free XPUs fit the request most tightly, else along the
board's interconnect; any other count never fits. A refusal with no device-level reason is ``NumaNotFit``.
On by default, as in HAMi (:data:`ENABLE_FLAG` is None).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from vgpu_scheduler.shared.codec._go import fail
from vgpu_scheduler.shared.codec.register import encode_register_json
from vgpu_scheduler.shared.codec.resources import (
    QuantityKind,
    RequestReader,
    ResourceRequestError,
    container_label,
    container_lists,
    raw_value,
)
from vgpu_scheduler.shared.domain.model import (
    EMPTY_REQUEST,
    MEM_PCT_UNSET,
    ContainerDevice,
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
from vgpu_scheduler.shared.errors import ConfigError
from vgpu_scheduler.shared.vendors.base import NodeLockKind, ResourceNames
from vgpu_scheduler.shared.vendors.capacity import count_in_limits, count_registration, observe_count
from vgpu_scheduler.shared.vendors.common import names_section, reader_config
from vgpu_scheduler.shared.vendors.described import DescribedVendor, Description
from vgpu_scheduler.shared.vendors.registration import (
    HANDSHAKE_TIMEOUT_S,
    NodeView,
    Observation,
)
from vgpu_scheduler.shared.vendors.simple import UuidOnlyRules, count_only_request, decode_json

SECTION: Final = "kunlun"
"""The device-config section that configures both vendors."""

ENABLE_FLAG: Final[str | None] = None
"""HAMi v2.10 initialises both Kunlunxin vendors whatever its device config holds: no flag enables them."""

# ---- whole XPUs (device.go) ----------------------------------------------------------------------------------
NAME: Final = "kunlun"
"""HAMi's common word (and device type) of whole XPUs."""
ALLOCATED_KEY: Final = "hami.io/kunlun-allocated"
DEVICE_IDX_KEY: Final = "BAIDU_COM_DEVICE_IDX"
"""The pod annotation the Kunlunxin device plugin reads the XPUs' indexes from."""
USE_UUID: Final = "baidu.com/use-gpuuuid"
NOUSE_UUID: Final = "baidu.com/nouse-gpuuuid"
XPU_MEMORY_MIB: Final = 98304
"""Every XPU's memory, as HAMi registers it (``KunlunMaxMemory``)."""
XPU_CORES: Final = 100
XPU_SLOTS: Final = 100
_ID_INFIX: Final = "-kunlun-"

# ---- vXPUs (vdevice.go) --------------------------------------------------------------------------------------
VXPU_NAME: Final = "XPU"
"""HAMi's common word of vXPUs."""
VXPU_REGISTER_KEY: Final = "hami.io/node-register-xpu"
VXPU_HANDSHAKE_KEY: Final = "hami.io/node-handshake-xpu"
VXPU_TO_ALLOCATE_KEY: Final = "hami.io/xpu-devices-to-allocate"
VXPU_ALLOCATED_KEY: Final = "hami.io/xpu-devices-allocated"
VXPU_USE_UUID: Final = "hami.io/use-xpu-uuid"
VXPU_NOUSE_UUID: Final = "hami.io/no-use-xpu-uuid"
VXPU_SIZES_MIB: Final = (24576, 49152, XPU_MEMORY_MIB)
"""The memory a vXPU may have: a quarter, a half or the whole XPU (HAMi's ``trimMemory`` templates)."""

# ---- the board's topology (device.go constants) --------------------------------------------------------------
WING: Final = 4
"""XPUs per half-board: positions 0–3 are the left wing, 4–7 the right."""
BOARD: Final = 8
INTER_GROUP_PAIRS: Final = ((0, 4), (1, 5), (2, 6), (3, 7))
"""``InterGroupConnection``: the links between the wings."""
GROUP_PAIRS: Final = ((0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3), (4, 5), (4, 6), (4, 7), (5, 6), (5, 7), (6, 7))
"""``GroupConnection``: the links inside a wing."""
QUADS: Final = ((0, 1, 4, 5), (2, 3, 6, 7), (0, 2, 4, 6), (1, 3, 5, 7), (0, 3, 4, 7), (1, 2, 5, 6))
"""``InterGroupConnection2``: the 4-XPU groups across the wings."""
_ODD_ORDER: Final = (1, 3, 2, 4)
"""The free-XPU counts of a wing a 1-XPU request prefers, in order (HAMi's ``oddorder``)."""


@dataclass(frozen=True, slots=True)
class KunlunConfig:
    """The ``kunlun:`` section (HAMi's ``KunlunConfig``): the whole-XPU count name and the vXPU names."""

    resource_count_name: str = "kunlunxin.com/xpu"
    resource_vcount_name: str = "kunlunxin.com/vxpu"
    resource_vmemory_name: str = "kunlunxin.com/vxpu-memory"


_KEYS: Mapping[str, str] = {
    "resourceCountName": "resource_count_name",
    "resourceVCountName": "resource_vcount_name",
    "resourceVMemoryName": "resource_vmemory_name",
}


_REQUIRED: Mapping[str, str] = {
    "resourceVCountName": "it is how a container asks for vXPUs",
    "resourceVMemoryName": "it is how a vXPU's memory is asked",
}


def parse_config(section: object) -> KunlunConfig:
    """Validate the ``kunlun:`` section; absent keys keep HAMi's defaults. The vXPU names must not be empty either
    (they are how a container asks for vXPUs), and the three names must differ. ConfigError names the key path."""
    config = KunlunConfig(**names_section(section, SECTION, _KEYS, unit="XPUs", required=_REQUIRED))
    names = [config.resource_count_name, config.resource_vcount_name, config.resource_vmemory_name]
    if len({n for n in names if n}) != len([n for n in names if n]):
        raise ConfigError(f"{SECTION}: the resource names must differ, got {', '.join(names)}")
    return config


def build(section: object) -> tuple[KunlunVendor, KunlunVxpuVendor]:
    """Both vendors the ``kunlun:`` section configures (``None`` or ``{}``: HAMi's defaults)."""
    config = parse_config(section)
    return KunlunVendor(config), KunlunVxpuVendor(config)


# ------------------------------------------------------------------------------------------------------------
# The board's topology (topo.go)
# ------------------------------------------------------------------------------------------------------------


def _can_meet(have: Sequence[int], want: Sequence[int]) -> bool:
    """Every index of ``want`` is in ``have`` (HAMi's ``canMeet``)."""
    return set(want) <= set(have)


def _delta(have: Sequence[int], want: Sequence[int]) -> list[int]:
    """``have`` without the indexes of ``want``, in order (HAMi's ``delta``)."""
    drop = set(want)
    return [v for v in have if v not in drop]


def _pick(indexes: Sequence[int], free: Sequence[bool], start: int, nums: int) -> list[int]:
    """The first ``nums`` free XPUs from position ``start`` (HAMi's ``devicepick``; fewer when there are not)."""
    out: list[int] = []
    for pos in range(start, len(indexes)):
        if free[pos]:
            out.append(indexes[pos])
            if len(out) == nums:
                break
    return out


def _interconnect(indexes: Sequence[int], free: Sequence[bool], nums: int) -> list[int]:
    """HAMi's ``interconnect``: 2 XPUs linked across the wings, or a 4-XPU cross-wing group (with 6 free XPUs,
    one that leaves a linked pair free when there is one)."""
    if nums == 2:
        present = [i for i, f in zip(indexes, free, strict=True) if f]
        for a in present:
            for b in present:
                if a != b and any({a, b} == {lw, rw} for lw, rw in INTER_GROUP_PAIRS):
                    return [a, b]
    if nums == 4:
        unused = [i for i, f in zip(indexes, free, strict=True) if f]
        if len(unused) in (4, 5):
            for quad in QUADS:
                if _can_meet(unused, quad):
                    return list(quad)
        if len(unused) == 6:
            found: list[int] = []
            for quad in QUADS:
                if _can_meet(unused, quad):
                    found = list(quad)
                    rest = _delta(unused, quad)
                    if any(_can_meet(rest, pair) for pair in (*INTER_GROUP_PAIRS, *GROUP_PAIRS)):
                        return found
            return found
    return []


def graph_select(board: Sequence[tuple[int, bool]], nums: int) -> list[int]:
    """HAMi's ``graghSelect``: the indexes of the XPUs a request for ``nums`` takes, from ``board`` = every XPU of
    the node as ``(index, free)`` (sorted by index here, whatever order it comes in); ``[]`` when none fits.

    8: the whole board, only when all 8 are free. 1, 2, 4: when a wing (positions 0–3 or 4–7) has enough free
    XPUs, the wing whose free count is tightest (1-XPU requests prefer a wing with 1, then 3, 2, 4 free; others
    the smallest count from ``nums`` up; left before right), its first free XPUs; otherwise along the board's
    interconnect (:func:`_interconnect`). Any other count: ``[]``."""
    ordered = sorted(board, key=lambda b: b[0])
    indexes = [i for i, _ in ordered]
    free = [f for _, f in ordered]
    left = sum(1 for pos, f in enumerate(free) if f and pos < WING)
    right = sum(1 for pos, f in enumerate(free) if f and pos >= WING)
    if nums == BOARD:
        return list(range(BOARD)) if left + right == BOARD else []
    if nums in (1, 2, 4):
        if left >= nums or right >= nums:
            for slots in range(nums, WING + 1):
                want = _ODD_ORDER[slots - 1] if nums % 2 == 1 else slots
                if left == want:
                    return _pick(indexes, free, 0, nums)
                if right == want:
                    return _pick(indexes, free, WING, nums)
        return _interconnect(indexes, free, nums)
    return []


def _count_bubble(indexes: Sequence[int]) -> int:
    """HAMi's ``countbubble``: how fragmented a set of busy XPUs leaves the wings (a full or empty wing: 0 or 1,
    one XPU: 2, else 1, summed over both wings; 1 for none)."""

    left = sum(1 for i in indexes if i < WING)
    return _bubble(left, len(indexes) - left)


def _bubble(left: int, right: int) -> int:
    """:func:`_count_bubble` of ``left`` XPUs in the left wing and ``right`` in the right one."""

    def value(n: int) -> int:
        return 0 if n == WING else 2 if n == 1 else 1

    if left == 0 and right == 0:
        return 1
    return value(left) + value(right)


_STEP_SCORES: Final[Mapping[int, float]] = {-1: 3000.0, 0: 2000.0, 1: 1000.0, 2: 0.0}
_OTHER_STEP_SCORE: Final = 1000.0


def score_fragmentation(previous: Sequence[int], current: Sequence[int]) -> float:
    """HAMi's ``calcscore``: the node score a pod's XPUs (``current`` indexes) get against the node's busy XPUs
    before it (``previous``): 3000 when they fragment the board one step less, 2000 the same, 1000 one step
    more, 0 two steps more (1000 otherwise)."""
    step = _count_bubble(current) - _count_bubble(previous)
    return _STEP_SCORES.get(step, _OTHER_STEP_SCORE)


def score_node(previous: Sequence[tuple[str, int, int]], pod: Sequence[Sequence[tuple[str, int]]]) -> float:
    """HAMi's whole-XPU ``ScoreNode``: ``previous`` = the node's devices as ``(type, index, used)``, ``pod`` = the
    pod's devices per container as ``(type, index)``; 0 when any of them is not a Kunlunxin XPU (the type
    contains ``kunlun``), else :func:`score_fragmentation` of the busy indexes and the pod's. The plan adds it to
    the node's score through :meth:`KunlunRules.pod_score`."""
    prev: list[int] = []
    cur: list[int] = []
    for kind, index, used in previous:
        if NAME not in kind:
            return 0.0
        if used > 0 and index not in prev:
            prev.append(index)
    for ctr in pod:
        for kind, index in ctr:
            if NAME not in kind:
                return 0.0
            if index not in cur:
                cur.append(index)
    return score_fragmentation(prev, cur)


# ------------------------------------------------------------------------------------------------------------
# Fit
# ------------------------------------------------------------------------------------------------------------


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
        self,
        snap: NodeSnapshot,
        devices: Sequence[Sequence[ContainerDevice]],
        policy: NodePolicy,
        constraints: PodConstraints,
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


# ------------------------------------------------------------------------------------------------------------
# Registration
# ------------------------------------------------------------------------------------------------------------


def devices_from_capacity(node: str, cards: int) -> tuple[DeviceInfo, ...]:
    """HAMi's whole-XPU ``GetNodeDevices``: ``cards`` XPUs ``<node>-kunlun-<i>``, the first ``cards // 2`` on
    NUMA node 0 and the others on NUMA node 1."""
    return tuple(
        DeviceInfo(
            f"{node}{_ID_INFIX}{i}",
            i,
            XPU_SLOTS,
            XPU_MEMORY_MIB,
            XPU_CORES,
            NAME,
            1 if i >= cards // 2 else 0,
            "",
            True,
            vendor=NAME,
        )
        for i in range(cards)
    )


def xpu_index(uuid: str) -> int | None:
    """The index HAMi encodes in a whole XPU's id ``<node>-kunlun-<i>`` (None for another id)."""
    _, sep, tail = uuid.rpartition(_ID_INFIX)
    return int(tail) if sep and tail.isascii() and tail.isdigit() else None


def decode_vxpu_register(value: str) -> tuple[DeviceInfo, ...]:
    """``hami.io/node-register-xpu`` → the node's XPUs for vXPUs (HAMi's JSON only)."""
    return decode_json(value, VXPU_REGISTER_KEY, VXPU_NAME)


def trim_memory(mib: int) -> int:
    """HAMi's ``trimMemory``: the smallest vXPU size holding ``mib`` (the whole XPU beyond a half)."""
    return next((s for s in VXPU_SIZES_MIB if mib <= s), XPU_MEMORY_MIB)


# ------------------------------------------------------------------------------------------------------------
# The vendors
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KunlunVendor(DescribedVendor):
    """Whole Kunlunxin XPUs (see the module docstring)."""

    description = Description(name=NAME, rules=KUNLUN_RULES, allocated_key=ALLOCATED_KEY, node_lock=NodeLockKind.NONE)

    config: KunlunConfig = dataclasses.field(default_factory=KunlunConfig)

    @property
    def resources(self) -> ResourceNames:
        return ResourceNames(count=self.config.resource_count_name)

    def container_request(self, container: Mapping[str, Any], what: str) -> ContainerRequest:
        """HAMi's ``GenerateResourceRequests``: the count from the limits, else the requests; 100 % of each XPU's
        memory, no cores. A bad quantity is a ResourceRequestError."""
        return count_only_request(container, what, self.config.resource_count_name, NAME)

    def mutate_container(self, container: dict[str, Any], where: str) -> bool:
        """HAMi's ``MutateAdmission``: no edit; ours when the count is in the limits (validated here)."""
        return count_in_limits(container, where, self.config.resource_count_name, self.container_request)

    def selectors(self, annotations: Mapping[str, str]) -> Selectors:
        """Both UUID pairs (HAMi v2.10 checks ``hami.io/use-xpu-uuid`` and ``baidu.com/use-gpuuuid`` alike)."""
        return _both_uuid_lists(annotations, ((VXPU_USE_UUID, VXPU_NOUSE_UUID), (USE_UUID, NOUSE_UUID)))

    def observe(self, node: NodeView, now_local: datetime, *, reported_before: bool = False) -> Observation:
        """Registration from ``status.capacity[kunlunxin.com/xpu]``: absent → not registered; not a whole number
        → invalid; 0 → not registered (HAMi's "device not found"); else that many XPUs, healthy (HAMi's
        ``CheckHealth`` always says so). Cordoned XPUs from ``hami.io/device-cordon``."""
        del now_local, reported_before
        return observe_count(
            node,
            vendor=NAME,
            count_name=self.config.resource_count_name,
            top=2**31 - 1,
            expected="expected a whole number from 0 to 2^31-1",
            devices=devices_from_capacity,
        )

    def node_registration(self, devices: Sequence[DeviceInfo]) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
        """What the Kunlunxin device plugin advertises for ``devices``: their number as the count resource. Only
        XPUs as HAMi registers them (98304 MiB, 100 cores, 100 slots) survive the round trip."""
        return count_registration(
            devices,
            self.config.resource_count_name,
            shape=(XPU_MEMORY_MIB, XPU_CORES, XPU_SLOTS),
            refusal="Kunlunxin XPUs register by count only: each has 98304 MiB, 100 cores and 100 slots",
        )

    def extra_pod_annotations(self, devices: PodDevices, now_unix: int) -> Mapping[str, str]:
        """``BAIDU_COM_DEVICE_IDX``: each container's XPU indexes joined by ``,``, the containers joined by ``;``
        (one entry per container, empty where it has none); nothing when the pod has no XPU."""
        del now_unix
        if not any(devices):
            return {}
        parts = [",".join(str(i) for d in ctr if (i := xpu_index(d.uuid)) is not None) for ctr in devices]
        return {DEVICE_IDX_KEY: ";".join(parts)}


@dataclass(frozen=True, slots=True)
class KunlunVxpuVendor(DescribedVendor):
    """Kunlunxin vXPUs (see the module docstring)."""

    description = Description(
        name=VXPU_NAME,
        rules=VXPU_RULES,
        allocated_key=VXPU_ALLOCATED_KEY,
        to_allocate_key=VXPU_TO_ALLOCATE_KEY,
        register_key=VXPU_REGISTER_KEY,
        handshake_key=VXPU_HANDSHAKE_KEY,
        use_uuid=VXPU_USE_UUID,
        nouse_uuid=VXPU_NOUSE_UUID,
        decode_register=decode_vxpu_register,
    )

    config: KunlunConfig = dataclasses.field(default_factory=KunlunConfig)
    handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S

    @property
    def resources(self) -> ResourceNames:
        c = self.config
        return ResourceNames(count=c.resource_vcount_name, memory=c.resource_vmemory_name or None)

    def _read(self, container: Mapping[str, Any], what: str) -> tuple[int | None, int | None, RequestReader]:
        c = self.config
        limits, requests = container_lists(container, what)
        r = RequestReader(
            reader_config(c.resource_vcount_name, c.resource_vmemory_name, ""), container_label(container, what)
        )
        n = r.read(limits, requests, c.resource_vcount_name, QuantityKind.COUNT)
        mem = (
            r.read(limits, requests, c.resource_vmemory_name, QuantityKind.MEMORY) if c.resource_vmemory_name else None
        )
        return n, mem, r

    def container_request(self, container: Mapping[str, Any], what: str) -> ContainerRequest:
        """HAMi's ``GenerateResourceRequests``: the count and memory from the limits, else the requests; memory
        rounded up to a vXPU size (:func:`trim_memory`), cores the same share of 100; no memory: the whole XPU
        (98304 MiB, 100 %, 100 cores). Strict: memory without the count, a count of 0 with memory, memory 0 or
        above a whole XPU, and any bad quantity are a ResourceRequestError."""
        c = self.config
        limits, requests = container_lists(container, what)
        n, mem, r = self._read(container, what)
        has_count = raw_value(limits, requests, c.resource_vcount_name)[0]
        has_mem = bool(c.resource_vmemory_name) and raw_value(limits, requests, c.resource_vmemory_name)[0]
        if not r.problems:
            if not has_count and has_mem:
                r.problem(
                    f"{c.resource_vmemory_name} needs {c.resource_vcount_name}, the number of vXPUs: "
                    f"add {c.resource_vcount_name}: 1"
                )
            elif has_count and not n and mem:
                r.problem(f"{c.resource_vcount_name} is 0 but {c.resource_vmemory_name} asks for XPU memory")
            elif has_count and n and mem is not None and not 0 < mem <= XPU_MEMORY_MIB:
                sizes = ", ".join(str(s) for s in VXPU_SIZES_MIB)
                r.problem(
                    f"{c.resource_vmemory_name}: {mem} MiB is not a vXPU size; a vXPU has {sizes} MiB "
                    f"(a value up to {XPU_MEMORY_MIB} is rounded up to one of them)"
                )
        if r.problems:
            raise ResourceRequestError(r.problems)
        if not has_count or not n:
            return EMPTY_REQUEST
        if mem is None:
            return ContainerRequest(nums=n, mem_mib=XPU_MEMORY_MIB, mem_pct=100, cores_pct=100, type=VXPU_NAME)
        size = trim_memory(mem)
        return ContainerRequest(
            nums=n, mem_mib=size, mem_pct=MEM_PCT_UNSET, cores_pct=size * 100 // XPU_MEMORY_MIB, type=VXPU_NAME
        )

    def mutate_container(self, container: dict[str, Any], where: str) -> bool:
        """HAMi's ``MutateAdmission``: with the count in the limits, a memory limit is rounded up to its vXPU size
        in both the limits and the requests (validated first)."""
        c = self.config
        limits, _ = container_lists(container, where)
        if c.resource_vcount_name not in limits:
            return False
        req = self.container_request(container, where)
        if c.resource_vmemory_name and c.resource_vmemory_name in limits and not req.empty:
            res = container["resources"]
            res["limits"][c.resource_vmemory_name] = str(req.mem_mib)
            rq = res.get("requests")
            if not isinstance(rq, dict):
                rq = res["requests"] = {}
            rq[c.resource_vmemory_name] = str(req.mem_mib)
        return True

    def selectors(self, annotations: Mapping[str, str]) -> Selectors:
        return _both_uuid_lists(annotations, ((VXPU_USE_UUID, VXPU_NOUSE_UUID),))

    def node_registration(self, devices: Sequence[DeviceInfo]) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
        """What the Kunlunxin vXPU device plugin writes on its Node: the JSON register value and one count per
        slot."""
        if not devices:
            return {}, {}, {}
        annotations = {VXPU_REGISTER_KEY: encode_register_json(tuple(devices))}
        return annotations, {self.config.resource_vcount_name: str(sum(max(d.count, 0) for d in devices))}, {}
