"""The Enflame DRS vendor (:class:`VgcuVendor`): its requests, webhook edits and the plugin's bind annotations; and
``build``, both Enflame vendors of the ``enflame:`` section. Pure."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any, Final

from vgpu_scheduler.shared.codec._go import fail
from vgpu_scheduler.shared.codec.resources import (
    QuantityKind,
    ResourceRequestError,
    container_lists,
    pod_containers,
    raw_value,
)
from vgpu_scheduler.shared.domain.model import (
    EMPTY_REQUEST,
    MEM_PCT_UNSET,
    ContainerRequest,
    DeviceInfo,
    MigProfile,
    NodeInventory,
    PodDevices,
)
from vgpu_scheduler.shared.vendors.base import NodeLockKind, ResourceNames
from vgpu_scheduler.shared.vendors.common import read_container
from vgpu_scheduler.shared.vendors.described import DescribedVendor, observe_described
from vgpu_scheduler.shared.vendors.description import Description, Liveness, PodLists, RegisterAnnotation, SelectorKeys
from vgpu_scheduler.shared.vendors.enflame.drs import (
    DIRECT,
    VGCU_RULES,
    decode_drs_capacity,
    default_menu,
    device_minor,
    device_profiles,
    drs_profiles,
    encode_drs_capacity,
)
from vgpu_scheduler.shared.vendors.enflame.gcu import GcuVendor
from vgpu_scheduler.shared.vendors.enflame.keys import (
    ASSIGNED_CONTAINERS_KEY,
    ASSIGNED_ID_KEY,
    ASSIGNED_INDEX_KEY,
    ASSIGNED_KEY,
    ASSIGNED_MINOR_KEY,
    ASSIGNED_TIME_KEY,
    DRS_CAPACITY_KEY,
    NOUSE_UUID,
    REQUEST_SIZE_KEY,
    USE_UUID,
    VGCU,
    VGCU_ALLOCATED_KEY,
    EnflameConfig,
    parse_config,
)
from vgpu_scheduler.shared.vendors.registration import NodeView, Observation


def build(section: object) -> tuple[GcuVendor, VgcuVendor]:
    config = parse_config(section)
    return GcuVendor(config), VgcuVendor(config)


_DRS_REGISTER: Final = RegisterAnnotation(DRS_CAPACITY_KEY, liveness=Liveness.LISTED)
"""Decoded per node (:meth:`VgcuVendor.observe`: the cards are named after the node)."""

VGCU_DESCRIPTION: Final = Description(
    VGCU,
    VGCU_RULES,
    PodLists(VGCU_ALLOCATED_KEY),
    _DRS_REGISTER,
    SelectorKeys(USE_UUID, NOUSE_UUID),
    node_lock=NodeLockKind.NONE,
)


@dataclass(frozen=True, slots=True)
class VgcuVendor(DescribedVendor):
    """Enflame DRS instances (see the module docstring)."""

    description = VGCU_DESCRIPTION

    config: EnflameConfig = dataclasses.field(default_factory=EnflameConfig)

    @property
    def resources(self) -> ResourceNames:
        c = self.config
        return ResourceNames(
            count=c.resource_name_drs_gcu, memory=c.resource_name_gcu_memory, cores=c.resource_name_gcu_core
        )

    def container_request(self, container: Mapping[str, Any], what: str) -> ContainerRequest:
        """HAMi's ``GenerateResourceRequests`` with its webhook's checks: ``drs-gcu`` (limits, else requests) asks for
        a profile of that many slices; otherwise ``gcu-memory`` and/or ``gcu-core`` ask for the smallest profile
        holding both. Always one instance. Refused (ResourceRequestError), as HAMi's webhook refuses them: a
        ``drs-gcu`` or memory of 0, cores outside 1..100, and any bad quantity."""
        c = self.config
        limits, requests, r = read_container(
            container, what, c.resource_name_drs_gcu, c.resource_name_gcu_memory, c.resource_name_gcu_core
        )
        if raw_value(limits, requests, c.resource_name_drs_gcu)[0]:
            n = r.read(limits, requests, c.resource_name_drs_gcu, QuantityKind.COUNT)
            if n == 0:
                r.problem(f"{c.resource_name_drs_gcu} must be greater than 0 (the slices of one DRS profile)")
            if r.problems or n is None:
                raise ResourceRequestError(r.problems)
            return ContainerRequest(nums=1, mem_mib=n, mem_pct=DIRECT, cores_pct=0, type=VGCU)
        has_mem = raw_value(limits, requests, c.resource_name_gcu_memory)[0]
        has_core = raw_value(limits, requests, c.resource_name_gcu_core)[0]
        if not has_mem and not has_core:
            return EMPTY_REQUEST
        mem = r.read(limits, requests, c.resource_name_gcu_memory, QuantityKind.MEMORY)
        core = r.read(limits, requests, c.resource_name_gcu_core, QuantityKind.PRIORITY)
        if has_mem and mem == 0:
            r.problem(f"{c.resource_name_gcu_memory} must be greater than 0")
        if has_core and core is not None and not 1 <= core <= 100:
            r.problem(f"{c.resource_name_gcu_core} must be from 1 to 100 (a percentage of one GCU): got {core}")
        if r.problems:
            raise ResourceRequestError(r.problems)
        return ContainerRequest(nums=1, mem_mib=mem or 0, mem_pct=MEM_PCT_UNSET, cores_pct=core or 0, type=VGCU)

    def mutate_container(self, container: dict[str, Any], where: str) -> bool:
        """HAMi's ``MutateAdmission``: a container naming ``drs-gcu`` (or else memory / cores) in its limits or
        requests is ours; each of them given on one side only is copied to the other."""
        c = self.config
        limits, requests = container_lists(container, where)
        names = (c.resource_name_drs_gcu, c.resource_name_gcu_memory, c.resource_name_gcu_core)
        if not any(raw_value(limits, requests, n)[0] for n in names):
            return False
        self.container_request(container, where)
        resources = container.setdefault("resources", {})
        lim = resources.get("limits")
        req = resources.get("requests")
        if not isinstance(lim, dict):
            lim = resources["limits"] = {}
        if not isinstance(req, dict):
            req = resources["requests"] = {}
        copy = names[:1] if raw_value(lim, req, names[0])[0] else names[1:]
        for n in copy:
            if n in lim and n not in req:
                req[n] = lim[n]
            elif n in req and n not in lim:
                lim[n] = req[n]
        return True

    def plugin_device_count(self, container: Mapping[str, Any]) -> int:
        """How many instances Enflame's DRS plugin serves ``container``: one when it asks for a DRS resource (the
        count resource holds slices, not instances), else none. Used by the simulated device plugin."""
        return 1 if self.manages(container) else 0

    def observe(self, node: NodeView, now_local: datetime, *, reported_before: bool = False) -> Observation:
        """Registration from ``enflame.com/gcu-drs-capacity`` (its cards are named after the node): absent → not
        registered; undecodable → invalid; no card → not registered. HAMi's ``CheckHealth`` always says healthy: no
        handshake (:attr:`Liveness.LISTED`)."""
        del reported_before
        register = dataclasses.replace(_DRS_REGISTER, decode=partial(decode_drs_capacity, node=node.name))
        d = dataclasses.replace(self.description, register=register)
        return observe_described(node, now_local, d, self.resources.count)

    def node_registration(self, devices: Sequence[DeviceInfo]) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
        """What Enflame's DRS plugin writes for ``devices``: the capacity annotation (a card without a menu gets
        :func:`default_menu` of its memory and slots) and the count resource (one per slice)."""
        if not devices:
            return {}, {}, {}
        first = devices[0]
        if not first.mig_profiles:
            menu = default_menu(first.devmem_mib, first.count)
            if not menu:
                raise ValueError("a DRS card needs at least 1 GiB of memory and 1 slot")
            profiles = tuple(
                MigProfile(f"{p.name}={p.id}", p.memory_mib, p.core_pct, p.size, ()) for p in drs_profiles(menu)
            )
            devices = [dataclasses.replace(d, mig_profiles=profiles) for d in devices]
        count = {self.config.resource_name_drs_gcu: str(sum(d.count for d in devices))}
        return {DRS_CAPACITY_KEY: encode_drs_capacity(devices)}, count, {}

    def bind_pod_annotations(
        self, pod: Mapping[str, Any] | None, inventory: NodeInventory | None, devices: PodDevices, now_unix: int
    ) -> Mapping[str, str]:
        """HAMi's ``PatchAnnotations`` extras (see the module docstring); the first container with an instance
        names the card and the slices. DecodeError when the node's inventory or the card is gone."""
        if not any(devices):
            return {}
        out = {ASSIGNED_KEY: "false", ASSIGNED_TIME_KEY: str(now_unix * 1_000_000_000)}
        assigned: dict[str, dict[str, Any]] = {}
        for i, ctr in enumerate(devices):
            if not ctr:
                continue
            chosen = ctr[0]
            dev = inventory.device(chosen.uuid) if inventory is not None else None
            if dev is None:
                fail(VGCU_ALLOCATED_KEY, "the card is not registered on the node any more", chosen.uuid)
            profile = next(
                (
                    p
                    for p in device_profiles(dev)
                    if p.memory_mib == chosen.used_mem_mib and p.core_pct == chosen.used_cores
                ),
                None,
            )
            entry: dict[str, Any] = {"allocated": False, "request": profile.size if profile else 1}
            if profile is not None:
                entry["profileID"] = profile.id
                entry["profileName"] = profile.name
            assigned[container_name(pod, i)] = entry
            out.setdefault(ASSIGNED_INDEX_KEY, str(dev.index))
            out.setdefault(ASSIGNED_ID_KEY, str(dev.index))
            out.setdefault(ASSIGNED_MINOR_KEY, device_minor(dev))
            out.setdefault(REQUEST_SIZE_KEY, str(entry["request"]))
        out[ASSIGNED_CONTAINERS_KEY] = json.dumps(dict(sorted(assigned.items())), separators=(",", ":"))
        return out


def container_name(pod: Mapping[str, Any] | None, index: int) -> str:
    """HAMi's ``containerNameByIndex``: init containers first, then the others; ``container-<i>`` when unknown."""
    if pod is not None:
        inits, ctrs = pod_containers(pod)
        both = [*inits, *ctrs]
        if 0 <= index < len(both) and isinstance(both[index], Mapping):
            name = both[index].get("name")
            if isinstance(name, str):
                return name
    return f"container-{index}"
