"""Saga steps around an MCP client's ``call_tool``: ``wrap_tool`` and ``wrap_session``.

Works with the official SDK's clients of both live major versions: ``ClientSession``
(1.x and 2.x) and ``Client`` (2.x). Anything with an awaitable
``call_tool(name, arguments)`` returning a ``CallToolResult`` will do.

Each wrapped tool is a :class:`~agent_saga.adapter.ToolSpec` (its name and its
:class:`~agent_saga.StepOptions`), built by ``wrap_tool`` from every step option, or by the
tool policy for ``wrap_session``. The kit's ``Adapter`` base class does not fit here: what
it wraps is one tool object into a copy of the same type, where an MCP client is one object
holding many tools, each of them only a name.

A result with ``isError`` / ``is_error`` set is a **failed step**, left UNKNOWN: the server
reports the failure in band, but nothing in the protocol says whether the tool changed
anything before failing (a payment API that timed out after charging reports an error
too). :class:`ToolErrorResult` is raised inside the saga, so the boundary unwinds the
steps before it; outside a saga the result is returned as is.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from typing import Any, Unpack

from agent_saga import ActionSemantics, BoundaryRequired, Compensation, StepOptions, StepRefused, current_saga
from agent_saga.adapter import SPEC_ATTR, StepKwargs, ToolSpec
from agent_saga.plugins import PolicyError, ToolNotClassified, ToolPolicy
from agent_saga.plugins.policy import ToolRule
from agent_saga_mcp.compat import is_error_result, result_as_wire
from agent_saga_mcp.document import result_document
from agent_saga_mcp.handler import add_route
from agent_saga_mcp.policy import CALL_TOOL_HANDLER, ORIGIN, McpPolicy
from agent_saga_mcp.servers import servers_path, valid_name

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


async def _call_step(client: Any, tool: str, arguments: dict[str, Any], kwargs: dict[str, Any]) -> Any:
    """One call as a step's forward: an error result fails the step."""
    result = await _call(client, tool, arguments, **kwargs)
    if is_error_result(result):
        raise ToolErrorResult(tool, result)
    return result


class SagaTool:
    """One MCP tool of one client, callable as ``await tool(arguments)``; a saga step inside a saga.

    ``arguments`` are what the gate polices and the log records; keywords go to the
    client's ``call_tool`` as they are (a progress callback, a timeout). A
    ``fallback_action`` is called with the same ``arguments``.
    """

    def __init__(self, client: Any, spec: ToolSpec, undo_for: Callable[[dict[str, Any]], Factory] | None = None) -> None:
        self.client = client
        self.spec = spec
        # A policy's undo may read the call's own arguments ($args): then it is made per call.
        self._undo_for = undo_for
        setattr(self, SPEC_ATTR, spec)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def options(self) -> StepOptions:
        return self.spec.options

    def __repr__(self) -> str:
        return f"SagaTool({self.name!r}, {self.options.semantics.value})"

    async def __call__(self, arguments: Mapping[str, Any] | None = None, **kwargs: Any) -> Any:
        saga = current_saga()
        args = dict(arguments or {})
        if saga is None:
            if self.options.require_boundary:
                raise BoundaryRequired(
                    f"MCP tool {self.name!r} was called outside a saga; open one with saga_scope()"
                )
            return await _call(self.client, self.name, args, **kwargs)
        options = self.options
        if self._undo_for is not None:
            try:
                options = options.with_changes(compensate=self._undo_for(args))
            except StepRefused as refused:  # the undo could not be built: never called, and on record
                saga.refuse(self.name, args, refused, origin=ORIGIN)
                raise
        if options.fallback_action is not None:
            options = options.with_changes(fallback_action=functools.partial(options.fallback_action, args))
        forward = functools.partial(_call_step, self.client, self.name, args, kwargs)
        return await saga.execute(tool=self.name, forward=forward, args=args, options=options)


def _from_result(factory: Callable[[Any], Any]) -> Factory:
    """Adapt a factory over the result *document* to the engine's factory over the SDK result."""

    def build(result: Any) -> Any:
        return factory(None if result is None else result_document(result_as_wire(result)))

    build.__qualname__ = getattr(factory, "__qualname__", "compensate")
    # An undo declared not to need the result can still undo an UNKNOWN step.
    build.known_before_call = getattr(factory, "known_before_call", False)  # type: ignore[attr-defined]
    return build


def _check_client(client: Any, what: str) -> None:
    if not callable(getattr(client, "call_tool", None)):
        raise TypeError(f"{what} needs an MCP client with call_tool (ClientSession or Client), got {client!r}")


