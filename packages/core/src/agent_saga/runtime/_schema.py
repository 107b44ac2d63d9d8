"""A tool's argument schema, as a check that lists what is wrong with one call's arguments.

``argument_check(source)`` accepts what a user has to hand:

* a plain function (or a tool made a step by ``@tool`` / ``wrap_tool``): its signature --
  missing and unexpected names, and the annotations that are plain types (``int``,
  ``float``, ``str``, ``bool``, ``list``, ``dict``, ``None``, unions and ``Literal`` of them);
* a pydantic model class (anything with ``model_validate``): the model's own errors;
* a JSON Schema dict (what a framework shows the model): the subset ``type``,
  ``properties``, ``required``, ``additionalProperties: false``, ``enum``, ``const``,
  ``minimum``/``maximum`` (and the exclusive forms), ``minLength``/``maxLength``,
  ``items``, ``anyOf``/``oneOf``; other keywords are not checked;
* a framework tool that carries its schema (``args_schema``, ``params_json_schema``,
  ``inputSchema``).

Each error is one line naming the argument, what it got and what it needed: the model
reads it and tries again.

Why not ``matches_schema``'s jsonschema: repair runs in core, which depends on pluggy only.
"""

from __future__ import annotations

import inspect
import math
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

from agent_saga.errors import ConfigurationError
from agent_saga.inert import clip, inert

__all__ = ["ArgumentCheck", "argument_check"]

#: ``check(args)`` -> the errors (empty when the arguments fit).
ArgumentCheck = Callable[[Mapping[str, Any]], list[str]]

_JSON_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool))
    or (isinstance(v, float) and math.isfinite(v) and v.is_integer()),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, (list, tuple)),
    "object": lambda v: isinstance(v, Mapping),
    "null": lambda v: v is None,
}
_BOUNDS: tuple[tuple[str, Callable[[Any, Any], bool]], ...] = (
    ("minimum", lambda v, b: v >= b), ("maximum", lambda v, b: v <= b),
    ("exclusiveMinimum", lambda v, b: v > b), ("exclusiveMaximum", lambda v, b: v < b),
)
_SKIPPED = frozenset({"idempotency_key", "self", "cls"})


def _clip(text: str, limit: int) -> str:
    """One inert line, cut to ``limit`` characters: a model's value is quoted, never obeyed."""
    return clip(inert(text), limit)


def _shown(value: Any) -> str:
    return _clip(repr(value), 60)


def argument_check(source: Any) -> ArgumentCheck:
    """The check for ``source`` (see the module docstring); ConfigurationError if it has no schema."""
    if isinstance(source, Mapping):
        schema = dict(source)
        return lambda args: _json_errors(schema, dict(args), "")
    if isinstance(source, type) and hasattr(source, "model_validate"):
        return _pydantic_check(source)
    spec = getattr(source, "__saga_spec__", None)
    if spec is not None and getattr(spec, "signature", None) is not None:
        return _signature_check(spec.signature)
    for attr in ("args_schema", "params_json_schema", "inputSchema", "input_schema"):
        carried = getattr(source, attr, None)
        if isinstance(carried, Mapping) or (isinstance(carried, type) and hasattr(carried, "model_validate")):
            return argument_check(carried)
    if callable(source):
        try:
            return _signature_check(inspect.signature(source))
        except (TypeError, ValueError):
            pass
    raise ConfigurationError(
        f"no argument schema can be read from {source!r}: give a function, a pydantic model class, "
        "a JSON Schema dict, or a framework tool that carries one (args_schema, params_json_schema)"
    )


# -- pydantic ---------------------------------------------------------------------------------


def _pydantic_check(model: Any) -> ArgumentCheck:
    def check(args: Mapping[str, Any]) -> list[str]:
        try:
            model.model_validate(dict(args))
        except Exception as err:  # noqa: BLE001 - pydantic's ValidationError, without importing pydantic
            listed = getattr(err, "errors", None)
            if not callable(listed):
                return [_clip(str(err), 200)]
            return [
                f"{'.'.join(str(p) for p in e.get('loc', ())) or '(arguments)'}: {_clip(str(e.get('msg', '')), 120)}"
                f" (got {_shown(e.get('input'))})"
                for e in listed()
            ]
        return []

    return check


# -- a signature --------------------------------------------------------------------------------


