"""Moore Threads GPUs as a vendor (HAMi's ``pkg/device/mthreads``): common word ``Mthreads``, pure.

What a Moore Threads pod and node look like on the wire (docs/vendors/mthreads.md):

* resources ``mthreads.com/vgpu`` (count), ``mthreads.com/sgpu-memory`` (memory in **512 MiB units**, for all the
  container's GPUs together) and ``mthreads.com/sgpu-core`` (cores, 16 per GPU, for all its GPUs together);
  each GPU gets the container's memory and cores divided by the count;
* registration from **node capacity**: ``capacity[sgpu-core] / 16`` GPUs (rounded up) ``<node>-mthreads-<i>``, each
  with 100 slots, 16 cores and ``capacity[sgpu-memory] × 512 × 16 / capacity[sgpu-core]`` MiB;
* the pod's device list only under ``hami.io/mthreads-vgpu-devices-allocated`` (HAMi writes no to-allocate key
  for it), plus ``mthreads.com/gpu-index`` (the GPUs' indexes), ``mthreads.com/predicate-time`` (the bind's time
  in nanoseconds) and ``mthreads.com/predicate-node`` (the node); **no node lock**;
* selectors ``mthreads.ai/use-gpuuuid`` / ``mthreads.ai/nouse-gpuuuid`` (both apply).

Admission (HAMi's ``MutateAdmission``): more than one GPU, or one GPU without memory, sets the core and memory
limits to whole GPUs (16 cores and 96 units each) and, for more than one, the pod annotation
``mthreads.com/request-gpu-num``; one GPU's memory must be one of 2, 4, 8, 16, 32, 64 or 96 units. ``Fit``: every
container of a pod goes on the one GPU the first one got (HAMi's ``customFilterRule``).
On by default, as in HAMi (:data:`ENABLE_FLAG` is None).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from vgpu_scheduler.shared.codec.resources import (
    QuantityKind,
    RequestReader,
    ResourceRequestError,
    container_lists,
)
from vgpu_scheduler.shared.domain.model import ContainerDevice, DeviceInfo, PodDevices
from vgpu_scheduler.shared.domain.vendor import DeviceRules
from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.vendors.base import NodeLockKind
from vgpu_scheduler.shared.vendors.capacity import CoreSplit, index_in_id, observe_capacity, whole_capacity
from vgpu_scheduler.shared.vendors.common import read_container
from vgpu_scheduler.shared.vendors.described import ShareConfig, ShareRequest, ShareVendor
from vgpu_scheduler.shared.vendors.description import Description, PodLists, SelectorKeys
from vgpu_scheduler.shared.vendors.registration import DecodeFailure, Invalid, NodeView, Observation
from vgpu_scheduler.shared.vendors.simple import UuidOnlyRules

SECTION: Final = "mthreads"
ENABLE_FLAG: Final[str | None] = None
"""HAMi v2.10 initialises Moore Threads whatever its device config holds."""

NAME: Final = "Mthreads"
GPU_INDEX_KEY: Final = "mthreads.com/gpu-index"
PREDICATE_TIME_KEY: Final = "mthreads.com/predicate-time"
PREDICATE_NODE_KEY: Final = "mthreads.com/predicate-node"
REQUEST_GPU_NUM_KEY: Final = "mthreads.com/request-gpu-num"
MEMORY_UNIT_MIB: Final = 512
CORES_PER_GPU: Final = 16
MEMORY_PER_GPU: Final = 96
"""Units of 512 MiB the webhook gives a whole GPU."""
LEGAL_MEMORY: Final = (2, 4, 8, 16, 32, 64, 96)
"""The sGPU memory sizes (units) one GPU can be split into."""
SLOTS: Final = 100
_ID_INFIX: Final = "-mthreads-"
_SPLIT: Final = CoreSplit(NAME, _ID_INFIX, MEMORY_UNIT_MIB, CORES_PER_GPU, SLOTS, "mthreads capacity", "GPU")


DEFAULT_CONFIG: Final = ShareConfig(
    "mthreads.com/vgpu", "mthreads.com/sgpu-memory", "mthreads.com/sgpu-core", memory_factor=MEMORY_UNIT_MIB
)
"""HAMi's defaults of the ``mthreads:`` section (memory in units of 512 MiB, which the section cannot change)."""


def parse_config(section: object) -> ShareConfig:
    """Validate the ``mthreads:`` section; absent keys keep HAMi's defaults. The memory and core names register
    the GPUs (node capacity), so they must not be empty. ConfigError names the key path."""
    required = dict.fromkeys(("resourceMemoryName", "resourceCoreName"), "the GPUs register through it")
    return DEFAULT_CONFIG.parse(section, SECTION, unit="GPUs", required=required)


