"""Drive Semantic Kernel's real agent loop offline: a scripted chat completion service."""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
from collections.abc import Callable
from typing import Any

from pydantic import Field
from semantic_kernel.agents import ChatCompletionAgent
from semantic_kernel.connectors.ai.chat_completion_client_base import ChatCompletionClientBase
from semantic_kernel.connectors.ai.function_choice_behavior import FunctionChoiceBehavior
from semantic_kernel.contents import AuthorRole, ChatMessageContent, FunctionCallContent
from semantic_kernel.functions import KernelFunction, KernelPlugin, kernel_function
from semantic_kernel.functions.kernel_function_from_method import KernelFunctionFromMethod

__all__ = ["PLUGIN", "ScriptedChat", "agent", "kernel_tool"]

PLUGIN = "tools"


class ScriptedChat(ChatCompletionClientBase):
    """Answers each turn with the next scripted message (tool calls, then text)."""

    SUPPORTS_FUNCTION_CALLING = True
    script: list[Any] = Field(default_factory=list)

    async def _inner_get_chat_message_contents(self, chat_history: Any, settings: Any) -> list[Any]:
        return [self.script.pop(0)]


def _turns(calls: list[tuple[str, dict[str, Any]]], together: bool = False) -> list[ChatMessageContent]:
    """One assistant message per call, or (``together``) one carrying every call; then "done"."""
    requests = [
        FunctionCallContent(id=f"call_{i}", function_name=name, plugin_name=PLUGIN, arguments=json.dumps(args))
        for i, (name, args) in enumerate(calls)
    ]
    turns = [ChatMessageContent(role=AuthorRole.ASSISTANT, items=list(items))
             for items in ([requests] if together else [[r] for r in requests])]
    turns.append(ChatMessageContent(role=AuthorRole.ASSISTANT, content="done"))
    return turns


def kernel_tool(fn: Callable[..., Any]) -> KernelFunctionFromMethod:
    """A kernel function over ``fn`` (a fresh callable, so ``fn`` itself is not decorated)."""
    if asyncio.iscoroutinefunction(fn):

        async def method(*args: Any, **kwargs: Any) -> Any:
            return await fn(*args, **kwargs)

    else:

        def method(*args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
            return fn(*args, **kwargs)

    functools.update_wrapper(method, fn)
    decorated = kernel_function(method, name=fn.__name__, description=inspect.getdoc(fn))
    made = KernelFunction.from_method(decorated, plugin_name=PLUGIN)
    assert isinstance(made, KernelFunctionFromMethod)
    return made


def agent(
    functions: list[Any], calls: list[tuple[str, dict[str, Any]]], *, name: str = "worker", together: bool = False
) -> ChatCompletionAgent:
    """A ChatCompletionAgent with auto function calling over one plugin of ``functions``."""
    return ChatCompletionAgent(
        name=name, instructions="use the tools",
        plugins=[KernelPlugin(name=PLUGIN, functions=functions)],
        service=ScriptedChat(ai_model_id="scripted", script=_turns(calls, together)),
        function_choice_behavior=FunctionChoiceBehavior.Auto(),
    )
