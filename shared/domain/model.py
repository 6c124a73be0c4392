"""The scheduling vocabulary: frozen value types shared by the codecs, the core, the store and the services.

Pure data, no I/O. Units are in the names (``mem_mib``, ``cores_pct``); capacities are integers.
Everything here mirrors a concept of HAMi's protocol (see ``docs/hami-wire.md``); the
section that defines each one is named in its docstring. A stored placement is ``allocation.Allocation``; the
namespace quota's types are in ``quota``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

NVIDIA = "NVIDIA"
"""HAMi's common word for NVIDIA GPUs: the ``Type`` of every NVIDIA request and pod device entry."""

MEM_PCT_UNSET = 101
"""HAMi's sentinel for "no memory percentage requested" (hami-wire §1.2)."""


class NodePolicy(enum.Enum):
    """Node ordering (hami-wire §6.2): binpack prefers the busiest node, spread the idlest."""

    BINPACK = "binpack"
    SPREAD = "spread"


class GpuPolicyToken(enum.Enum):
    """One token of a GPU policy chain (hami-wire §6.1, §6.3).

    ``binpack``, ``spread`` and ``numa`` are sort keys; ``topology-aware`` and ``mutex`` act as filters in Fit.
    """

    BINPACK = "binpack"
    SPREAD = "spread"
    TOPOLOGY_AWARE = "topology-aware"
    MUTEX = "mutex"
    NUMA = "numa"


@dataclass(frozen=True, slots=True)
class GpuPolicy:
    """A GPU policy as written: a single token or a comma chain such as ``binpack,numa``."""

    tokens: tuple[GpuPolicyToken, ...]

    @property
    def is_chain(self) -> bool:
        """HAMi treats a value containing ``,`` or exactly ``numa`` as a sort-key chain (§6.3)."""
        return len(self.tokens) > 1 or self.tokens == (GpuPolicyToken.NUMA,)

    def contains(self, token: GpuPolicyToken) -> bool:
        return token in self.tokens

    def __str__(self) -> str:
        return ",".join(t.value for t in self.tokens)


class BindPhase(enum.Enum):
    """``hami.io/bind-phase`` values (hami-wire §3)."""

    ALLOCATING = "allocating"
    SUCCESS = "success"
    FAILED = "failed"


class DeviceMode(enum.Enum):
    """The ``mode`` field of a registered device (hami-wire §2.1)."""

    HAMI_CORE = "hami-core"
    MIG = "mig"
    MPS = "mps"


class Reason(enum.Enum):
    """Failure reason strings, byte-exact to HAMi's ``pkg/device/common/common.go`` (hami-wire §6.6)."""

    CARD_TYPE_MISMATCH = "CardTypeMismatch"
    CARD_UUID_MISMATCH = "CardUuidMismatch"
    CARD_TIME_SLICING_EXHAUSTED = "CardTimeSlicingExhausted"
    CARD_COMPUTE_UNITS_EXHAUSTED = "CardComputeUnitsExhausted"
    CARD_INSUFFICIENT_MEMORY = "CardInsufficientMemory"
    CARD_INSUFFICIENT_CORE = "CardInsufficientCore"
    CARD_NOT_HEALTH = "CardNotHealth"
    CARD_UNHEALTHY = "CardUnhealthy"
    """MetaX sGPU's word for an unhealthy card (HAMi's ``pkg/device/metax``); the others write ``CardNotHealth``."""
    CARD_CORDONED = "CardCordoned"
    NUMA_NOT_FIT = "NumaNotFit"
    EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT = "ExclusiveDeviceAllocateConflict"
    CARD_NOT_FOUND_CUSTOM_FILTER_RULE = "CardNotFoundCustomFilterRule"
    CARD_MIG_TOPOLOGY_INFEASIBLE = "CardMigTopologyInfeasible"
    NODE_INSUFFICIENT_DEVICE = "NodeInsufficientDevice"
    ALLOCATED_CARDS_INSUFFICIENT_REQUEST = "AllocatedCardsInsufficientRequest"
    NODE_UNFIT_POD = "NodeUnfitPod"
    NODE_FIT_POD = "NodeFitPod"
    RESOURCE_QUOTA_NOT_FIT = "ResourceQuotaNotFit"
    MODE_NOT_FIT = "ModeNotFit"
    CARD_QOS_POLICY_MISMATCH = "CardQosPolicyMismatch"
    """MetaX sGPU: the card in use runs another QoS policy (HAMi's ``pkg/device/metax``)."""
    CARD_APP_CLASS_MISMATCH = "CardAppClassMismatch"
    """MetaX sGPU: the card in use runs pods of an app class the pod may not share it with."""


