"""Saga steps around an MCP client's ``call_tool``: ``wrap_tool`` and ``wrap_session``.

Works with the official SDK's clients of both live major versions: ``ClientSession``
(1.x and 2.x) and ``Client`` (2.x). Anything with an awaitable
``call_tool(name, arguments)`` returning a ``CallToolResult`` will do.

A result with ``isError`` / ``is_error`` set is a **failed step**, left UNKNOWN: the server
reports the failure in band, but nothing in the protocol says whether the tool changed
anything before failing (a payment API that timed out after charging reports an error
too). :class:`ToolErrorResult` is raised inside the saga, so the boundary unwinds the
steps before it; outside a saga the result is returned as is.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from agent_saga.context import current_saga
from agent_saga.errors import BoundaryRequired
from agent_saga.plugins.patching import ToolNotClassified
from agent_saga.plugins.policy import PolicyError, ToolPolicy, ToolRule
from agent_saga.semantics import ActionSemantics, Compensation
from agent_saga_mcp.compat import is_error_result, result_as_wire
from agent_saga_mcp.document import result_document
from agent_saga_mcp.handler import add_route, server_spec
from agent_saga_mcp.policy import McpPolicy

__all__ = ["SagaSession", "SagaTool", "ToolErrorResult", "wrap_session", "wrap_tool"]

Factory = Callable[[Any], "Compensation | None"]


class ToolErrorResult(Exception):
    """An MCP tool answered with an error result; the step's outcome is UNKNOWN."""

    def __init__(self, tool: str, result: Any) -> None:
        self.tool = tool
        self.result = result
        wire = result_as_wire(result)
        texts = [b.get("text") for b in wire.get("content", []) if isinstance(b, Mapping) and b.get("text")]
        super().__init__(f"MCP tool {tool!r} returned an error result: {' '.join(map(str, texts))[:300]}")


async def _call(client: Any, tool: str, arguments: Mapping[str, Any] | None, **kwargs: Any) -> Any:
    return await client.call_tool(tool, dict(arguments or {}), **kwargs)


class SagaTool:
    """One MCP tool of one client, callable as ``await tool(arguments)``; a saga step inside a saga."""

    def __init__(
        self,
        client: Any,
        name: str,
        semantics: ActionSemantics,
        compensate: Factory | None,
        gate_args: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None,
        require_boundary: bool = False,
    ) -> None:
        self.client = client
        self.name = name
        self.semantics = semantics
        self.compensate = compensate
        self._gate_args = gate_args
        self.require_boundary = require_boundary

    def __repr__(self) -> str:
        return f"SagaTool({self.name!r}, {self.semantics.value})"

    async def __call__(self, arguments: Mapping[str, Any] | None = None, **kwargs: Any) -> Any:
        saga = current_saga()
        if saga is None:
            if self.require_boundary:
                raise BoundaryRequired(
                    f"MCP tool {self.name!r} was called outside a saga; open one with saga_scope()"
                )
            return await _call(self.client, self.name, arguments, **kwargs)
        args = dict(arguments or {})

        async def forward() -> Any:
            result = await _call(self.client, self.name, args, **kwargs)
            if is_error_result(result):
                raise ToolErrorResult(self.name, result)
            return result

        return await saga.execute(
            tool=self.name, semantics=self.semantics, forward=forward,
            compensate=self.compensate,
            args=self._gate_args(args) if self._gate_args is not None else args, inline=True,
        )


def _from_result(factory: Callable[[Any], Any]) -> Factory:
    """Adapt a factory over the result *document* to the engine's factory over the SDK result."""

    def build(result: Any) -> Any:
        return factory(None if result is None else result_document(result_as_wire(result)))

    build.__qualname__ = getattr(factory, "__qualname__", "compensate")
    return build


