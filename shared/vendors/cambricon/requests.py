"""Reading one container's MLU resources strictly (memory in 256 MiB units), collecting every problem. Pure."""

from __future__ import annotations

import math
from typing import Any

from vgpu_scheduler.shared.codec.resources import Problems, decimal_text, shown_value
from vgpu_scheduler.shared.vendors.base import ResourceNames
from vgpu_scheduler.shared.vendors.cambricon.keys import _BINARY_SUFFIX, _INT32_MAX, _MIB, CARD_CORES, MEMORY_UNIT_MIB

# ------------------------------------------------------------------------------------------------------------
# Requests
# ------------------------------------------------------------------------------------------------------------


class _Reader(Problems):
    """Reads one container's Cambricon resources, collecting every problem."""

    def __init__(self, names: ResourceNames, label: str) -> None:
        super().__init__(label)
        self.names = names

    def count(self, raw: Any) -> int | None:
        name = self.names.count
        hint = f"write a whole number of MLUs, e.g. {name}: 1"
        q = self.quantity(raw, name, lambda: hint)
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
        q = self.quantity(raw, name, lambda: hint)
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
        q = self.quantity(raw, name, lambda: hint)
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
