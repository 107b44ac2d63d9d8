"""Does a value appear in a text? Numbers by value, strings verbatim.

A model that copies ``4200`` out of an invoice may write it back as ``4,200``,
``4 200.00`` or ``4200.0``: the same number, so the check compares numbers by
value. It must not be fooled the other way: ``4200`` is not in ``"42000"`` nor in
``"14200"``, so a number in the text is read whole (a run of digits is never cut
to find a shorter one inside it).

How a number in a text is read:

* digits, optionally grouped by thousands with ``,``, a space, a no-break or thin
  space, ``'`` or ``_`` (``4,200``, ``4 200``); a group separator counts only
  before exactly three digits, so ``1,2`` is two numbers, not one;
* optionally a decimal part after ``.`` (``4200.00``);
* optionally a leading ``-`` or ``−`` (U+2212) when it does not join a word
  (``-42`` is negative; ``invoice-17`` holds 17);
* a space-grouped run (``17 200``) also yields its pieces (17 and 200): a text
  that writes "invoice 17 200 units" contains both readings; a later piece with a
  leading zero (the ``000`` of ``1 000``) is not a number of its own.

A string value that reads as one number (``"4200"``, ``"4,200.00"``) is compared
as that number, so a string amount cannot slip through as a substring of a longer
number. Any other string is compared verbatim (case and spacing included); the
empty string is in no text.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

__all__ = ["as_number", "numbers_in", "quotes_in", "value_in_text"]

_SEPARATORS = ",\u0020\u00a0\u202f\u2009'_"
_GROUP_SEP = "[" + re.escape(_SEPARATORS) + "]"
# A number: optional sign (only where it starts a token), then either a thousands-grouped
# integer part or a plain run of digits, then an optional decimal part. The look-behind and
# look-ahead keep a digit run whole: no match starts or ends inside one.
_NUMBER = re.compile(
    r"(?<![\d.])"  # never from inside a digit run or a decimal part
    r"(?P<sign>[-\u2212](?=\d))?"
    r"(?<![\d])"
    r"(?P<int>\d{1,3}(?:" + _GROUP_SEP + r"\d{3})+(?![\d])|\d+)"
    r"(?P<frac>\.\d+)?"
    r"(?![\d])"
)
# A sign is a sign only at the start of a token: "invoice-17" holds 17, not -17.
_SIGN_ALLOWED_AFTER = frozenset(" \t\r\n\u00a0([{:=;,")
_QUOTE = re.compile(r"[\"\u201c]([^\"\u201c\u201d]+)[\"\u201d]")


def _readings(text: str) -> list[tuple[Decimal, bool]]:
    """Every number in ``text``, in order; the flag marks space-grouped pieces."""
    found: list[tuple[Decimal, bool]] = []
    for match in _NUMBER.finditer(text):
        start = match.start()
        sign = match.group("sign")
        integer = match.group("int")
        frac = match.group("frac") or ""
        if sign and start > 0 and text[start - 1] not in _SIGN_ALLOWED_AFTER:
            sign = None  # "invoice-17": a hyphen, not a minus
        digits = re.sub(_GROUP_SEP, "", integer)
        value = Decimal(digits + frac)
        found.append((-value if sign else value, False))
        if re.search(r"[\u0020\u00a0\u202f\u2009]", integer):
            # "17 200": the pieces are numbers in the text too
            pieces = re.split(r"[\u0020\u00a0\u202f\u2009]", integer)
            for i, piece in enumerate(pieces):
                if i and piece.startswith("0"):
                    continue  # "1 000" holds 1 and 1000, never 0: nobody writes 0 as "000"
                piece_digits = re.sub(_GROUP_SEP, "", piece)
                tail = frac if i == len(pieces) - 1 else ""
                found.append((Decimal(piece_digits + tail), True))
    return found


def numbers_in(text: str) -> list[Decimal]:
    """The numbers written in ``text``, in order, each read whole (``"4,200.00"`` -> 4200.00)."""
    if not isinstance(text, str):
        raise TypeError(f"numbers_in() reads a str, got {type(text).__name__}")
    return [value for value, piece in _readings(text) if not piece]


def quotes_in(text: str) -> list[str]:
    """The direct quotes in ``text``: what stands between straight or curly double quotes."""
    if not isinstance(text, str):
        raise TypeError(f"quotes_in() reads a str, got {type(text).__name__}")
    return [m.group(1) for m in _QUOTE.finditer(text) if m.group(1).strip()]


def as_number(value: object) -> Decimal | None:
    """``value`` as a Decimal when it is a number or a string that reads as exactly one number."""
    if isinstance(value, bool):
        return None  # True is not 1 here: a flag is not an amount
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return None
        return Decimal(repr(value))  # the shortest decimal that round-trips, not the binary expansion
    if isinstance(value, Decimal):
        return value if value.is_finite() else None
    if isinstance(value, str):
        stripped = value.strip()
        match = _NUMBER.fullmatch(stripped)
        if match is None:
            return None
        readings = _readings(stripped)
        return readings[0][0] if readings else None
    return None


def value_in_text(value: object, text: str) -> bool:
    """Whether ``value`` appears in ``text``: numbers by value, other strings verbatim.

    Raises TypeError for a value that is neither a number nor a string (a list, a
    dict, None): there is no honest way to find one in a text.
    """
    if not isinstance(text, str):
        raise TypeError(f"value_in_text() searches a str, got {type(text).__name__}")
    number = as_number(value)
    if number is not None:
        try:
            return any(found == number for found, _ in _readings(text))
        except InvalidOperation:  # pragma: no cover - _NUMBER only matches digits
            return False
    if isinstance(value, str):
        return bool(value) and value in text
    raise TypeError(
        f"value_in_text() compares numbers and strings, got {type(value).__name__}; "
        "pass the number or the text itself"
    )
