"""value_in_text / numbers_in / quotes_in: numbers by value, never a digit run cut short."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_saga.runtime import numbers_in, quotes_in, value_in_text
from agent_saga.runtime._matching import as_number, quantities_in, quantity_in


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
    # 17 is part of the identifier invoice-17: not a number of the text (issue 40 item 5)
    assert numbers_in("invoice-17 for 4,200.50 EUR, 1,2 and (-3)") == [
        Decimal("4200.50"), Decimal(1), Decimal(2), Decimal(-3),
    ]


def test_a_hyphen_is_not_a_minus_but_a_leading_minus_is() -> None:
    assert not value_in_text(17, "invoice-17") and not value_in_text(-17, "invoice-17")
    assert value_in_text(-42, "change: -42") and not value_in_text(42, "change: -42")


@pytest.mark.parametrize(("text", "unit", "other"), [
    ("4200 kPa", "kPa", ""), ("EUR 4200", "EUR", ""), ("\u20ac4200", "EUR", ""), ("4200%", "%", ""),
    ("4200e-3", "", "exponent 'e-3'"), ("4200 \u00d7 10^3", "", "exponent '\u00d7 10^3'"),
    ("4200 thousand", "", "scale 'thousand'"), ("4200 Thousands", "", "scale 'thousand'"), ("4200k", "", "scale 'k'"),
    ("invoice-4200", "", "part of 'invoice-4200'"), ("INV4200", "", "part of 'INV4200'"), ("#4200", "", "part of '#4200'"),
    ("4200/month", "", "part of '4200/month'"),
])
def test_what_stands_next_to_a_number_says_which_quantity_it_is(text: str, unit: str, other: str) -> None:
    [quantity] = [q for q in quantities_in(f"so: {text}; end") if not q.piece]
    assert (quantity.value, quantity.unit, quantity.other) == (Decimal(4200), unit, other)


@pytest.mark.parametrize(("text", "value"), [
    ("forty thousand kPa", 40000), ("twelve hundred", 1200), ("two million and five", 2000005),
    ("a thousand", 1000), ("ninety-nine", 99),
])
def test_cardinals_in_words_are_read(text: str, value: int) -> None:
    assert [q.value for q in quantities_in(text)] == [Decimal(value)]
    assert quantities_in("one of the two reasons") == []  # small words alone are prose


def test_a_dot_before_three_digits_is_ambiguous() -> None:
    assert not value_in_text(4.2, "Gesamt: 4.200 EUR") and not value_in_text(4200, "Gesamt: 4.200 EUR")
    assert value_in_text(4.2, "4.20 EUR") and value_in_text(4200, "4,200 EUR") and value_in_text(0.5, "0.500 l")


def test_a_quantity_in_a_text_has_its_value_its_qualifier_and_the_unit_it_states() -> None:
    [mpa] = quantities_in("4200 MPa")
    assert not quantity_in(mpa, "the limit is 4200 kPa") and quantity_in(mpa, "4,200 MPa")
    [bare] = quantities_in("4200")
    assert quantity_in(bare, "the limit is 4200 kPa") and not quantity_in(bare, "4200 thousand kPa")


@given(
    token=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_]{0,10}", fullmatch=True),
    more=st.from_regex(r"[A-Za-z0-9]{1,3}", fullmatch=True),
    joiner=st.sampled_from(["", "-", "_", ".", "/", "@"]),
)
def test_a_string_is_found_only_as_a_whole_token(token: str, more: str, joiner: str) -> None:
    # acct_9 is not in acct_97, an IBAN missing its last digit is not in the IBAN (issue 40 item 5)
    if as_number(token) is not None:
        return  # a numeric string is compared as a number
    assert not value_in_text(token, f"< {token}{joiner}{more} >")
    assert not value_in_text(token, f"< {more}{joiner}{token} >")
    assert value_in_text(token, f"< ({token}), >")
    assert value_in_text(f"{token}{joiner}{more}", f"< {token}{joiner}{more}. >")


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
