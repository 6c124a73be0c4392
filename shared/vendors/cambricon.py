"""Cambricon MLU (common word ``MLU``): HAMi's ``pkg/device/cambricon`` as a pure vendor (docs/vendors/cambricon.md).

Everything the scheduler needs to know about Cambricon's dynamic-SMLU sharing:

* **Resources** (device config section ``cambricon:``): ``cambricon.com/vmlu`` (count),
  ``cambricon.com/mlu.smlu.vmemory`` (memory, one unit = 256 MiB), ``cambricon.com/mlu.smlu.vcore`` (percent of
  one card, default 100 = the whole card).
* **Registration from node capacity**, no annotation and no handshake: ``capacity[vcore]`` counts hundredths of
  cards, so the node has ``ceil(vcore / 100)`` cards named ``<node>-cambricon-mlu-<i>``, each with
  ``capacity[vmemory] × 256 × 100 // capacity[vcore]`` MiB, 100 cores and 100 slots. The type is the node label
  ``Model`` when it contains ``MLU`` (the device plugin's ``--node-label``), else ``MLU``.
* **Pod annotations**: ``hami.io/cambricon-mlu-devices-to-allocate`` / ``-allocated`` (the common
  ``UUID,Type,mem,cores:`` list), plus ``CAMBRICON_DSMLU_ASSIGNED=false`` and
  ``CAMBRICON_DSMLU_PROFILE=<index>_<cores>_<memory units>`` (:func:`extra_annotations`).
* **Node lock**: its own node annotation ``cambricon.com/dsmlu.lock`` holding only an RFC 3339 time, taken for
  pods that ask for MLUs, stale after two minutes (:func:`lock_annotation`, :func:`lock_state`).
* **Selectors**: ``cambricon.com/use-mlutype`` / ``nouse-mlutype`` (types, upper-cased substrings of the card's
  model) and ``cambricon.com/use-gpuuuid`` / ``nouse-gpuuuid`` (exact device ids).

Pure: no I/O. Facts from HAMi's ``pkg/device/cambricon/device.go`` and ``pkg/device/devices.go`` at commit
ad358d3a (the v2.10 line, with device cordon) and the expected values of its ``device_test.go`` /
``device_cordon_test.go``.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from fractions import Fraction
from typing import Any, Final

from vgpu_scheduler.shared.codec.nodelock import format_rfc3339, parse_rfc3339
from vgpu_scheduler.shared.codec.poddevices import decode_pod_devices, encode_pod_devices
from vgpu_scheduler.shared.codec.quantity import parse_quantity
from vgpu_scheduler.shared.codec.resources import (
    ResourceRequestError,
    capped_cores_warning,
    container_lists,
    decimal_text,
    names_any,
    raw_value,
    shown_value,
)
from vgpu_scheduler.shared.codec.selectors import decode_cordon, decode_type_list, decode_uuid_list
from vgpu_scheduler.shared.domain.model import (
    EMPTY_REQUEST,
    ContainerDevice,
    ContainerRequest,
    DeviceInfo,
    NodeInventory,
    PodConstraints,
    PodDevices,
    Selectors,
)
from vgpu_scheduler.shared.domain.vendor import BasicRules, DeviceRules
from vgpu_scheduler.shared.errors import ConfigError, DecodeError
from vgpu_scheduler.shared.vendors.base import NodeLockKind, ResourceNames, Vendor
from vgpu_scheduler.shared.vendors.registration import (
    DecodeFailure,
    Invalid,
    NodeView,
    NotRegistered,
    Observation,
    Registered,
    Unregistered,
)

MLU: Final = "MLU"
"""HAMi's common word and device type of Cambricon MLUs."""

SECTION: Final = "cambricon"
"""The device-config section that configures Cambricon (on by default; the section overrides HAMi's defaults)."""

ENABLE_FLAG: Final[str | None] = None
"""On by default, as HAMi initialises it (``shared.vendors.catalog``)."""

MEMORY_UNIT_MIB: Final = 256
"""One ``cambricon.com/mlu.smlu.vmemory`` unit (HAMi's ``MemoryFactor``)."""

CARD_CORES: Final = 100
"""``capacity[vcore]`` per card; also each card's ``devcore`` and ``count`` (slots)."""

