"""Agent-controlled text, rendered so that a person reading it sees what it holds.

Whatever the agent wrote (a tool's arguments, a saga's name, an error's text) can
reach a terminal, a notification, a web page or an SVG, where characters act
instead of showing: ``ESC [1A ESC [2K`` moves the cursor up and erases the line an
approver just read, a bidi override (U+202E) reorders what follows, a zero-width
space hides inside a name. :func:`inert` is the one place such text becomes inert:
every character that could act or hide is written as a visible escape, and the
backslash is escaped too, so no input can spell an escape that stands for anything
but itself (distinct texts stay distinct: the rendering is injective).

Escaped, as ``\\xNN``, ``\\uNNNN`` or ``\\UNNNNNNNN`` (and ``\\n``, ``\\r``, ``\\t``, ``\\\\``):

* control characters (category Cc): C0 including ESC, CR, backspace, newline and
  tab (a rendered field is one line), DEL, and C1 (U+0080..U+009F, where U+009B
  is a one-byte CSI);
* format characters (Cf): the bidi embeddings, overrides, isolates and marks
  (U+202A..U+202E, U+2066..U+2069, U+200E, U+200F, U+061C), zero-width space and
  joiners, word joiner, invisible operators, BOM, the tag characters, ...;
* the line and paragraph separators (Zl, Zp), lone surrogates (Cs), and code points
  this Python's Unicode database does not know (Cn), whose meaning it cannot vouch for;
* the other default-ignorable code points, drawn as nothing although not Cf:
  the combining grapheme joiner, the Hangul fillers, the variation selectors.

Everything else (letters of any script, spaces, emoji, punctuation) is kept.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Mapping
from typing import Any

__all__ = ["clip", "inert", "inert_json", "inert_tree", "inert_value"]

_NAMED = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_ESCAPED_CATEGORIES = frozenset(("Cc", "Cf", "Cs", "Cn", "Zl", "Zp"))
# Default_Ignorable_Code_Point (Unicode's DerivedCoreProperties) outside the categories above:
# shown as nothing by a renderer that follows the standard, so they can hide text as well as Cf.
_IGNORABLE = (
    (0x034F, 0x034F),  # COMBINING GRAPHEME JOINER
    (0x115F, 0x1160),  # HANGUL CHOSEONG / JUNGSEONG FILLER
    (0x17B4, 0x17B5),  # KHMER VOWEL INHERENT AQ / AA
    (0x180B, 0x180F),  # MONGOLIAN FREE VARIATION SELECTORS
    (0x3164, 0x3164),  # HANGUL FILLER
    (0xFE00, 0xFE0F),  # VARIATION SELECTORS 1-16
    (0xFFA0, 0xFFA0),  # HALFWIDTH HANGUL FILLER
    (0xE0000, 0xE0FFF),  # tags and VARIATION SELECTORS 17-256
)
_cache: dict[str, str] = {}


def _escape(c: str) -> str:
    named = _NAMED.get(c)
    if named is not None:
        return named
    code = ord(c)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _acts(c: str) -> bool:
    if c in _NAMED:
        return True
    if " " <= c <= "~":
        return False  # printable ASCII: the common case, decided without the database
    code = ord(c)
    if unicodedata.category(c) in _ESCAPED_CATEGORIES:
        return True
    return any(low <= code <= high for low, high in _IGNORABLE)


def _render(c: str) -> str:
    shown = _cache.get(c)
    if shown is None:
        shown = _escape(c) if _acts(c) else c
        if len(_cache) < 4096:  # bounded: an attacker's text cannot grow it without limit
            _cache[c] = shown
    return shown


def inert(value: object) -> str:
    """``value`` (``str()`` of it when not text) as one line that can only be read, never obeyed.

    Every character that could move a cursor, erase, reorder or hide is replaced by
    a visible escape (``\\x1b``, ``\\u202e``, ``\\n``); a backslash becomes ``\\\\``, so
    ``inert(a) == inert(b)`` only when ``a == b``. Text without such characters comes
    back unchanged.
    """
    text = value if isinstance(value, str) else str(value)
    if text.isascii() and text.isprintable() and "\\" not in text:
        return text
    return "".join(_render(c) for c in text)


def inert_value(value: Any) -> str:
    """A JSON-shaped value (an argument) as one inert line: a string as itself, anything else as JSON.

    The JSON keeps its characters (``ensure_ascii=False``), so each is escaped once, by :func:`inert`.
    """
    if isinstance(value, str):
        return inert(value)
    return inert(json.dumps(value, sort_keys=True, ensure_ascii=False, default=str))


def inert_tree(value: Any) -> Any:
    """``value`` with :func:`inert` applied to every string in it, keys included (JSON-shaped data).

    Numbers, booleans and None are kept; lists, tuples and mappings are walked; any
    other object becomes its inert ``str()``. For a page that shows data it received as
    JSON: the client then never holds a character that acts.
    """
    if isinstance(value, str):
        return inert(value)
    if isinstance(value, Mapping):
        return {inert(k) if isinstance(k, str) else k: inert_tree(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [inert_tree(v) for v in value]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return inert(value)  # anything else is shown as its str(), so inert too


# In JSON text written with ensure_ascii=False, a string's characters appear either as
# themselves or as one of JSON's escapes; everything else (numbers, literals, structure)
# is printable ASCII. So these are the only places a character that acts can stand.
_JSON_CHAR = re.compile(r'\\(?:u[0-9a-fA-F]{4}|["\\/bfnrt])|[^\x20-\x7e]')


def _inert_json_char(match: re.Match[str]) -> str:
    found = match.group()
    char = json.loads(f'"{found}"') if found[0] == "\\" else found
    return json.dumps(_render(char), ensure_ascii=False)[1:-1]


def inert_json(value: Any) -> str:
    """``json.dumps(inert_tree(value), ensure_ascii=False)``, computed on the text in one pass.

    The flight recorder serves pages of thousands of frames; walking each one to rebuild
    it with inert strings cost more than the replay itself. The JSON text is scanned
    once instead, and only a character that JSON escapes or that lies outside printable
    ASCII is looked at (a test checks it equals the tree walk for arbitrary values).
    """
    text = json.dumps(value, ensure_ascii=False, default=str)
    return _JSON_CHAR.sub(_inert_json_char, text)


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, ending in '...' when cut (it does not make ``text`` inert)."""
    return text if len(text) <= limit else text[: limit - 3] + "..."
