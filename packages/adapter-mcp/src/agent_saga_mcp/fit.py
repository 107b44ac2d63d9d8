"""Whether an undo's mapped arguments can fit the compensating tool's ``inputSchema``.

Checked once, at the first ``tools/list``, so that a value of the wrong type is refused when
the proxy starts, not discovered at rollback when the undo is refused by the server. Each
mapped value has a type that is known without running anything:

* a literal: its JSON type; a list or an object written in the policy: an array or an
  object, whose members are checked in turn;
* a path with ``[*]``: an array (of what the path finds in each item);
* a path without ``[*]``: what the forward tool's ``outputSchema`` (for ``$``) or
  ``inputSchema`` (for ``$args``) says is there. Where that schema says nothing, the path
  yields *one* value: it is refused where the undo takes only an array (write ``[*]`` to
  build one), and allowed anywhere else.

A value is refused only when no type it may have is one the schema allows (``integer``
counts as a ``number``); a schema that says nothing allows anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent_saga.plugins.policy import JsonPath
from agent_saga_mcp.compat import ToolInfo
from agent_saga_mcp.document import deref, schema_at

__all__ = ["misfit"]


@dataclass(frozen=True)
class _Undo:
    """What a misfit is measured against: the forward tool, and the undo tool's input schema."""

    forward: ToolInfo
    tool: str
    schema: Mapping[str, Any]

    def source(self, path: JsonPath) -> tuple[Mapping[str, Any] | None, str]:
        """The schema a path reads, and how to name it."""
        if path.reads_result:
            return self.forward.output_schema, f"the outputSchema of {self.forward.name!r}"
        return self.forward.input_schema, f"the inputSchema of {self.forward.name!r}"


def misfit(value: Any, forward: ToolInfo, tool: str, schema: Mapping[str, Any] | None) -> str | None:
    """Why the parsed template ``value`` (an ``ArgTemplate`` tree) cannot fit ``schema``, or None.

    ``schema`` is the undo tool's ``inputSchema``; ``value`` the whole ``compensate.args``.
    The reason starts with the location (``['entityNames']``), for the caller to prefix.
    """
    if schema is None:
        return None
    return _misfit(value, deref(schema, schema), "", _Undo(forward, tool, schema))


def _misfit(value: Any, wanted: Any, where: str, undo: _Undo) -> str | None:
    if not isinstance(wanted, Mapping):
        return None
    allowed = _types(wanted, undo.schema)
    if isinstance(value, JsonPath):
        return _path_misfit(value, wanted, allowed, where, undo)
    have = _json_type(value)
    if allowed is not None and not _overlap({have}, allowed):
        return f"{where} = {value!r:.80} is {_a(have)}, where {undo.tool!r} takes {_either(allowed)}"
    if isinstance(value, list):
        items = deref(wanted.get("items"), undo.schema)
        for at, item in enumerate(value):
            miss = _misfit(item, items, f"{where}[{at}]", undo)
            if miss is not None:
                return miss
    elif isinstance(value, Mapping):
        props = wanted.get("properties")
        for key, item in value.items():
            field = deref(props.get(key), undo.schema) if isinstance(props, Mapping) else None
            miss = _misfit(item, field, f"{where}[{key!r}]", undo)
            if miss is not None:
                return miss
    return None


def _path_misfit(
    path: JsonPath, wanted: Mapping[str, Any], allowed: set[str] | None, where: str, undo: _Undo
) -> str | None:
    source, named = undo.source(path)
    found = schema_at(source, path)
    found_types = _types(found, source) if found is not None else None
    if allowed is None:
        return None
    if path.fans_out:
        if not _overlap({"array"}, allowed):
            return (f"{where} = {path.text!r} builds an array ([*]), where {undo.tool!r} takes "
                    f"{_either(allowed)}; read one item instead ([0])")
        items = _types(deref(wanted.get("items"), undo.schema), undo.schema)
        if items is not None and found_types is not None and not _overlap(found_types, items):
            return (f"{where} = {path.text!r} builds an array of {_either(found_types)} (per {named}), where "
                    f"{undo.tool!r} takes an array of {_either(items)}")
        return None
    if found_types is None:
        if allowed - {"null"} == {"array"}:
            return (f"{where} = {path.text!r} gives one value, where {undo.tool!r} takes an array; build one "
                    f"from every item with [*] (e.g. '$.items[*].id'), or write a list: [{path.text!r}]")
        return None
    if not _overlap(found_types, allowed):
        hint = " (build one from every item with [*], e.g. '$.items[*].id')" if "array" in allowed else ""
        return (f"{where} = {path.text!r} gives {_either(found_types)} (per {named}), where {undo.tool!r} "
                f"takes {_either(allowed)}{hint}")
    return None


def _types(node: Any, root: Any) -> set[str] | None:
    """The JSON types a schema node allows; None when it does not say (or allows anything)."""
    if not isinstance(node, Mapping):
        return None
    stated = node.get("type")
    if isinstance(stated, str):
        return {stated}
    if isinstance(stated, list) and all(isinstance(t, str) for t in stated):
        return set(stated)
    if "const" in node:
        return {_json_type(node["const"])}
    if isinstance(node.get("enum"), list) and node["enum"]:
        return {_json_type(v) for v in node["enum"]}
    branches = node.get("anyOf") or node.get("oneOf")
    if isinstance(branches, list) and branches:
        union: set[str] = set()
        for branch in branches:
            kinds = _types(deref(branch, root), root)
            if kinds is None:
                return None
            union |= kinds
        return union
    return None


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _overlap(have: set[str], allowed: set[str]) -> bool:
    widened = have | ({"number"} if "integer" in have else set())
    return bool(widened & allowed)


def _a(kind: str) -> str:
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


def _either(kinds: set[str]) -> str:
    return " or ".join(_a(k) for k in sorted(kinds))
