"""What a JSON path in an MCP policy reads, and whether a tool's schema can satisfy it.

A tool result is not the tool's return value: it is a list of content blocks, optionally
with ``structuredContent``. A ``compensate.args`` path reads the *result document*:

1. ``structuredContent`` when the result has it (SDK servers fill it for typed returns);
2. else the JSON value of the only text block, when there is exactly one and it parses;
3. else the whole result as sent on the wire (``$.content[0].text`` still works).

``policy_args`` paths read the call's ``arguments`` object, because the gate decides before
the call runs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agent_saga.plugins.policy import JsonPath

__all__ = ["result_document", "schema_misses"]


def result_document(result: Mapping[str, Any]) -> Any:
    """The value ``compensate.args`` paths are resolved against (see the module doc)."""
    structured = result.get("structuredContent")
    if structured is not None:
        return structured
    content = result.get("content")
    if isinstance(content, list) and len(content) == 1:
        block = content[0]
        if isinstance(block, Mapping) and block.get("type") == "text" and isinstance(block.get("text"), str):
            try:
                return json.loads(block["text"])
            except ValueError:
                pass
    return dict(result)


def schema_misses(schema: Mapping[str, Any] | None, path: JsonPath) -> str | None:
    """Why ``path`` cannot resolve in any value valid under ``schema``, or None if it may.

    Only what the schema states is used: a step into an object whose ``properties`` are
    listed and which does not allow other keys, or an index into something that is not an
    array. A schema that says nothing (or allows anything) never blocks a path.
    """
    node: Any = schema
    for step in path.steps:
        if not isinstance(node, Mapping):
            return None
        if isinstance(step, int):
            if node.get("type") not in (None, "array") :
                return f"{path.text}: [{step}] indexes a {node.get('type')}, not an array"
            node = node.get("items")
            continue
        props = node.get("properties")
        if node.get("type") not in (None, "object"):
            return f"{path.text}: {step!r} reads a field of a {node.get('type')}"
        if isinstance(props, Mapping):
            if step in props:
                node = props[step]
                continue
            extra = node.get("additionalProperties")
            if extra is None or extra is False:
                known = ", ".join(sorted(str(k) for k in props)) or "none"
                return f"{path.text}: the schema has no field {step!r} (fields: {known})"
            node = extra
            continue
        return None
    return None
