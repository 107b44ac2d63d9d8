"""The usual REVERSIBLE commit record, its canonical JSON joined from its parts' encodings.

A log that encodes each record as it is appended (FileWAL, the server logs) does so on the
caller's thread, so that a record it cannot hold is refused to its caller. The commit record
of a REVERSIBLE step with no undo, no provenance and no reconciliation changes from step to
step only in its arguments, origin, result and tool: its JSON is their encodings put where
the canonical (sorted-key) form places them — the text encoding the whole body gives
(``test_commit_record.py`` holds the two equal) for a fraction of the encoder's work — and
the log queues that text as it is (``GroupCommitWAL.append_encoded``). The header needs no
check here: the record type is the engine's, the saga's id was checked at its door, the step
number is the saga's count.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from agent_saga.log.codec import canonical

__all__ = ["UNRECORDED", "commit_json"]

#: The result of a step whose options record none (``record_result="none"``): no key at all.
UNRECORDED: Any = object()
_string: Callable[[str], str] = json.encoder.encode_basestring
# A recorded scalar's JSON without the encoder: what it writes for exactly these types (a float
# goes to the encoder, which refuses a NaN; anything else too).
_SCALARS: dict[type, Callable[[Any], str]] = {
    int: repr, str: _string, bool: lambda flag: "true" if flag else "false", type(None): lambda _: "null",
}


def commit_json(tool: str, args: dict[str, Any], origin: str | None, result: Any) -> str | None:
    """The canonical JSON of ``{"tool", "semantics": REVERSIBLE, "args", "compensation": None[, "origin"][, "result"]}``.

    None when a part cannot be encoded (a NaN, a lone surrogate): the caller then appends the
    body itself, and the log's own encoding refuses it, naming the part.
    """
    try:
        # The optional parts first, then the record in one join: no string grown piece by piece.
        origin_json = "" if origin is None else f',"origin":{_string(origin)}'
        if result is UNRECORDED:
            result_json = ""
        else:
            scalar = _SCALARS.get(type(result))
            result_json = f',"result":{canonical(result) if scalar is None else scalar(result)}'
        text = (f'{{"args":{canonical(args) if args else "{}"},"compensation":null{origin_json}{result_json},'
                f'"semantics":"REVERSIBLE","tool":{_string(tool)}}}')
        if not text.isascii():
            text.encode()  # a lone surrogate passes the encoder, not UTF-8
    except (ValueError, TypeError, RecursionError):
        return None
    return text