def wrap_tool(
    client: Any,
    name: str,
    *,
    semantics: ActionSemantics | str,
    compensate: Callable[[Any], Compensation | None] | None = None,
    require_boundary: bool = False,
) -> SagaTool:
    """``await wrap_tool(session, "create_charge", semantics=..., compensate=...)({"amount": 5})``.

    ``compensate`` receives the result *document* (``structuredContent``, else the JSON of
    the only text block, else the wire result; see ``agent_saga_mcp.document``) and
    returns a :class:`Compensation` (or None while the result is unknown).
    """
    if not callable(getattr(client, "call_tool", None)):
        raise TypeError(f"wrap_tool needs an MCP client with call_tool (ClientSession or Client), got {client!r}")
    sem = ActionSemantics.parse(semantics)
    return SagaTool(client, name, sem, _from_result(compensate) if compensate is not None else None,
                    require_boundary=require_boundary)


class SagaSession:
    """An MCP client whose ``call_tool`` follows a tool policy; every other attribute is the client's."""

    def __init__(self, client: Any, policy: McpPolicy, server: dict[str, Any] | None) -> None:
        self._client = client
        self._policy = policy
        self._server = server
        self._tools: dict[str, SagaTool] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    @property
    def client(self) -> Any:
        return self._client

    def tool(self, name: str) -> SagaTool | None:
        """The wrapped tool ``name`` per the policy; None when the policy does not name it."""
        if name in self._tools:
            return self._tools[name]
        rule = self._policy.rule_for(name)
        if rule is None:
            return None
        wrapped = SagaTool(
            self._client, name, rule.semantics, self._undo(name, rule),
            gate_args=lambda args: self._policy.gate_args(name, rule, args),
        )
        self._tools[name] = wrapped
        return wrapped

    def _undo(self, name: str, rule: ToolRule) -> Factory | None:
        if rule.compensate is None:
            return None
        policy, server, client = self._policy, self._server, self._client

        def build(result: Any) -> Compensation | None:
            wire = None if result is None else result_as_wire(result)
            if server is not None:  # recorded as mcp.call_tool: the daemon can run it later
                return policy.undo(name, rule, wire, server)
            comp = policy.undo(name, rule, wire, {"command": ["?"], "cwd": ""})
            if comp is None or comp.handler != "mcp.call_tool":
                return comp
            undo_tool, undo_args = comp.kwargs["tool"], dict(comp.kwargs["arguments"])

            async def call_undo() -> None:
                answer = await _call(client, undo_tool, undo_args)
                if is_error_result(answer):
                    raise ToolErrorResult(undo_tool, answer)

            return Compensation(fn=call_undo, description=comp.description)

        return build

    async def call_tool(self, name: str, arguments: Mapping[str, Any] | None = None, **kwargs: Any) -> Any:
        wrapped = self.tool(name)
        if wrapped is not None:
            return await wrapped(arguments, **kwargs)
        if current_saga() is not None and self._policy.enforce:
            raise ToolNotClassified(name, "mcp")
        return await _call(self._client, name, arguments, **kwargs)


def wrap_session(
    client: Any,
    policy: McpPolicy | ToolPolicy | Mapping[str, Any] | str | os.PathLike[str],
    *,
    server: list[str] | None = None,
) -> SagaSession:
    """The client, with ``call_tool`` run as saga steps according to a tool policy.

    ``compensate.tool`` entries call the compensating tool through this same client. Pass
    ``server=`` (the stdio command the client was started with) to record them as the
    ``mcp.call_tool`` handler instead, which the recovery daemon can run after a crash;
    while the client is open, such undos still go through it.
    """
    if not callable(getattr(client, "call_tool", None)):
        raise TypeError(f"wrap_session needs an MCP client with call_tool (ClientSession or Client), got {client!r}")
    loaded = policy if isinstance(policy, McpPolicy) else McpPolicy.load(policy)
    spec = server_spec(server) if server is not None else None
    session = SagaSession(client, loaded, spec)
    if spec is not None:
        async def route(tool: str, arguments: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
            return result_as_wire(await _call(client, tool, arguments))

        try:
            add_route(spec, route)
        except RuntimeError as err:  # no running loop
            raise PolicyError("wrap_session(server=...) must be called inside the event loop that uses the client") \
                from err
    return session

