"""What a pod holds, read from its annotations (difference 10, §5.4). Pure: no I/O.

A pod *holds* devices while it carries ``hami.io/vgpu-node``, is not in phase ``Succeeded``/``Failed`` and exists
(terminating pods stay counted). What it holds is its ``hami.io/vgpu-devices-allocated`` list (plus
``hami.io/vgpu-mig-allocations``) and every other enabled vendor's allocated list
(``hami.io/dcu-devices-allocated`` …), merged per container in vendor order, collapsed over init and app containers
by :func:`shared.domain.accounting.collapse` — the same function the extender charges a decision with, so a
confirmed reservation and the recorded pod agree.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec.podannotations import NVIDIA_READER, AllocatedReader, decode_allocation
from vgpu_scheduler.shared.codec.resources import pod_containers
from vgpu_scheduler.shared.domain.accounting import collapse
from vgpu_scheduler.shared.domain.allocation import Allocation
from vgpu_scheduler.shared.domain.model import BindPhase, DeviceCharge, PodDevices
from vgpu_scheduler.shared.errors import DecodeError

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
"""Pod phases whose devices are released at once (§5.4)."""


class PodStatus(enum.Enum):
    """How accounting sees a pod."""

    NOT_PLACED = "not_placed"  # no hami.io/vgpu-node: holds nothing (yet)
    HOLDS = "holds"  # placed, not terminated: holds its allocation
    TERMINATED = "terminated"  # Succeeded/Failed: holds nothing any more


@dataclass(frozen=True, slots=True)
class PodFacts:
    """The parts of a pod the informer acts on. ``node`` is the ``hami.io/vgpu-node`` annotation (None if absent);
    ``bind_time_s`` the ``hami.io/bind-time`` annotation when it is a plain integer."""

    uid: str
    namespace: str
    name: str
    phase: str
    node: str | None
    bind_phase: BindPhase | None
    bind_time_s: int | None

    @property
    def terminated(self) -> bool:
        return self.phase in TERMINAL_PHASES

    @property
    def status(self) -> PodStatus:
        if self.terminated:
            return PodStatus.TERMINATED
        if self.node is None:
            return PodStatus.NOT_PLACED
        return PodStatus.HOLDS

    @property
    def settled(self) -> bool:
        """The device plugin has finished with the pod: bind phase ``success`` or ``failed``."""
        return self.bind_phase in (BindPhase.SUCCESS, BindPhase.FAILED)


def _mapping(v: Any) -> Mapping[str, Any]:
    return v if isinstance(v, Mapping) else {}


def _str(v: Any) -> str:
    return v if isinstance(v, str) else ""


def pod_facts(pod: Mapping[str, Any]) -> PodFacts:
    """The facts of a pod's JSON; missing or oddly typed fields read as absent (never raises)."""
    meta = _mapping(pod.get("metadata"))
    annos = _mapping(meta.get("annotations"))
    node = annos.get(keys.VGPU_NODE)
    phase_text = annos.get(keys.BIND_PHASE)
    try:
        bind_phase = BindPhase(phase_text) if isinstance(phase_text, str) else None
    except ValueError:
        bind_phase = None
    bind_time = annos.get(keys.BIND_TIME)
    bind_time_s = int(bind_time) if isinstance(bind_time, str) and bind_time.isdigit() else None
    return PodFacts(
        uid=_str(meta.get("uid")),
        namespace=_str(meta.get("namespace")),
        name=_str(meta.get("name")),
        phase=_str(_mapping(pod.get("status")).get("phase")),
        node=node if isinstance(node, str) else None,
        bind_phase=bind_phase,
        bind_time_s=bind_time_s,
    )


def _recorded(
    charges: tuple[DeviceCharge, ...],
    devices: PodDevices,
    annotations: Mapping[str, Any],
    vendors: Sequence[AllocatedReader],
) -> tuple[DeviceCharge, ...]:
    """The charges as the vendors that complete them record them (the optional vendor hook
    ``recorded_charge(annotations, charge)``: MetaX sGPUs' usage tags and sharing rule, read from the pod's app
    class and QoS policy), equal to the extender's reservation."""
    hooks = {getattr(v, "name", ""): getattr(v, "recorded_charge", None) for v in vendors}
    completing = {name: hook for name, hook in hooks.items() if hook is not None}
    if not completing:
        return charges
    kinds = {d.uuid: d.type for ctr in devices for d in ctr}
    return tuple(completing[kinds[c.uuid]](annotations, c) if kinds.get(c.uuid) in completing else c for c in charges)


def pod_allocation(
    pod: Mapping[str, Any],
    device_totals: Mapping[str, int] | None = None,
    vendors: Sequence[AllocatedReader] = (NVIDIA_READER,),
) -> Allocation | None:
    """The allocation a placed pod holds, or None when it holds nothing (not placed, or no device entries).

    ``vendors`` are read in order (each one's allocated annotation), their devices merged per container
    (:func:`~shared.codec.podannotations.decode_allocation`).

    Does not look at the phase: callers decide whether a terminated pod still counts (it does not).
    ``device_totals`` (UUID → core total, from the node's inventory) marks whole-card charges as the extender
    does. Raises :class:`DecodeError` naming the annotation when the pod's allocation cannot be read.
    """
    decoded = decode_allocation(pod, vendors)
    if decoded is None:
        return None
    facts = pod_facts(pod)
    if not facts.node:
        raise DecodeError(keys.VGPU_NODE, "empty node name", "")
    if not facts.uid:
        raise DecodeError("pod.metadata.uid", "placed pod without a uid")
    devices, mig = decoded
    init, _ = pod_containers(pod)
    charges = collapse(devices, len(init), mig, device_totals=dict(device_totals) if device_totals else None)
    if not charges:
        return None
    charges = _recorded(charges, devices, _mapping(_mapping(pod.get("metadata")).get("annotations")), vendors)
    return Allocation(
        pod_uid=facts.uid,
        namespace=facts.namespace,
        name=facts.name,
        node=facts.node,
        devices=devices,
        charges=charges,
        mig=mig,
    )
