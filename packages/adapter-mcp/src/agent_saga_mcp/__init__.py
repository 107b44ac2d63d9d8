"""agent-saga for MCP (official ``mcp`` SDK, 1.x and 2.x).

* :func:`wrap_tool` / :func:`wrap_session`: an MCP client's ``call_tool`` as saga steps.
* ``agent-saga mcp``: a stdio proxy that gates any MCP server with a tool policy
  (:mod:`agent_saga_mcp.cli` registers the verb, :mod:`agent_saga_mcp.core` holds the
  message handling, :mod:`agent_saga_mcp.proxy` the pipes).
* ``mcp.call_tool`` (:mod:`agent_saga_mcp.handler`): the registered undo behind every
  compensating tool call, runnable by the recovery daemon.

Also importable as ``agent_saga.adapters.mcp``.

The names below are imported when first used: the ``agent-saga`` command loads
:mod:`agent_saga_mcp.cli` to register its verb every time it starts, and importing the MCP
SDK (which every other module here does) takes seconds.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent_saga_mcp.client import SagaSession, SagaTool, ToolErrorResult, wrap_session, wrap_tool
    from agent_saga_mcp.compat import MCP_MAJOR
    from agent_saga_mcp.core import BoundaryMode, ProxyConfig, ProxyCore
    from agent_saga_mcp.handler import CompensatingCallFailed, call_tool
    from agent_saga_mcp.policy import McpPolicy

__all__ = [
    "MCP_MAJOR",
    "BoundaryMode",
    "CompensatingCallFailed",
    "McpPolicy",
    "ProxyConfig",
    "ProxyCore",
    "SagaSession",
    "SagaTool",
    "ToolErrorResult",
    "call_tool",
    "wrap_session",
    "wrap_tool",
]

_HOMES = {
    "MCP_MAJOR": "compat",
    "BoundaryMode": "core",
    "CompensatingCallFailed": "handler",
    "McpPolicy": "policy",
    "ProxyConfig": "core",
    "ProxyCore": "core",
    "SagaSession": "client",
    "SagaTool": "client",
    "ToolErrorResult": "client",
    "call_tool": "handler",
    "wrap_session": "client",
    "wrap_tool": "client",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value  # the next lookup is an ordinary one
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
