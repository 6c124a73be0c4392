"""The registrar's vendor interface: the *pure* part of registering one vendor's devices on one node.

A vendor turns a :class:`NodeView` (the few fields of a Node the registrar reads) and the current local time
into an :class:`Observation`: the node is registered with an inventory (and maybe a handshake value to write),
unregistered for a reason, or its annotations are invalid. No I/O here (no asyncio, logging, redis, Kubernetes):
the service (``service.py``) does the reads and writes, this module only decides. That keeps every rule of
docs/hami-wire.md §2 testable as a table.

Liveness (difference 9): a vendor is live while ``allocatable[<count resource>] > 0`` and its register annotation
decodes. For ≤ v2.7 device plugins (colon-format register annotation, or a plugin that writes ``Reported …``)
the ``Requesting_``/``Reported`` handshake of §2.2 also applies, see :func:`judge_handshake`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from fractions import Fraction
from typing import Any, Protocol

from vgpu_scheduler.shared.codec.handshake import HandshakeKind, format_requesting, parse_handshake
from vgpu_scheduler.shared.codec.quantity import parse_quantity
from vgpu_scheduler.shared.domain.model import NodeInventory
from vgpu_scheduler.shared.errors import DecodeError

HANDSHAKE_TIMEOUT_S = 60.0
"""How long a ``Requesting_`` stays fresh (HAMi's code: 60 s; its protocol.md's "5 minutes" is wrong, §12)."""


@dataclass(frozen=True, slots=True)
class NodeView:
    """What the registrar reads from a Node: name, resourceVersion, annotations and allocatable resources."""

    name: str
    resource_version: str
    annotations: Mapping[str, str]
    allocatable: Mapping[str, Any]
    capacity: Mapping[str, Any] = field(default_factory=dict)
    """``status.capacity`` (vendors that register from node capacity, e.g. Cambricon, read it)."""
    labels: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, node: Mapping[str, Any]) -> NodeView:
        """Pick the fields out of a Node as the API server serves it (missing parts read as empty)."""
        meta = _mapping(node.get("metadata"))
        status = _mapping(node.get("status"))
        annotations = _mapping(meta.get("annotations"))
        return cls(
            name=str(meta.get("name", "")),
            resource_version=str(meta.get("resourceVersion", "")),
            annotations={k: v for k, v in annotations.items() if isinstance(v, str)},
            allocatable=_mapping(status.get("allocatable")),
            capacity=_mapping(status.get("capacity")),
            labels={k: v for k, v in _mapping(meta.get("labels")).items() if isinstance(v, str)},
        )


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


class Unregistered(enum.Enum):
    """Why a node's vendor is not registered (all of them remove it from Redis)."""

    ABSENT = "absent"
    """No register annotation."""
    NO_DEVICES = "no_devices"
    """The annotation lists no device (HAMi: "no gpu found on node")."""
    NO_ALLOCATABLE = "no_allocatable"
    """``allocatable[<count resource>]`` is 0 or missing: the device plugin is gone."""
    HANDSHAKE_TIMEOUT = "handshake_timeout"
    """≤ v2.7 plugin: our ``Requesting_`` went unanswered past the timeout and allocatable is 0."""


class DecodeFailure(enum.Enum):
    """Which input of a node failed to decode: the ``reason`` label of the decode-error metric."""

    REGISTER = "register"
    TOPOLOGY = "topology_score"
    ALLOCATABLE = "allocatable"


@dataclass(frozen=True, slots=True)
class Registered:
    """The vendor is live on the node. ``handshake`` is a value to merge-patch onto ``handshake_key`` first
    (None: nothing to write). ``reporter`` is True when the plugin was seen answering with ``Reported``."""

    inventory: NodeInventory
    handshake: str | None = None
    legacy: bool = False
    reporter: bool = False


@dataclass(frozen=True, slots=True)
class NotRegistered:
    """The vendor is not (or no longer) live on the node; its inventory must not be in Redis."""

    reason: Unregistered
    legacy: bool = False


@dataclass(frozen=True, slots=True)
class Invalid:
    """An annotation (or the allocatable quantity) of the node is malformed: the vendor is dropped for this node.

    ``source`` names the annotation key (or ``status.allocatable[<name>]``), ``value`` is the offending text:
    one warning event is recorded per distinct (source, value)."""

    failure: DecodeFailure
    source: str
    value: str
    error: DecodeError