DEFAULT_COUNT_NAME: Final = "cambricon.com/vmlu"
DEFAULT_MEMORY_NAME: Final = "cambricon.com/mlu.smlu.vmemory"
DEFAULT_CORE_NAME: Final = "cambricon.com/mlu.smlu.vcore"

TO_ALLOCATE_KEY: Final = "hami.io/cambricon-mlu-devices-to-allocate"
ALLOCATED_KEY: Final = "hami.io/cambricon-mlu-devices-allocated"
USE_TYPE_KEY: Final = "cambricon.com/use-mlutype"
NOUSE_TYPE_KEY: Final = "cambricon.com/nouse-mlutype"
USE_UUID_KEY: Final = "cambricon.com/use-gpuuuid"
NOUSE_UUID_KEY: Final = "cambricon.com/nouse-gpuuuid"
DSMLU_PROFILE_KEY: Final = "CAMBRICON_DSMLU_PROFILE"
"""Pod annotation ``<card index>_<cores>_<memory in 256 MiB units>`` of the pod's first MLU."""
DSMLU_ASSIGNED_KEY: Final = "CAMBRICON_DSMLU_ASSIGNED"
DSMLU_ASSIGNED_LEGACY_KEY: Final = "CAMBRICON_DSMLU_ASSIGHED"
"""The same flag as Cambricon's device plugin spells it (sic): HAMi's scheduler has written both spellings over
its releases and the plugin reads this one, so a bind writes both."""
"""Pod annotation the scheduler sets to ``false``; the device plugin flips it once the profile is applied."""
MODEL_LABEL: Final = "Model"
"""Node label with the card model (published by the Cambricon device plugin with ``--node-label``)."""
DEVICE_CORDON_KEY: Final = "hami.io/device-cordon"

LOCK_KEY: Final = NodeLockKind.CAMBRICON.value
"""``cambricon.com/dsmlu.lock``: the node lock, an RFC 3339 time."""
LOCK_EXPIRY: Final = timedelta(minutes=2)
"""A lock older than this (strictly) may be taken over."""

_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1
_MIB = 2**20
_BINARY_SUFFIX = re.compile(r"(?P<mantissa>.*?)(?P<suffix>[KMGTPE]i)\Z")
_ID_INFIX = "-cambricon-mlu-"


# ------------------------------------------------------------------------------------------------------------
# The node lock
# ------------------------------------------------------------------------------------------------------------


class LockState(enum.Enum):
    """What ``cambricon.com/dsmlu.lock`` says about a node at a given time."""

    FREE = "free"
    """No lock annotation: lock by writing :func:`lock_annotation`."""
    HELD = "held"
    """Locked at most two minutes ago (or in the future), or the value is not an RFC 3339 time: HAMi fails the bind
    (and its failure path then deletes the annotation, whoever wrote it)."""
    EXPIRED = "expired"
    """Locked more than two minutes ago: HAMi removes the annotation and locks again."""


def lock_annotation(now: datetime) -> dict[str, str]:
    """The node annotation that takes the lock: ``{"cambricon.com/dsmlu.lock": <now, RFC 3339>}``.

    ``now`` must be aware; HAMi writes its local time (``time.Now().Format(time.RFC3339)``, whole seconds)."""
    return {LOCK_KEY: format_rfc3339(now)}


def lock_time(node_annotations: Mapping[str, str]) -> datetime | None:
    """When the node was locked (aware), None when it is not; DecodeError naming the key for a value that is not
    an RFC 3339 time."""
    value = node_annotations.get(LOCK_KEY)
    if value is None:
        return None
    return parse_rfc3339(value, LOCK_KEY)


def lock_state(node_annotations: Mapping[str, str], now: datetime) -> LockState:
    """HAMi's ``LockNode`` decision: free without the annotation; expired when ``now - lock > 2 minutes``; held
    otherwise, including a lock time in the future and a value that does not parse (``now`` must be aware)."""
    try:
        at = lock_time(node_annotations)
    except DecodeError:
        return LockState.HELD
    if at is None:
        return LockState.FREE
    return LockState.EXPIRED if now - at > LOCK_EXPIRY else LockState.HELD


# ------------------------------------------------------------------------------------------------------------
# Fit rules
# ------------------------------------------------------------------------------------------------------------


