"""A step's return value as its STEP_COMMITTED record holds it: bounded, redacted, never a refusal.

The log is evidence that other processes read (replay serves a recorded value, the corpus
gives its shape), so what a forward returned is recorded, with three limits:

* it goes through the same scrubber as the arguments (``redaction.redact_args``): a value
  under a secret-looking key, at any depth, is :data:`~agent_saga.redaction.REDACTED`, and a
  URL's password is masked in any string;
* it is recorded as the value only when, so redacted, it is plain JSON (dicts with str keys,
  lists, str, finite numbers, bools, None; a tuple is written as a list) and its canonical JSON
  is at most :data:`MAX_RESULT_BYTES` bytes. Anything else (an object, a NaN, a big payload)
  is recorded as its *shape* only: ``{"$shape": {"type": ..., "length": ..., "keys": {...}}}``,
  type names and sizes, never a value;
* a dict whose own keys include ``"$shape"`` is recorded as its shape too, so a reader can
  always tell a recorded shape from a recorded value.

Recording never fails a step: whatever the value, a shape can be written.
``StepOptions(record_result=...)`` chooses per step: ``"value"`` (the default, as above),
``"shape"`` (never the value), or ``"none"`` (no ``result`` field at all, as in logs written
before results were recorded).
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Mapping
from typing import Any, Final, Literal

from agent_saga.log.codec import canonical
from agent_saga.log.encodable import plain_json, utf8_safe
from agent_saga.redaction import REDACTED, redact_args, redact_value

__all__ = ["DURABLE_RESULT_BYTES", "MAX_RESULT_BYTES", "RECORD_RESULT_MODES", "SHAPE_KEY", "RecordResult", "logged_result", "shape_of"]

#: The largest canonical JSON (in UTF-8 bytes) recorded as the value; larger results are
#: recorded as their shape. 2 KiB: ids, statuses and small objects fit; a page of search
#: results or a file's contents does not, and would make every commit record (fsync'd, read
#: by every daemon) that much larger.
MAX_RESULT_BYTES: Final = 2048
#: The bound for the steps of a durable run (``@durable``), whose log is also its replay source:
#: a result recorded only as its shape cannot be served on resume, so the step runs again (a
#: model asked and paid again) or the run diverges. 64 KiB holds a long model answer or a page
#: of records; the larger commit record is the price of not paying for the call twice.
DURABLE_RESULT_BYTES: Final = 64 * 1024
#: The key that marks a recorded shape (``{"$shape": {...}}``) rather than a value.
SHAPE_KEY: Final = "$shape"

RecordResult = Literal["value", "shape", "none"]
RECORD_RESULT_MODES: Final = ("value", "shape", "none")

#: At most this many keys of a dict are listed in its shape (the first, in sorted order),
#: and each key at most this many characters: a shape stays small whatever was returned.
_SHAPE_KEYS = 64
_KEY_CHARS = 64
_PLAIN = (type(None), bool, int, float, str)


def _type_name(value: Any) -> str:
    return type(value).__name__


def shape_of(value: Any) -> dict[str, Any]:
    """The shape of ``value``: its type name, its length (sized values), and for a dict the
    type name of each key's value (of at most 64 keys). Never a value, so always loggable."""
    shape: dict[str, Any] = {"type": utf8_safe(_type_name(value))}
    if isinstance(value, Mapping):
        shape["length"] = len(value)
        # The first keys met (bounded, so a huge dict costs no more), listed in sorted order.
        kinds = {utf8_safe(str(k))[:_KEY_CHARS]: utf8_safe(_type_name(v))
                 for k, v in itertools.islice(value.items(), _SHAPE_KEYS)}
        shape["keys"] = dict(sorted(kinds.items()))
    elif isinstance(value, (str, bytes, bytearray, list, tuple, set, frozenset)):
        shape["length"] = len(value)
    return shape


def _within(value: Any, budget: int, depth: int) -> int:
    """``budget`` less a lower bound of ``value``'s canonical JSON length; negative once over.

    Stops as soon as the budget is spent, so a huge result costs a few steps of walking, not
    a redacted copy, a check and an encoding of all of it before it turns out to be too big.
    """
    kind = type(value)
    if kind is str:
        return budget - len(value) - 2
    if kind is dict or kind is list or kind is tuple:
        if depth > 200:
            return -1  # the log refuses such nesting anyway
        budget -= 2 + max(len(value) - 1, 0)  # brackets and commas
        if kind is dict:
            for key, item in value.items():
                budget -= (len(key) + 3) if type(key) is str else 3
                if budget < 0:
                    return budget
                budget = _within(item, budget, depth + 1)
                if budget < 0:
                    return budget
        else:
            for item in value:
                budget = _within(item, budget, depth + 1)
                if budget < 0:
                    return budget
        return budget
    return budget - 1


