"""A device vendor end to end: HAMi's ``Devices`` interface (``pkg/device/devices.go``) split into pure parts.

One :class:`Vendor` per device family (HAMi's *common word*: ``NVIDIA``, ``DCU``, ``MLU``, ``AMD``,
``Ascend910B``…). Every process asks the vendors of :class:`~shared.vendors.registry.Vendors` instead of
knowing NVIDIA:

============================  ==========================================================================
HAMi                          here
============================  ==========================================================================
``CommonWord``                :attr:`Vendor.name` (``ContainerRequest.type``, ``DeviceInfo.vendor``, metrics label)
``GetResourceNames``          :attr:`Vendor.resources` (quota, "is this pod ours")
``GenerateResourceRequests``  :meth:`Vendor.container_request`
``MutateAdmission``           :meth:`Vendor.mutate_container`
``GetNodeDevices`` +          :meth:`Vendor.observe` (registration from an annotation or node capacity, and
``CheckHealth``               liveness/handshake: :mod:`shared.vendors.registration`)
``CheckType``/``CheckUUID``   :meth:`Vendor.selectors` (decoded once per pod) + :attr:`Vendor.rules`
``Fit``                       :attr:`Vendor.rules` (:class:`~shared.domain.vendor.DeviceRules`, run by the core)
``ScoreNode``                 ``rules.score_node``
``PatchAnnotations``          :attr:`Vendor.to_allocate_key` / :attr:`Vendor.allocated_key` (+ :meth:`encode_devices`)
``LockNode``                  :attr:`Vendor.node_lock`
============================  ==========================================================================

Everything here is pure (no I/O): the services do the reads and writes.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from vgpu_scheduler.shared.domain.hooks import implements
from vgpu_scheduler.shared.domain.model import ContainerDevice, ContainerRequest, Selectors
from vgpu_scheduler.shared.domain.vendor import DeviceRules
from vgpu_scheduler.shared.vendors.registration import NodeView, Observation


class NodeLockKind(enum.Enum):
    """How a vendor's device plugin learns which pod it allocates (HAMi's ``LockNode``)."""

    HAMI = "hami.io/mutex.lock"
    """HAMi's shared node lock annotation ``<RFC3339>,<ns>,<name>`` (NVIDIA, AMD, Ascend, Hygon, …)."""
    CAMBRICON = "cambricon.com/dsmlu.lock"
    """Cambricon's own node annotation (an RFC3339 time), written only for pods asking for MLUs."""
    NONE = "none"
    """No node lock: the device plugin reads the pod's annotations by itself."""


@dataclass(frozen=True, slots=True)
class ResourceNames:
    """HAMi's ``ResourceNames`` of a vendor: the extended resources a container asks with.

    ``memory_unit_mib`` is what one unit of ``memory`` is worth (NVIDIA: ``memoryFactor`` MiB; Cambricon: 256).
    Names that the vendor does not have are ``None``. ``extra`` lists further names that make a pod this vendor's
    (priority, a percentage resource, per-chip names …).
    """

    count: str
    memory: str | None = None
    cores: str | None = None
    memory_percentage: str | None = None
    memory_unit_mib: int = 1
    extra: tuple[str, ...] = ()

    @property
    def all(self) -> frozenset[str]:
        names = {self.count, self.memory, self.cores, self.memory_percentage, *self.extra}
        return frozenset(n for n in names if n)


class Vendor(Protocol):
    """One device family, as every process sees it. Implementations are immutable and thread-safe."""

    @property
    def name(self) -> str:
        """HAMi's common word (``NVIDIA``, ``DCU``, ``MLU``, ``AMD``, ``Ascend910B``…)."""
        ...

    @property
    def resources(self) -> ResourceNames: ...

    @property
    def rules(self) -> DeviceRules:
        """The vendor's part of ``Fit``, run by the scheduling core."""
        ...

    @property
    def to_allocate_key(self) -> str | None:
        """Pod annotation the device plugin consumes (``hami.io/dcu-devices-to-allocate``…); None if HAMi has none."""
        ...

    @property
    def allocated_key(self) -> str:
        """Pod annotation accounting reads (``hami.io/dcu-devices-allocated``…)."""
        ...

    @property
    def register_key(self) -> str | None:
        """The node annotation the registration is decoded from; None when it comes from node capacity."""
        ...

    @property
    def handshake_key(self) -> str | None:
        """The node annotation of the liveness handshake (``hami.io/node-handshake-dcu``); None if the vendor has
        none."""
        ...

    @property
    def node_lock(self) -> NodeLockKind: ...

    def manages(self, container: Mapping[str, Any]) -> bool:
        """Whether the container names one of this vendor's resources in its limits or requests (whatever the
        value): what makes a pod "ours" for the webhook and the extender. Always exactly "names one of
        ``resources.all``": :meth:`Vendors.managing` answers it from those names."""
        ...

    def container_request(self, container: Mapping[str, Any], what: str) -> ContainerRequest:
        """HAMi's ``GenerateResourceRequests``: this vendor's request of one container (``EMPTY_REQUEST`` when it
        asks for none; ``type`` is :attr:`name`; memory in MiB). Raises
        :class:`~shared.codec.resources.ResourceRequestError` naming every problem (``what`` locates the
        container in messages)."""
        ...

    def mutate_container(self, container: dict[str, Any], where: str) -> bool:
        """HAMi's ``MutateAdmission`` for one container: edit it in place (defaults, env …); True when it asks for
        this vendor's devices (the pod is then sent to our scheduler)."""
        ...

    def selectors(self, annotations: Mapping[str, str]) -> Selectors:
        """The pod's type / UUID selectors for this vendor (``hygon.com/use-dcutype`` …). DecodeError if malformed.
        NVIDIA returns its own (also on ``PodConstraints``'s NVIDIA fields)."""
        ...

    def observe(self, node: NodeView, now_local: datetime, *, reported_before: bool = False) -> Observation:
        """Registration and liveness of this vendor on ``node`` (see :mod:`shared.vendors.registration`)."""
        ...

    def encode_devices(self, devices: tuple[tuple[ContainerDevice, ...], ...]) -> str:
        """This vendor's pod device list, one entry per container (init first), as the device plugin reads it."""
        ...

    def decode_devices(self, value: str) -> tuple[tuple[ContainerDevice, ...], ...]:
        """The inverse of :meth:`encode_devices` (entries not yet aligned to the pod's containers)."""
        ...


@runtime_checkable
class AdmissionWarnings(Protocol):
    """Optional part of a :class:`Vendor`: the admission warnings of one container whose request this vendor
    accepts but adjusts, the way HAMi adjusts it without a word (a core percentage above 100 read as 100, memory
    rounded up to a vNPU template). The webhook returns them in ``response.warnings``; kubectl prints them.
    Called only on containers whose request validated. Pure."""

    def admission_warnings(self, container: Mapping[str, Any], where: str) -> tuple[str, ...]: ...


def admission_warnings(
    managing: Callable[[Mapping[str, Any], str], Iterable[object]],
    containers: Iterable[tuple[str, Mapping[str, Any]]],
) -> list[str]:
    """The :class:`AdmissionWarnings` of the vendors that manage each ``(where, container)`` (``managing``:
    ``Vendors.managing``; a vendor has no warning for a container it does not manage), in that order, without
    repeats."""
    found: dict[str, None] = {}
    for where, container in containers:
        for vendor in managing(container, where):
            if implements(vendor, AdmissionWarnings):  # type: ignore[type-abstract]
                found.update(dict.fromkeys(vendor.admission_warnings(container, where)))
    return list(found)