# --------------------------------------------------------------------------------------------
# Node inventory (what the registrar decodes from node annotations)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MigPlacement:
    """A MIG placement on a GPU's slice grid: ``{"start": s, "size": n}`` (hami-wire §7.1)."""

    start: int
    size: int

    def overlaps(self, other: MigPlacement) -> bool:
        return self.start < other.start + other.size and other.start < self.start + self.size


@dataclass(frozen=True, slots=True)
class MigProfile:
    """One entry of a device's ``migProfiles`` (hami-wire §7.1)."""

    name: str
    memory_mib: int
    core_pct: int
    slice_count: int
    placements: tuple[MigPlacement, ...]


@dataclass(frozen=True, slots=True)
class MigTemplate:
    """One template of a legacy ``knownMigGeometries`` geometry (hami-wire §7.2)."""

    name: str
    memory_mib: int
    core_pct: int
    count: int


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """One registered physical GPU, as decoded from ``hami.io/node-nvidia-register`` (hami-wire §2.1).

    ``count`` is the split count (max concurrent tasks), ``devmem_mib`` the registered memory (already scaled
    by the device plugin), ``devcore`` the core total (100 unless core scaling is on).
    """

    id: str
    index: int
    count: int
    devmem_mib: int
    devcore: int
    type: str
    numa: int
    mode: str
    health: bool
    mig_profiles: tuple[MigProfile, ...] = ()
    vendor: str = NVIDIA
    """HAMi's common word of the device's family (``NVIDIA``, ``DCU``, ``MLU``, ``AMD``, ``Ascend910B``…): a node
    may carry devices of several vendors, and a request only ever takes devices of its own vendor."""


@dataclass(frozen=True, slots=True)
class NodeInventory:
    """One vendor's devices on one node, with what else the registrar learnt from the node.

    ``pair_scores[a][b]`` is the topology pair score between device UUIDs (hami-wire §2.3); missing pairs
    score 0. ``cordoned`` holds the UUIDs listed in ``hami.io/device-cordon`` (§2.4).
    """

    node: str
    vendor: str
    devices: tuple[DeviceInfo, ...]
    pair_scores: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    cordoned: frozenset[str] = frozenset()

    def device(self, uuid: str) -> DeviceInfo | None:
        for d in self.devices:
            if d.id == uuid:
                return d
        return None


# --------------------------------------------------------------------------------------------
# Requests (what a pod asks for)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ContainerRequest:
    """HAMi's ``ContainerDeviceRequest`` for one container and one vendor (hami-wire §1.2).

    ``nums == 0`` means the container requests nothing from this vendor. ``mem_pct == MEM_PCT_UNSET`` (101)
    means no percentage; ``mem_mib`` is already multiplied by ``memoryFactor``.
    """

    nums: int
    mem_mib: int = 0
    mem_pct: int = MEM_PCT_UNSET
    cores_pct: int = 0
    type: str = NVIDIA

    @property
    def empty(self) -> bool:
        return self.nums <= 0


EMPTY_REQUEST = ContainerRequest(nums=0)


@dataclass(frozen=True, slots=True)
class PodRequest:
    """The device requests of a whole pod: one entry per container, init containers first (difference 2).

    A container asking for several vendors at once (HAMi's multi-type request) has one entry per vendor:
    ``owners[i]`` is then the container index of entry ``i`` (entries of one container are adjacent, in
    container order). Empty ``owners`` means one entry per container (``owners[i] == i``), the common case.
    """

    containers: tuple[ContainerRequest, ...]
    init_count: int
    owners: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.owners and len(self.owners) != len(self.containers):
            raise ValueError("PodRequest.owners must name the container of every request entry")

    @property
    def any(self) -> bool:
        return any(not c.empty for c in self.containers)

    @property
    def container_count(self) -> int:
        """How many (init + app) containers the pod has: the length of its device list."""
        return self.owners[-1] + 1 if self.owners else len(self.containers)

    def owner(self, entry: int) -> int:
        """The container index of request entry ``entry``."""
        return self.owners[entry] if self.owners else entry

    def is_init(self, container_index: int) -> bool:
        return container_index < self.init_count


# --------------------------------------------------------------------------------------------
# Allocations (what a pod was given)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ContainerDevice:
    """One device entry of the pod device list: ``<UUID>,<Type>,<Usedmem>,<Usedcores>:`` (hami-wire §3.1).

    ``uuid`` is the physical GPU UUID. ``legacy_mig`` is the ``[g-s]`` suffix of legacy MIG (§7.2), kept
    apart so the physical UUID can be looked up directly; the codec re-attaches it.
    """

    uuid: str
    used_mem_mib: int
    used_cores: int
    type: str = NVIDIA
    legacy_mig: tuple[int, int] | None = None
    shown_type: str = ""
    """The ``<Type>`` written in the pod's device entry when it is not :attr:`type` (AMD: the card's registered
    product type, as HAMi writes it). :attr:`type` stays the vendor's common word, which every process keys on
    (quota per vendor, the per-vendor annotation split, the node lock)."""