def build(section: object) -> tuple[MthreadsVendor, ...]:
    return (MthreadsVendor(parse_config(section)),)


# ------------------------------------------------------------------------------------------------------------
# Fit
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MthreadsRules(UuidOnlyRules):
    """Moore Threads ``Fit``: the common skeleton (a GPU has 16 cores) plus HAMi's ``customFilterRule``: a
    device is refused (``CardNotFoundCustomFilterRule``) when an earlier container of the pod got another one."""

    def pod_device_ok(self, dev: DeviceInfo, earlier: Sequence[ContainerDevice]) -> bool:
        return all(d.uuid == dev.id for d in earlier)


MTHREADS_RULES: DeviceRules = MthreadsRules(NAME)


# ------------------------------------------------------------------------------------------------------------
# Registration from node capacity
# ------------------------------------------------------------------------------------------------------------


def devices_from_capacity(node: str, cores_total: int, memory_total: int) -> tuple[DeviceInfo, ...]:
    """HAMi's ``GetNodeDevices``: a GPU per 16 cores (rounded up), each of ``memory_total × 512 × 16 //
    cores_total`` MiB. DecodeError when that does not fit in int32 (HAMi would wrap it)."""
    return _SPLIT.devices(node, cores_total, memory_total, f"{memory_total}/{cores_total}")


def gpu_index(uuid: str) -> int | None:
    """The index HAMi encodes in a device id ``<node>-mthreads-<i>`` (None for another id)."""
    return index_in_id(uuid, _ID_INFIX)


def _whole(capacity: Mapping[str, Any], name: str) -> int | None:
    return whole_capacity(capacity, name, 2**63 - 1, "expected a whole number from 0 to 2^63-1")


# ------------------------------------------------------------------------------------------------------------
# The vendor
# ------------------------------------------------------------------------------------------------------------


def _sgpu_size(n: int, mem: int | None, memory_name: str) -> str | None:
    """One GPU's memory must be an sGPU size (HAMi's webhook refuses another)."""
    if n == 1 and mem is not None and mem not in LEGAL_MEMORY:
        sizes = ", ".join(str(m) for m in LEGAL_MEMORY)
        return f"{memory_name}: {mem} is not an sGPU size of one GPU; use one of {sizes}"
    return None


REQUEST: Final = ShareRequest(
    devices="GPUs",
    memory="GPU memory",
    cores=QuantityKind.PRIORITY,
    default_cores=0,
    zero_count_hint=False,
    check=_sgpu_size,
    per_device=True,
)
"""Each resource from the limits, else the requests; memory and cores are the container's total."""


DESCRIPTION: Final = Description(
    NAME,
    MTHREADS_RULES,
    PodLists("hami.io/mthreads-vgpu-devices-allocated"),
    selectors=SelectorKeys("mthreads.ai/use-gpuuuid", "mthreads.ai/nouse-gpuuuid"),
    node_lock=NodeLockKind.NONE,
)


