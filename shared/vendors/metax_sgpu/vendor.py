"""The MetaX sGPU vendor (:class:`MetaxSgpuVendor`): its description, the webhook's QoS default and the plugin's extra
pod annotations. Pure."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from vgpu_scheduler.shared.codec.resources import ResourceRequestError, container_label, container_lists
from vgpu_scheduler.shared.domain.model import ContainerRequest, DeviceCharge, DeviceInfo, PodDevices, Selectors
from vgpu_scheduler.shared.vendors.base import ResourceNames
from vgpu_scheduler.shared.vendors.described import DescribedVendor
from vgpu_scheduler.shared.vendors.description import Description, Liveness, PodLists, RegisterAnnotation, SelectorKeys
from vgpu_scheduler.shared.vendors.metax_sgpu.fit import SGPU_RULES, sharing_terms
from vgpu_scheduler.shared.vendors.metax_sgpu.keys import (
    ALLOCATED_KEY,
    APP_CLASS_KEY,
    BEST_EFFORT,
    MEMORY_FACTOR,
    METAX_ALLOCATED_KEY,
    NAME,
    NOUSE_UUID,
    OFFLINE,
    ONLINE,
    PREDICATE_TIME_KEY,
    QOS_POLICY_KEY,
    REGISTER_KEY,
    TO_ALLOCATE_KEY,
    USE_UUID,
)
from vgpu_scheduler.shared.vendors.metax_sgpu.registration import decode_devices_register, registration_value
from vgpu_scheduler.shared.vendors.metax_sgpu.requests import capped_vcore_warning, qos_selectors, sgpu_request

DESCRIPTION: Final = Description(
    NAME,
    SGPU_RULES,
    PodLists(ALLOCATED_KEY, TO_ALLOCATE_KEY),
    RegisterAnnotation(REGISTER_KEY, decode_devices_register, liveness=Liveness.LISTED),
    SelectorKeys(USE_UUID, NOUSE_UUID),
)


@dataclass(frozen=True, slots=True)
class MetaxSgpuVendor(DescribedVendor):
    """MetaX sGPUs (see the module docstring). The names come from the ``metax:`` section."""

    description = DESCRIPTION

    count_name: str = "metax-tech.com/sgpu"
    memory_name: str = "metax-tech.com/vmemory"
    core_name: str = "metax-tech.com/vcore"

    @property
    def resources(self) -> ResourceNames:
        return ResourceNames(
            count=self.count_name, memory=self.memory_name, cores=self.core_name, memory_unit_mib=MEMORY_FACTOR
        )

    # ---- requests ----------------------------------------------------------------------------------------------

    def container_request(self, container: Mapping[str, Any], what: str) -> ContainerRequest:
        return sgpu_request(container, what, self.count_name, self.core_name, self.memory_name)

    def admission_warnings(self, container: Mapping[str, Any], where: str) -> tuple[str, ...]:
        """A ``vcore`` above 100 is scheduled as 100 (HAMi's ``Fit`` caps it without a word)."""
        warning = capped_vcore_warning(container, where, self.count_name, self.core_name)
        return (warning,) if warning else ()

    def mutate_container(self, container: dict[str, Any], where: str) -> bool:
        """HAMi's ``MutateAdmission`` for the container: no edit; ours when the count is in the limits (validated
        here). The QoS default is :meth:`mutate_pod`'s."""
        limits, _ = container_lists(container, where)
        if self.count_name not in limits:
            return False
        self.container_request(container, where)
        return True

    def mutate_pod(self, pod: dict[str, Any], where: str) -> None:
        """HAMi's ``MutateAdmission`` pod edit: a pod with an sGPU container and no
        ``metax-tech.com/sgpu-qos-policy`` gets ``best-effort``, unless it is online. A pod with an app class must
        ask for exactly one card in each sGPU container (HAMi: "app-class pod must request single device"): a
        :class:`ResourceRequestError` naming the container otherwise. (A bad policy or app class is refused
        through :meth:`selectors`, which the webhook and ``/filter`` both read.)"""
        del where
        spec = pod.get("spec") or {}
        asking = [
            (key, i, ctr)
            for key in ("initContainers", "containers")
            for i, ctr in enumerate(spec.get(key) or ())
            if isinstance(ctr, Mapping)
            and isinstance(ctr.get("resources"), Mapping)
            and isinstance(ctr["resources"].get("limits"), Mapping)
            and self.count_name in ctr["resources"]["limits"]
        ]
        if not asking:
            return
        meta = pod.setdefault("metadata", {})
        annotations = meta.get("annotations")
        if not isinstance(annotations, dict):
            annotations = meta["annotations"] = {}
        app = annotations.get(APP_CLASS_KEY)
        if app in (ONLINE, OFFLINE):
            problems = [
                f"{container_label(ctr, f'spec.{key}[{i}]')}: {self.count_name} "
                f"{ctr['resources']['limits'][self.count_name]!r} is not one card, and a pod with {APP_CLASS_KEY}: "
                f"{app} must ask for exactly one; write 1"
                for key, i, ctr in asking
                if self.container_request(ctr, f"spec.{key}[{i}]").nums != 1
            ]
            if problems:
                raise ResourceRequestError(problems)
        if app != ONLINE:
            annotations.setdefault(QOS_POLICY_KEY, BEST_EFFORT)

    def selectors(self, annotations: Mapping[str, str]) -> Selectors:
        return qos_selectors(annotations)

    def recorded_charge(self, annotations: Mapping[str, Any], charge: DeviceCharge) -> DeviceCharge:
        """A placed pod's charge on a card as the informer records it: :func:`sharing_terms` read from the pod's
        annotations (what the reservation had). Never raises: an app class other than ``online``/``offline`` reads
        as none, an online pod's policy is not read."""
        app = annotations.get(APP_CLASS_KEY)
        app_class = app if app in (ONLINE, OFFLINE) else ""
        qos = annotations.get(QOS_POLICY_KEY)
        return sharing_terms(charge, app_class, qos if isinstance(qos, str) and app_class != ONLINE else "")

    # ---- registration ------------------------------------------------------------------------------------------

    def node_registration(self, devices: Sequence[DeviceInfo]) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
        """What the MetaX device plugin writes on its Node: the JSON register value and the count of slots."""
        if not devices:
            return {}, {}, {}
        return {REGISTER_KEY: registration_value(devices)}, {self.count_name: str(sum(d.count for d in devices))}, {}

    # ---- pod annotations ---------------------------------------------------------------------------------------

    def extra_pod_annotations(self, devices: PodDevices, now_unix: int) -> Mapping[str, str]:
        """HAMi's ``PatchAnnotations`` for sGPUs besides the device lists: the plugin's own JSON list
        (``metax-tech.com/gpu-devices-allocated``, ``compute`` and ``vRam`` left out when 0, as Go's
        ``omitempty``) and ``metax-tech.com/predicate-time`` (the bind's time in nanoseconds, whole seconds)."""
        if not any(devices):
            return {}
        return {
            METAX_ALLOCATED_KEY: metax_allocated_value(devices),
            PREDICATE_TIME_KEY: str(now_unix * 1_000_000_000),
        }


def metax_allocated_value(devices: PodDevices) -> str:
    """``metax-tech.com/gpu-devices-allocated``: one list per container of ``{"uuid", "compute", "vRam"}``."""
    out: list[list[dict[str, Any]]] = []
    for ctr in devices:
        entries: list[dict[str, Any]] = []
        for d in ctr:
            entry: dict[str, Any] = {"uuid": d.uuid}
            if d.used_cores:
                entry["compute"] = d.used_cores
            if d.used_mem_mib:
                entry["vRam"] = d.used_mem_mib
            entries.append(entry)
        out.append(entries)
    return json.dumps(out, separators=(",", ":"))