PodDevices = tuple[tuple[ContainerDevice, ...], ...]
"""Per container (init first, then app), the devices given to it. Empty tuples keep the index mapping."""


@dataclass(frozen=True, slots=True)
class MigAllocation:
    """One element of ``hami.io/vgpu-mig-allocations`` (hami-wire §7.1).

    The runtime fields are written by the device plugin after Allocate: all three or none.
    """

    container_index: int
    device_index: int
    gpu_uuid: str
    profile: str
    placement: MigPlacement
    mig_uuid: str | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None


@dataclass(frozen=True, slots=True)
class DeviceUsage:
    """What is in use on one physical device (hami-wire §5.4).

    ``used`` counts slots (tasks), ``used_mem_mib`` and ``used_cores`` are sums. ``mig_in_use`` holds the
    dynamic-MIG placements occupied on this GPU; ``legacy_geometry``/``legacy_slots`` the legacy-MIG state.
    """

    used: int = 0
    used_mem_mib: int = 0
    used_cores: int = 0
    mig_in_use: tuple[MigPlacement, ...] = ()
    legacy_geometry: int | None = None
    legacy_slots: frozenset[int] = frozenset()
    tags: tuple[tuple[str, int], ...] = ()
    """How many slots of the device are held by tasks carrying each tag (``DeviceCharge.tags``), sorted by tag;
    tags with no holder are left out (MetaX sGPUs: the app class and QoS policy of the pods on a card)."""

    def tag_count(self, tag: str) -> int:
        """The slots held by tasks tagged ``tag`` (0 when none)."""
        for name, n in self.tags:
            if name == tag:
                return n
        return 0


def with_tags(tags: tuple[tuple[str, int], ...], charge: DeviceCharge, sign: int) -> tuple[tuple[str, int], ...]:
    """A device's usage tags with ``charge``'s added (``sign`` 1) or taken away (-1), each weighted by its slots
    (``max(slots, 1)``, as the usage counts them); tags left with no holder are dropped."""
    if not charge.tags:
        return tags
    counts = dict(tags)
    for tag in charge.tags:
        counts[tag] = counts.get(tag, 0) + sign * max(charge.slots, 1)
    return tuple(sorted((t, n) for t, n in counts.items() if n > 0))


ZERO_USAGE = DeviceUsage()


@dataclass(frozen=True, slots=True)
class DeviceCharge:
    """The collapsed footprint of one pod on one physical device: what it adds to that device's usage.

    ``slots`` = max(1 if any init container uses it, number of app-container occurrences); memory and
    cores = max(peak over init containers, sum over app containers) (hami-wire §5.4).
    ``exclusive`` marks a whole-card claim (cores 100 on a 100-core card) that needs an idle device.
    """

    uuid: str
    slots: int
    mem_mib: int
    cores_pct: int
    exclusive: bool = False
    mig_placements: tuple[MigPlacement, ...] = ()
    legacy_mig: tuple[tuple[int, int], ...] = ()
    uniform: bool = False
    """The device is shared only by tasks of one size: it must be idle or hold only tasks of this charge's memory
    per slot (Kunlunxin vXPUs: an XPU splits into equal parts; the atomic reserve re-checks it)."""
    tags: tuple[str, ...] = ()
    """Labels this charge's slots add to the device's usage (``DeviceUsage.tags``): what kind of task holds it
    (MetaX sGPUs: ``app=online``, ``qos=best-effort``, …), for vendors whose sharing rule depends on it."""
    refuse_tags: tuple[str, ...] = ()
    """The atomic reserve's sharing rule: a device in use must hold no task with one of these tags."""
    need_tags: tuple[str, ...] = ()
    """The atomic reserve's sharing rule: a device in use must hold some task with one of these tags (empty: no
    such condition)."""
    cores_unchecked: bool = False
    """The charge is not held to the device's cores: a 0-core charge may join a device whose cores are all taken
    (MetaX sGPU online pods, whose Fit skips the core checks)."""


# --------------------------------------------------------------------------------------------
# Per-pod scheduling options (hami-wire §1.4) and the NVIDIA device config (§11)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ScoringWeights:
    """``hami.io/device-scoring-weights``: ``slot=<int>,core=<int>,memory=<int>`` (defaults 1,1,1)."""

    slot: int = 1
    core: int = 1
    memory: int = 1


