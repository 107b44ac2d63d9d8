"""value_in_text / numbers_in / quotes_in: numbers by value, never a digit run cut short."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_saga.runtime import numbers_in, quotes_in, value_in_text
from agent_saga.runtime._matching import as_number


def _grouped(n: int, sep: str) -> str:
    return f"{n:,}".replace(",", sep)


def _spellings(n: int) -> list[str]:
    return [str(n), _grouped(n, ","), _grouped(n, " "), _grouped(n, "\u00a0"), f"{n}.0", f"{_grouped(n, ' ')}.00"]


@pytest.mark.parametrize("text", [
    "4200", "4,200", "4 200.00", "4200.0", "pay $4,200.00 now", "EUR4200", "4200.", "4'200", "4_200",
    "4\u2009200", "4\u202f200", "4\u00a0200",
])
def test_4200_is_found_however_it_is_written(text: str) -> None:
    assert value_in_text(4200, text)


@pytest.mark.parametrize("text", ["42000", "14200", "42 00", "4,2000", "420", "4200.5", "A-14200", "1.4200"])
def test_4200_is_not_found_inside_or_beside_another_number(text: str) -> None:
    assert not value_in_text(4200, text)


@given(n=st.integers(min_value=0, max_value=10**12), which=st.integers(min_value=0, max_value=5))
def test_every_spelling_of_a_number_matches_it(n: int, which: int) -> None:
    text = f"the total is {_spellings(n)[which]} EUR"
    assert value_in_text(n, text)
    assert value_in_text(Decimal(n), text)
    assert value_in_text(str(n), text)


@given(
    n=st.integers(min_value=0, max_value=10**9),
    m=st.integers(min_value=0, max_value=10**9),
    which=st.integers(min_value=0, max_value=5),
)
def test_a_different_number_never_matches(n: int, m: int, which: int) -> None:
    spelled = _spellings(m)[which]
    pieces = re.split("[ \u00a0]", spelled.split(".")[0])
    # A space-grouped run's pieces are numbers in the text too (the module's docstring), except a
    # later piece with a leading zero.
    readings = {int(pieces[0]), *(int(p) for p in pieces[1:] if not p.startswith("0"))} if len(pieces) > 1 else set()
    if n == m or n in readings:
        return
    assert not value_in_text(n, f"amount: {spelled};")


@pytest.mark.parametrize(("n", "text", "found"), [
    (0, "amount: 1 000;", False), (1, "amount: 1 000;", True), (1000, "amount: 1 000;", True),
    (42, "x 17 042 y", False), (17, "x 17 042 y", True),
])
def test_the_pieces_of_a_space_grouped_run(n: int, text: str, found: bool) -> None:
    assert value_in_text(n, text) is found


@given(
    n=st.integers(min_value=1, max_value=10**9),
    prefix=st.integers(min_value=1, max_value=9),
    suffix=st.integers(min_value=0, max_value=9),
)
def test_a_number_is_never_found_inside_a_longer_digit_run(n: int, prefix: int, suffix: int) -> None:
    assert not value_in_text(n, f"x {prefix}{n} y")
    assert not value_in_text(n, f"x {n}{suffix} y")


@given(st.decimals(min_value=-(10**9), max_value=10**9, places=2, allow_nan=False, allow_infinity=False))
def test_decimals_round_trip_through_their_own_text(d: Decimal) -> None:
    assert numbers_in(f"value {d} end") == [d]
    assert value_in_text(d, f"value {d} end")
    assert value_in_text(float(d), f"value {d} end")


def test_numbers_are_read_whole() -> None:
    assert numbers_in("invoice-17 for 4,200.50 EUR, 1,2 and (-3)") == [
        Decimal(17), Decimal("4200.50"), Decimal(1), Decimal(2), Decimal(-3),
    ]


def test_a_hyphen_is_not_a_minus_but_a_leading_minus_is() -> None:
    assert value_in_text(17, "invoice-17") and not value_in_text(-17, "invoice-17")
    assert value_in_text(-42, "change: -42") and not value_in_text(42, "change: -42")


def test_strings_compare_verbatim_and_numeric_strings_by_value() -> None:
    assert value_in_text("ACME", "please pay ACME Corp")
    assert not value_in_text("acme", "please pay ACME Corp")
    assert not value_in_text("", "anything")
    assert not value_in_text("4200", "ref 14200")  # a numeric string is a number, not a substring
    assert value_in_text("4,200.00", "ref 4200")


def test_flags_and_containers_are_not_numbers() -> None:
    assert as_number(True) is None
    for value in (True, [4200], None):
        with pytest.raises(TypeError, match="compares numbers and strings"):
            value_in_text(value, "1 True 4200 None")


def test_quotes_straight_and_curly() -> None:
    assert quotes_in('he said "pay now" and \u201cnot later\u201d, "" stays out') == ["pay now", "not later"]
