"""``mcp.call_tool``: the one registered undo behind every compensating MCP tool call.

A compensation declared as ``{"tool": "create_refund", "args": {...}}`` is recorded in the
log as this handler with JSON kwargs that name the server, never how to start it::

    {"server": "payments", "tool": "create_refund", "arguments": {"charge": "ch_1"}}

so any process that imports this module can run it: the proxy itself during an in-process
rollback, or the recovery daemon after the proxy died
(``agent-saga recover --import agent_saga_mcp.handler``).

* While a proxy (or ``wrap_session``) in this process holds a live connection to the server
  of that name, the call goes through that connection: a server that keeps state in memory
  is undone where the effect happened.
* Otherwise the handler looks the name up in the reading host's own list
  (``/etc/agent-saga/mcp-servers.json``, :mod:`agent_saga_mcp.servers`), starts that
  command in that directory over stdio (the SDK's ``stdio_client``) with *this* process's
  environment, initializes a session, calls the tool and closes it.
* The log is written by the agent, so nothing in it is run: a record naming a server the
  list does not hold, naming none, or still carrying a ``command`` (records of older
  versions) raises :class:`~agent_saga.CompensationRefused`. The recovery daemon escalates
  that (``undo-refused``) and dead-letters the saga instead of starting anything.
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

from agent_saga import CompensationError, CompensationRefused, ConfigurationError
from agent_saga.registry import compensator
from agent_saga_mcp.compat import is_error_result, result_as_wire
from agent_saga_mcp.servers import ServerEntry, load_servers, servers_path, valid_name

__all__ = [
    "IDEMPOTENCY_META",
    "CompensatingCallFailed",
    "Route",
    "add_route",
    "call_tool",
    "remove_route",
]

IDEMPOTENCY_META = "agent-saga/idempotency-key"
_DEFAULT_TIMEOUT = 120.0

Route = Callable[[str, dict[str, Any], dict[str, Any]], Awaitable[dict[str, Any]]]
# Live connections by server name (None: the one unnamed server of a proxy in this process).
_routes: dict[str | None, tuple[asyncio.AbstractEventLoop, Route]] = {}


class CompensatingCallFailed(CompensationError):
    """The compensating tool call returned an error result (or could not be made)."""


def add_route(server: str | None, route: Route) -> None:
    """Send calls for the server named ``server`` through a live connection owned by the running loop."""
    _routes[server] = (asyncio.get_running_loop(), route)


def remove_route(server: str | None, route: Route | None = None) -> None:
    """Forget the live connection to ``server`` (only if it is still ``route``, when given)."""
    held = _routes.get(server)
    if held is not None and (route is None or held[1] == route):
        del _routes[server]


def _refused(server: object, why: str) -> CompensationRefused:
    shown = repr(server)
    return CompensationRefused(
        f"mcp.call_tool refused the recorded server {shown[:200]}: {why}; nothing was started. The log names servers "
        f"and this process starts only those listed in its own {servers_path()} (see docs/MCP.md)"
    )


def _configured(server: object) -> ServerEntry:
    """The host's entry for the recorded ``server``, or CompensationRefused saying why not."""
    if isinstance(server, Mapping):
        # Records of earlier versions named the command itself: never run, whatever it says.
        raise _refused(server, "a record that carries its own command is never run (the agent wrote it)")
    if server is None:
        raise _refused(server, "the undo names no server (its proxy ran without --server NAME)")
    if not valid_name(server):
        raise _refused(server, "a server is named by 1-64 letters, digits, '.', '_' or '-'")
    try:
        servers = load_servers()
    except ConfigurationError as err:
        raise _refused(server, f"the server list cannot be trusted or read ({err})") from None
    entry = servers.get(cast(str, server))
    if entry is None:
        raise _refused(server, f"no server of that name is configured here (known: {', '.join(sorted(servers)) or 'none'})")
    return entry


@compensator("mcp.call_tool")
async def call_tool(
    server: str | None,
    tool: str,
    arguments: dict[str, Any],
    idempotency_key: str | None = None,
) -> dict[str, Any]:
    """Call ``tool`` on the server named ``server`` and return the wire result; raise if it reports an error."""
    meta = {IDEMPOTENCY_META: idempotency_key} if idempotency_key else {}
    live = _routes.get(server) if server is None or isinstance(server, str) else None
    if live is not None and live[0] is not asyncio.get_running_loop():
        live = None
    entry = None if live is not None else _configured(server)
    timeout = entry.timeout if entry is not None else _DEFAULT_TIMEOUT
    try:
        async with asyncio.timeout(timeout):
            if live is not None:
                result = await live[1](tool, dict(arguments), meta)
            else:
                assert entry is not None
                result = await _spawn_and_call(entry, tool, dict(arguments), meta)
    except CompensatingCallFailed:
        raise
    except Exception as err:
        raise CompensatingCallFailed(
            f"compensating call {tool}({arguments!r}) on server {server!r} failed: {type(err).__name__}: {err}"
        ) from err
    if is_error_result(result):
        raise CompensatingCallFailed(
            f"compensating call {tool}({arguments!r}) returned an error: {_text(result)}"
        )
    return result


async def _spawn_and_call(
    entry: ServerEntry, tool: str, arguments: dict[str, Any], meta: dict[str, Any]
) -> dict[str, Any]:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(
        command=entry.command[0], args=list(entry.command[1:]), cwd=entry.cwd, env=dict(os.environ)
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