Observation = Registered | NotRegistered | Invalid


def allocatable_quantity(allocatable: Mapping[str, Any], count_name: str) -> Fraction | Invalid:
    """``allocatable[count_name]`` (0 when absent) as a quantity, or the observation that it is none
    (``Invalid`` naming ``status.allocatable[<count_name>]``): how every vendor judges whether its device plugin
    still advertises devices."""
    source = f"status.allocatable[{count_name}]"
    raw = allocatable.get(count_name, 0)
    try:
        return parse_quantity(raw, source)
    except DecodeError as e:
        return Invalid(DecodeFailure.ALLOCATABLE, source, str(raw), e)


class Registrar(Protocol):
    """One device vendor as the registrar sees it (HAMi's ``Devices``: ``GetNodeDevices`` + ``CheckHealth``)."""

    @property
    def name(self) -> str:
        """HAMi's common word, e.g. ``NVIDIA``: the ``vendor`` of the inventories and the metrics label."""
        ...

    @property
    def handshake_key(self) -> str:
        """The node annotation of this vendor's handshake (``hami.io/node-handshake`` for NVIDIA)."""
        ...

    def observe(self, node: NodeView, now_local: datetime, *, reported_before: bool = False) -> Observation:
        """Decide this vendor's state on ``node`` at ``now_local`` (a naive local datetime, Go's ``time.Local``).

        ``reported_before``: the plugin on this node was seen writing ``Reported`` earlier (so it speaks the
        handshake even though the annotation now holds our ``Requesting_``).
        """
        ...


# ------------------------------------------------------------------------------------------------------------
# The handshake (hami-wire §2.2), shared by every vendor that has one
# ------------------------------------------------------------------------------------------------------------


class HandshakeState(enum.Enum):
    """What the handshake value says about a ≤ v2.7 plugin."""

    AWAITING = "awaiting"
    """Our ``Requesting_`` is younger than the timeout: the plugin still has time to answer; live."""
    EXPIRED = "expired"
    """Our ``Requesting_`` is older than the timeout: liveness falls back to allocatable."""
    ANSWER = "answer"
    """Anything else (``Reported``, ``Deleted_``, absent, unparsable): write a fresh ``Requesting_``; live."""


@dataclass(frozen=True, slots=True)
class HandshakeJudgement:
    state: HandshakeState
    write: str | None
    reporter: bool


def judge_handshake(
    value: str | None, now_local: datetime, timeout_s: float = HANDSHAKE_TIMEOUT_S
) -> HandshakeJudgement:
    """HAMi's ``CheckHealth`` handshake step, with two deliberate differences (docs/registrar.md):

    * a value that is not a parsable ``Requesting_<time>`` is *answered* with a fresh ``Requesting_`` (HAMi
      keeps a garbled ``Requesting…`` forever as "healthy, no update");
    * the registrar never marks a dead node (no ``Deleted_``, no removal): the stale ``Requesting_`` stays until
      the plugin answers, so a dead node does not flap back to healthy every 60 s as in HAMi HEAD.

    The ``Reported`` time is the plugin's clock and is not compared with ours: only our own ``Requesting_`` time
    measures the timeout.
    """
    parsed = None
    if value is not None:
        try:
            parsed = parse_handshake(value)
        except DecodeError:
            parsed = None
    if parsed is not None and parsed.kind is HandshakeKind.REQUESTING:
        fresh = now_local < parsed.at + timedelta(seconds=timeout_s)
        return HandshakeJudgement(HandshakeState.AWAITING if fresh else HandshakeState.EXPIRED, None, False)
    reporter = parsed is not None and parsed.kind is HandshakeKind.REPORTED
    return HandshakeJudgement(HandshakeState.ANSWER, format_requesting(now_local), reporter)


def is_reported(value: str | None) -> bool:
    """True when ``value`` is a device plugin's ``Reported <time>`` (the plugin speaks the handshake)."""
    return value is not None and value.startswith(HandshakeKind.REPORTED.value)


Vendor = Registrar
"""The registrar's name for :class:`Registrar` (kept for existing imports)."""
