"""What differs between mcp 1.x and 2.x, in one place.

1.x: ``JSONRPCMessage`` is a pydantic ``RootModel``, fields are camelCase (``isError``,
``structuredContent``, ``inputSchema``). 2.x: ``JSONRPCMessage`` is a plain union with a
ready ``jsonrpc_message_adapter``, fields are snake_case (``is_error``, ...). On the wire
both speak the same camelCase JSON, which is what the proxy reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import metadata
from typing import Any, cast

from pydantic import TypeAdapter

__all__ = [
    "MCP_MAJOR",
    "ToolInfo",
    "call_params",
    "is_error_result",
    "list_tools_result",
    "result_as_wire",
    "validate_message",
]

MCP_MAJOR = int(metadata.version("mcp").split(".")[0])

if MCP_MAJOR >= 2:
    # The wire types alone: mcp 2.x's mcp.types re-exports this package's very objects, and importing
    # it leaves the SDK's transports unimported (0.5 s less CPU in every proxy process).
    import mcp_types as types  # type: ignore[import-not-found, unused-ignore]
else:
    from mcp import types  # type: ignore[no-redef, unused-ignore]

_ADAPTER: TypeAdapter[Any] = cast(
    "TypeAdapter[Any]",
    getattr(types, "jsonrpc_message_adapter", None) or TypeAdapter(types.JSONRPCMessage),
)


def validate_message(obj: Any) -> Any:
    """The SDK's own model of one JSON-RPC message; ``pydantic.ValidationError`` if it is not one."""
    message = _ADAPTER.validate_python(obj)
    return getattr(message, "root", message)  # 1.x wraps the union in a RootModel


def call_params(params: Any) -> tuple[str, dict[str, Any]]:
    """``(name, arguments)`` of a tools/call request, validated with the SDK's model."""
    model = types.CallToolRequestParams.model_validate(params)
    return model.name, dict(model.arguments or {})


class ToolInfo:
    """One tool of a tools/list result, as the wire said it (camelCase schemas)."""

    __slots__ = ("input_schema", "name", "output_schema")

    def __init__(self, name: str, input_schema: Mapping[str, Any] | None, output_schema: Mapping[str, Any] | None):
        self.name = name
        self.input_schema = input_schema
        self.output_schema = output_schema

    def __repr__(self) -> str:
        return f"ToolInfo({self.name!r})"


def list_tools_result(result: Any) -> tuple[list[ToolInfo], str | None]:
    """The tools of one tools/list result page and its ``nextCursor``; ValidationError if malformed."""
    types.ListToolsResult.model_validate(result)  # the SDK decides what a valid page is
    page = cast(Mapping[str, Any], result)
    tools = [
        ToolInfo(str(t["name"]), t.get("inputSchema"), t.get("outputSchema"))
        for t in cast(list[Mapping[str, Any]], page.get("tools", []))
    ]
    cursor = page.get("nextCursor")
    return tools, cursor if isinstance(cursor, str) else None


def is_error_result(result: Any) -> bool:
    """Whether an SDK result object or a wire dict reports a tool error."""
    if isinstance(result, Mapping):
        return bool(result.get("isError") or result.get("is_error"))
    return bool(getattr(result, "is_error", None) or getattr(result, "isError", None))


def result_as_wire(result: Any) -> dict[str, Any]:
    """An SDK result object (either major version) as its camelCase wire dict."""
    if isinstance(result, Mapping):
        return dict(result)
    dump = getattr(result, "model_dump", None)
    if dump is None:
        raise TypeError(f"not an MCP result: {type(result).__name__}")
    return cast(dict[str, Any], dump(mode="json", by_alias=True, exclude_none=True))
