"""What an sGPU container asks for (:func:`sgpu_request`, from the limits only) and the pod's sGPU selectors with its
app class and QoS policy (:func:`qos_selectors`). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from vgpu_scheduler.shared.codec._go import fail
from vgpu_scheduler.shared.codec.quantity import parse_quantity
from vgpu_scheduler.shared.codec.resources import (
    CORES_CAP,
    ResourceRequestError,
    capped_cores_warning,
    container_label,
    container_lists,
)
from vgpu_scheduler.shared.domain.model import EMPTY_REQUEST, MEM_PCT_UNSET, ContainerRequest, Selectors
from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.vendors.metax_sgpu.keys import (
    _GO_TRUE,
    _MIB,
    APP_CLASS_KEY,
    DEFAULT_CORES,
    INT32_MAX,
    MEMORY_FACTOR,
    MSG_APP_CLASS,
    MSG_QOS,
    NAME,
    NOUSE_UUID,
    OFFLINE,
    ONLINE,
    QOS_POLICIES,
    QOS_POLICY_KEY,
    TOPOLOGY_AWARE_KEY,
    USE_UUID,
)
from vgpu_scheduler.shared.vendors.simple import uuid_selectors


def _has_unit(raw: Any) -> bool:
    """HAMi's test: the quantity's text holds a letter (``16Gi``, ``1k``); a bare number does not."""
    return isinstance(raw, str) and any(c.isascii() and c.isalpha() for c in raw)


def capped_vcore_warning(container: Mapping[str, Any], what: str, count_name: str, core_name: str) -> str | None:
    """The admission warning for a ``vcore`` limit above 100 read as 100 (None: no sGPU request, or no such value).
    Only the limits count, as in :func:`sgpu_request`."""
    try:
        limits, _ = container_lists(container, what)
    except DecodeError:
        return None
    if count_name not in limits:
        return None
    view = {"name": container.get("name"), "resources": {"limits": limits}}
    return capped_cores_warning(view, core_name, what, "card")


def sgpu_request(
    container: Mapping[str, Any], what: str, count_name: str, core_name: str, memory_name: str
) -> ContainerRequest:
    """HAMi's ``GenerateResourceRequests`` for sGPUs: from the limits only, ``count`` cards, ``vcore`` percent of
    each (default 100), ``vmemory`` MiB of each (a bare number × 1024, a number with a unit in bytes ÷ 2²⁰; absent
    or 0: 100 % of the card). Values HAMi drops without a word (not whole, negative, beyond int32, a memory below
    1 MiB) raise :class:`ResourceRequestError` naming the container and what to write. A ``vcore`` above 100 is
    read as 100, as HAMi's ``Fit`` caps it (the webhook warns: :func:`capped_vcore_warning`)."""
    limits, _ = container_lists(container, what)
    if count_name not in limits:
        return EMPTY_REQUEST
    label = container_label(container, what)
    problems: list[str] = []

    def whole(name: str, hint: str) -> tuple[int | None, Any]:
        raw = limits[name]
        try:
            q = parse_quantity(raw, f"{label} {name}")
        except DecodeError:
            problems.append(f"{label}: {name} {raw!r} is not a quantity; {hint}")
            return None, raw
        return _whole_or_problem(q, raw, name, hint), raw

    def _whole_or_problem(q: Fraction, raw: Any, name: str, hint: str) -> int | None:
        if q.denominator != 1 or q < 0:
            problems.append(f"{label}: {name} {raw!r} is not a whole number ≥ 0; {hint}")
            return None
        return q.numerator

    count, _ = whole(count_name, "write the number of cards, such as 1")
    if count is not None and count > INT32_MAX:
        problems.append(f"{label}: {count_name} {count} is out of range; write at most {INT32_MAX}")
    cores = DEFAULT_CORES
    if core_name in limits:
        value, _ = whole(core_name, "write a percentage of one card's compute, such as 50")
        if value is not None and value > INT32_MAX:
            problems.append(f"{label}: {core_name} {value} is out of range; write at most 100")
        elif value is not None:
            cores = min(value, CORES_CAP)  # HAMi's Fit caps it ("core limit can't exceed 100")
    mem_mib = 0
    if memory_name in limits:
        value, raw = whole(memory_name, "write GiB as a bare number (16) or a size with a unit (16Gi)")
        if value is not None:
            if _has_unit(raw):
                mem_mib = value // _MIB
                if value and not mem_mib:
                    problems.append(f"{label}: {memory_name} {raw!r} is less than 1 MiB; write a size such as 1Gi")
            else:
                mem_mib = value * MEMORY_FACTOR
            if mem_mib > INT32_MAX:
                problems.append(f"{label}: {memory_name} {raw!r} is out of range (more than {INT32_MAX} MiB)")
    if problems:
        raise ResourceRequestError(problems)
    if not count:
        return EMPTY_REQUEST
    return ContainerRequest(
        nums=count, mem_mib=mem_mib, mem_pct=100 if mem_mib == 0 else MEM_PCT_UNSET, cores_pct=cores, type=NAME
    )


def qos_selectors(annotations: Mapping[str, str]) -> Selectors:
    """The pod's UUID lists, app class and QoS policy for sGPUs. An app class other than ``online``/``offline``
    and, for a pod that is not online, a QoS policy other than HAMi's three are DecodeErrors (HAMi's messages). An
    online pod's QoS policy is not read (HAMi admits and schedules it whatever it says)."""
    sel = uuid_selectors(annotations, USE_UUID, NOUSE_UUID)
    app = annotations.get(APP_CLASS_KEY)
    if app is not None and app not in (ONLINE, OFFLINE):
        fail(APP_CLASS_KEY, MSG_APP_CLASS, str(app))
    app_class = app or ""
    topology = annotations.get(TOPOLOGY_AWARE_KEY)
    aware = isinstance(topology, str) and topology in _GO_TRUE
    qos = annotations.get(QOS_POLICY_KEY) if app_class != ONLINE else None
    if qos is not None and qos not in QOS_POLICIES:
        fail(QOS_POLICY_KEY, MSG_QOS, str(qos))
    if qos is None and not aware and not app_class:
        return sel
    return Selectors(
        use_uuids=sel.use_uuids,
        nouse_uuids=sel.nouse_uuids,
        qos_policy=qos or "",
        topology_aware=aware,
        app_class=app_class,
    )
