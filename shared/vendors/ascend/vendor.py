"""One Ascend chip as every process sees it (:class:`AscendVendor`). Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec._go import dump_array, dump_object, dump_str, fail
from vgpu_scheduler.shared.codec.resources import (
    ResourceRequestError,
    capped_cores_warning,
    container_label,
    container_lists,
)
from vgpu_scheduler.shared.codec.selectors import annotation_text, decode_cordon
from vgpu_scheduler.shared.domain.model import ContainerRequest, DeviceInfo, NodeInventory, PodDevices, Selectors
from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.vendors import registration as reg
from vgpu_scheduler.shared.vendors.ascend.config import (
    PREDICATE_TIME,
    SOFT_CORE_TOTAL,
    VISIBLE_DEVICES_ENV,
    VNPU_MODE_ANNOTATION,
    VNPU_MODE_HAMI_CORE,
    VNPU_NODE_ANNOTATION,
    ChipConfig,
)
from vgpu_scheduler.shared.vendors.ascend.fit import AscendRules
from vgpu_scheduler.shared.vendors.ascend.registration import (
    _pair_scores,
    decode_registration,
    handshake_key,
    register_key,
    registration_annotations,
)
from vgpu_scheduler.shared.vendors.ascend.requests import parse_container
from vgpu_scheduler.shared.vendors.base import ResourceNames
from vgpu_scheduler.shared.vendors.described import DescribedVendor
from vgpu_scheduler.shared.vendors.description import Description, PodLists, RegisterAnnotation, SelectorKeys
from vgpu_scheduler.shared.vendors.registration import HANDSHAKE_TIMEOUT_S, NodeView, Observation
from vgpu_scheduler.shared.vendors.simple import uuid_selectors


def describe(common_word: str, rules: AscendRules) -> Description:
    """A chip's wire names, all built from its common word (``hami.io/node-register-<cw>`` …)."""
    return Description(
        common_word,
        rules,
        PodLists(f"hami.io/{common_word}-devices-allocated", f"hami.io/{common_word}-devices-to-allocate"),
        RegisterAnnotation(register_key(common_word), handshake=handshake_key(common_word)),
        SelectorKeys(f"hami.io/use-{common_word}-uuid", f"hami.io/no-use-{common_word}-uuid"),
    )