@dataclass(frozen=True, slots=True)
class MthreadsVendor(ShareVendor):
    """Moore Threads (see the module docstring); requests as :data:`REQUEST` says: memory × 512 MiB and cores, each
    divided by the count (integer division); no memory: the whole GPU (100 %). Strict: a memory or core resource
    without the count, a count of 0 with memory, one GPU with a memory that is not an sGPU size (HAMi's webhook
    refuses it), and any bad quantity are a ResourceRequestError."""

    description = DESCRIPTION
    share_request = REQUEST
    config: ShareConfig = DEFAULT_CONFIG

    # ---- requests ----------------------------------------------------------------------------------------------

    def _read(self, container: Mapping[str, Any], what: str) -> tuple[int, int | None, int | None, RequestReader]:
        c = self.config
        limits, requests, r = read_container(
            container,
            what,
            c.resource_count_name,
            c.resource_memory_name,
            c.resource_core_name,
            memory_factor=MEMORY_UNIT_MIB,
        )
        n = r.read(limits, requests, c.resource_count_name, QuantityKind.COUNT) or 0
        mem = r.read(limits, requests, c.resource_memory_name, QuantityKind.MEMORY)
        core = r.read(limits, requests, c.resource_core_name, QuantityKind.PRIORITY)
        if r.problems:
            raise ResourceRequestError(r.problems)
        return n, mem, core, r

    def mutate_container(self, container: dict[str, Any], where: str) -> bool:
        """HAMi's ``MutateAdmission`` for the container: with the count in its limits, more than one GPU (or one
        without memory) gets whole GPUs: 16 cores and 96 memory units per GPU. (The pod annotation
        ``mthreads.com/request-gpu-num`` is :meth:`mutate_pod`'s.)"""
        c = self.config
        limits, _ = container_lists(container, where)
        if c.resource_count_name not in limits:
            return False
        n, _, _, _ = self._read(container, where)
        if n > 1 or c.resource_memory_name not in limits:
            lim = container["resources"]["limits"]
            lim[c.resource_core_name] = str(n * CORES_PER_GPU)
            lim[c.resource_memory_name] = str(n * MEMORY_PER_GPU)
        return True

    def mutate_pod(self, pod: dict[str, Any], where: str) -> None:
        """HAMi's ``MutateAdmission`` pod edit: ``mthreads.com/request-gpu-num`` = the count of a container asking
        for more than one GPU (the last such container's)."""
        spec = pod.get("spec") or {}
        count = None
        for key in ("initContainers", "containers"):
            for i, ctr in enumerate(spec.get(key) or ()):
                limits, _ = container_lists(ctr, f"{where}.{key}[{i}]")
                if self.config.resource_count_name in limits:
                    n, _, _, _ = self._read(ctr, f"{where}.{key}[{i}]")
                    if n > 1:
                        count = n
        if count is not None:
            meta = pod.setdefault("metadata", {})
            annotations = meta.get("annotations")
            if not isinstance(annotations, dict):
                annotations = meta["annotations"] = {}
            annotations[REQUEST_GPU_NUM_KEY] = str(count)

    # ---- registration ------------------------------------------------------------------------------------------

    def observe(self, node: NodeView, now_local: datetime, *, reported_before: bool = False) -> Observation:
        """Registration from ``status.capacity``, in order: no ``capacity[sgpu-core]`` → not registered; a core
        or memory capacity that is not a whole quantity → invalid; ``allocatable[sgpu-core]`` not a quantity →
        invalid; 0 cores → not registered; memory per GPU beyond int32 → invalid; ``allocatable[sgpu-core]`` ≤ 0
        (the device plugin is gone) → not registered. HAMi's ``CheckHealth`` always says healthy."""
        del now_local, reported_before
        c = self.config

        def devices(cores_total: int, memory_total: int) -> tuple[DeviceInfo, ...] | Observation:
            try:
                return devices_from_capacity(node.name, cores_total, memory_total)
            except DecodeError as e:
                return Invalid(DecodeFailure.REGISTER, f"status.capacity[{c.resource_memory_name}]", e.part or "", e)

        return observe_capacity(node, NAME, c.resource_core_name, c.resource_memory_name, whole=_whole, devices=devices)

    def node_registration(self, devices: Sequence[DeviceInfo]) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
        """What the Moore Threads device plugin advertises for ``devices`` (all of one size): 16 cores per GPU and
        their memory in 512 MiB units, plus the count resource (100 per GPU)."""
        c = self.config
        if not devices:
            return {}, {}, {}
        per_gpu = {d.devmem_mib for d in devices}
        if len(per_gpu) != 1 or next(iter(per_gpu)) % MEMORY_UNIT_MIB:
            raise ValueError("Moore Threads GPUs of a node share one memory size, a whole number of 512 MiB units")
        units = next(iter(per_gpu)) // MEMORY_UNIT_MIB * len(devices)
        return (
            {},
            {
                c.resource_core_name: str(CORES_PER_GPU * len(devices)),
                c.resource_memory_name: str(units),
                c.resource_count_name: str(SLOTS * len(devices)),
            },
            {},
        )

    # ---- pod device lists --------------------------------------------------------------------------------------

    def extra_pod_annotations(self, devices: PodDevices, now_unix: int) -> Mapping[str, str]:
        """HAMi's ``PatchAnnotations`` extras: ``mthreads.com/gpu-index`` (the last container with GPUs: their
        indexes, comma-joined) and ``mthreads.com/predicate-time`` (the bind's time, nanoseconds).
        ``mthreads.com/predicate-node`` is :meth:`node_pod_annotations`'."""
        last = next((ctr for ctr in reversed(devices) if ctr), ())
        if not last:
            return {}
        indexes = [gpu_index(d.uuid) for d in last]
        text = ",".join(str(i) for i in indexes if i is not None)
        return {GPU_INDEX_KEY: text, PREDICATE_TIME_KEY: str(now_unix * 1_000_000_000)}

    def node_pod_annotations(self, node: str, devices: PodDevices) -> Mapping[str, str]:
        """``mthreads.com/predicate-node``: the node the pod is bound to (when it got GPUs)."""
        return {PREDICATE_NODE_KEY: node} if any(devices) else {}
