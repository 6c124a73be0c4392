"""Reading one container's Ascend resources strictly, collecting every problem. Pure."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from vgpu_scheduler.shared.codec._go import (
    INT32_MAX,
)
from vgpu_scheduler.shared.codec.quantity import parse_quantity
from vgpu_scheduler.shared.codec.resources import (
    decimal_text,
    shown_value,
)
from vgpu_scheduler.shared.domain.model import (
    ContainerRequest,
)
from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.vendors.ascend.config import _BINARY_SUFFIX, _MIB, ChipConfig

# ------------------------------------------------------------------------------------------------------------
# Requests
# ------------------------------------------------------------------------------------------------------------


class _Reader:
    """Reads one container's Ascend resources, collecting every problem."""

    def __init__(self, chip: ChipConfig, label: str) -> None:
        self.chip = chip
        self.label = label
        self.problems: list[str] = []

    def problem(self, text: str) -> None:
        self.problems.append(f"{self.label}: {text}")

    def read(self, raw: Any, name: str, *, memory: bool) -> int | None:
        """A whole, non-negative, int32 value (None when refused; the refusal is recorded)."""
        try:
            q = parse_quantity(raw, name)
        except DecodeError:
            self.problem(f"{name}: {shown_value(raw)} is not a number; {self._hint(name, memory)}")
            return None
        if q < 0:
            self.problem(f"{name} cannot be negative: got {shown_value(raw)}; {self._hint(name, memory)}")
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
