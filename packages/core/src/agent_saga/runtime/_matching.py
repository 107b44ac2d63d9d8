"""Does a value appear in a text? Numbers by value and as quantities, strings as whole tokens.

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
* optionally a leading ``-`` or ``−`` (U+2212) when it does not join a word;
* a space-grouped run (``17 200``) also yields its pieces (17 and 200): a text
  that writes "invoice 17 200 units" contains both readings; a later piece with a
  leading zero (the ``000`` of ``1 000``) is not a number of its own;
* a cardinal in words with a tens, teen or scale word (``forty thousand``,
  ``twelve hundred``) is read as its value; a lone ``one`` or ``two`` is prose.

A number is a *plain quantity* unless something next to it makes it another one
(:attr:`Quantity.other` says what): an exponent (``4200e-3``, ``4.2×10^3``), a
scale word or letter (``4200 thousand``, ``4200k``, ``4.2m``), a place inside an
identifier (``invoice-4200``, ``INV4200``, ``#4200``, ``2026-11-02``), or a
``.`` that may be a German thousands separator (``4.200``: 4.2 or 4200). The
unit or currency written next to it (``4200 kPa``, ``EUR 4200``, ``$4,200``) is
kept as its :attr:`Quantity.unit`.

:func:`value_in_text` finds a number only as a plain quantity (any unit: a bare
value states none). A string value that reads as one plain number (``"4200"``,
``"4,200.00"``) is compared as that number; any other string must appear as a
whole token: not inside a longer one (``acct_9`` is not in ``acct_97``, an IBAN
missing its last digit is not in the IBAN), a token running on through letters,
digits, ``_``, or a ``-``, ``/``, ``.`` or ``@`` between them. The empty string
is in no text. :func:`quantity_in` compares two quantities as written: the same
value, the same qualifier, and the unit the first one states (grounding: "4200
MPa" is not "4200 kPa").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

__all__ = ["Quantity", "as_number", "numbers_in", "quantities_in", "quantity_in", "quotes_in", "value_in_text"]

_SEPARATORS = ",\u0020\u00a0\u202f\u2009'_"
_GROUP_SEP = "[" + re.escape(_SEPARATORS) + "]"
_SPACES = "\u0020\u00a0\u202f\u2009"
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
# A sign is a sign only at the start of a token: "invoice-17" is an identifier, not -17.
_SIGN_ALLOWED_AFTER = frozenset(" \t\r\n\u00a0([{:=;,")
_QUOTE = re.compile(r"[\"\u201c]([^\"\u201c\u201d]+)[\"\u201d]")

# What may follow a number and make it another quantity, tried in this order.
_EXPONENT = re.compile(
    r"[eE][+\-\u2212]?\d+"
    r"|[ \u00a0]?[x\u00d7\u00b7*][ \u00a0]?10(?:\^|\*\*)?[+\-\u2212]?\d+"
    r"|[ \u00a0]?[x\u00d7\u00b7*][ \u00a0]?10[\u207a\u207b]?[\u2070\u00b9\u00b2\u00b3\u2074-\u2079]+"
)
_SCALE = re.compile(
    r"(?:[ \u00a0\u202f\u2009]?(?P<word>thousands?|millions?|billions?|trillions?|mio|mrd|tsd|bn|mn|lakhs?|crores?)"
    r"|(?P<letter>[kmb]))(?!\w)",
    re.IGNORECASE,
)
# ISO 4217 codes written before or after an amount; other capitals are not a unit.
_CURRENCIES = frozenset((
    "USD", "EUR", "GBP", "JPY", "CHF", "CNY", "CAD", "AUD", "NZD", "SEK", "NOK", "DKK", "PLN", "CZK",
    "HUF", "INR", "BRL", "MXN", "ZAR", "HKD", "SGD", "KRW", "RUB", "TRY", "ILS", "AED", "SAR", "THB",
))
_SYMBOLS = {"\u20ac": "EUR", "\u00a3": "GBP", "$": "$", "\u00a5": "\u00a5"}
_UNIT = re.compile(
    r"[ \u00a0\u202f\u2009]?(?P<unit>%|\u2030|\u00b0[CF]?|[$\u20ac\u00a3\u00a5]|[A-Z]{3}"
    r"|(?:da|[yzafpnu\u00b5\u03bcmcdhkMGTPEZY])?"
    r"(?:Pa|bar|m|g|s|A|K|mol|cd|Hz|N|J|W|Wh|V|C|F|\u03a9|S|T|H|L|l|t|B|b|bit|bps|eV)"
    r"|rpm|min|h)(?!\w)"
)
_CURRENCY_BEFORE = re.compile(r"(?:(?P<sym>[$\u20ac\u00a3\u00a5])|(?<![^\W\d_])(?P<code>[A-Z]{3}))[ \u00a0]?\Z")
# Joiners: between word characters they keep one token going ("invoice-17", "acme.com").
_JOINERS = "-/.@"

_SMALL = {w: i for i, w in enumerate((
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
    "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen",
))}
_TENS = {w: 10 * (i + 2) for i, w in enumerate(
    ("twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"),
)}
_MULTIPLIERS = {"hundred": 100, "thousand": 10**3, "million": 10**6, "billion": 10**9, "trillion": 10**12}
_WORD = "|".join(sorted([*_SMALL, *_TENS, *_MULTIPLIERS], key=len, reverse=True))
_WORDS = re.compile(rf"\b(?:{_WORD})(?:(?:[ \t-]+(?:and[ \t]+)?)(?:{_WORD}))*\b", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Quantity:
    """A number as a text writes it: its value, its unit, and what else qualifies it."""

    value: Decimal
    #: The unit or currency written next to it (``kPa``, ``EUR``, ``%``); "" when none.
    unit: str = ""
    #: What makes it another quantity than the plain number: "" when nothing does, else a
    #: phrase such as ``exponent 'e-3'``, ``scale 'thousand'``, ``part of 'invoice-4200'``.
    other: str = ""
    #: A piece of a space-grouped run (``17`` of ``17 200``), an alternative reading.
    piece: bool = False
    #: The number as written, with its unit or qualifier.
    written: str = ""


def _word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def _joined(text: str, i: int, step: int) -> bool:
    """Whether ``text[i]`` carries on the token next to it (``step``: -1 reads leftwards)."""
    if not 0 <= i < len(text):
        return False
    if _word(text[i]):
        return True
    j = i + step
    return text[i] in _JOINERS and 0 <= j < len(text) and _word(text[j])


def _token(text: str, start: int, end: int) -> str:
    """The whole token around ``text[start:end]``."""
    while _joined(text, start - 1, -1):
        start -= 1
    while _joined(text, end, 1):
        end += 1
    return text[start:end]


def _qualified(text: str, lead: int, end: int, sign_refused: bool) -> tuple[str, str, int]:
    """(unit, other, where the number's writing ends) for the number at ``text[lead:end]``."""
    unit = ""
    before = text[max(0, lead - 5):lead]
    currency = _CURRENCY_BEFORE.search(before)
    if currency is not None and (currency.group("sym") or currency.group("code") in _CURRENCIES):
        unit = _SYMBOLS.get(currency.group("sym") or "", currency.group("code") or "")
    elif sign_refused or _joined(text, lead - 1, -1) or text[lead - 1:lead] == "#":
        start = lead - 1 if text[lead - 1:lead] == "#" else lead
        return unit, f"part of {_token(text, start, end)!r}", end
    for pattern, kind in ((_EXPONENT, "exponent"), (_SCALE, "scale")):
        found = pattern.match(text, end)
        if found is not None:
            said = found.group(0).strip().lower().replace("\u2212", "-")
            return unit, f"{kind} {said.rstrip('s') if kind == 'scale' else said!r}", found.end()
    after = _UNIT.match(text, end)
    if after is not None and (len(after.group("unit")) != 3 or not after.group("unit").isupper()
                              or after.group("unit") in _CURRENCIES):
        written = after.group("unit")
        return unit or _SYMBOLS.get(written, written), "", after.end()
    if _joined(text, end, 1):
        return unit, f"part of {_token(text, lead, end)!r}", end
    return unit, "", end


def _digit_readings(text: str, taken: list[tuple[int, int]] | None = None) -> list[Quantity]:
    """The numbers written in digits; ``taken`` gets where each one's writing is."""
    found: list[Quantity] = []
    written_to = 0  # where the last number's writing ended: the digits of its exponent are not numbers
    for match in _NUMBER.finditer(text):
        if match.start() < written_to:
            continue
        sign = match.group("sign")
        integer = match.group("int")
        frac = match.group("frac") or ""
        refused = bool(sign) and match.start() > 0 and text[match.start() - 1] not in _SIGN_ALLOWED_AFTER
        lead = match.start("int") if refused or not sign else match.start()
        digits = re.sub(_GROUP_SEP, "", integer)
        value = Decimal(digits + frac)
        if sign and not refused:
            value = -value
        unit, other, stop = _qualified(text, lead, match.end(), refused)
        if not other and len(frac) == 4 and integer.isdigit() and len(integer) <= 3 and integer[0] != "0":
            other = f"ambiguous {text[lead:match.end()]!r} (a decimal point, or a thousands separator)"
        found.append(Quantity(value, unit, other, False, text[lead:stop].strip()))
        written_to = stop
        if taken is not None:
            taken.append((lead, stop))
        if not other and re.search(f"[{_SPACES}]", integer):
            # "17 200": the pieces are numbers in the text too
            pieces = re.split(f"[{_SPACES}]", integer)
            for i, piece in enumerate(pieces):
                if i and piece.startswith("0"):
                    continue  # "1 000" holds 1 and 1000, never 0: nobody writes 0 as "000"
                piece_digits = re.sub(_GROUP_SEP, "", piece)
                tail = frac if i == len(pieces) - 1 else ""
                found.append(Quantity(Decimal(piece_digits + tail), unit, "", True, piece + tail))
    return found


def _word_readings(text: str, taken: list[tuple[int, int]]) -> list[Quantity]:
    """Cardinals written in words, outside the spans digit readings took (their scale words)."""
    found: list[Quantity] = []
    for match in _WORDS.finditer(text):
        if any(a < match.end() and match.start() < b for a, b in taken):
            continue
        words = [w.lower() for w in re.findall(r"[A-Za-z]+", match.group(0)) if w.lower() != "and"]
        if not any(w in _TENS or w in _MULTIPLIERS or _SMALL.get(w, 0) > 12 for w in words):
            continue  # "one", "two", "ten": prose far more often than an amount
        total = current = 0
        for w in words:
            if w in _MULTIPLIERS and w != "hundred":
                total += (current or 1) * _MULTIPLIERS[w]
                current = 0
            elif w == "hundred":
                current = (current or 1) * 100
            else:
                current += _SMALL.get(w, 0) + _TENS.get(w, 0)
        after = _UNIT.match(text, match.end())
        unit = "" if after is None else _SYMBOLS.get(after.group("unit"), after.group("unit"))
        stop = match.end() if after is None else after.end()
        found.append(Quantity(Decimal(total + current), unit, "", False, text[match.start():stop]))
    return found


def quantities_in(text: str) -> list[Quantity]:
    """Every quantity written in ``text``: digit readings in order, then cardinals in words."""
    if not isinstance(text, str):
        raise TypeError(f"quantities_in() reads a str, got {type(text).__name__}")
    taken: list[tuple[int, int]] = []
    digits = _digit_readings(text, taken)
    return digits + _word_readings(text, taken)


def quantity_in(quantity: Quantity, text: str) -> bool:
    """Whether ``text`` writes ``quantity``: its value, its qualifier, and the unit it states."""
    return any(
        found.value == quantity.value and found.other == quantity.other
        and (not quantity.unit or found.unit == quantity.unit)
        for found in quantities_in(text)
    )


def numbers_in(text: str) -> list[Decimal]:
    """The plain numbers written in digits in ``text``, in order, each read whole (``"4,200.00"`` -> 4200.00)."""
    if not isinstance(text, str):
        raise TypeError(f"numbers_in() reads a str, got {type(text).__name__}")
    return [q.value for q in _digit_readings(text) if not q.piece and not q.other]


def quotes_in(text: str) -> list[str]:
    """The direct quotes in ``text``: what stands between straight or curly double quotes."""
    if not isinstance(text, str):
        raise TypeError(f"quotes_in() reads a str, got {type(text).__name__}")
    return [m.group(1) for m in _QUOTE.finditer(text) if m.group(1).strip()]


def as_number(value: object) -> Decimal | None:
    """``value`` as a Decimal when it is a number or a string that reads as exactly one plain number."""
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
        if _NUMBER.fullmatch(stripped) is None:
            return None
        readings = _digit_readings(stripped)
        return readings[0].value if readings and not readings[0].other else None
    return None


def _token_in(value: str, text: str) -> bool:
    """Whether ``value`` stands in ``text`` as a whole token (see the module's docstring)."""
    check_left, check_right = _word(value[0]), _word(value[-1])
    at = text.find(value)
    while at >= 0:
        end = at + len(value)
        if not (check_left and _joined(text, at - 1, -1)) and not (check_right and _joined(text, end, 1)):
            return True
        at = text.find(value, at + 1)
    return False


def value_in_text(value: object, text: str) -> bool:
    """Whether ``value`` appears in ``text``: numbers as plain quantities, other strings as whole tokens.

    Raises TypeError for a value that is neither a number nor a string (a list, a
    dict, None): there is no honest way to find one in a text.
    """
    if not isinstance(text, str):
        raise TypeError(f"value_in_text() searches a str, got {type(text).__name__}")
    number = as_number(value)
    if number is not None:
        try:
            return any(found.value == number and not found.other for found in quantities_in(text))
        except InvalidOperation:  # pragma: no cover - _NUMBER only matches digits
            return False
    if isinstance(value, str):
        return bool(value) and _token_in(value, text)
    raise TypeError(
        f"value_in_text() compares numbers and strings, got {type(value).__name__}; "
        "pass the number or the text itself"
    )
