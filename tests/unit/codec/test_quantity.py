"""Kubernetes quantity parsing, exact and Go-compatible."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vgpu_scheduler.shared.codec.quantity import parse_quantity, parse_quantity_int, whole_int64
from vgpu_scheduler.shared.errors import DecodeError

NANO = Fraction(1, 10**9)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("3k", 3000),
        ("3000", 3000),
        ("1Gi", 2**30),
        ("500m", Fraction(1, 2)),
        ("1e3", 1000),
        ("1E3", 1000),
        ("1e+3", 1000),
        ("1e-3", Fraction(1, 1000)),
        ("1.5", Fraction(3, 2)),
        (".5", Fraction(1, 2)),
        ("5.", 5),
        ("1.G", 10**9),
        ("+1", 1),
        ("-1", -1),
        ("0", 0),
        ("00", 0),
        ("-0", 0),
        ("+", 0),
        (".", 0),
        ("1n", NANO),
        ("1u", Fraction(1, 10**6)),
        ("12E", 12 * 10**18),
        ("1Ei", 2**60),
        ("8Ei", 2**63 - 1),
        ("-8Ei", -(2**63 - 1)),
        ("1.5Ki", 1536),
        ("0.5Ki", 512),
        ("0.0000000001", NANO),
        ("-0.0000000001", -NANO),
        ("1e-20", NANO),
        ("1.1m", Fraction(11, 10000)),
        ("0.1n", NANO),
        ("1.0000000001", 1 + NANO),
    ],
)
def test_parse_quantity(text: str, value: Fraction | int) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize(
    "text",
    ["", " 1", "1 ", "abc", "1kk", "1K", "1ki", "1e", "1e+", "1.2.3", "--1", "1Mi1", "1e4294967296", "1e10001", "٣"],
)
def test_parse_quantity_rejects(text: str) -> None:
    with pytest.raises(DecodeError) as e:
        parse_quantity(text, "limits[x]")
    assert e.value.what == "limits[x]"


@pytest.mark.parametrize("value", [True, None, [1], float("nan"), float("inf")])
def test_parse_quantity_rejects_non_quantities(value: object) -> None:
    with pytest.raises(DecodeError):
        parse_quantity(value)  # type: ignore[arg-type]


def test_numbers_from_hand_written_specs() -> None:
    assert parse_quantity(3000) == 3000
    assert parse_quantity(0.5) == Fraction(1, 2)
    assert parse_quantity(1e20) == 10**20


def test_parse_quantity_int() -> None:
    assert parse_quantity_int("3k") == 3000
    with pytest.raises(DecodeError):
        parse_quantity_int("500m")


def test_whole_int64() -> None:
    assert whole_int64(Fraction(3000)) == 3000
    assert whole_int64(Fraction(1, 2)) is None
    assert whole_int64(Fraction(2**63)) is None


_DEC = {"": 0, "n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BIN = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}


@settings(deadline=None)
@given(st.integers(0, 10**12), st.sampled_from(sorted(_DEC)), st.booleans())
def test_decimal_suffixes(n: int, suffix: str, negative: bool) -> None:
    expected = Fraction(n) * Fraction(10) ** _DEC[suffix]
    assert parse_quantity(f"{'-' if negative else ''}{n}{suffix}") == (-expected if negative else expected)


@settings(deadline=None)
@given(st.integers(0, 2**20), st.sampled_from(sorted(_BIN)))
def test_binary_suffixes(n: int, suffix: str) -> None:
    assert parse_quantity(f"{n}{suffix}") == min(n * 2 ** _BIN[suffix], 2**63 - 1)


@settings(deadline=None)
@given(st.integers(0, 10**15), st.integers(0, 10**9 - 1), st.integers(-30, 30))
def test_decimal_fraction_and_exponent(whole: int, frac: int, exponent: int) -> None:
    digits = f"{frac:09d}"
    exact = (Fraction(whole) + Fraction(frac, 10**9)) * Fraction(10) ** exponent
    rounded = Fraction(-(-exact.numerator * 10**9 // exact.denominator), 10**9)  # up to a nano multiple
    assert parse_quantity(f"{whole}.{digits}e{exponent}") == rounded
