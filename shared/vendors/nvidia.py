"""NVIDIA as a :class:`~shared.vendors.base.Vendor` (pure). Registration: ``hami.io/node-nvidia-register`` +
``hami.io/node-nvidia-score`` + ``hami.io/device-cordon`` → :class:`NodeInventory`, and
liveness (hami-wire §2.1–2.4, differences 1 and 9).

Order of the checks, each ending the observation:

1. no register annotation → not registered (``absent``);
2. the register annotation does not decode (JSON, 9- or 7-field colon format) → invalid (``register``);
3. the topology score annotation is present but does not decode → invalid (``topology_score``): HAMi fails the
   whole NVIDIA registration of the node in that case (§2.3);
4. ``allocatable[<resourceCountName>]`` is not a quantity → invalid (``allocatable``);
5. the device list is empty → not registered (``no_devices``);
6. liveness: live when allocatable > 0; for ≤ v2.7 plugins (colon format, or ``Reported`` seen) also while our
   ``Requesting_`` is fresh or is being answered (:func:`~services.registrar.vendor.judge_handshake`);
   otherwise not registered (``no_allocatable`` / ``handshake_timeout``).

Cordoned UUIDs are kept only when the node has such a device (the list is an admin's free text).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec.register import decode_register, is_json
from vgpu_scheduler.shared.codec.resources import capped_cores_warning, container_request, names_any
from vgpu_scheduler.shared.codec.selectors import decode_cordon, decode_pod_constraints
from vgpu_scheduler.shared.codec.topology import decode_topology
from vgpu_scheduler.shared.domain.model import NVIDIA, ContainerRequest, NodeInventory, NvidiaConfig, Selectors
from vgpu_scheduler.shared.domain.vendor import NVIDIA_RULES
from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.vendors import registration as reg
from vgpu_scheduler.shared.vendors.base import ResourceNames
from vgpu_scheduler.shared.vendors.described import DescribedVendor, share_resources
from vgpu_scheduler.shared.vendors.description import Description, PodLists, RegisterAnnotation
from vgpu_scheduler.shared.vendors.registration import HANDSHAKE_TIMEOUT_S, NodeView, Observation

DESCRIPTION: Final = Description(
    NVIDIA,
    NVIDIA_RULES,
    PodLists(keys.DEVICES_ALLOCATED, keys.DEVICES_TO_ALLOCATE),
    RegisterAnnotation(keys.NODE_NVIDIA_REGISTER, handshake=keys.NODE_HANDSHAKE),
)


@dataclass(frozen=True, slots=True)
class NvidiaVendor(DescribedVendor):
    """The NVIDIA vendor. ``config.resource_count_name`` is the allocatable resource judged for liveness."""

    description = DESCRIPTION

    config: NvidiaConfig = field(default_factory=NvidiaConfig)
    handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S

    @property
    def resources(self) -> ResourceNames:
        c = self.config
        return share_resources(
            c,
            max(c.memory_factor, 1),
            memory_percentage=c.resource_memory_percentage_name,
            extra=(c.resource_priority_name,),
        )

    def manages(self, container: Mapping[str, Any]) -> bool:
        return names_any(container, self.config.resource_names)

    def container_request(self, container: Mapping[str, Any], what: str) -> ContainerRequest:
        return container_request(container, self.config, what)

    def mutate_container(self, container: dict[str, Any], where: str) -> bool:
        """NVIDIA's admission edits need the whole pod (``shared.protocol.webhook``); here only "is it ours"."""
        del where
        return self.manages(container)

    def admission_warnings(self, container: Mapping[str, Any], where: str) -> tuple[str, ...]:
        """A core percentage above 100 is scheduled as 100 (HAMi's ``Fit`` caps it without a word)."""
        warning = capped_cores_warning(container, self.config.resource_core_name, where)
        return (warning,) if warning else ()

    def selectors(self, annotations: Mapping[str, str]) -> Selectors:
        c = decode_pod_constraints(annotations)
        return Selectors(c.use_types, c.nouse_types, c.use_uuids, c.nouse_uuids)

    def observe(self, node: NodeView, now_local: datetime, *, reported_before: bool = False) -> Observation:
        """See the module docstring for the order of the checks."""
        a = node.annotations
        register = a.get(keys.NODE_NVIDIA_REGISTER)
        if register is None:
            return reg.NotRegistered(reg.Unregistered.ABSENT)
        try:
            devices = decode_register(register)
        except DecodeError as e:
            return reg.Invalid(reg.DecodeFailure.REGISTER, keys.NODE_NVIDIA_REGISTER, register, e)
        score = a.get(keys.NODE_NVIDIA_SCORE)
        pair_scores = {}
        if score is not None:
            try:
                pair_scores = {k: dict(v) for k, v in decode_topology(score).items()}
            except DecodeError as e:
                return reg.Invalid(reg.DecodeFailure.TOPOLOGY, keys.NODE_NVIDIA_SCORE, score, e)
        count_name = self.config.resource_count_name
        allocatable = reg.allocatable_quantity(node.allocatable, count_name)
        if isinstance(allocatable, reg.Invalid):
            return allocatable

        handshake_value = a.get(keys.NODE_HANDSHAKE)
        legacy = not is_json(register) or reg.is_reported(handshake_value) or reported_before
        if not devices:
            return reg.NotRegistered(reg.Unregistered.NO_DEVICES, legacy)

        write: str | None = None
        reporter = False
        live = allocatable > 0
        reason = reg.Unregistered.NO_ALLOCATABLE
        if legacy:
            judged = reg.judge_handshake(handshake_value, now_local, self.handshake_timeout_s)
            write, reporter = judged.write, judged.reporter
            if judged.state is not reg.HandshakeState.EXPIRED:
                live = True
            reason = reg.Unregistered.HANDSHAKE_TIMEOUT
        if not live:
            return reg.NotRegistered(reason, legacy)

        ids = {d.id for d in devices}
        cordoned = frozenset(u for u in decode_cordon(a.get(keys.DEVICE_CORDON, "")) if u in ids)
        inventory = NodeInventory(
            node=node.name, vendor=NVIDIA, devices=devices, pair_scores=pair_scores, cordoned=cordoned
        )
        return reg.Registered(inventory, handshake=write, legacy=legacy, reporter=reporter)