def _generic_model(dev_type: str) -> bool:
    model = dev_type.strip()
    return model == "" or model.upper() == MLU


@dataclass(frozen=True, slots=True)
class CambriconRules(BasicRules):
    """Cambricon's ``Fit`` hooks: the common skeleton (memory in MiB, else a percentage of the card; cores as asked,
    never clamped) with HAMi's Cambricon type and UUID checks.

    * Type: with a ``use-mlutype`` / ``nouse-mlutype`` selector, a card whose model is unknown (type ``MLU``, no
      ``Model`` label) matches neither list and is refused; otherwise upper-cased substring matching.
    * UUID: a ``use-gpuuuid`` list must name the card *and* a ``nouse-gpuuuid`` list must not.
    """

    name: str = MLU
    clamp_cores: bool = False

    def type_ok(self, dev: DeviceInfo, req: ContainerRequest, constraints: PodConstraints) -> bool:
        if req.type != self.name:
            return False
        sel = constraints.selectors(self.name)
        if not (sel.use_types or sel.nouse_types):
            return True
        if _generic_model(dev.type):
            return False
        kind = dev.type.upper()
        if sel.use_types and not any(t in kind for t in sel.use_types):
            return False
        return not any(t in kind for t in sel.nouse_types)

    def uuid_ok(self, dev: DeviceInfo, constraints: PodConstraints) -> bool:
        sel = constraints.selectors(self.name)
        if sel.use_uuids and dev.id not in sel.use_uuids:
            return False
        return dev.id not in sel.nouse_uuids


RULES: DeviceRules = CambriconRules()


# ------------------------------------------------------------------------------------------------------------
# Requests
# ------------------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Reader:
    names: ResourceNames
    label: str
    problems: list[str] = field(default_factory=list)

    def problem(self, text: str) -> None:
        self.problems.append(f"{self.label}: {text}")

    def quantity(self, raw: Any, name: str, hint: str) -> Fraction | None:
        try:
            q = parse_quantity(raw, name)
        except DecodeError:
            self.problem(f"{name}: {shown_value(raw)} is not a number; {hint}")
            return None
        if q < 0:
            self.problem(f"{name} cannot be negative: got {shown_value(raw)}; {hint}")
            return None
        return q

    def count(self, raw: Any) -> int | None:
        name = self.names.count
        hint = f"write a whole number of MLUs, e.g. {name}: 1"
        q = self.quantity(raw, name, hint)
        if q is None:
            return None
        binary = _BINARY_SUFFIX.match(raw.strip()) if isinstance(raw, str) else None
        if binary is not None:
            self.problem(
                f"{name} counts MLUs and takes no unit: {shown_value(raw)} would be {decimal_text(q)} MLUs; {hint}"
            )
            return None
        if q.denominator != 1:
            self.problem(
                f"{name} counts whole MLUs: {shown_value(raw)} is {decimal_text(q)}; to share an MLU, ask for "
                f"{name}: 1 with "
                f"{self.names.memory} (units of {MEMORY_UNIT_MIB} MiB) and {self.names.cores} (percent of the card)"
            )
            return None
        if q > _INT32_MAX:
            self.problem(f"{name}: {shown_value(raw)} is too large (at most {_INT32_MAX}); {hint}")
            return None
        return q.numerator

    def memory(self, raw: Any) -> int | None:
        name = self.names.memory or ""
        limit = _INT32_MAX // MEMORY_UNIT_MIB
        hint = f"write a whole number of {MEMORY_UNIT_MIB} MiB units, e.g. {name}: 16 for 4 GiB"
        q = self.quantity(raw, name, hint)
        if q is None:
            return None
        binary = _BINARY_SUFFIX.match(raw.strip()) if isinstance(raw, str) else None
        if binary is not None or q > limit:
            units = math.floor(q / (_MIB * MEMORY_UNIT_MIB))
            mean = f"; did you mean {units}?" if units >= 1 else f"; {hint}"
            self.problem(
                f"{name} is in units of {MEMORY_UNIT_MIB} MiB (at most {limit}): {shown_value(raw)} would be "
                f"{decimal_text(q)} units{mean}"
            )
            return None
        if q.denominator != 1:
            self.problem(
                f"{name} must be a whole number: {shown_value(raw)} is {decimal_text(q)}; did you mean {math.ceil(q)}?"
            )
            return None
        return q.numerator

    def cores(self, raw: Any) -> int | None:
        name = self.names.cores or ""
        hint = "write a whole number from 0 to 100 (percent of one MLU)"
        q = self.quantity(raw, name, hint)
        if q is None:
            return None
        binary = _BINARY_SUFFIX.match(raw.strip()) if isinstance(raw, str) else None
        if binary is not None:
            self.problem(f"{name} is a percentage of one MLU and takes no unit: {shown_value(raw)}; {hint}")
            return None
        if q.denominator != 1:
            self.problem(f"{name} must be a whole number: {shown_value(raw)} is {decimal_text(q)}; {hint}")
            return None
        return min(q.numerator, CARD_CORES)  # HAMi's Fit caps a core percentage above 100 (a warning at admission)


