"""The Cambricon MLU vendor (:class:`CambriconVendor`), its extra pod annotations and what its device plugin
writes on a Node. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from vgpu_scheduler.shared.codec.resources import ResourceRequestError, capped_cores_warning, container_lists, raw_value
from vgpu_scheduler.shared.codec.selectors import decode_cordon, decode_type_list, decode_uuid_list
from vgpu_scheduler.shared.domain.model import (
    EMPTY_REQUEST,
    ContainerRequest,
    DeviceInfo,
    NodeInventory,
    PodDevices,
    Selectors,
)
from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.vendors import registration as reg
from vgpu_scheduler.shared.vendors.base import NodeLockKind, ResourceNames
from vgpu_scheduler.shared.vendors.cambricon.fit import RULES

# ------------------------------------------------------------------------------------------------------------
# The vendor
# ------------------------------------------------------------------------------------------------------------
from vgpu_scheduler.shared.vendors.cambricon.keys import (
    ALLOCATED_KEY,
    CARD_CORES,
    DEFAULT_CORE_NAME,
    DEFAULT_COUNT_NAME,
    DEFAULT_MEMORY_NAME,
    DEVICE_CORDON_KEY,
    DSMLU_ASSIGNED_KEY,
    DSMLU_ASSIGNED_LEGACY_KEY,
    DSMLU_PROFILE_KEY,
    MEMORY_UNIT_MIB,
    MLU,
    MODEL_LABEL,
    NOUSE_TYPE_KEY,
    NOUSE_UUID_KEY,
    TO_ALLOCATE_KEY,
    USE_TYPE_KEY,
    USE_UUID_KEY,
)
from vgpu_scheduler.shared.vendors.cambricon.registration import (
    _BadQuantity,
    _capacity_int,
    card_index,
    card_type,
    devices_from_capacity,
)
from vgpu_scheduler.shared.vendors.cambricon.requests import _Reader
from vgpu_scheduler.shared.vendors.described import DescribedVendor
from vgpu_scheduler.shared.vendors.description import Description, PodLists
from vgpu_scheduler.shared.vendors.registration import NodeView, Observation

DESCRIPTION: Final = Description(
    MLU, RULES, PodLists(ALLOCATED_KEY, TO_ALLOCATE_KEY, list_key=TO_ALLOCATE_KEY), node_lock=NodeLockKind.CAMBRICON
)


@dataclass(frozen=True, slots=True)
class CambriconVendor(DescribedVendor):
    """The Cambricon MLU vendor with the resource names of the device config's ``cambricon:`` section."""

    description = DESCRIPTION
    """HAMi's Cambricon plugin reads the to-allocate list: a malformed device list is reported under that key."""

    count_name: str = DEFAULT_COUNT_NAME
    memory_name: str = DEFAULT_MEMORY_NAME
    core_name: str = DEFAULT_CORE_NAME

    @property
    def resources(self) -> ResourceNames:
        return ResourceNames(
            count=self.count_name, memory=self.memory_name, cores=self.core_name, memory_unit_mib=MEMORY_UNIT_MIB
        )

    # ---- pods ----------------------------------------------------------------------------------------------

    def container_request(self, container: Mapping[str, Any], what: str) -> ContainerRequest:
        """HAMi's ``GenerateResourceRequests``, strict (see docs/vendors/cambricon.md)::

            count n (limits, else requests)   → n MLUs; absent or 0 → no request
            memory m units                     → m × 256 MiB, mem_pct 0; absent or 0 → 100 % of the card
            cores c                            → c % of each card; absent → 100

        HAMi ignores a container whose values it cannot read (it gets no MLU); here each is a problem of the
        ResourceRequestError, as is memory or cores without a count and memory on zero MLUs.
        """
        limits, requests = container_lists(container, what)
        names = self.resources
        r = _Reader(names, what)
        has_count, raw_count = raw_value(limits, requests, names.count)
        has_mem, raw_mem = raw_value(limits, requests, names.memory)
        has_core, raw_core = raw_value(limits, requests, names.cores)
        n = r.count(raw_count) if has_count else None
        mem = r.memory(raw_mem) if has_mem else None
        core = r.cores(raw_core) if has_core else None
        if not has_count and (has_mem or has_core):
            asked = " and ".join(x for x, given in ((names.memory, has_mem), (names.cores, has_core)) if given and x)
            r.problem(f"{asked} without {names.count}: add {names.count}: 1 (the number of MLUs to share)")
        if n == 0 and mem:
            r.problem(f"{names.memory} asks for memory on 0 MLUs ({names.count}: 0)")
        if r.problems:
            raise ResourceRequestError(r.problems)
        if not n:
            return EMPTY_REQUEST
        mem_mib = (mem or 0) * MEMORY_UNIT_MIB
        return ContainerRequest(
            nums=n,
            mem_mib=mem_mib,
            mem_pct=100 if mem_mib == 0 else 0,
            cores_pct=CARD_CORES if core is None else core,
            type=MLU,
        )

    def mutate_container(self, container: dict[str, Any], where: str) -> bool:
        """HAMi's ``MutateAdmission``: edits nothing; True when the count resource is in the container's limits."""
        del where
        limits, _ = container_lists(container, "container")
        return self.count_name in limits

    def admission_warnings(self, container: Mapping[str, Any], where: str) -> tuple[str, ...]:
        """A core percentage above 100 is scheduled as 100 (HAMi's ``Fit`` caps it without a word)."""
        warning = capped_cores_warning(container, self.resources.cores, where, "MLU")
        return (warning,) if warning else ()

    def selectors(self, annotations: Mapping[str, str]) -> Selectors:
        """``cambricon.com/use-mlutype`` / ``nouse-mlutype`` / ``use-gpuuuid`` / ``nouse-gpuuuid``. A blank value is
        no constraint; a *use* list that is not blank but holds no token (``","``) matches no card in HAMi and is a
        DecodeError here."""

        def text(key: str) -> str | None:
            v = annotations.get(key)
            if v is not None and not isinstance(v, str):
                raise DecodeError(key, f"annotation value must be a string, got {type(v).__name__}")
            return v

        def guard(key: str, value: str, found: bool) -> None:
            if value.strip() and not found:
                raise DecodeError(key, "list holds no token, so no device could ever match", value)

        use_types: tuple[str, ...] = ()
        nouse_types: tuple[str, ...] = ()
        use_uuids: frozenset[str] = frozenset()
        nouse_uuids: frozenset[str] = frozenset()
        if (v := text(USE_TYPE_KEY)) is not None:
            use_types = decode_type_list(v)
            guard(USE_TYPE_KEY, v, bool(use_types))
        if (v := text(NOUSE_TYPE_KEY)) is not None:
            nouse_types = decode_type_list(v)
        if (v := text(USE_UUID_KEY)) is not None:
            use_uuids = decode_uuid_list(v)
            guard(USE_UUID_KEY, v, bool(use_uuids))
        if (v := text(NOUSE_UUID_KEY)) is not None:
            nouse_uuids = decode_uuid_list(v)
        return Selectors(use_types, nouse_types, use_uuids, nouse_uuids)

    def extra_pod_annotations(self, devices: PodDevices, now_unix: int) -> dict[str, str]:
        """HAMi's extra Cambricon pod annotations (:func:`extra_annotations`), written with the device lists."""
        del now_unix
        return extra_annotations(devices)

    # ---- nodes ---------------------------------------------------------------------------------------------

    def observe(self, node: NodeView, now_local: datetime, *, reported_before: bool = False) -> Observation:
        """Registration from ``capacity`` and the ``Model`` label; liveness from ``allocatable[count] > 0`` when
        the node advertises the count.

        A node view without capacity (some test doubles) reads allocatable in its place."""
        del now_local, reported_before
        return self.observe_node(
            node.name, node.annotations, node.capacity or node.allocatable, node.allocatable, node.labels
        )

    def observe_node(
        self,
        name: str,
        annotations: Mapping[str, str],
        capacity: Mapping[str, Any],
        allocatable: Mapping[str, Any],
        labels: Mapping[str, str],
    ) -> Observation:
        """The checks, in order, each ending the observation:

        1. no ``capacity[vcore]`` → not registered (``absent``);
        2. ``capacity[vcore]`` or ``capacity[vmemory]`` not a whole non-negative quantity → invalid (``register``);
        3. ``allocatable[count]`` not a quantity → invalid (``allocatable``);
        4. ``capacity[vcore]`` is 0 → not registered (``no_devices``);
        5. the memory per card beyond int32 → invalid (``register``);
        6. ``allocatable[count]`` present and ≤ 0 → not registered (``no_allocatable``); absent, the capacity
           alone registers the cards, as in HAMi;
        7. registered; ``hami.io/device-cordon`` ids of this node's cards are kept.
        """
        try:
            cores_total = _capacity_int(capacity, self.core_name)
            if cores_total is None:
                return reg.NotRegistered(reg.Unregistered.ABSENT)
            memory_total = _capacity_int(capacity, self.memory_name) or 0
        except _BadQuantity as bad:
            return reg.Invalid(reg.DecodeFailure.REGISTER, bad.source, bad.value, bad.error)
        quantity = reg.allocatable_quantity(allocatable, self.count_name)
        if isinstance(quantity, reg.Invalid):
            return quantity
        live = quantity > 0 or self.count_name not in allocatable  # HAMi reads the capacity alone
        if cores_total == 0:
            return reg.NotRegistered(reg.Unregistered.NO_DEVICES)
        try:
            devices = devices_from_capacity(name, cores_total, memory_total, card_type(labels))
        except DecodeError as e:
            return reg.Invalid(
                reg.DecodeFailure.REGISTER, f"status.capacity[{self.memory_name}]", str(capacity[self.memory_name]), e
            )
        if not live:
            return reg.NotRegistered(reg.Unregistered.NO_ALLOCATABLE)
        ids = {d.id for d in devices}
        cordoned = frozenset(u for u in decode_cordon(annotations.get(DEVICE_CORDON_KEY, "")) if u in ids)
        return reg.Registered(NodeInventory(node=name, vendor=MLU, devices=devices, cordoned=cordoned))


