"""Strands ``@tool`` functions as saga steps, an agent invocation as one saga.

``wrap_tool`` returns a copy of a ``DecoratedFunctionTool`` (what ``@strands.tool`` makes)
whose function is the step: same class, name, tool spec and input model; the ``ToolContext``
and ``agent`` parameters Strands fills reach the function but not the log. ``patch_all()``
patches ``DecoratedFunctionTool.stream``: each call of a tool not wrapped runs on a copy whose
function is classified by the tool policy.

Strands turns a tool's exception into an error result for the model and the loop goes on; the
step inside the tool still fails, and the run helpers then unwind the run (``ToolFailed``).
When a Speculator is attached to the saga a run helper starts in, the agent's hook
:class:`PlannedCalls` names each model response's tool uses to it before Strands runs them.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import weakref
from collections.abc import AsyncIterator, Callable
from typing import Any

from strands import Agent
from strands.hooks import HookRegistry, MessageAddedEvent
from strands.tools.decorator import DecoratedFunctionTool

from agent_saga import SagaOptions
from agent_saga.adapter import Adapter, ToolSpec, signature_of, split_saga_options
from agent_saga_strands import _compat

__all__ = ["PlannedCalls", "Strands", "adapter", "saga_run", "saga_run_sync"]


class Strands(Adapter):
    framework = "strands"
    distribution = "agent-saga-strands"
    tool_types = (DecoratedFunctionTool,)
    hint = "make one with @strands.tool"

    def function_of(self, tool: Any) -> Callable[..., Any]:
        return _compat.function_of(tool)

    def tool_name(self, tool: Any) -> str:
        return str(tool.tool_name)

    def wrap_with_spec(self, tool: Any, spec: ToolSpec) -> Any:
        if _compat.is_streaming(tool):
            raise TypeError(
                f"tool {tool.tool_name!r} is an async generator (it streams its result): agent-saga-strands "
                "wraps tools that return their result; make the step a function that returns it"
            )
        fn, hidden = _compat.function_of(tool), _compat.context_params(tool)
        # The parameters Strands fills are known from the tool (its @tool(context=...)), not the function.
        spec = dataclasses.replace(spec, signature=signature_of(fn, without=hidden))
        return _compat.with_function(tool, spec.wrap(fn, hidden=hidden))

    def patch(self) -> None:
        self.patches.apply(DecoratedFunctionTool, "stream", self._policed_stream)

    def _policed_stream(self, original: Callable[..., AsyncIterator[Any]]) -> Callable[..., AsyncIterator[Any]]:
        @functools.wraps(original)
        async def stream(tool: Any, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            # A streaming tool's events are the model's to read as they come: it is left alone
            # (docs/ADAPTERS.md, the honest limits).
            policed = tool if self.is_wrapped(tool) or _compat.is_streaming(tool) else self._policed(tool)
            async for event in original(policed, *args, **kwargs):
                yield event

        return stream

    def _policed(self, tool: Any) -> Any:
        fn, hidden = _compat.function_of(tool), _compat.context_params(tool)

        def logged(kwargs: dict[str, Any]) -> dict[str, Any]:  # Strands passes every argument by keyword
            return {k: v for k, v in kwargs.items() if k not in hidden}

        async def policed_async(**kwargs: Any) -> Any:
            return await self.patched_async(tool, lambda: fn(**kwargs), logged(kwargs))

        def policed_sync(**kwargs: Any) -> Any:
            return self.patched_sync(tool, lambda: fn(**kwargs), logged(kwargs))

        policed = policed_async if inspect.iscoroutinefunction(fn) else policed_sync
        return _compat.with_function(tool, functools.update_wrapper(policed, fn))


adapter = Strands()

#: The last message named for each agent: an agent given PlannedCalls twice names each once.
_NAMED: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
#: The agents a run helper gave a PlannedCalls (once each).
_PLANNING: weakref.WeakSet[Any] = weakref.WeakSet()


class PlannedCalls:
    """A Strands hook provider that names each model response's tool uses to the saga's Speculator.

    Strands adds the model's message to the conversation (``MessageAddedEvent``) before it runs
    the tool uses in it: they go to :meth:`Adapter.planned <agent_saga.adapter.Adapter.planned>`,
    so the REVERSIBLE ones run ahead. Strands has no per-invocation hooks: the run helpers add
    one to an agent the first time it runs in a saga with a Speculator attached, and it stays
    (with no Speculator it returns at once). An agent may be built with it,
    ``Agent(..., hooks=[PlannedCalls()])``.
    """

    def register_hooks(self, registry: HookRegistry, **_: Any) -> None:
        # Added after the caller's own: this event's callbacks run in the order they were added.
        registry.add_callback(MessageAddedEvent, self.on_message_added)

    def on_message_added(self, event: MessageAddedEvent) -> None:
        message = event.message
        if message.get("role") != "assistant" or _NAMED.get(event.agent) is message:
            return
        uses = [block["toolUse"] for block in message.get("content", ()) if "toolUse" in block]
        if uses:
            _NAMED[event.agent] = message
            adapter.planned((use["name"], use["input"]) for use in uses)


def _planning(agent: Agent) -> None:
    """Give ``agent`` a :class:`PlannedCalls` (once) when the saga has a Speculator; else leave it as it is."""
    if not adapter.speculating() or agent in _PLANNING:
        return
    _PLANNING.add(agent)
    agent.hooks.add_hook(PlannedCalls())


async def saga_run(
    agent: Agent, prompt: Any = None, *, options: SagaOptions | None = None, **invoke: Any,
) -> Any:
    """``await agent.invoke_async(prompt, **invoke)`` as one transaction.

    Strands hands a tool's exception to the model as an error result and the loop goes on;
    when the invocation returns, the helper fails it (``ToolFailed``) and everything is undone
    newest-first. Inside an open saga the invocation joins it; a Speculator attached to that
    saga is told each model response's tool uses (:class:`PlannedCalls`).
    """
    saga, invoke = split_saga_options(invoke)
    async with adapter.boundary(options=options, **saga):
        _planning(agent)
        return await agent.invoke_async(prompt, **invoke)


def saga_run_sync(
    agent: Agent, prompt: Any = None, *, options: SagaOptions | None = None, **invoke: Any,
) -> Any:
    """The blocking form (``agent(prompt)``, which runs the loop on a thread of its own)."""
    saga, invoke = split_saga_options(invoke)
    with adapter.boundary(options=options, **saga):
        _planning(agent)
        return agent(prompt, **invoke)