# ------------------------------------------------------------------------------------------------------------
# Registration
# ------------------------------------------------------------------------------------------------------------


class _BadQuantity(Exception):
    """A capacity quantity that does not decode (internal to :meth:`CambriconVendor.observe_node`)."""

    def __init__(self, source: str, value: str, error: DecodeError) -> None:
        super().__init__(str(error))
        self.source = source
        self.value = value
        self.error = error


def _capacity_int(capacity: Mapping[str, Any], name: str) -> int | None:
    """A whole, non-negative capacity quantity (None when absent); _BadQuantity otherwise."""
    if name not in capacity:
        return None
    raw = capacity[name]
    source = f"status.capacity[{name}]"
    try:
        q = parse_quantity(raw, source)
        if q.denominator != 1 or q < 0 or q > _INT64_MAX:
            raise DecodeError(source, "expected a whole number from 0 to 2^63-1", str(raw))
    except DecodeError as e:
        raise _BadQuantity(source, str(raw), e) from e
    return q.numerator


def card_type(labels: Mapping[str, str]) -> str:
    """The node's card type: the trimmed ``Model`` label when it contains ``MLU`` (any case), else ``MLU``."""
    model = labels.get(MODEL_LABEL, "").strip()
    return model if MLU in model.upper() else MLU


