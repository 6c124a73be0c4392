"""Kubernetes resource quantities (``3k``, ``1Gi``, ``500m``, ``1e3``), parsed exactly.

A port of ``k8s.io/apimachinery/pkg/api/resource.ParseQuantity``: the same scanner (so ``1.G``, ``+`` and ``.``
parse as Go parses them), the same suffix table, non-zero values rounded *up* (away from zero) to a multiple of
10⁻⁹, binary-suffixed values capped at 2⁶³−1. The API server normalises what it stores (``gpumem: 3000`` is
served as ``"3k"``), so the extender must read those forms.

Deliberate limits, where Go would silently wrap or spend unbounded time: a decimal exponent outside the int32
range, or a value above 10¹⁰⁰⁰⁰, is a :class:`~shared.errors.DecodeError` (Go truncates the exponent to int32).
"""

from __future__ import annotations

import math
from fractions import Fraction

from vgpu_scheduler.shared.codec._go import INT64_MAX, INT64_MIN, fail

_DECIMAL = {"": 0, "n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_SUFFIX_CHARS = frozenset("eEinumkKMGTP")
_DIGITS = frozenset("0123456789")
_MAX_DECIMAL_EXPONENT = 10_000
_NANO = 10**9


def _scan(s: str, what: str) -> tuple[bool, str, str, str]:
    """Go ``parseQuantityString``: (positive, numerator digits, denominator digits, suffix)."""
    pos, end, positive = 0, len(s), True
    if s[0] == "-":
        positive, pos = False, 1
    elif s[0] == "+":
        pos = 1
    while pos < end and s[pos] == "0":  # leading zeros
        pos += 1
    if pos >= end:
        return positive, "0", "", ""
    i = pos
    while i < end and s[i] in _DIGITS:
        i += 1
    num = s[pos:i] or "0"
    pos = i
    denom = ""
    if pos < end and s[pos] == ".":
        pos += 1
        i = pos
        while i < end and s[i] in _DIGITS:
            i += 1
        denom, pos = s[pos:i], i
    suffix_start = pos
    while pos < end and s[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos < end and s[pos] in "+-":
        pos += 1
    while pos < end and s[pos] in _DIGITS:
        pos += 1
    if pos < end:
        fail(what, f"not a quantity: {s!r}", s)
    return positive, num, denom, s[suffix_start:]


def _interpret(suffix: str, s: str, what: str) -> tuple[int, int]:
    """Go ``suffixHandler.interpret``: (base, exponent)."""
    if suffix in _DECIMAL:
        return 10, _DECIMAL[suffix]
    if suffix in _BINARY:
        return 2, _BINARY[suffix]
    if len(suffix) > 1 and suffix[0] in "eE":
        body = suffix[1:]
        digits = body[1:] if body[:1] in ("+", "-") else body
        if digits and all(c in _DIGITS for c in digits):
            exponent = int(body) if len(digits) <= 20 else 2**63
            if -(2**31) <= exponent < 2**31:
                return 10, exponent
            fail(what, f"quantity exponent out of range: {s!r}", s)
    fail(what, f"unknown quantity suffix {suffix!r}", s)


def _round_up_nano(value: Fraction) -> Fraction:
    """Round the magnitude up to the next multiple of 10⁻⁹ (inf.RoundUp on the absolute value)."""
    if value == 0 or (_NANO % value.denominator == 0):
        return value
    mag = abs(value)
    units = -((-mag.numerator * _NANO) // mag.denominator)
    return Fraction(units if value > 0 else -units, _NANO)


def parse_quantity(value: str | int | float, what: str = "quantity") -> Fraction:
    """Parse a Kubernetes quantity into its exact value.

    Accepts the string forms the API serves and, for specs written by hand, JSON/YAML numbers (an ``int`` as is,
    a finite ``float`` through its shortest decimal form, the way Go reads the raw JSON number).
    Raises :class:`~shared.errors.DecodeError` (``what`` names the field) for anything Go would reject.
    """
    if isinstance(value, bool):
        fail(what, "expected a quantity, got a boolean", str(value))
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            fail(what, "expected a quantity, got a non-finite number", repr(value))
        value = repr(value)
    if not isinstance(value, str):
        fail(what, f"expected a quantity string, got {type(value).__name__}")
    s = value
    if s == "":
        fail(what, "empty quantity", s)
    if s == "0":
        return Fraction(0)
    positive, num, denom, suffix = _scan(s, what)
    base, exponent = _interpret(suffix, s, what)
    try:
        digits = int(num + denom)
    except ValueError:  # beyond Python's int-conversion digit limit
        fail(what, "quantity has too many digits", s)
    if digits == 0:
        return Fraction(0)
    if base == 2:
        result = Fraction(digits * 2**exponent, 10 ** len(denom))
    else:
        e = exponent - len(denom)
        if e >= 0:
            if e + len(num) > _MAX_DECIMAL_EXPONENT:
                fail(what, "quantity too large", s)
            result = Fraction(digits * 10**e)
        elif e >= -9:
            result = Fraction(digits, 10**-e)
        else:
            k = -e - 9  # the value is digits / 10**k nano-units
            units = 1 if k > len(str(digits)) else -(-digits // 10**k)
            result = Fraction(units, _NANO)
    result = _round_up_nano(result)
    if base == 2 and result > INT64_MAX:
        result = Fraction(INT64_MAX)
    return result if positive else -result


def parse_quantity_int(value: str | int | float, what: str = "quantity") -> int:
    """Parse a quantity that must be a whole number (``"3k"`` → 3000); a fraction is a DecodeError."""
    q = parse_quantity(value, what)
    if q.denominator != 1:
        fail(what, f"not a whole number: {value!r}", str(value))
    return q.numerator


def whole_int64(q: Fraction) -> int | None:
    """The value as an int when it is whole and fits int64, else ``None``.

    Stands for Go's ``Quantity.AsInt64()`` on the canonical forms the API server serves.
    """
    if q.denominator == 1 and INT64_MIN <= q.numerator <= INT64_MAX:
        return q.numerator
    return None