def _flat_fits(value: dict[Any, Any], limit: int) -> bool:
    """Whether a dict of plain scalars surely fits: an upper bound of its canonical JSON, in one pass.

    The usual result (``{"id": "ch_1", "status": "paid"}``) is decided here without the walk,
    the check and the encoding of the general path; anything else (a nested value, non-ASCII
    text, a URL, a big int) answers False and takes that path.
    """
    size = 2
    for key, item in value.items():
        if type(key) is not str or not key.isascii():
            return False
        size += 6 * len(key) + 4  # quotes, colon, comma; an escape is at most 6 characters
        kind = type(item)
        if kind is str:
            if not item.isascii() or "://" in item:
                return False
            size += 6 * len(item) + 2 + len(REDACTED)  # room for it to be redacted
        elif kind is int:
            if not -_BIG < item < _BIG:
                return False
            size += 20
        elif kind is float:
            if item - item != 0.0:  # NaN or infinite
                return False
            size += 25
        elif kind is bool or item is None:
            size += len(REDACTED) + 2
        else:
            return False
        if size > limit:
            return False
    return True


_BIG = 10**18


def _small_scalar(kind: type, value: Any, limit: int) -> bool:
    """Whether ``value`` is a scalar the general path would record as it is: known in a few tests.

    An int below 10**18, a finite float, a bool or None (at most 25 characters of JSON), or an
    ASCII str with no URL in it (nothing to redact) whose JSON surely fits ``limit``.
    """
    if kind is int:
        return bool(-_BIG < value < _BIG) and limit >= 20
    if kind is str:
        return bool(value.isascii()) and "://" not in value and 6 * len(value) + 2 <= limit
    if kind is bool or value is None:
        return limit >= 5
    return kind is float and value - value == 0.0 and limit >= 25


def _shaped(value: Any) -> dict[str, Any]:
    return {SHAPE_KEY: shape_of(value)}


def logged_result(
    result: Any, mode: RecordResult, reveal: Collection[str] = (), limit: int = MAX_RESULT_BYTES
) -> tuple[bool, Any]:
    """``(record it, what to record)`` for a forward's ``result`` under ``mode``.

    ``(False, None)`` for ``"none"``; otherwise the redacted value when it is plain JSON within
    ``limit`` bytes (:data:`MAX_RESULT_BYTES`, or :data:`DURABLE_RESULT_BYTES` in a durable
    run), else ``{"$shape": ...}``. ``reveal`` names keys kept in clear, as for the arguments.
    Never raises for any ``result``.
    """
    if mode == "none":
        return False, None
    kind = type(result)
    if mode == "value" and _small_scalar(kind, result, limit):
        return True, result  # the usual REVERSIBLE result, decided without the walk and the encoding
    try:
        if mode == "shape":
            return True, _shaped(result)
        if kind is dict and _flat_fits(result, limit):
            if SHAPE_KEY in result:
                return True, _shaped(result)
            return True, redact_args(result, reveal)
        if (kind is str or kind is dict or kind is list or kind is tuple) and _within(result, limit, 0) < 0:
            return True, _shaped(result)  # too big, known without copying or encoding it
        if kind in _PLAIN:
            # The usual small results, without the walk: a str only needs its URL passwords masked.
            value = redact_value(result, reveal) if kind is str else result
        elif kind is dict or isinstance(result, Mapping):
            if SHAPE_KEY in result:
                return True, _shaped(result)  # it would read back as a shape, not a value
            value = redact_args(result, reveal)
        elif isinstance(result, (list, tuple)):
            value = redact_value(result, reveal)
        else:
            return True, _shaped(result)  # an object: the log would hold only "<TypeName>"
        if not plain_json(value):  # an object nested inside, a NaN, a non-str key, a cycle
            return True, _shaped(result)
        text = canonical(value)
        if len(text) > limit or len(text.encode()) > limit:
            return True, _shaped(result)
        return True, value
    except Exception:  # noqa: BLE001 - a result the log cannot describe is never the step's failure
        try:
            return True, _shaped(result)
        except Exception:  # noqa: BLE001 - e.g. a __len__ that raises: the type name alone
            return True, {SHAPE_KEY: {"type": utf8_safe(_type_name(result))}}
