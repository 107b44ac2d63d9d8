"""``mcp.call_tool``: the one registered undo behind every compensating MCP tool call.

A compensation declared as ``{"tool": "create_refund", "args": {...}}`` is recorded in the
log as this handler with JSON kwargs::

    {"server": {"command": ["python", "-m", "my_mcp_server"], "cwd": "/srv/app"},
     "tool": "create_refund", "arguments": {"charge": "ch_1"}}

so any process that imports this module can run it: the proxy itself during an in-process
rollback, or the recovery daemon after the proxy died
(``agent-saga recover --import agent_saga_mcp.handler``).

* While a proxy in this process holds a live connection to that very server (same command
  and working directory), the call goes through that connection: a server that keeps state
  in memory is undone where the effect happened.
* Otherwise the handler starts the server command itself over stdio (the SDK's
  ``stdio_client``) with *this* process's environment, initializes a session, calls the
  tool and closes it. The server's environment is deliberately not written to the log (it
  usually holds credentials): run the daemon where the server command works.
* The step's idempotency key travels in the request's ``_meta`` as
  ``agent-saga/idempotency-key``, for servers that deduplicate.
* A result with ``isError`` raises :class:`CompensatingCallFailed`, so the engine or the
  daemon records a failed attempt and retries it (same key) rather than calling it done.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, cast

from agent_saga import CompensationError
from agent_saga.registry import compensator
from agent_saga_mcp.compat import is_error_result, result_as_wire

__all__ = [
    "IDEMPOTENCY_META",
    "CompensatingCallFailed",
    "Route",
    "add_route",
    "call_tool",
    "remove_route",
    "server_key",
    "server_spec",
]

IDEMPOTENCY_META = "agent-saga/idempotency-key"
_DEFAULT_TIMEOUT = 120.0

Route = Callable[[str, dict[str, Any], dict[str, Any]], Awaitable[dict[str, Any]]]
_routes: dict[str, tuple[asyncio.AbstractEventLoop, Route]] = {}


class CompensatingCallFailed(CompensationError):
    """The compensating tool call returned an error result (or could not be made)."""


def server_spec(command: list[str], cwd: str | None = None) -> dict[str, Any]:
    """The JSON description of a stdio server that the log records with each undo."""
    if not command or not all(isinstance(part, str) for part in command):
        raise ValueError(f"a server command is a non-empty list of strings, got {command!r}")
    return {"command": list(command), "cwd": os.path.abspath(cwd or os.getcwd())}


def server_key(server: Mapping[str, Any]) -> str:
    return json.dumps({"command": server.get("command"), "cwd": server.get("cwd")}, sort_keys=True)


def add_route(server: Mapping[str, Any], route: Route) -> None:
    """Send calls for ``server`` through a live connection owned by the running loop."""
    _routes[server_key(server)] = (asyncio.get_running_loop(), route)


def remove_route(server: Mapping[str, Any]) -> None:
    _routes.pop(server_key(server), None)


@compensator("mcp.call_tool")
async def call_tool(
    server: dict[str, Any],
    tool: str,
    arguments: dict[str, Any],
    idempotency_key: str | None = None,
) -> dict[str, Any]:
    """Call ``tool`` on ``server`` and return the wire result; raise if it reports an error."""
    meta = {IDEMPOTENCY_META: idempotency_key} if idempotency_key else {}
    live = _routes.get(server_key(server))
    timeout = float(server.get("timeout", _DEFAULT_TIMEOUT))
    try:
        async with asyncio.timeout(timeout):
            if live is not None and live[0] is asyncio.get_running_loop():
                result = await live[1](tool, dict(arguments), meta)
            else:
                result = await _spawn_and_call(server, tool, dict(arguments), meta)
    except CompensatingCallFailed:
        raise
    except Exception as err:
        raise CompensatingCallFailed(
            f"compensating call {tool}({arguments!r}) on {' '.join(server.get('command', []))!r} failed: "
            f"{type(err).__name__}: {err}"
        ) from err
    if is_error_result(result):
        raise CompensatingCallFailed(
            f"compensating call {tool}({arguments!r}) returned an error: {_text(result)}"
        )
    return result


async def _spawn_and_call(
    server: Mapping[str, Any], tool: str, arguments: dict[str, Any], meta: dict[str, Any]
) -> dict[str, Any]:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    command = server.get("command")
    if not isinstance(command, list) or not command:
        raise CompensatingCallFailed(f"recorded server has no command: {dict(server)!r}")
    params = StdioServerParameters(
        command=command[0], args=list(command[1:]), cwd=server.get("cwd"), env=dict(os.environ)
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        # The meta parameter's type differs between 1.x (dict) and 2.x (a TypedDict).
        result = await cast(Any, session).call_tool(tool, arguments, meta=meta or None)
    return result_as_wire(result)


def _text(result: Mapping[str, Any]) -> str:
    content = result.get("content")
    if isinstance(content, list):
        texts = [b.get("text") for b in content if isinstance(b, Mapping) and isinstance(b.get("text"), str)]
        if texts:
            return " ".join(str(t) for t in texts)[:500]
    return json.dumps(dict(result))[:500]
