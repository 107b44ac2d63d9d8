"""What the log's canonical form can hold, checked before a value becomes a record.

The canonical JSON (``agent_saga.log.codec``) refuses a few values outright, and a
record holding one fails when it is sealed: on a flusher thread that writes every
saga's records together, that one record would break the log for all of them. So a
value that comes from outside (a tool's arguments, a result an undo is built from)
is checked here first, where the one caller that brought it can be told what is
wrong with it:

* a float that is NaN or infinite (JSON has no such number);
* an int with more than :data:`MAX_INT_DIGITS` decimal digits (Python refuses to
  write or read one; every reader of the log is Python);
* a string that is not Unicode text (a lone surrogate cannot be written as UTF-8);
* a dict key that is not a str (``1`` would be read back as ``"1"``; a mix of
  types cannot even be sorted);
* a container that holds itself, or nesting deeper than :data:`MAX_DEPTH`.

Other objects (a datetime, a client) are not refused: the codec writes them as
``"<TypeName>"``. Tuples are written as lists.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["MAX_DEPTH", "MAX_INT_DIGITS", "encodable", "name_problem", "plain_json", "unencodable", "utf8_safe"]

#: Python's default ``sys.int_max_str_digits``: what a reader in another process accepts.
MAX_INT_DIGITS = 4300
#: Deeper than this, encoding (and reading back) risks the recursion limit.
MAX_DEPTH = 200

_INT_LIMIT = 10**MAX_INT_DIGITS


def _float_problem(value: float) -> str | None:
    if math.isfinite(value):
        return None
    what = "NaN" if value != value else ("infinite" if value > 0 else "-infinite")
    return f"is {what}: the log's canonical JSON cannot hold non-finite numbers; pass a finite number or a string"


def _int_problem(value: int) -> str | None:
    if -_INT_LIMIT < value < _INT_LIMIT:
        return None
    return (
        f"is an int of {value.bit_length()} bits (more than {MAX_INT_DIGITS} decimal digits): the log's "
        "canonical JSON cannot hold it; pass it as a string"
    )


def _str_problem(value: str) -> str | None:
    if value.isascii():  # O(1) in CPython: the usual case costs nothing more
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        return (
            f"holds a lone surrogate ({value[err.start]!r} at index {err.start}): the log's canonical "
            "JSON is UTF-8 and cannot hold it; pass valid Unicode text"
        )
    return None


def name_problem(name: str, what: str) -> str | None:
    """One line when ``name`` (a tool's, a saga's, a tag) is text the log cannot hold, else None.

    ``what`` names it in the line: ``"the tool's name holds a lone surrogate ('\\ud800' at
    index 3): ..."``. An ASCII name, the usual one, is answered in O(1).
    """
    if name.isascii():
        return None
    problem = _str_problem(name)
    return None if problem is None else f"{what} {problem}"


def _problem(value: Any) -> str | None:
    kind = type(value)
    if kind is str:
        return _str_problem(value)
    if kind is float:
        return _float_problem(value)
    if kind is int:
        return _int_problem(value)
    # Subclasses (an IntEnum, a StrEnum) are encoded as their base type.
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        return _str_problem(value)
    if isinstance(value, float):
        return _float_problem(value)
    if isinstance(value, int):
        return _int_problem(value)
    return None


def unencodable(value: Any, where: str = "value") -> str | None:
    """One line naming the first part of ``value`` the log cannot hold, or None.

    ``where`` names ``value`` in the message (``args``); a part is named by its path,
    ``args.limit`` or ``args.items[2]``: ``"args.limit is NaN: the log's canonical JSON
    cannot hold non-finite numbers; pass a finite number or a string"``.
    """
    if _clean(value, 0):
        return None  # the usual case, answered without building a path
    return _walk(value, where, 0, set())


def plain_json(value: Any) -> bool:
    """Whether ``value`` is plain JSON the log holds exactly as it is: dicts with str keys,
    lists and tuples, str, finite floats, ints within :data:`MAX_INT_DIGITS`, bools and None,
    no deeper than :data:`MAX_DEPTH` (so never circular). An object of any other type is not
    (the codec would write it as ``"<TypeName>"``)."""
    return _clean(value, 0)


def _clean(value: Any, depth: int) -> bool:
    """Whether ``value`` is plain JSON the log can hold, decided without naming anything.

    False only sends the value to :func:`_walk`, which finds (and names) the problem, or
    finds none: objects of other types, cycles and deep nesting are all left to it.
    """
    kind = type(value)
    if kind is str:
        return bool(value.isascii()) or _str_problem(value) is None
    if kind is int:
        return bool(-_INT_LIMIT < value < _INT_LIMIT)
    if kind is float:
        return bool(value - value == 0.0)  # False for NaN and the infinities
    if kind is bool or value is None:
        return True
    if depth >= MAX_DEPTH:
        return False
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str or not (key.isascii() or _str_problem(key) is None):
                return False
            if not _clean(item, depth + 1):
                return False
        return True
    if kind is list or kind is tuple:
        return all(_clean(item, depth + 1) for item in value)
    return False


def _walk(value: Any, path: str, depth: int, open_: set[int]) -> str | None:
    if depth > MAX_DEPTH:
        return f"{path} is nested more than {MAX_DEPTH} levels deep: the log cannot hold it; flatten it"
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, (list, tuple)):
        items = enumerate(value)
    else:
        problem = _problem(value)
        return None if problem is None else f"{path} {problem}"
    if id(value) in open_:
        return f"{path} contains itself: the log cannot hold a circular structure; pass a copy without the cycle"
    open_.add(id(value))
    try:
        for key, item in items:
            if isinstance(value, dict):
                if not isinstance(key, str):
                    return (
                        f"{path} has a key {key!r} ({type(key).__name__}): the log's canonical JSON holds only "
                        "string keys, and would read it back as a different key; use str keys"
                    )
                key_problem = _str_problem(key)
                if key_problem is not None:
                    return f"{path} has a key that {key_problem}"
                inner = f"{path}.{key}" if key.isidentifier() else f"{path}[{key!r}]"
            else:
                inner = f"{path}[{key}]"
            found = _walk(item, inner, depth + 1, open_)
            if found is not None:
                return found
    finally:
        open_.discard(id(value))
    return None


def encodable(value: Any) -> Any:
    """A copy of ``value`` the log can hold: every part it cannot is replaced by a marked string.

    For evidence about a value that was refused (what the agent tried to pass): the
    record shows where the bad part was and what it was, ``"<unencodable: NaN>"``,
    and never holds the part itself.
    """
    if unencodable(value) is None:
        return value
    return _copy(value, 0, set())


def _copy(value: Any, depth: int, open_: set[int]) -> Any:
    if depth > MAX_DEPTH:
        return "<unencodable: nested too deep>"
    if isinstance(value, (dict, list, tuple)):
        if id(value) in open_:
            return "<unencodable: circular>"
        open_.add(id(value))
        try:
            if isinstance(value, dict):
                return {_safe_key(k): _copy(v, depth + 1, open_) for k, v in value.items()}
            return [_copy(v, depth + 1, open_) for v in value]
        finally:
            open_.discard(id(value))
    if _problem(value) is None:
        return value
    if isinstance(value, str):
        return utf8_safe(value)
    if isinstance(value, float):
        return "<unencodable: NaN>" if value != value else f"<unencodable: {value!r}>"
    return f"<unencodable: int of {value.bit_length()} bits>"


def _safe_key(key: Any) -> str:
    if isinstance(key, str):
        return utf8_safe(key)
    return f"<{type(key).__name__} key: {utf8_safe(repr(key))}>"


def utf8_safe(text: str) -> str:
    """``text`` as UTF-8 can hold it: a lone surrogate becomes its visible escape (``\\udc80``)."""
    if text.isascii():
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
