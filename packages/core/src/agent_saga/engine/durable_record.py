"""A durable step's STEP_INTENT and STEP_COMMITTED records, their canonical JSON joined from their parts.

The same saving as the usual REVERSIBLE commit record (engine/commit_record.py), for the two
records every durable step appends on its caller's thread: each body's canonical (sorted-key)
JSON is its parts' encodings put where that form places them, with no dict built for the whole
record, no sort and no walk through the encoder's general path. ``test_durable_record.py`` holds
each text equal to what encoding the whole body gives, for any input, and None exactly where the
log's own encoding would refuse the body (a NaN, a lone surrogate): the caller then appends the
body itself, and that encoding names the part.
"""

from __future__ import annotations

from typing import Any

from agent_saga.engine.commit_record import _SCALARS, UNRECORDED, _string
from agent_saga.log.codec import canonical
from agent_saga.registry import recoverable
from agent_saga.semantics import ActionSemantics, Compensation

__all__ = ["durable_commit_json", "intent_json", "undo_json"]

# Each member's JSON, made once: what the encoder writes for a str enum is its value, quoted.
_SEMANTICS = {member: _string(member.value) for member in ActionSemantics}
# What a part the log cannot hold raises while it is encoded.
_UNFIT = (ValueError, TypeError, RecursionError)


def _json(value: Any) -> str:
    scalar = _SCALARS.get(type(value))
    return canonical(value) if scalar is None else scalar(value)


def undo_json(comp: Compensation | None) -> str:
    """The canonical JSON of ``undo.describe(comp)``, written from the undo without that dict.

    Raises what the encoder raises for a part it cannot encode. Each part's usual type is
    written inline, without a call per part.
    """
    if comp is None:
        return "null"
    key, handler = comp.idempotency_key, comp.handler
    key_json = _string(key) if type(key) is str else _json(key)
    if handler is not None and recoverable(comp):  # (describe's rule: kwargs and label for an undo another process can run)
        label, kwargs = comp.label, comp.kwargs
        return (
            f'{{"description":{_string(label) if type(label) is str else _json(label)},'
            f'"handler":{_string(handler)},"key":{key_json},'
            f'"kwargs":{canonical(kwargs if type(kwargs) is dict else dict(kwargs))},"recoverable":true}}'
        )
    text = comp.description
    return (
        f'{{"description":{_string(text) if type(text) is str else _json(text)},'
        f'"handler":{"null" if handler is None else _json(handler)},"key":{key_json},"kwargs":null,'
        '"recoverable":false}'
    )


def intent_json(
    tool: str, semantics: ActionSemantics, op: str, args: dict[str, Any], prebuilt: Compensation | None,
    fallback: bool, recipe: Any, origin: str | None, claims: Any,
) -> str | None:
    """The canonical JSON of a durable step's STEP_INTENT body, or None where the log would refuse it.

    ``{"tool", "semantics", "op", "args", "compensation", "fallback"[, "recipe"][, "origin"][, "provenance"]}``:
    ``recipe`` and ``origin`` are left out when None, ``claims`` (the provenance) when empty. The
    engine's own parts have their types: ``tool``, ``op`` and ``origin`` are text, ``fallback`` a bool.
    """
    semantics_json = _SEMANTICS.get(semantics)
    if semantics_json is None:
        return None
    try:
        text = (
            f'{{"args":{canonical(args) if args else "{}"},"compensation":{undo_json(prebuilt)},'
            f'"fallback":{"true" if fallback else "false"},"op":{_string(op)}'
        )
        if origin is not None:
            text += f',"origin":{_string(origin)}'
        if claims:
            text += f',"provenance":{canonical(claims)}'
        if recipe is not None:
            text += f',"recipe":{canonical(recipe)}'
        text += f',"semantics":{semantics_json},"tool":{_string(tool)}}}'
        if not text.isascii():
            text.encode()  # a lone surrogate passes the encoder, not UTF-8
    except _UNFIT:
        return None
    return text


def durable_commit_json(
    op: str, comp: Compensation | None, problem: str | None, reconciled: bool, result: Any,
) -> str | None:
    """The canonical JSON of a durable step's STEP_COMMITTED body, or None where the log would refuse it.

    ``{"op", "compensation"[, "reconciled": true][, "problem"][, "result"]}``: ``result`` is left
    out when it is ``UNRECORDED``; ``op`` and ``problem`` are text.
    """
    try:
        text = f'{{"compensation":{undo_json(comp)},"op":{_string(op)}'
        if problem is not None:
            text += f',"problem":{_string(problem)}'
        if reconciled:
            text += ',"reconciled":true'
        if result is not UNRECORDED:
            text += f',"result":{canonical(result) if type(result) is dict else _json(result)}'
        text += "}"
        if not text.isascii():
            text.encode()
    except _UNFIT:
        return None
    return text