def wrap_tool(
    client: Any,
    name: str,
    *,
    semantics: ActionSemantics | str | None = None,
    options: StepOptions | None = None,
    **more: Unpack[StepKwargs],
) -> SagaTool:
    """``await wrap_tool(session, "create_charge", semantics=..., compensate=...)({"amount": 5})``.

    Takes every step option (see :class:`~agent_saga.StepOptions`), or a ready ``options=``;
    ``origin`` is ``"mcp"`` unless given. A ``compensate`` factory receives the result
    *document* (``structuredContent``, else the JSON of the only text block, else the wire
    result; see ``agent_saga_mcp.document``) and returns a :class:`Compensation` (or None
    while the result is unknown).
    """
    _check_client(client, "wrap_tool")
    opts = ToolSpec.of(name, semantics=semantics, options=options, **more).options
    compensate = opts.compensate
    if callable(compensate) and not isinstance(compensate, Compensation):
        opts = opts.with_changes(compensate=_from_result(compensate))
    if opts.origin is None:
        opts = opts.with_changes(origin=ORIGIN)
    return SagaTool(client, ToolSpec(name, opts))


class SagaSession:
    """An MCP client whose ``call_tool`` follows a tool policy; every other attribute is the client's."""

    def __init__(self, client: Any, policy: McpPolicy, server: str | None) -> None:
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
        options = self._policy.step_options(rule, None)
        undo_for = functools.partial(self._undo, name, rule) if rule.compensate is not None else None
        wrapped = SagaTool(self._client, ToolSpec(name, options), undo_for)
        self._tools[name] = wrapped
        return wrapped

    def _undo(self, name: str, rule: ToolRule, arguments: dict[str, Any]) -> Factory:
        """The undo factory of one call (StepRefused when its ``$args`` do not resolve in ``arguments``)."""
        server, client = self._server, self._client
        undo = self._policy.undo(name, rule, arguments, server)

        def build(result: Any) -> Compensation | None:
            comp = undo(None if result is None else result_as_wire(result))
            if server is not None or comp is None or comp.handler != CALL_TOOL_HANDLER:
                return comp  # with a server name, recorded as mcp.call_tool: the daemon can run it later
            # An error result from the undo is a failed attempt, as for any step's forward.
            call_undo = functools.partial(_call_step, client, comp.kwargs["tool"], dict(comp.kwargs["arguments"]), {})
            return Compensation(fn=call_undo, description=comp.description)

        return build

    async def call_tool(self, name: str, arguments: Mapping[str, Any] | None = None, **kwargs: Any) -> Any:
        wrapped = self.tool(name)
        if wrapped is not None:
            return await wrapped(arguments, **kwargs)
        saga = current_saga()
        if saga is not None and self._policy.enforce:
            refused = ToolNotClassified(name, ORIGIN)
            saga.refuse(name, dict(arguments or {}), refused, origin=ORIGIN)  # on record, like the proxy's
            raise refused
        return await _call(self._client, name, arguments, **kwargs)


def wrap_session(
    client: Any,
    policy: McpPolicy | ToolPolicy | Mapping[str, Any] | str | os.PathLike[str],
    *,
    server: str | None = None,
) -> SagaSession:
    """The client, with ``call_tool`` run as saga steps according to a tool policy.

    ``compensate.tool`` entries call the compensating tool through this same client. Pass
    ``server=`` (the server's name in the recovery host's ``/etc/agent-saga/mcp-servers.json``,
    see :mod:`agent_saga_mcp.servers`) to record them as the ``mcp.call_tool`` handler
    instead, which the recovery daemon can run after a crash; while the client is open,
    such undos still go through it.
    """
    _check_client(client, "wrap_session")
    if server is not None and not valid_name(server):
        raise PolicyError(
            f"wrap_session(server=...) takes the server's name in {servers_path()} (1-64 letters, digits, "
            f"'.', '_', '-'), got {server!r}: the log names servers, never the command that starts them"
        )
    loaded = policy if isinstance(policy, McpPolicy) else McpPolicy.load(policy)
    session = SagaSession(client, loaded, server)
    if server is not None:
        async def route(tool: str, arguments: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
            return result_as_wire(await _call(client, tool, arguments))

        try:
            add_route(server, route)
        except RuntimeError as err:  # no running loop
            raise PolicyError("wrap_session(server=...) must be called inside the event loop that uses the client") \
                from err
    return session
