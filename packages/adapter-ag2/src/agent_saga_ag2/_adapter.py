"""AG2 tools as saga steps, a chat as one saga.

``wrap_tool`` returns a copy of an ``autogen.tools.Tool`` whose function is the step (register
the copy). ``patch_all()`` replaces the ``Tool.func`` property: a tool registered for
execution from then on is classified by the tool policy.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from autogen import ConversableAgent
from autogen.tools import Tool
from autogen.tools.dependency_injection import ChatContext

from agent_saga import SagaOptions
from agent_saga.adapter import Adapter, ToolSpec, signature_of, split_saga_options
from agent_saga_ag2 import _compat

__all__ = ["AG2", "adapter", "saga_run", "saga_run_sync"]


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


def saga_run_sync(
    sender: ConversableAgent, recipient: ConversableAgent, message: Any, *, options: SagaOptions | None = None, **chat: Any,
) -> Any:
    """``sender.initiate_chat(recipient, message=message, **chat)`` as one transaction.

    AG2 answers the model with a failed tool's error and goes on; the helper then fails the
    chat (``ToolFailed``), undoing everything newest-first. Inside an open saga it joins it.
    """
    saga, chat = split_saga_options(chat)
    with adapter.boundary(options=options, **saga):
        return sender.initiate_chat(recipient, message=message, **chat)


async def saga_run(
    sender: ConversableAgent, recipient: ConversableAgent, message: Any, *, options: SagaOptions | None = None, **chat: Any,
) -> Any:
    """The awaiting form (``sender.a_initiate_chat``)."""
    saga, chat = split_saga_options(chat)
    async with adapter.boundary(options=options, **saga):
        return await sender.a_initiate_chat(recipient, message=message, **chat)