DEFAULT_VENDOR: Final = CambriconVendor()


# ------------------------------------------------------------------------------------------------------------
# Pod annotations besides the device list
# ------------------------------------------------------------------------------------------------------------


def extra_annotations(devices: PodDevices) -> dict[str, str]:
    """HAMi's extra pod annotations for a pod given MLUs: ``CAMBRICON_DSMLU_ASSIGNED=false`` (under both
    spellings, see :data:`DSMLU_ASSIGNED_LEGACY_KEY`) and
    ``CAMBRICON_DSMLU_PROFILE=<index>_<cores>_<memory // 256>`` of the first device of the first container that
    has one (HAMi reads only that one). Empty when the pod has no MLU."""
    for entry in devices:
        if entry:
            d = entry[0]
            profile = f"{card_index(d.uuid)}_{d.used_cores}_{d.used_mem_mib // MEMORY_UNIT_MIB}"
            return {DSMLU_ASSIGNED_KEY: "false", DSMLU_ASSIGNED_LEGACY_KEY: "false", DSMLU_PROFILE_KEY: profile}
    return {}


# ------------------------------------------------------------------------------------------------------------
# What a Cambricon device plugin writes on a Node (simulator, emulator, tests)
# ------------------------------------------------------------------------------------------------------------


def registration_annotations(devices: tuple[DeviceInfo, ...]) -> dict[str, str]:
    """Cambricon registers through node capacity: no annotation."""
    del devices
    return {}


