"""The registrar's view of a vendor: the pure registration types now live in :mod:`shared.vendors.registration`
(every vendor module builds on them); this module keeps the registrar's imports short."""

from vgpu_scheduler.shared.vendors.registration import (
    HANDSHAKE_TIMEOUT_S,
    DecodeFailure,
    HandshakeJudgement,
    HandshakeState,
    Invalid,
    NodeView,
    NotRegistered,
    Observation,
    Registered,
    Unregistered,
    Vendor,
    is_reported,
    judge_handshake,
)

__all__ = [
    "HANDSHAKE_TIMEOUT_S",
    "DecodeFailure",
    "HandshakeJudgement",
    "HandshakeState",
    "Invalid",
    "NodeView",
    "NotRegistered",
    "Observation",
    "Registered",
    "Unregistered",
    "Vendor",
    "is_reported",
    "judge_handshake",
]
