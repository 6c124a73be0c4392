"""NVIDIA as a registrar vendor (pure): ``hami.io/node-nvidia-register`` + ``hami.io/node-nvidia-score`` +
``hami.io/device-cordon`` → :class:`NodeInventory`, and liveness (hami-wire §2.1–2.4, differences 1 and 9).

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

from dataclasses import dataclass, field
from datetime import datetime

from services.registrar.vendor import (
    HANDSHAKE_TIMEOUT_S,
    DecodeFailure,
    HandshakeState,
    Invalid,
    NodeView,
    NotRegistered,
    Observation,
    Registered,
    Unregistered,
    is_reported,
    judge_handshake,
)
from shared.codec import annotations as keys
from shared.codec.quantity import parse_quantity
from shared.codec.register import decode_register, is_json
from shared.codec.selectors import decode_cordon
from shared.codec.topology import decode_topology
from shared.domain.model import NVIDIA, NodeInventory, NvidiaConfig
from shared.errors import DecodeError


@dataclass(frozen=True, slots=True)
class NvidiaVendor:
    """The NVIDIA vendor. ``config.resource_count_name`` is the allocatable resource judged for liveness."""

    config: NvidiaConfig = field(default_factory=NvidiaConfig)
    handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S

    @property
    def name(self) -> str:
        return NVIDIA

    @property
    def handshake_key(self) -> str:
        return keys.NODE_HANDSHAKE

    def observe(self, node: NodeView, now_local: datetime, *, reported_before: bool = False) -> Observation:
        """See the module docstring for the order of the checks."""
        a = node.annotations
        register = a.get(keys.NODE_NVIDIA_REGISTER)
        if register is None:
            return NotRegistered(Unregistered.ABSENT)
        try:
            devices = decode_register(register)
        except DecodeError as e:
            return Invalid(DecodeFailure.REGISTER, keys.NODE_NVIDIA_REGISTER, register, e)
        score = a.get(keys.NODE_NVIDIA_SCORE)
        pair_scores = {}
        if score is not None:
            try:
                pair_scores = {k: dict(v) for k, v in decode_topology(score).items()}
            except DecodeError as e:
                return Invalid(DecodeFailure.TOPOLOGY, keys.NODE_NVIDIA_SCORE, score, e)
        count_name = self.config.resource_count_name
        source = f"status.allocatable[{count_name}]"
        raw = node.allocatable.get(count_name, 0)
        try:
            allocatable = parse_quantity(raw, source)
        except DecodeError as e:
            return Invalid(DecodeFailure.ALLOCATABLE, source, str(raw), e)

        handshake_value = a.get(self.handshake_key)
        legacy = not is_json(register) or is_reported(handshake_value) or reported_before
        if not devices:
            return NotRegistered(Unregistered.NO_DEVICES, legacy)

        write: str | None = None
        reporter = False
        live = allocatable > 0
        reason = Unregistered.NO_ALLOCATABLE
        if legacy:
            judged = judge_handshake(handshake_value, now_local, self.handshake_timeout_s)
            write, reporter = judged.write, judged.reporter
            if judged.state is not HandshakeState.EXPIRED:
                live = True
            reason = Unregistered.HANDSHAKE_TIMEOUT
        if not live:
            return NotRegistered(reason, legacy)

        ids = {d.id for d in devices}
        cordoned = frozenset(u for u in decode_cordon(a.get(keys.DEVICE_CORDON, "")) if u in ids)
        inventory = NodeInventory(
            node=node.name, vendor=NVIDIA, devices=devices, pair_scores=pair_scores, cordoned=cordoned
        )
        return Registered(inventory, handshake=write, legacy=legacy, reporter=reporter)
