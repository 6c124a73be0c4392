"""A device family's description: its common word, ``Fit`` rules and wire names, grouped as the mechanism reads
them (the pod's device lists, the node's register annotation, the selector annotations) plus its node lock. Pure
data: :mod:`shared.vendors.described` is the mechanism that reads it; docs/adding-a-vendor.md shows one."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from vgpu_scheduler.shared.domain.model import DeviceInfo
from vgpu_scheduler.shared.domain.vendor import DeviceRules
from vgpu_scheduler.shared.vendors.base import NodeLockKind


class Liveness(enum.Enum):
    """How the registrar decides that a family's registered node is live (HAMi's ``CheckHealth``)."""

    HANDSHAKE = "handshake"
    """The ``Requesting_``/``Reported`` handshake: live while ours is fresh or answered, once it expired only while
    ``allocatable[count] > 0`` (Hygon, Iluvatar, Biren, Vastai, Kunlunxin vXPU). Observations are ``legacy``."""
    ALLOCATABLE = "allocatable"
    """No handshake: live while ``allocatable[count] > 0`` (AMD)."""
    LISTED = "listed"
    """Live while the register annotation lists a device; allocatable is not read (MetaX sGPU)."""


@dataclass(frozen=True, slots=True)
class PodLists:
    """The pod annotations that list the devices a pod got (HAMi's ``SupportDevices`` and ``InRequestDevices``)."""

    allocated: str
    to_allocate: str | None = None
    """None when HAMi writes no to-allocate list for the family."""
    list_key: str | None = None
    """The key a malformed pod device list is reported under (default ``allocated``; Cambricon's plugin reads the
    to-allocate list)."""


@dataclass(frozen=True, slots=True)
class RegisterAnnotation:
    """The node annotation a family's device plugin registers its devices under, and how the node is judged live.

    ``decode`` reads its value into devices (None for a family that observes the node by itself); ``handshake`` is
    the annotation of HAMi's ``Requesting_``/``Reported`` handshake, None without one."""

    key: str
    decode: Callable[[str], tuple[DeviceInfo, ...]] | None = None
    handshake: str | None = None
    liveness: Liveness = Liveness.HANDSHAKE


@dataclass(frozen=True, slots=True)
class SelectorKeys:
    """The pod annotations that choose devices: the two UUID lists (both apply,
    :func:`~shared.vendors.simple.uuid_selectors`) and, where HAMi reads them, the two type lists (then the four
    lists of :func:`~shared.vendors.common.decode_selectors`)."""

    use_uuid: str
    nouse_uuid: str
    use_type: str | None = None
    nouse_type: str | None = None


@dataclass(frozen=True, slots=True)
class Description:
    """What tells one device family from another on the wire (HAMi's per-family constants), in three groups: the
    pod's device lists, the node's register annotation (None: the family registers from node capacity or observes
    the node by itself) and the selector annotations (None: HAMi's ``checkUUID`` of the family is always true)."""

    name: str
    """HAMi's common word (``ContainerRequest.type``, ``DeviceInfo.vendor``)."""
    rules: DeviceRules
    pods: PodLists
    register: RegisterAnnotation | None = None
    selectors: SelectorKeys | None = None
    node_lock: NodeLockKind = NodeLockKind.HAMI