def _signature_check(signature: inspect.Signature) -> ArgumentCheck:
    params = [p for p in signature.parameters.values() if p.name not in _SKIPPED]
    open_ended = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
    named = {p.name: p for p in params if p.kind not in (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)}
    try:
        hints = typing.get_type_hints(_Holder(signature))
    except Exception:  # noqa: BLE001 - an annotation that does not resolve is not checked
        hints = {}

    def check(args: Mapping[str, Any]) -> list[str]:
        errors = [
            f"{name}: missing (required)"
            for name, p in named.items()
            if p.default is inspect.Parameter.empty and name not in args
        ]
        for name, value in args.items():
            if name not in named:
                if not open_ended:
                    errors.append(f"{name}: unexpected argument (the tool takes {', '.join(named) or 'none'})")
                continue
            hint = hints.get(name, named[name].annotation)
            if hint is not inspect.Parameter.empty and not _fits(value, hint):
                errors.append(f"{name}: got {_shown(value)}, needs {_type_name(hint)}")
        return errors

    return check


class _Holder:
    """Lets typing.get_type_hints resolve a signature's string annotations."""

    def __init__(self, signature: inspect.Signature) -> None:
        self.__annotations__ = {
            p.name: p.annotation for p in signature.parameters.values() if p.annotation is not inspect.Parameter.empty
        }


def _fits(value: Any, hint: Any) -> bool:
    """Whether ``value`` fits a plain annotation; an annotation this cannot read passes."""
    if hint is Any or hint is object:
        return True
    if hint is None or hint is type(None):
        return value is None
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        return _fits(value, typing.get_args(hint)[0])
    if origin is typing.Union or origin is types.UnionType:
        return any(_fits(value, arm) for arm in typing.get_args(hint))
    if origin is typing.Literal:
        return any(value == v and type(value) is type(v) for v in typing.get_args(hint))
    if origin is not None:
        hint = origin  # list[int] -> list: the items are not checked
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return _JSON_TYPES["integer"](value)
    if hint is float:
        return _JSON_TYPES["number"](value)
    if hint in (str, list, dict, tuple):
        return isinstance(value, hint if hint is not tuple else (list, tuple))
    if isinstance(hint, type) and hasattr(hint, "model_validate"):
        return isinstance(value, (Mapping, hint))
    return True


def _type_name(hint: Any) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


# -- JSON Schema (a subset) -------------------------------------------------------------------------


def _json_errors(schema: Mapping[str, Any], value: Any, where: str) -> list[str]:
    at = where or "(arguments)"
    for key in ("anyOf", "oneOf"):
        arms = schema.get(key)
        if isinstance(arms, list) and arms and all(_json_errors(arm, value, where) for arm in arms if isinstance(arm, Mapping)):
            return [f"{at}: got {_shown(value)}, which fits none of the allowed shapes"]
    wanted = schema.get("type")
    if wanted is not None:
        kinds = wanted if isinstance(wanted, list) else [wanted]
        if not any(_JSON_TYPES.get(k, lambda v: True)(value) for k in kinds):
            return [f"{at}: got {_shown(value)}, needs {' or '.join(str(k) for k in kinds)}"]
    errors: list[str] = []
    if "enum" in schema and isinstance(schema["enum"], list) and value not in schema["enum"]:
        errors.append(f"{at}: got {_shown(value)}, needs one of {_shown(schema['enum'])}")
    if "const" in schema and value != schema["const"]:
        errors.append(f"{at}: got {_shown(value)}, needs {_shown(schema['const'])}")
    if _JSON_TYPES["number"](value):
        for key, ok in _BOUNDS:
            bound = schema.get(key)
            if _JSON_TYPES["number"](bound) and not ok(value, bound):
                errors.append(f"{at}: got {_shown(value)}, {key} is {bound}")
    if isinstance(value, str):
        if isinstance(schema.get("minLength"), int) and len(value) < schema["minLength"]:
            errors.append(f"{at}: {len(value)} characters, needs at least {schema['minLength']}")
        if isinstance(schema.get("maxLength"), int) and len(value) > schema["maxLength"]:
            errors.append(f"{at}: {len(value)} characters, allows at most {schema['maxLength']}")
    if isinstance(value, (list, tuple)) and isinstance(schema.get("items"), Mapping):
        for i, item in enumerate(value):
            errors += _json_errors(schema["items"], item, f"{where}[{i}]")
    if isinstance(value, Mapping):
        props = schema.get("properties") if isinstance(schema.get("properties"), Mapping) else {}
        assert isinstance(props, Mapping)
        for name in schema.get("required", ()) if isinstance(schema.get("required"), list) else ():
            if name not in value:
                errors.append(f"{_join(where, name)}: missing (required)")
        for name, item in value.items():
            sub = props.get(name)
            if isinstance(sub, Mapping):
                errors += _json_errors(sub, item, _join(where, str(name)))
            elif schema.get("additionalProperties") is False:
                errors.append(
                    f"{_join(where, str(name))}: unexpected argument (allowed: {', '.join(map(str, props)) or 'none'})"
                )
    return errors


def _join(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name
