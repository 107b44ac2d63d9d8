"""agent-saga for MCP (official ``mcp`` SDK, 1.x and 2.x).

* :func:`wrap_tool` / :func:`wrap_session`: an MCP client's ``call_tool`` as saga steps.
* ``agent-saga mcp``: a stdio proxy that gates any MCP server with a tool policy
  (:mod:`agent_saga_mcp.core` holds the message handling, :mod:`agent_saga_mcp.proxy` the pipes).
* ``mcp.call_tool`` (:mod:`agent_saga_mcp.handler`): the registered undo behind every
  compensating tool call, runnable by the recovery daemon.

Also importable as ``agent_saga.adapters.mcp``.
"""

from agent_saga_mcp.client import SagaSession, SagaTool, ToolErrorResult, wrap_session, wrap_tool
from agent_saga_mcp.compat import MCP_MAJOR
from agent_saga_mcp.core import Boundary, ProxyConfig, ProxyCore
from agent_saga_mcp.handler import CompensatingCallFailed, call_tool
from agent_saga_mcp.policy import McpPolicy

__all__ = [
    "MCP_MAJOR",
    "Boundary",
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
