"""The two Kunlunxin vendors (:class:`KunlunVendor` for whole XPUs, :class:`KunlunVxpuVendor` for vXPUs) and the
``kunlun:`` section that builds both. Pure."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from vgpu_scheduler.shared.codec.register import encode_register_json
from vgpu_scheduler.shared.codec.resources import (
    QuantityKind,
    ResourceRequestError,
    container_lists,
    raw_value,
)
from vgpu_scheduler.shared.domain.model import (
    EMPTY_REQUEST,
    MEM_PCT_UNSET,
    ContainerRequest,
    DeviceInfo,
    PodDevices,
    Selectors,
)
from vgpu_scheduler.shared.errors import ConfigError
from vgpu_scheduler.shared.vendors.base import NodeLockKind, ResourceNames
from vgpu_scheduler.shared.vendors.capacity import slot_capacity
from vgpu_scheduler.shared.vendors.common import names_section, read_container, section_keys
from vgpu_scheduler.shared.vendors.counted import Counted, CountedVendor
from vgpu_scheduler.shared.vendors.described import DescribedVendor
from vgpu_scheduler.shared.vendors.description import Description, PodLists, RegisterAnnotation, SelectorKeys
from vgpu_scheduler.shared.vendors.kunlun.fit import KUNLUN_RULES, VXPU_RULES, _both_uuid_lists
from vgpu_scheduler.shared.vendors.kunlun.keys import (
    _REQUIRED,
    ALLOCATED_KEY,
    DEVICE_IDX_KEY,
    NAME,
    NOUSE_UUID,
    SECTION,
    USE_UUID,
    VXPU_ALLOCATED_KEY,
    VXPU_HANDSHAKE_KEY,
    VXPU_NAME,
    VXPU_NOUSE_UUID,
    VXPU_REGISTER_KEY,
    VXPU_SIZES_MIB,
    VXPU_TO_ALLOCATE_KEY,
    VXPU_USE_UUID,
    XPU_CORES,
    XPU_MEMORY_MIB,
    XPU_SLOTS,
    KunlunConfig,
)
from vgpu_scheduler.shared.vendors.kunlun.registration import (
    decode_vxpu_register,
    devices_from_capacity,
    trim_memory,
    xpu_index,
)
from vgpu_scheduler.shared.vendors.registration import HANDSHAKE_TIMEOUT_S


def parse_config(section: object) -> KunlunConfig:
    """Validate the ``kunlun:`` section; absent keys keep HAMi's defaults. The vXPU names must not be empty either
    (they are how a container asks for vXPUs), and the three names must differ. ConfigError names the key path."""
    config = KunlunConfig(
        **names_section(section, SECTION, section_keys(KunlunConfig), unit="XPUs", required=_REQUIRED)
    )
    names = [config.resource_count_name, config.resource_vcount_name, config.resource_vmemory_name]
    if len({n for n in names if n}) != len([n for n in names if n]):
        raise ConfigError(f"{SECTION}: the resource names must differ, got {', '.join(names)}")
    return config


def build(section: object) -> tuple[KunlunVendor, KunlunVxpuVendor]:
    """Both vendors the ``kunlun:`` section configures (``None`` or ``{}``: HAMi's defaults)."""
    config = parse_config(section)
    return KunlunVendor(config), KunlunVxpuVendor(config)


DESCRIPTION: Final = Description(NAME, KUNLUN_RULES, PodLists(ALLOCATED_KEY), node_lock=NodeLockKind.NONE)


@dataclass(frozen=True, slots=True)
class KunlunVendor(CountedVendor):
    """Whole Kunlunxin XPUs (see the package docstring): HAMi's ``GetNodeDevices`` derives XPUs of 98304 MiB, 100
    cores and 100 slots from ``capacity[kunlunxin.com/xpu]`` (healthy while listed: HAMi's ``CheckHealth`` always
    says so); a request takes 100 % of each XPU's memory and no cores."""

    description = DESCRIPTION
    counted = Counted(
        top=2**31 - 1,
        expected="expected a whole number from 0 to 2^31-1",
        devices=devices_from_capacity,
        shape=(XPU_MEMORY_MIB, XPU_CORES, XPU_SLOTS),
        refusal="Kunlunxin XPUs register by count only: each has 98304 MiB, 100 cores and 100 slots",
    )

    config: KunlunConfig = dataclasses.field(default_factory=KunlunConfig)

    @property
    def count_name(self) -> str:
        return self.config.resource_count_name

    def selectors(self, annotations: Mapping[str, str]) -> Selectors:
        """Both UUID pairs (HAMi v2.10 checks ``hami.io/use-xpu-uuid`` and ``baidu.com/use-gpuuuid`` alike)."""
        return _both_uuid_lists(annotations, ((VXPU_USE_UUID, VXPU_NOUSE_UUID), (USE_UUID, NOUSE_UUID)))

    def extra_pod_annotations(self, devices: PodDevices, now_unix: int) -> Mapping[str, str]:
        """``BAIDU_COM_DEVICE_IDX``: each container's XPU indexes joined by ``,``, the containers joined by ``;``
        (one entry per container, empty where it has none); nothing when the pod has no XPU."""
        del now_unix
        if not any(devices):
            return {}
        parts = [",".join(str(i) for d in ctr if (i := xpu_index(d.uuid)) is not None) for ctr in devices]
        return {DEVICE_IDX_KEY: ";".join(parts)}


VXPU_DESCRIPTION: Final = Description(
    VXPU_NAME,
    VXPU_RULES,
    PodLists(VXPU_ALLOCATED_KEY, VXPU_TO_ALLOCATE_KEY),
    RegisterAnnotation(VXPU_REGISTER_KEY, decode_vxpu_register, handshake=VXPU_HANDSHAKE_KEY),
    SelectorKeys(VXPU_USE_UUID, VXPU_NOUSE_UUID),
)


@dataclass(frozen=True, slots=True)
class KunlunVxpuVendor(DescribedVendor):
    """Kunlunxin vXPUs (see the module docstring)."""

    description = VXPU_DESCRIPTION

    config: KunlunConfig = dataclasses.field(default_factory=KunlunConfig)
    handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S

    @property
    def resources(self) -> ResourceNames:
        c = self.config
        return ResourceNames(count=c.resource_vcount_name, memory=c.resource_vmemory_name or None)

    def container_request(self, container: Mapping[str, Any], what: str) -> ContainerRequest:
        """HAMi's ``GenerateResourceRequests``: the count and memory from the limits, else the requests; memory
        rounded up to a vXPU size (:func:`trim_memory`), cores the same share of 100; no memory: the whole XPU
        (98304 MiB, 100 %, 100 cores). Strict: memory without the count, a count of 0 with memory, memory 0 or
        above a whole XPU, and any bad quantity are a ResourceRequestError."""
        c = self.config
        limits, requests, r = read_container(container, what, c.resource_vcount_name, c.resource_vmemory_name)
        n = r.read(limits, requests, c.resource_vcount_name, QuantityKind.COUNT)
        mem = (
            r.read(limits, requests, c.resource_vmemory_name, QuantityKind.MEMORY) if c.resource_vmemory_name else None
        )
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
        return annotations, slot_capacity(devices, self.config.resource_vcount_name), {}