def devices_from_capacity(
    node: str, cores_total: int, memory_total: int, dev_type: str = MLU
) -> tuple[DeviceInfo, ...]:
    """HAMi's ``GetNodeDevices``: ``ceil(cores_total / 100)`` cards of ``memory_total × 256 × 100 // cores_total``
    MiB each. DecodeError when that memory does not fit in int32 (HAMi would wrap it)."""
    if cores_total <= 0:
        return ()
    devmem = memory_total * MEMORY_UNIT_MIB * CARD_CORES // cores_total
    if devmem > _INT32_MAX:
        raise DecodeError(
            "cambricon capacity",
            f"{devmem} MiB per card is beyond int32",
            f"{memory_total} units / {cores_total} cores",
        )
    n = -(-cores_total // CARD_CORES)
    return tuple(
        DeviceInfo(
            id=f"{node}{_ID_INFIX}{i}",
            index=i,
            count=CARD_CORES,
            devmem_mib=devmem,
            devcore=CARD_CORES,
            type=dev_type,
            numa=0,
            mode="",
            health=True,
            vendor=MLU,
        )
        for i in range(n)
    )


def card_index(uuid: str) -> int:
    """The card index HAMi encodes in a device id ``<node>-cambricon-mlu-<index>``; DecodeError otherwise."""
    _, sep, tail = uuid.rpartition(_ID_INFIX)
    if not sep or not tail.isdigit() or not tail.isascii():
        raise DecodeError(DSMLU_PROFILE_KEY, f"not a Cambricon device id <node>{_ID_INFIX}<index>", uuid)
    return int(tail)


# ------------------------------------------------------------------------------------------------------------
# The vendor
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CambriconVendor:
    """The Cambricon MLU vendor with the resource names of the device config's ``cambricon:`` section."""

    count_name: str = DEFAULT_COUNT_NAME
    memory_name: str = DEFAULT_MEMORY_NAME
    core_name: str = DEFAULT_CORE_NAME

    @property
    def name(self) -> str:
        return MLU

    @property
    def resources(self) -> ResourceNames:
        return ResourceNames(
            count=self.count_name, memory=self.memory_name, cores=self.core_name, memory_unit_mib=MEMORY_UNIT_MIB
        )

    @property
    def rules(self) -> DeviceRules:
        return RULES

    @property
    def to_allocate_key(self) -> str | None:
        return TO_ALLOCATE_KEY

    @property
    def allocated_key(self) -> str:
        return ALLOCATED_KEY

    @property
    def register_key(self) -> str | None:
        return None

    @property
    def handshake_key(self) -> str | None:
        return None

    @property
    def node_lock(self) -> NodeLockKind:
        return NodeLockKind.CAMBRICON

    # ---- pods ----------------------------------------------------------------------------------------------

    def manages(self, container: Mapping[str, Any]) -> bool:
        return names_any(container, self.resources.all)

    def container_request(self, container: Mapping[str, Any], what: str) -> ContainerRequest:
        """HAMi's ``GenerateResourceRequests``, strict (see docs/vendors/cambricon.md)::

            count n (limits, else requests)   → n MLUs; absent or 0 → no request
            memory m units                     → m × 256 MiB, mem_pct 0; absent or 0 → 100 % of the card
            cores c                            → c % of each card; absent → 100

        HAMi ignores a container whose values it cannot read (it gets no MLU); here each is a problem of the
        ResourceRequestError, as is memory or cores without a count and memory on zero MLUs.
        """
        limits, requests = container_lists(container, what)
        names = self.resources
        r = _Reader(names, what)
        has_count, raw_count = raw_value(limits, requests, names.count)
        has_mem, raw_mem = raw_value(limits, requests, names.memory)
        has_core, raw_core = raw_value(limits, requests, names.cores)
        n = r.count(raw_count) if has_count else None
        mem = r.memory(raw_mem) if has_mem else None
        core = r.cores(raw_core) if has_core else None
        if not has_count and (has_mem or has_core):
            asked = " and ".join(x for x, given in ((names.memory, has_mem), (names.cores, has_core)) if given and x)
            r.problem(f"{asked} without {names.count}: add {names.count}: 1 (the number of MLUs to share)")
        if n == 0 and mem:
            r.problem(f"{names.memory} asks for memory on 0 MLUs ({names.count}: 0)")
        if r.problems:
            raise ResourceRequestError(r.problems)
        if not n:
            return EMPTY_REQUEST
        mem_mib = (mem or 0) * MEMORY_UNIT_MIB
        return ContainerRequest(
            nums=n,
            mem_mib=mem_mib,
            mem_pct=100 if mem_mib == 0 else 0,
            cores_pct=CARD_CORES if core is None else core,
            type=MLU,
        )

    def mutate_container(self, container: dict[str, Any], where: str) -> bool:
        """HAMi's ``MutateAdmission``: edits nothing; True when the count resource is in the container's limits."""
        del where
        limits, _ = container_lists(container, "container")
        return self.count_name in limits

    def admission_warnings(self, container: Mapping[str, Any], where: str) -> tuple[str, ...]:
        """A core percentage above 100 is scheduled as 100 (HAMi's ``Fit`` caps it without a word)."""
        warning = capped_cores_warning(container, self.resources.cores, where, "MLU")
        return (warning,) if warning else ()

    def selectors(self, annotations: Mapping[str, str]) -> Selectors:
        """``cambricon.com/use-mlutype`` / ``nouse-mlutype`` / ``use-gpuuuid`` / ``nouse-gpuuuid``. A blank value is
        no constraint; a *use* list that is not blank but holds no token (``","``) matches no card in HAMi and is a
        DecodeError here."""

        def text(key: str) -> str | None:
            v = annotations.get(key)
            if v is not None and not isinstance(v, str):
                raise DecodeError(key, f"annotation value must be a string, got {type(v).__name__}")
            return v

        def guard(key: str, value: str, found: bool) -> None:
            if value.strip() and not found:
                raise DecodeError(key, "list holds no token, so no device could ever match", value)

        use_types: tuple[str, ...] = ()
        nouse_types: tuple[str, ...] = ()
        use_uuids: frozenset[str] = frozenset()
        nouse_uuids: frozenset[str] = frozenset()
        if (v := text(USE_TYPE_KEY)) is not None:
            use_types = decode_type_list(v)
            guard(USE_TYPE_KEY, v, bool(use_types))
        if (v := text(NOUSE_TYPE_KEY)) is not None:
            nouse_types = decode_type_list(v)
        if (v := text(USE_UUID_KEY)) is not None:
            use_uuids = decode_uuid_list(v)
            guard(USE_UUID_KEY, v, bool(use_uuids))
        if (v := text(NOUSE_UUID_KEY)) is not None:
            nouse_uuids = decode_uuid_list(v)
        return Selectors(use_types, nouse_types, use_uuids, nouse_uuids)

    def extra_pod_annotations(self, devices: PodDevices, now_unix: int) -> dict[str, str]:
        """HAMi's extra Cambricon pod annotations (:func:`extra_annotations`), written with the device lists."""
        del now_unix
        return extra_annotations(devices)

    # ---- nodes ---------------------------------------------------------------------------------------------

    def observe(self, node: NodeView, now_local: datetime, *, reported_before: bool = False) -> Observation:
        """Registration from ``capacity`` and the ``Model`` label; liveness from ``allocatable[count] > 0``.

        A node view without capacity (some test doubles) reads allocatable in its place."""
        del now_local, reported_before
        return self.observe_node(
            node.name, node.annotations, node.capacity or node.allocatable, node.allocatable, node.labels
        )

    def observe_node(
        self,
        name: str,
        annotations: Mapping[str, str],
        capacity: Mapping[str, Any],
        allocatable: Mapping[str, Any],
        labels: Mapping[str, str],
    ) -> Observation:
        """The checks, in order, each ending the observation:

        1. no ``capacity[vcore]`` → not registered (``absent``);
        2. ``capacity[vcore]`` or ``capacity[vmemory]`` not a whole non-negative quantity → invalid (``register``);
        3. ``allocatable[count]`` not a quantity → invalid (``allocatable``);
        4. ``capacity[vcore]`` is 0 → not registered (``no_devices``);
        5. the memory per card beyond int32 → invalid (``register``);
        6. ``allocatable[count]`` ≤ 0 → not registered (``no_allocatable``);
        7. registered; ``hami.io/device-cordon`` ids of this node's cards are kept.
        """
        try:
            cores_total = _capacity_int(capacity, self.core_name)
            if cores_total is None:
                return NotRegistered(Unregistered.ABSENT)
            memory_total = _capacity_int(capacity, self.memory_name) or 0
        except _BadQuantity as bad:
            return Invalid(DecodeFailure.REGISTER, bad.source, bad.value, bad.error)
        source = f"status.allocatable[{self.count_name}]"
        raw = allocatable.get(self.count_name, 0)
        try:
            live = parse_quantity(raw, source) > 0
        except DecodeError as e:
            return Invalid(DecodeFailure.ALLOCATABLE, source, str(raw), e)
        if cores_total == 0:
            return NotRegistered(Unregistered.NO_DEVICES)
        try:
            devices = devices_from_capacity(name, cores_total, memory_total, card_type(labels))
        except DecodeError as e:
            return Invalid(
                DecodeFailure.REGISTER, f"status.capacity[{self.memory_name}]", str(capacity[self.memory_name]), e
            )
        if not live:
            return NotRegistered(Unregistered.NO_ALLOCATABLE)
        ids = {d.id for d in devices}
        cordoned = frozenset(u for u in decode_cordon(annotations.get(DEVICE_CORDON_KEY, "")) if u in ids)
        return Registered(NodeInventory(node=name, vendor=MLU, devices=devices, cordoned=cordoned))

    # ---- pod device lists ----------------------------------------------------------------------------------

    def encode_devices(self, devices: tuple[tuple[ContainerDevice, ...], ...]) -> str:
        return encode_pod_devices(devices, TO_ALLOCATE_KEY)

    def decode_devices(self, value: str) -> tuple[tuple[ContainerDevice, ...], ...]:
        return decode_pod_devices(value, TO_ALLOCATE_KEY)


DEFAULT_VENDOR: Final = CambriconVendor()


# ------------------------------------------------------------------------------------------------------------
# Pod annotations besides the device list
# ------------------------------------------------------------------------------------------------------------


def extra_annotations(devices: PodDevices) -> dict[str, str]:
    """HAMi's extra pod annotations for a pod given MLUs: ``CAMBRICON_DSMLU_ASSIGNED=false`` (under both
    spellings, see :data:`DSMLU_ASSIGNED_LEGACY_KEY`) and
    ``CAMBRICON_DSMLU_PROFILE=<index>_<cores>_<memory // 256>`` of the first device of the first container that
    has one (HAMi reads only that one). Empty when the pod has no MLU."""
    for entry in devices:
        if entry:
            d = entry[0]
            profile = f"{card_index(d.uuid)}_{d.used_cores}_{d.used_mem_mib // MEMORY_UNIT_MIB}"
            return {DSMLU_ASSIGNED_KEY: "false", DSMLU_ASSIGNED_LEGACY_KEY: "false", DSMLU_PROFILE_KEY: profile}
    return {}


# ------------------------------------------------------------------------------------------------------------
# What a Cambricon device plugin writes on a Node (simulator, emulator, tests)
# ------------------------------------------------------------------------------------------------------------


def registration_annotations(devices: tuple[DeviceInfo, ...]) -> dict[str, str]:
    """Cambricon registers through node capacity: no annotation."""
    del devices
    return {}


def node_labels(devices: tuple[DeviceInfo, ...]) -> dict[str, str]:
    """The ``Model`` label that gives the cards their type (none for the generic ``MLU``)."""
    kinds = {d.type for d in devices}
    if len(kinds) > 1:
        raise ValueError(f"Cambricon cards of one node share one type, got {sorted(kinds)}")
    kind = next(iter(kinds), MLU)
    return {} if kind == MLU else {MODEL_LABEL: kind}


def node_capacity(devices: tuple[DeviceInfo, ...], vendor: CambriconVendor = DEFAULT_VENDOR) -> dict[str, str]:
    """Capacity (= allocatable) quantities that :meth:`CambriconVendor.observe` reads back as ``devices``: 100
    vcore per card, the memory total in 256 MiB units, and 100 count units per card (one per slot, our choice:
    the real plugin's count depends on its own settings). ValueError when the cards differ in memory or the
    total is not a whole number of units."""
    if not devices:
        return {}
    mems = {d.devmem_mib for d in devices}
    if len(mems) > 1:
        raise ValueError(f"Cambricon cards of one node share one memory size, got {sorted(mems)}")
    n = len(devices)
    total_mib = mems.pop() * n
    if total_mib % MEMORY_UNIT_MIB:
        raise ValueError(f"{total_mib} MiB in all is not a whole number of {MEMORY_UNIT_MIB} MiB units")
    return {
        vendor.count_name: str(CARD_CORES * n),
        vendor.memory_name: str(total_mib // MEMORY_UNIT_MIB),
        vendor.core_name: str(CARD_CORES * n),
    }


# ------------------------------------------------------------------------------------------------------------
# Device config
# ------------------------------------------------------------------------------------------------------------

_CONFIG_KEYS: Final = {
    "resourceCountName": "count_name",
    "resourceMemoryName": "memory_name",
    "resourceCoreName": "core_name",
}


def build(section: object) -> tuple[Vendor, ...]:
    """The vendor of a ``cambricon:`` section (``None`` / ``{}``: HAMi's default names).

    ``resourceCountName``, ``resourceMemoryName`` and ``resourceCoreName`` must be non-empty strings (an empty
    value keeps the default); other keys are ignored, as HAMi ignores them. ConfigError names the key path.
    """
    if section is None:
        return (DEFAULT_VENDOR,)
    if not isinstance(section, Mapping):
        raise ConfigError(f"{SECTION}: expected a mapping, got {type(section).__name__}")
    given: dict[str, str] = {}
    for key, attr in _CONFIG_KEYS.items():
        value = section.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise ConfigError(f"{SECTION}.{key}: expected a string, got {value!r}")
        if not value.strip():
            raise ConfigError(f"{SECTION}.{key}: expected a resource name, got an empty string")
        given[attr] = value
    names = [given.get(a, getattr(DEFAULT_VENDOR, a)) for a in _CONFIG_KEYS.values()]
    if len(set(names)) != len(names):
        raise ConfigError(f"{SECTION}: the count, memory and core resource names must differ, got {names}")
    return (CambriconVendor(**given),)
