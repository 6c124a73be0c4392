"""Container resources → NVIDIA device requests (HAMi's ``GenerateResourceRequests``, made strict; hami-wire §1.2).

Input is the Kubernetes API JSON of a container / pod (camelCase, quantities as the API serves them, e.g.
``"3k"``, or plain numbers in hand-written specs). Each resource is taken from ``limits``, else ``requests``.

**Every managed resource is validated first, the same way at every layer** (the webhook denies with the
message, ``/filter`` refuses every node with it, ``simulate`` reports it): a container that names the count,
memory, memory-percentage, cores or priority resource (the names come from the device config) with a value
that cannot mean what it says is a :class:`ResourceRequestError` whose message says what to write instead::

    nvidia.com/gpumem is in MiB: "20Gi" would be 21474836480 MiB; did you mean 20480?

The rules, per kind of value:

* **count** (``nvidia.com/gpu``): a whole number ``0 ..= 2³¹−1`` of GPUs, no binary unit (``"1Ki"``);
  fractions (``"500m"``) are refused with a pointer to memory / percentage sharing.
* **memory** (``nvidia.com/gpumem``, units of ``memoryFactor`` MiB): a whole number ``0 ..= 2³¹−1 //
  memoryFactor``; a binary unit (``"20Gi"``) or a value beyond that range is read as bytes to suggest the
  MiB figure; a fraction suggests the next whole MiB.
* **percentages** (``gpumem-percentage``): a whole number ``0 ..= 100``, no unit.
* **cores** (``gpucores``): a whole number, no unit; above 100 it is read as 100 (a whole GPU), as HAMi's ``Fit``
  caps it, and the webhook says so in its admission warnings (:func:`capped_cores_warning`).
* **priority**: a whole number ``0 ..= 2³¹−1``, no unit.
* anything negative, or not a Kubernetes quantity at all (``"20GB"``), is refused.

Decimal suffixes are accepted for every kind: the API server normalises what it stores (``gpumem: 3000`` is
served as ``"3k"``), so they cannot tell a mistake from a plain number.

Then, for a valid container:

1. ``n`` = the count. Absent while memory, percentage or cores are given → ``defaultGPUNum`` (what the webhook
   writes into the limits), refused when that is 0. ``0`` → the empty request (no NVIDIA request), refused when
   memory or a percentage asks for something on those zero GPUs.
2. Memory × memoryFactor.
3. Memory percentage: ``0`` means unset (the sentinel 101).
4. Percentage unset and memory 0: ``defaultMemory`` if non-zero (not scaled), else 100 %.
5. Cores: ``defaultCores``, overridden by the core resource.

Where this differs from HAMi on purpose: HAMi turns a bad memory value into *no request at all* (the pod is
placed anywhere, without a GPU), ignores a bad percentage and wraps counts through int32; each of these is a
refusal here, so a pod that asks for a GPU either gets one or is told why not.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any

from vgpu_scheduler.shared.codec._go import INT32_MAX, fail
from vgpu_scheduler.shared.codec.quantity import parse_quantity
from vgpu_scheduler.shared.domain.context import default_memory
from vgpu_scheduler.shared.domain.model import (
    EMPTY_REQUEST,
    MEM_PCT_UNSET,
    NVIDIA,
    ContainerRequest,
    NvidiaConfig,
    PodRequest,
)
from vgpu_scheduler.shared.errors import DecodeError

_NO_RESOURCES: Mapping[str, Any] = {}
_MIB = 2**20
_BINARY_SUFFIX = re.compile(r"(?P<mantissa>.*?)(?P<suffix>[KMGTPE]i)\Z")
_BYTE_UNIT = re.compile(r"(?P<size>[0-9.]+\s*[kKMGTPE]i?)[bB]\Z")


class ResourceRequestError(DecodeError):
    """A container asks for a managed resource with a value that cannot be honoured as written.

    ``problems`` are the operator-facing sentences (one per bad value, each naming the container and saying
    what to write instead); ``str()`` is them joined with ``"; "``.
    """

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("resources", "; ".join(self.problems))

    def __str__(self) -> str:
        return "; ".join(self.problems)


class QuantityKind(enum.Enum):
    COUNT = "count"
    MEMORY = "memory"
    PERCENT = "percent"
    CORES = "cores"
    """A percentage of one device's compute that HAMi's ``Fit`` caps at 100: read as at most 100."""
    PRIORITY = "priority"


CORES_CAP = 100
"""What a core percentage above 100 is read as (HAMi's ``Fit``: ``if k.Coresreq > 100 { k.Coresreq = 100 }``)."""


def _mapping(v: Any, what: str) -> Mapping[str, Any]:
    if v is None:
        return _NO_RESOURCES
    if not isinstance(v, Mapping):
        fail(what, f"expected an object, got {type(v).__name__}")
    return v


def container_lists(container: Any, what: str) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    c = _mapping(container, what)
    res = _mapping(c.get("resources"), f"{what}.resources")
    return _mapping(res.get("limits"), f"{what}.resources.limits"), _mapping(
        res.get("requests"), f"{what}.resources.requests"
    )


def raw_value(limits: Mapping[str, Any], requests: Mapping[str, Any], name: str | None) -> tuple[bool, Any]:
    """(present, raw value). Limits win over requests by key presence."""
    if name and name in limits:
        return True, limits[name]
    if name and name in requests:
        return True, requests[name]
    return False, None


def shown_value(raw: Any) -> str:
    """A value as the operator wrote it: strings quoted, numbers bare."""
    if isinstance(raw, str):
        return f'"{raw}"'
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if isinstance(raw, int | float):
        return repr(raw)
    return type(raw).__name__


def decimal_text(q: Fraction) -> str:
    """An exact decimal rendering of a parsed quantity (at most nine decimals, as quantities are)."""
    if q.denominator == 1:
        return str(q.numerator)
    sign = "-" if q < 0 else ""
    mag = abs(q)
    whole, rest = divmod(mag.numerator, mag.denominator)
    digits = []
    for _ in range(12):
        if not rest:
            break
        rest *= 10
        d, rest = divmod(rest, mag.denominator)
        digits.append(str(d))
    return f"{sign}{whole}.{''.join(digits)}" + ("..." if rest else "")


class Problems:
    """One container's refusals, collected before raising (each opens with the container's ``label``), and the
    first step of every strict reader: a value read as a non-negative quantity."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.problems: list[str] = []

    def problem(self, text: str) -> None:
        self.problems.append(f"{self.label}: {text}")

    def quantity(self, raw: Any, name: str, hint: Callable[[], str]) -> Fraction | None:
        """``raw`` as a quantity that is not negative; None when it is not one, the refusal (ending in ``hint()``,
        asked only then) recorded."""
        try:
            q = parse_quantity(raw, name)
        except DecodeError:
            self.problem(f"{name}: {shown_value(raw)} is not a number; {hint()}")
            return None
        if q < 0:
            self.problem(f"{name} cannot be negative: got {shown_value(raw)}; {hint()}")
            return None
        return q


class RequestReader(Problems):
    """Reads one container's managed resources, collecting every problem before raising."""

    def __init__(self, cfg: NvidiaConfig, label: str) -> None:
        super().__init__(label)
        self.cfg = cfg

    # ---- hints -------------------------------------------------------------------------------------------------

    def _unit(self) -> str:
        factor = max(self.cfg.memory_factor, 1)
        return "MiB" if factor == 1 else f"units of {factor} MiB (memoryFactor {factor})"

    def _bytes_to_units(self, n_bytes: Fraction) -> int:
        return math.floor(n_bytes / (_MIB * max(self.cfg.memory_factor, 1)))

    def _hint(self, kind: QuantityKind, name: str) -> str:
        if kind is QuantityKind.COUNT:
            return f"write a whole number of GPUs, e.g. {name}: 1"
        if kind is QuantityKind.MEMORY:
            example = f", e.g. {name}: 20480 for 20 GiB" if max(self.cfg.memory_factor, 1) == 1 else ""
            return f"write a whole number of {self._unit()}{example}"
        if kind in (QuantityKind.PERCENT, QuantityKind.CORES):
            return "write a whole number from 0 to 100"
        return "write a whole number, e.g. 0 or 1"

    def _share_hint(self, name: str, q: Fraction) -> str:
        """What to write instead of a fractional count: the share resources the family has, if any."""
        memory, other = self.cfg.resource_memory_name, self.cfg.resource_memory_percentage_name
        factor = max(self.cfg.memory_factor, 1)
        shares = [f"{memory} ({'MiB' if factor == 1 else f'units of {factor} MiB'})"] if memory else []
        if other and other != memory:
            shares.append(other)
        if not shares:
            return f"did you mean {math.ceil(q)}?"
        return f"to share a GPU, ask for {name}: 1 with {' or '.join(shares)}"

    # ---- one value ---------------------------------------------------------------------------------------------

    def read(self, limits: Mapping[str, Any], requests: Mapping[str, Any], name: str, kind: QuantityKind) -> int | None:
        """The validated whole value of ``name`` (``None`` when absent or refused; refusals are collected)."""
        present, raw = raw_value(limits, requests, name)
        if not present:
            return None
        plain = self._plain(raw, kind)
        if plain is not None:
            return min(plain, CORES_CAP) if kind is QuantityKind.CORES else plain
        try:
            q = parse_quantity(raw, name)
        except DecodeError:
            self.problem(self._not_a_quantity(raw, name, kind))
            return None
        text = self._check(raw, q, name, kind)
        if text is not None:
            self.problem(text)
            return None
        return min(q.numerator, CORES_CAP) if kind is QuantityKind.CORES else q.numerator

    def _plain(self, raw: Any, kind: QuantityKind) -> int | None:
        """``raw`` when it is a plain whole number (ASCII digits, or a JSON integer) that passes every check of
        ``kind``: what the full parse would return for it, without its exact arithmetic. None: let the full parse
        decide (and word any problem)."""
        if type(raw) is str:
            if not (0 < len(raw) <= 10 and raw.isascii() and raw.isdigit()):
                return None
            value = int(raw)
        elif type(raw) is int:
            value = raw
        else:
            return None
        if kind is QuantityKind.PERCENT:
            bound = 100
        elif kind is QuantityKind.MEMORY:
            bound = INT32_MAX // max(self.cfg.memory_factor, 1)
        else:
            bound = INT32_MAX
        return value if 0 <= value <= bound else None

    def _not_a_quantity(self, raw: Any, name: str, kind: QuantityKind) -> str:
        text = f"{name}: {shown_value(raw)} is not a number"
        if kind is QuantityKind.MEMORY and isinstance(raw, str):
            m = _BYTE_UNIT.match(raw.strip())
            if m:
                try:
                    n_bytes = parse_quantity(m["size"].replace(" ", "").replace("K", "k").replace("ki", "Ki"))
                except DecodeError:
                    n_bytes = None
                if n_bytes is not None and n_bytes > 0:
                    suggestion = self._bytes_to_units(n_bytes)
                    if suggestion >= 1:
                        shown = shown_value(raw)
                        return f"{name} is in {self._unit()}: {shown} is not a number; did you mean {suggestion}?"
        return f"{text}; {self._hint(kind, name)}"

    def _check(self, raw: Any, q: Fraction, name: str, kind: QuantityKind) -> str | None:
        shown = shown_value(raw)
        if q < 0:
            return f"{name} cannot be negative: got {shown}; {self._hint(kind, name)}"
        binary = _BINARY_SUFFIX.match(raw.strip()) if isinstance(raw, str) else None
        if kind is QuantityKind.MEMORY:
            return self._check_memory(shown, q, name, binary is not None)
        if binary is not None:
            percent = "is a percentage of one GPU"
            what = {QuantityKind.COUNT: "counts GPUs", QuantityKind.PERCENT: percent, QuantityKind.CORES: percent}.get(
                kind, "is a number"
            )
            plain = binary["mantissa"]
            mean = f"; did you mean {plain}?" if plain.isdigit() else f"; {self._hint(kind, name)}"
            unit = {QuantityKind.COUNT: " GPUs", QuantityKind.PERCENT: "%", QuantityKind.CORES: "%"}.get(kind, "")
            return f"{name} {what} and takes no unit: {shown} would be {decimal_text(q)}{unit}{mean}"
        if q.denominator != 1:
            if kind is QuantityKind.COUNT:
                return f"{name} counts whole GPUs: {shown} is {decimal_text(q)}; {self._share_hint(name, q)}"
            return f"{name} must be a whole number: {shown} is {decimal_text(q)}; did you mean {math.ceil(q)}?"
        if kind is QuantityKind.PERCENT and q > 100:
            return f"{name} is a percentage of one GPU: {shown} is more than 100; use 100 for a whole GPU"
        if q > INT32_MAX:
            return f"{name}: {shown} is too large (at most {INT32_MAX}); {self._hint(kind, name)}"
        return None

    def _check_memory(self, shown: str, q: Fraction, name: str, binary: bool) -> str | None:
        limit = INT32_MAX // max(self.cfg.memory_factor, 1)
        if binary or q > limit:
            unit = "MiB" if max(self.cfg.memory_factor, 1) == 1 else "units"
            would = f"{name} is in {self._unit()}: {shown} would be {decimal_text(q)} {unit}"
            suggestion = self._bytes_to_units(q)
            if 1 <= suggestion <= limit:
                return f"{would}; did you mean {suggestion}?"
            why = f"more than {limit}" if q > limit else "a unit does not belong here"
            return f"{would}, {why}; {self._hint(QuantityKind.MEMORY, name)}"
        if q.denominator != 1:
            exact = decimal_text(q)
            return f"{name} is a whole number of {self._unit()}: {shown} is {exact}; did you mean {math.ceil(q)}?"
        return None


def container_label(container: Any, what: str) -> str:
    name = container.get("name") if isinstance(container, Mapping) else None
    kind = "init container" if "initContainers" in what else "container"
    return f'{kind} "{name}"' if isinstance(name, str) and name else what


def capped_cores_warning(container: Mapping[str, Any], name: str | None, what: str, device: str = "GPU") -> str | None:
    """The admission warning for a core percentage above 100 that :attr:`QuantityKind.CORES` reads as 100 (None:
    the container's value of ``name`` is absent, at most 100, or refused anyway). Pure; never raises on a bad
    value (the request's validation words those)."""
    if not name:
        return None
    try:
        limits, requests = container_lists(container, what)
    except DecodeError:
        return None
    present, raw = raw_value(limits, requests, name)
    if not present or (isinstance(raw, str) and _BINARY_SUFFIX.match(raw.strip())):
        return None
    try:
        q = parse_quantity(raw, name)
    except DecodeError:
        return None
    if q.denominator != 1 or not CORES_CAP < q <= INT32_MAX:
        return None
    return (
        f"{container_label(container, what)}: {name}: {shown_value(raw)} is more than 100 (a whole {device}); "
        f"scheduled as {CORES_CAP}, as HAMi does"
    )


def container_request(container: Mapping[str, Any], cfg: NvidiaConfig, what: str = "container") -> ContainerRequest:
    """One container's NVIDIA request (``nums == 0`` when it asks for none). ``what`` prefixes error locations.

    Raises :class:`ResourceRequestError` (every problem of the container) for a managed resource with a bad
    value, :class:`~shared.errors.DecodeError` for a container of the wrong shape.
    """
    limits, requests = container_lists(container, what)
    r = RequestReader(cfg, container_label(container, what))
    count_name, mem_name, pct_name = (
        cfg.resource_count_name,
        cfg.resource_memory_name,
        cfg.resource_memory_percentage_name,
    )
    n = r.read(limits, requests, count_name, QuantityKind.COUNT)
    mem = r.read(limits, requests, mem_name, QuantityKind.MEMORY)
    pct = r.read(limits, requests, pct_name, QuantityKind.PERCENT)
    core = r.read(limits, requests, cfg.resource_core_name, QuantityKind.CORES)
    r.read(limits, requests, cfg.resource_priority_name, QuantityKind.PRIORITY)
    if r.problems:
        raise ResourceRequestError(r.problems)

    count_given, _ = raw_value(limits, requests, count_name)
    shares = [x for x in (mem_name, pct_name, cfg.resource_core_name) if raw_value(limits, requests, x)[0]]
    if not count_given:
        if not shares:
            return EMPTY_REQUEST
        if cfg.default_gpu_num <= 0:
            r.problem(f"{shares[0]} needs {count_name}, the number of GPUs: add {count_name}: 1")
            raise ResourceRequestError(r.problems)
        n = cfg.default_gpu_num  # what the webhook writes into the limits
    assert n is not None
    if n == 0:
        asking = mem_name if mem else pct_name if pct else None
        if asking is not None:
            r.problem(
                f"{count_name} is 0 but {asking} asks for GPU memory: set {count_name} to the number of GPUs "
                f"(e.g. 1) or remove {asking}"
            )
            raise ResourceRequestError(r.problems)
        return EMPTY_REQUEST

    mem_mib = (mem or 0) * max(cfg.memory_factor, 1)
    mem_pct = pct if pct else MEM_PCT_UNSET
    mem_mib, mem_pct = default_memory(mem_mib, mem_pct, cfg)
    cores = cfg.default_cores if core is None else core
    return ContainerRequest(nums=n, mem_mib=mem_mib, mem_pct=mem_pct, cores_pct=cores, type=NVIDIA)


def _containers(spec: Mapping[str, Any], key: str) -> Sequence[Any]:
    v = spec.get(key)
    if v is None:
        return ()
    if not isinstance(v, list | tuple):
        fail(f"spec.{key}", f"expected a list, got {type(v).__name__}")
    return v


def _spec(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    p = _mapping(pod, "pod")
    spec = p.get("spec")
    if spec is None:
        fail("pod.spec", "pod has no spec")
    return _mapping(spec, "pod.spec")


def pod_containers(pod: Mapping[str, Any]) -> tuple[Sequence[Any], Sequence[Any]]:
    """(initContainers, containers) of a pod's JSON; missing lists are empty."""
    spec = _spec(pod)
    return _containers(spec, "initContainers"), _containers(spec, "containers")


def pod_request(pod: Mapping[str, Any], cfg: NvidiaConfig) -> PodRequest:
    """Every container's request, init containers first (difference 2); ``init_count`` marks the split.

    Raises :class:`ResourceRequestError` with the problems of every container (not only the first).
    """
    located, init_count = located_containers(pod)
    reqs: list[ContainerRequest] = []
    problems: list[str] = []
    for what, c in located:
        try:
            reqs.append(container_request(c, cfg, what))
        except ResourceRequestError as e:
            problems.extend(e.problems)
    if problems:
        raise ResourceRequestError(problems)
    return PodRequest(containers=tuple(reqs), init_count=init_count)


def names_any(container: Any, names: Iterable[str], what: str = "container") -> bool:
    """Whether the container names one of ``names`` in its limits or requests, whatever the value."""
    limits, requests = container_lists(container, what)
    return any(n in limits or n in requests for n in names)


def pod_requests_managed_resource(pod: Mapping[str, Any], cfg: NvidiaConfig) -> bool:
    """Whether any (init) container names one of the vendor's resources (``cfg.resource_names``) in its limits
    or requests, whatever the value: what makes a pod "ours" for the extender and the webhook."""
    names = cfg.resource_names
    init, app = pod_containers(pod)
    return any(names_any(c, names, f"container {i}") for i, c in enumerate([*init, *app]))


def located_containers(pod: Mapping[str, Any]) -> tuple[list[tuple[str, Any]], int]:
    """The pod's init then app containers, each with the path that names it in messages
    (``spec.initContainers[i]``, ``spec.containers[i]``), and the number of init containers."""
    init, app = pod_containers(pod)
    located = [(f"spec.initContainers[{i}]", c) for i, c in enumerate(init)]
    located += [(f"spec.containers[{i}]", c) for i, c in enumerate(app)]
    return located, len(init)
