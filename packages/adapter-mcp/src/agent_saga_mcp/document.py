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

__all__ = ["deref", "result_document", "schema_at", "schema_misses"]


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
    listed and which does not allow other keys, or an index (or ``[*]``) into something that
    is not an array. A schema that says nothing (or allows anything) never blocks a path.
    """
    return _walk(schema, path)[1]


def schema_at(schema: Mapping[str, Any] | None, path: JsonPath) -> Mapping[str, Any] | None:
    """The schema of what ``path`` finds (of each item, after ``[*]``); None where the schema does not say."""
    return _walk(schema, path)[0]


def deref(node: Any, root: Any) -> Any:
    """``node``, or what its local ``$ref`` (``#/$defs/...``) points to in ``root``."""
    for _ in range(32):  # a cycle of references says nothing
        ref = node.get("$ref") if isinstance(node, Mapping) else None
        if not isinstance(ref, str) or not ref.startswith("#/"):
            return node
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part.replace("~1", "/").replace("~0", "~")) if isinstance(target, Mapping) else None
        node = target
    return None


def _walk(schema: Mapping[str, Any] | None, path: JsonPath) -> tuple[Mapping[str, Any] | None, str | None]:
    node: Any = deref(schema, schema)
    for step in path.steps:
        if not isinstance(node, Mapping):
            return None, None
        if not isinstance(step, str):  # an index or [*]
            if not _may_be(node, "array"):
                return None, f"{path.text}: {_shown(step)} indexes a {node.get('type')}, not an array"
            node = deref(node.get("items"), schema)
            continue
        props = node.get("properties")
        if not _may_be(node, "object"):
            return None, f"{path.text}: {step!r} reads a field of a {node.get('type')}"
        if isinstance(props, Mapping):
            if step in props:
                node = deref(props[step], schema)
                continue
            extra = node.get("additionalProperties")
            if extra is None or extra is False:
                known = ", ".join(sorted(str(k) for k in props)) or "none"
                return None, f"{path.text}: the schema has no field {step!r} (fields: {known})"
            node = deref(extra, schema)
            continue
        return None, None
    return (node if isinstance(node, Mapping) else None), None


def _may_be(node: Mapping[str, Any], kind: str) -> bool:
    """Whether the node's ``type`` (absent, one name or a list of names) allows ``kind``."""
    stated = node.get("type")
    return stated is None or stated == kind or (isinstance(stated, list) and kind in stated)


def _shown(step: object) -> str:
    return repr(step) if not isinstance(step, int) else f"[{step}]"