def node_labels(devices: tuple[DeviceInfo, ...]) -> dict[str, str]:
    """The ``Model`` label that gives the cards their type (none for the generic ``MLU``)."""
    kinds = {d.type for d in devices}
    if len(kinds) > 1:
        raise ValueError(f"Cambricon cards of one node share one type, got {sorted(kinds)}")
    kind = next(iter(kinds), MLU)
    return {} if kind == MLU else {MODEL_LABEL: kind}


def node_capacity(devices: tuple[DeviceInfo, ...], vendor: CambriconVendor = DEFAULT_VENDOR) -> dict[str, str]:
    """Capacity (= allocatable) quantities that :meth:`CambriconVendor.observe` reads back as ``devices``: 100
    vcore per card, the memory total in 256 MiB units, and 100 count units per card (one per slot, our choice:
    the real plugin's count depends on its own settings). ValueError when the cards differ in memory or the
    total is not a whole number of units."""
    if not devices:
        return {}
    mems = {d.devmem_mib for d in devices}
    if len(mems) > 1:
        raise ValueError(f"Cambricon cards of one node share one memory size, got {sorted(mems)}")
    n = len(devices)
    total_mib = mems.pop() * n
    if total_mib % MEMORY_UNIT_MIB:
        raise ValueError(f"{total_mib} MiB in all is not a whole number of {MEMORY_UNIT_MIB} MiB units")
    return {
        vendor.count_name: str(CARD_CORES * n),
        vendor.memory_name: str(total_mib // MEMORY_UNIT_MIB),
        vendor.core_name: str(CARD_CORES * n),
    }
