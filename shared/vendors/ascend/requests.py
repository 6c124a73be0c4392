"""Reading one container's Ascend resources strictly, collecting every problem (:func:`parse_container`). Pure."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vgpu_scheduler.shared.codec._go import INT32_MAX
from vgpu_scheduler.shared.codec.resources import (
    Problems,
    ResourceRequestError,
    container_label,
    container_lists,
    decimal_text,
    raw_value,
    shown_value,
)
from vgpu_scheduler.shared.domain.model import EMPTY_REQUEST, MEM_PCT_UNSET, ContainerRequest
from vgpu_scheduler.shared.vendors.ascend.config import (
    _BINARY_SUFFIX,
    _MIB,
    ASCEND910C,
    NPUS_PER_910C_MODULE,
    ChipConfig,
)

# ------------------------------------------------------------------------------------------------------------
# Requests
# ------------------------------------------------------------------------------------------------------------


class _Reader(Problems):
    """Reads one container's Ascend resources, collecting every problem."""

    def __init__(self, chip: ChipConfig, label: str) -> None:
        super().__init__(label)
        self.chip = chip

    def read(self, raw: Any, name: str, *, memory: bool) -> int | None:
        """A whole, non-negative, int32 value (None when refused; the refusal is recorded)."""
        q = self.quantity(raw, name, lambda: self._hint(name, memory))
        if q is None:
            return None
        binary = _BINARY_SUFFIX.match(raw.strip()) if isinstance(raw, str) else None
        if memory and binary is not None:
            mib = math.floor(q / (_MIB * max(self.chip.memory_factor, 1)))
            mean = f"; did you mean {mib}?" if mib >= 1 else f"; {self._hint(name, memory)}"
            self.problem(f"{name} is in {self._unit()}: {shown_value(raw)} would be {decimal_text(q)}{mean}")
            return None
        if binary is not None:
            self.problem(f"{name} counts NPUs and takes no unit: {shown_value(raw)} would be {decimal_text(q)} NPUs")
            return None
        if q.denominator != 1:
            self.problem(
                f"{name} must be a whole number: {shown_value(raw)} is {decimal_text(q)}; did you mean {math.ceil(q)}?"
            )
            return None
        if q > INT32_MAX:
            self.problem(f"{name}: {shown_value(raw)} is too large (at most {INT32_MAX}); {self._hint(name, memory)}")
            return None
        return q.numerator

    def _unit(self) -> str:
        factor = max(self.chip.memory_factor, 1)
        return "MiB" if factor == 1 else f"units of {factor} MiB (memoryFactor {factor})"

    def _hint(self, name: str, memory: bool) -> str:
        if memory:
            return f"write a whole number of {self._unit()}, e.g. {name}: {self._example()}"
        return f"write a whole number of NPUs, e.g. {name}: 1"

    def _example(self) -> int:
        t = self.chip.templates[0].memory_mib if self.chip.templates else self.chip.memory_allocatable
        return max(t // max(self.chip.memory_factor, 1), 1)


@dataclass(frozen=True, slots=True)
class _Parsed:
    request: ContainerRequest
    count_raw_nums: int
    """The count as written (before the 910C round-up), 0 when absent."""
    memory_given: bool
    soft: bool = False
    """The container names the core resource: HAMi reads its memory as written (the hami-core soft split)."""


def parse_container(chip: ChipConfig, container: Mapping[str, Any], what: str) -> _Parsed:
    """One container's Ascend request, strict (every problem a ResourceRequestError): the count, and the memory
    through a vNPU template or, when the container names the core resource, the hami-core soft split."""
    c = chip
    limits, requests = container_lists(container, what)
    r = _Reader(c, container_label(container, what))
    count_given, count_raw = raw_value(limits, requests, c.resource_name)
    mem_given, mem_raw = raw_value(limits, requests, c.resource_memory_name)
    core_given, core_raw = raw_value(limits, requests, c.resource_core_name)
    n = r.read(count_raw, c.resource_name, memory=False) if count_given else None
    mem = r.read(mem_raw, c.resource_memory_name, memory=True) if mem_given else None
    core = r.read(core_raw, c.resource_core_name, memory=False) if core_given else None
    soft = core_given
    if r.problems:
        raise ResourceRequestError(r.problems)
    if not count_given:
        if mem_given or core_given:
            named = c.resource_memory_name if mem_given else c.resource_core_name
            r.problem(f"{named} needs {c.resource_name}, the number of NPUs: add {c.resource_name}: 1")
            raise ResourceRequestError(r.problems)
        return _Parsed(EMPTY_REQUEST, 0, False)
    assert n is not None
    if n == 0:
        if mem_given:
            r.problem(
                f"{c.resource_name} is 0 but {c.resource_memory_name} asks for NPU memory: set "
                f"{c.resource_name} to the number of NPUs (e.g. 1) or remove {c.resource_memory_name}"
            )
            raise ResourceRequestError(r.problems)
        return _Parsed(EMPTY_REQUEST, 0, False)
    nums = n
    if c.common_word == ASCEND910C:
        if n == 1 and c.super_pod:  # HAMi #2005: one NPU becomes a module only in a super-pod
            nums = NPUS_PER_910C_MODULE
        elif n > 1 and n % NPUS_PER_910C_MODULE:  # Fit takes several NPUs as whole modules only
            one = "1 (one module)" if c.super_pod else "1"
            r.problem(
                f"{c.resource_name}: an {ASCEND910C} module holds {NPUS_PER_910C_MODULE} NPUs and several NPUs "
                f"are taken as whole modules, so ask for {one} or an even number, not {n}"
            )
    mem_mib = 0
    if mem is not None:
        mem_mib = _slice_memory(c, r, mem, nums, soft)
    if r.problems:
        raise ResourceRequestError(r.problems)
    pct = MEM_PCT_UNSET if mem_mib else 100
    request = ContainerRequest(nums, mem_mib, pct, core or 0, c.common_word)
    return _Parsed(request, n, mem_given, soft)


def _slice_memory(c: ChipConfig, r: _Reader, mem: int, nums: int, soft: bool) -> int:
    """The MiB one NPU slice gets. The hami-core soft split (``soft``: the container names the core resource) takes
    the memory as written, no template (HAMi's ``isCoreRequested``), up to ``memoryCapacity``; otherwise the memory
    is trimmed up to the chip's vNPU template (0: none holds it). Several NPUs take whole cards either way."""
    name = c.resource_memory_name
    what = "soft-split" if soft else "vNPU"
    if mem == 0:
        needs = "the soft-split NPU" if soft else "a vNPU"
        r.problem(f"{name} is 0: omit it for whole NPUs, or ask for the MiB {needs} needs")
        return 0
    mib = mem * max(c.memory_factor, 1)
    size = (mib if mib <= c.memory_capacity else 0) if soft else c.trim_memory(mib)[0]
    if size == 0:
        r.problem(
            f"{name}: {mib} MiB is more than one {c.common_word} holds (memoryCapacity {c.memory_capacity} MiB); "
            f"ask for at most {c.memory_capacity // max(c.memory_factor, 1)}, or for more NPUs"
        )
        return 0
    if nums > 1 and size != c.memory_allocatable:
        r.problem(
            f"{name}: a {what} slice ({size} MiB) is a single-device request, but {nums} NPUs are asked for: "
            f"omit {name} (whole NPUs) or ask for 1 NPU"
        )
        return 0
    return size