@dataclass(frozen=True, slots=True)
class AscendVendor(DescribedVendor):
    """One Ascend chip (one ``vnpus`` entry) as every process sees it: the wire names are built from its common
    word (:func:`describe`); its requests (templates or the soft split), selectors (with the vNPU mode),
    registration (with the HCCS pair scores) and pod annotations are its own."""

    chip: ChipConfig
    handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S
    _rules: AscendRules = field(init=False, repr=False, compare=False)
    description: Description = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_rules", AscendRules(self.chip))
        object.__setattr__(self, "description", describe(self.chip.common_word, self._rules))

    @property
    def resources(self) -> ResourceNames:
        c = self.chip
        return ResourceNames(
            count=c.resource_name,
            memory=c.resource_memory_name or None,
            cores=c.resource_core_name or None,
            memory_unit_mib=max(c.memory_factor, 1),
        )

    @property
    def rules(self) -> AscendRules:
        return self._rules

    # an Ascend chip always has these keys: narrowed to str for its callers
    @property
    def to_allocate_key(self) -> str:
        return self.description.pods.to_allocate or ""

    @property
    def register_key(self) -> str:
        return register_key(self.name)

    @property
    def handshake_key(self) -> str:
        return handshake_key(self.name)

    @property
    def runtime_key(self) -> str:
        """The plugin's runtime list annotation ``huawei.com/<cw>`` (see :meth:`runtime_info`)."""
        return f"huawei.com/{self.name}"

    # ---- requests ------------------------------------------------------------------------------------------

    def container_request(self, container: Mapping[str, Any], what: str) -> ContainerRequest:
        return parse_container(self.chip, container, what).request

    def mutate_container(self, container: dict[str, Any], where: str) -> bool:
        """HAMi's ``MutateAdmission``. A container that asks for no Ascend chip at all gets
        ``ASCEND_VISIBLE_DEVICES=""`` when ``overwriteEnv`` is set (unless its last entry of that name already is
        the literal ``""``) and is not ours; a container asking for a sibling chip is left alone. Otherwise the
        request is validated (ResourceRequestError), a 910C count of 1 becomes 2 (``superPod``), and the memory
        limit and request are set to what the container takes (the template, the soft-split memory as written,
        or ``memoryAllocatable`` for whole NPUs; only when ``memoryFactor`` is 1)."""
        c = self.chip
        limits, requests = container_lists(container, where)
        if c.resource_name not in limits and c.resource_name not in requests:
            chips = c.ascend_resource_names or (c.resource_name,)
            asks_any = any(n in limits or n in requests for n in chips)  # a sibling chip's container is not hidden
            if c.overwrite_env and not asks_any:
                env = container.setdefault("env", [])
                if not _last_is_empty(env, VISIBLE_DEVICES_ENV):  # the kubelet takes the last same-name entry
                    env.append({"name": VISIBLE_DEVICES_ENV, "value": ""})
            return False
        parsed = parse_container(self.chip, container, where)
        req = parsed.request
        if req.empty:
            return False
        res = container.setdefault("resources", {})
        lim = res.setdefault("limits", {})
        rq = res.setdefault("requests", {})
        if req.nums != parsed.count_raw_nums:
            for lst in (lim, rq):
                if c.resource_name in lst:
                    lst[c.resource_name] = str(req.nums)
        if max(c.memory_factor, 1) == 1 and c.resource_memory_name:
            mem = req.mem_mib if req.mem_mib else c.memory_allocatable
            lim[c.resource_memory_name] = str(mem)
            rq[c.resource_memory_name] = str(mem)
        return True

    def mutate_pod(self, pod: dict[str, Any], where: str) -> None:
        """The pod-level rule of HAMi v2.10's ``MutateAdmission``: an AI-core percent above 0 in a pod without
        ``huawei.com/vnpu-mode: hami-core`` is refused (ResourceRequestError; the soft split is chosen by that
        annotation, a template vNPU's cores are fixed by its template)."""
        del where
        metadata = pod.get("metadata")
        annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
        if isinstance(annotations, Mapping) and annotations.get(VNPU_MODE_ANNOTATION) == VNPU_MODE_HAMI_CORE:
            return
        spec = pod.get("spec")
        if not isinstance(spec, Mapping):
            return
        c = self.chip
        problems: list[str] = []
        for kind in ("initContainers", "containers"):
            containers = spec.get(kind)
            for i, container in enumerate(containers if isinstance(containers, list) else ()):
                if not isinstance(container, Mapping):
                    continue
                here = f"{kind}[{i}]"
                cores = parse_container(self.chip, container, here).request.cores_pct
                if cores > 0:
                    problems.append(
                        f"{container_label(container, here)}: {c.resource_core_name} asks for {cores} AI-core "
                        f"percent, which is the hami-core soft split: add the pod annotation {VNPU_MODE_ANNOTATION}: "
                        f"{VNPU_MODE_HAMI_CORE} (the pod then runs only on soft-split nodes), or remove "
                        f"{c.resource_core_name} for a vNPU template"
                    )
        if problems:
            raise ResourceRequestError(problems)

    def admission_warnings(self, container: Mapping[str, Any], where: str) -> tuple[str, ...]:
        """An AI-core percent above 100 is scheduled as 100, as HAMi v2.10's ``Fit`` clamps it (difference 23)."""
        w = capped_cores_warning(container, self.chip.resource_core_name, where, device="NPU")
        return (w,) if w else ()

    def selectors(self, annotations: Mapping[str, str]) -> Selectors:
        sel = uuid_selectors(annotations, self.use_uuid_key, self.no_use_uuid_key, "NPU")
        mode = ""
        if (v := annotation_text(annotations, VNPU_MODE_ANNOTATION)) is not None:
            if v not in ("", VNPU_MODE_HAMI_CORE, "template"):
                fail(VNPU_MODE_ANNOTATION, f"expected {VNPU_MODE_HAMI_CORE} (the soft split) or template", v)
            mode = v if v == VNPU_MODE_HAMI_CORE else ""
        return Selectors(use_uuids=sel.use_uuids, nouse_uuids=sel.nouse_uuids, mode=mode)

    # ---- registration --------------------------------------------------------------------------------------

    def observe(self, node: NodeView, now_local: datetime, *, reported_before: bool = False) -> Observation:
        """Registration and liveness, in the order of the NVIDIA registrar:

        1. no register annotation → not registered (``absent``);
        2. it does not decode → invalid (``register``);
        3. ``allocatable[resourceName]`` is not a quantity → invalid (``allocatable``);
        4. no NPU → not registered (``no_devices``);
        5. liveness by the handshake (HAMi's ``CheckHealth``): live while our ``Requesting_`` is fresh or the
           plugin answered (anything else than a ``Requesting_``, e.g. its ``Reported_…``, is answered with a fresh
           ``Requesting_``); once our ``Requesting_`` is older than the timeout, live only while allocatable > 0.
        """
        a = node.annotations
        key = self.register_key
        register = a.get(key)
        if register is None:
            return reg.NotRegistered(reg.Unregistered.ABSENT, legacy=True)
        try:
            npus = decode_registration(register, self.name)
        except DecodeError as e:
            return reg.Invalid(reg.DecodeFailure.REGISTER, key, register, e)
        count_name = self.chip.resource_name
        allocatable = reg.allocatable_quantity(node.allocatable, count_name)
        if isinstance(allocatable, reg.Invalid):
            return allocatable
        if not npus:
            return reg.NotRegistered(reg.Unregistered.NO_DEVICES, legacy=True)
        shake = a.get(self.handshake_key)
        judged = reg.judge_handshake(shake, now_local, self.handshake_timeout_s)
        reporter = reported_before or (shake is not None and shake.startswith("Reported"))
        if judged.state is reg.HandshakeState.EXPIRED and allocatable <= 0:
            return reg.NotRegistered(reg.Unregistered.HANDSHAKE_TIMEOUT, legacy=True)
        devices = tuple(n.device for n in npus)
        if self.node_soft(a):  # every NPU is 100 % of its AI cores, shared by percent
            devices = tuple(replace(d, mode=VNPU_MODE_HAMI_CORE, devcore=SOFT_CORE_TOTAL) for d in devices)
        ids = {d.id for d in devices}
        cordoned = frozenset(u for u in decode_cordon(a.get(keys.DEVICE_CORDON, "")) if u in ids)
        inventory = NodeInventory(
            node=node.name, vendor=self.name, devices=devices, pair_scores=_pair_scores(npus), cordoned=cordoned
        )
        return reg.Registered(inventory, handshake=judged.write, legacy=True, reporter=reporter)

    def node_soft(self, annotations: Mapping[str, str]) -> bool:
        """Whether the node runs the hami-core soft split: its ``hami-vnpu-core`` annotation is ``"true"``, or,
        without the annotation, the ``vnpus`` section's ``hamiVnpuCore`` / ``hamiVnpuMode`` say so."""
        v = annotations.get(VNPU_NODE_ANNOTATION)
        return self.chip.hami_core if v is None else v == "true"

    # ---- pod annotations -----------------------------------------------------------------------------------

    def runtime_info(self, devices: PodDevices, *, soft: bool = False) -> str:
        """The value of ``huawei.com/<cw>`` that HAMi's ``PatchAnnotations`` writes for the device plugin: a JSON
        list over every device of every container, ``{"UUID": …, "temp": <template>, "memory": <MiB>,
        "core": <percent>}``, each key left out when empty (``temp`` for a whole NPU, and always for a hami-core
        pod: ``soft``); ``null`` when there is no device (Go marshals a nil slice so)."""
        items = []
        for ctr in devices:
            for d in ctr:
                pairs = [("UUID", dump_str(d.uuid))] if d.uuid else []
                if not soft:
                    _, temp = self.chip.trim_memory(d.used_mem_mib)
                    if temp:
                        pairs.append(("temp", dump_str(temp)))
                if d.used_mem_mib:
                    pairs.append(("memory", str(d.used_mem_mib)))
                if d.used_cores:
                    pairs.append(("core", str(d.used_cores)))
                items.append(dump_object(pairs))
        return dump_array(items) if items else "null"

    def bind_pod_annotations(
        self, pod: Mapping[str, Any] | None, inventory: NodeInventory | None, devices: PodDevices, now_unix: int
    ) -> dict[str, str]:
        """A hami-core pod's runtime list has no ``temp`` (HAMi's ``PatchAnnotations`` reads the pod's
        ``huawei.com/vnpu-mode``); it replaces the one :meth:`extra_pod_annotations` wrote."""
        del inventory, now_unix
        if pod is None or not any(devices):
            return {}
        metadata = pod.get("metadata")
        annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
        if not isinstance(annotations, Mapping) or annotations.get(VNPU_MODE_ANNOTATION) != VNPU_MODE_HAMI_CORE:
            return {}
        return {self.runtime_key: self.runtime_info(devices, soft=True)}

    def extra_pod_annotations(self, devices: PodDevices, now_unix: int) -> dict[str, str]:
        """Written with the device lists when the pod got NPUs of this chip: the plugin's runtime list
        ``huawei.com/<cw>`` and ``predicate-time`` (Unix seconds; Huawei's plugins find the pod by it)."""
        if not any(devices):
            return {}
        return {self.runtime_key: self.runtime_info(devices), PREDICATE_TIME: str(now_unix)}

    def pod_annotations(self, devices: PodDevices) -> dict[str, str]:
        """The Ascend annotations a bind writes when the pod got NPUs of this chip (besides ``predicate-time``,
        which the caller adds): the device list under both keys and the runtime list."""
        if not any(devices):
            return {}
        encoded = self.encode_devices(devices)
        return {
            self.to_allocate_key: encoded,
            self.allocated_key: encoded,
            self.runtime_key: self.runtime_info(devices),
        }

    def registration_annotations(
        self,
        devices: Sequence[DeviceInfo],
        *,
        network_ids: Mapping[str, int] | None = None,
        reported_at: datetime | None = None,
    ) -> dict[str, str]:
        """:func:`registration_annotations` for this chip's devices (their ``vendor`` is set to the common word)."""
        own = [_with_vendor(d, self.name) for d in devices]
        return registration_annotations(own, network_ids=network_ids, reported_at=reported_at)

    def node_capacity(self, devices: Sequence[DeviceInfo]) -> dict[str, str]:
        return {self.chip.resource_name: str(sum(d.count for d in devices))}


def _with_vendor(d: DeviceInfo, vendor: str) -> DeviceInfo:
    if d.vendor == vendor:
        return d
    return DeviceInfo(
        d.id, d.index, d.count, d.devmem_mib, d.devcore, d.type, d.numa, d.mode, d.health, d.mig_profiles, vendor
    )


def _last_is_empty(env: Sequence[Any], name: str) -> bool:
    for e in reversed(env):
        if isinstance(e, Mapping) and e.get("name") == name:
            return e.get("valueFrom") is None and e.get("value", "") == ""
    return False
