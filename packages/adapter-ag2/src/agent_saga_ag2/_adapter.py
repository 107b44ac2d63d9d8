"""AG2 tools as saga steps, a chat as one saga.

``wrap_tool`` returns a copy of an ``autogen.tools.Tool`` whose function is the step (register
the copy). ``patch_all()`` replaces the ``Tool.func`` property: a tool registered for
execution from then on is classified by the tool policy. When a Speculator is attached to the
saga a run helper starts in, the chat's two agents name each reply's tool calls to it
(:class:`PlannedCalls`, AG2's ``process_message_before_send`` hook) before the recipient runs them.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from autogen import ConversableAgent
from autogen.tools import Tool
from autogen.tools.dependency_injection import ChatContext

from agent_saga import SagaOptions
from agent_saga.adapter import Adapter, ToolSpec, signature_of, split_saga_options
from agent_saga_ag2 import _compat

__all__ = ["AG2", "PlannedCalls", "adapter", "saga_run", "saga_run_sync"]


class AG2(Adapter):
    framework = "ag2"
    distribution = "agent-saga-ag2"
    tool_types = (Tool,)
    hint = "make one with autogen.tools.Tool(func_or_tool=fn) or @autogen.tools.tool()"

    def function_of(self, tool: Any) -> Callable[..., Any]:
        return _compat.function_of(tool)

    def framework_params(self, fn: Callable[..., Any]) -> list[str]:
        signature = signature_of(fn)
        return [] if signature is None else [p.name for p in signature.parameters.values() if p.annotation is ChatContext]

    def wrap_with_spec(self, tool: Any, spec: ToolSpec) -> Any:
        stepped = self.step(spec, _compat.named_context(tool))
        stepped.__signature__ = inspect.signature(self.function_of(tool))  # type: ignore[attr-defined]  # AG2's schema
        return _compat.with_function(tool, stepped)

    def patch(self) -> None:
        self.patches.apply(Tool, "func", lambda original: property(lambda tool: self._policed(tool, original.fget(tool))))

    def _policed(self, tool: Tool, fn: Callable[..., Any]) -> Callable[..., Any]:
        fn = getattr(fn, self.POLICED_ATTR, fn)  # Tool(func_or_tool=tool, name=...) copied a policed function
        return self.policed_by_keyword(tool, fn, _compat.context_params(tool))  # AG2 passes every argument by keyword


adapter = AG2()

HOOK = "process_message_before_send"


class PlannedCalls:
    """AG2's ``process_message_before_send`` hook: a reply's tool calls, named to the saga's Speculator.

    An agent runs its hooks on each message it sends, after composing it and before the
    recipient receives it (and so before the recipient executes its tool calls): the calls go
    to :meth:`Adapter.planned <agent_saga.adapter.Adapter.planned>` (the model's JSON arguments
    as they are), so the REVERSIBLE ones run ahead. The message is returned as it came. The
    run helpers register it on the chat's two agents, after the caller's own hooks, when a
    Speculator is attached; a chat run another way can be given it with
    ``agent.register_hook("process_message_before_send", PlannedCalls())``.
    """

    def __call__(self, sender: Any, message: Any, recipient: Any, silent: Any) -> Any:
        if isinstance(message, Mapping):
            adapter.planned(_calls(message))
        return message


def _calls(message: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    """The ``(name, arguments)`` of a message's ``tool_calls`` (and of a legacy ``function_call``)."""
    calls = message.get("tool_calls") or []
    functions = [c.get("function") for c in calls if isinstance(c, Mapping)] if isinstance(calls, list) else []
    functions.append(message.get("function_call"))
    for function in functions:
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            yield function["name"], function.get("arguments")


@contextlib.contextmanager
def _planning(*agents: ConversableAgent) -> Iterator[None]:
    """:class:`PlannedCalls` on each agent's hooks for the run when the saga has a Speculator.

    Nothing is touched when none is attached, nor an agent that already has one; the hooks
    this added are removed when the run ends, so the agents are left as they were given.
    """
    if not adapter.speculating():
        yield
        return
    added: list[tuple[ConversableAgent, PlannedCalls]] = []
    try:
        for i, agent in enumerate(agents):
            if any(agent is other for other in agents[:i]):
                continue  # an agent chatting with itself is hooked once
            if any(isinstance(hook, PlannedCalls) for hook in _compat.hooks(agent, HOOK)):
                continue
            hook = PlannedCalls()
            agent.register_hook(HOOK, hook)
            added.append((agent, hook))
        yield
    finally:
        for agent, hook in added:
            _compat.unregister_hook(agent, HOOK, hook)


def saga_run_sync(
    sender: ConversableAgent, recipient: ConversableAgent, message: Any, *, options: SagaOptions | None = None, **chat: Any,
) -> Any:
    """``sender.initiate_chat(recipient, message=message, **chat)`` as one transaction.

    AG2 answers the model with a failed tool's error and goes on; the helper then fails the
    chat (``ToolFailed``), undoing everything newest-first. Inside an open saga it joins it; a
    Speculator attached to that saga is told each reply's tool calls (:class:`PlannedCalls`).
    """
    saga, chat = split_saga_options(chat)
    with adapter.boundary(options=options, **saga), _planning(sender, recipient):
        return sender.initiate_chat(recipient, message=message, **chat)


async def saga_run(
    sender: ConversableAgent, recipient: ConversableAgent, message: Any, *, options: SagaOptions | None = None, **chat: Any,
) -> Any:
    """The awaiting form (``sender.a_initiate_chat``)."""
    saga, chat = split_saga_options(chat)
    async with adapter.boundary(options=options, **saga):
        with _planning(sender, recipient):
            return await sender.a_initiate_chat(recipient, message=message, **chat)