@dataclass(frozen=True, slots=True)
class Selectors:
    """A vendor's device selectors from the pod's annotations (HAMi's ``CheckType`` / ``CheckUUID`` inputs).

    Types are upper-cased substrings of the device type; UUIDs match exactly. Empty means no constraint.
    NVIDIA's come from ``nvidia.com/use-gputype`` … and are the NVIDIA fields of :class:`PodConstraints`; every
    other vendor's are in ``PodConstraints.vendor_selectors[<common word>]``.
    """

    use_types: tuple[str, ...] = ()
    nouse_types: tuple[str, ...] = ()
    use_uuids: frozenset[str] = frozenset()
    nouse_uuids: frozenset[str] = frozenset()
    mode: str = ""
    """A vendor's pod-level mode annotation, when it has one (Ascend: ``huawei.com/vnpu-mode``)."""
    qos_policy: str = ""
    """MetaX sGPU's ``metax-tech.com/sgpu-qos-policy`` of the pod (``""`` when absent); other vendors leave it."""
    topology_aware: bool = False
    """MetaX sGPU's ``metax-tech.com/sgpu-topology-aware`` (a Go boolean; anything else is false)."""
    app_class: str = ""
    """MetaX sGPU's ``metax-tech.com/sgpu-app-class`` (``online``, ``offline``; ``""`` when absent)."""


NO_SELECTORS = Selectors()


@dataclass(frozen=True, slots=True)
class PodConstraints:
    """What a pod's annotations say about where it may go and how devices are ordered (hami-wire §1.4).

    Empty ``use_*`` collections mean "no constraint". Type tokens are stored upper-cased (substring match
    against the upper-cased device type). ``node_policy``/``gpu_policy`` are ``None`` when not overridden.
    """

    use_types: tuple[str, ...] = ()
    nouse_types: tuple[str, ...] = ()
    use_uuids: frozenset[str] = frozenset()
    nouse_uuids: frozenset[str] = frozenset()
    numa_bind: bool = False
    vgpu_mode: str | None = None
    node_policy: NodePolicy | None = None
    gpu_policy: GpuPolicy | None = None
    weights: ScoringWeights = ScoringWeights()
    vendor_selectors: Mapping[str, Selectors] = field(default_factory=dict)
    """Other vendors' selectors by common word (``hygon.com/use-dcutype`` …); NVIDIA's are the fields above."""

    def selectors(self, vendor: str) -> Selectors:
        """The selectors of ``vendor`` (NVIDIA's from the fields above)."""
        if vendor == NVIDIA:
            return Selectors(self.use_types, self.nouse_types, self.use_uuids, self.nouse_uuids)
        return self.vendor_selectors.get(vendor, NO_SELECTORS)


NO_CONSTRAINTS = PodConstraints()


@dataclass(frozen=True, slots=True)
class MigAllowlistEntry:
    """``nvidia.migProfileAllowlist[]``: model substrings and the allowed profile names (hami-wire §7.1)."""

    models: tuple[str, ...]
    profiles: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class MigGeometryEntry:
    """``nvidia.knownMigGeometries[]``: model substrings and their whole-GPU geometries (hami-wire §7.2)."""

    models: tuple[str, ...]
    geometries: tuple[tuple[MigTemplate, ...], ...]


@dataclass(frozen=True, slots=True)
class NvidiaConfig:
    """The ``nvidia:`` section of HAMi's device config file, with HAMi's defaults (hami-wire §1.1, §11)."""

    resource_count_name: str = "nvidia.com/gpu"
    resource_memory_name: str = "nvidia.com/gpumem"
    resource_memory_percentage_name: str = "nvidia.com/gpumem-percentage"
    resource_core_name: str = "nvidia.com/gpucores"
    resource_priority_name: str = "nvidia.com/priority"
    default_memory: int = 0
    default_cores: int = 0
    default_gpu_num: int = 1
    memory_factor: int = 1
    overwrite_env: bool = False
    gpu_core_policy: str = "default"
    runtime_class_name: str = ""
    disable_core_limit: bool = False
    mig_profile_allowlist: tuple[MigAllowlistEntry, ...] = ()
    known_mig_geometries: tuple[MigGeometryEntry, ...] = ()

    @property
    def resource_names(self) -> frozenset[str]:
        """Every resource name this vendor manages (what makes a pod "ours")."""
        return frozenset(
            {
                self.resource_count_name,
                self.resource_memory_name,
                self.resource_memory_percentage_name,
                self.resource_core_name,
                self.resource_priority_name,
            }
        )


DEFAULT_NVIDIA_CONFIG = NvidiaConfig()
