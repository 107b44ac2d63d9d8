"""Drive AG2's real conversation loop offline: AG2's own ``autogen.testing.TestAgent`` scripts the replies."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from autogen import ConversableAgent
from autogen.testing import TestAgent, ToolCall
from autogen.testing.messages import tools_message
from autogen.tools import Tool

__all__ = ["chat", "pair"]

# A custom model client that is never registered: the agent has an LLM config (so tools
# can be registered for the LLM) and TestAgent replaces its client with scripted replies.
SCRIPTED = {"config_list": [{"model": "scripted", "model_client_cls": "ScriptedReplies"}]}


Register = Callable[[Tool, ConversableAgent, ConversableAgent], None]


def register(tool: Tool, assistant: ConversableAgent, executor: ConversableAgent) -> None:
    tool.register_for_llm(assistant)
    tool.register_for_execution(executor)


@contextmanager
def pair(
    tools: list[Tool], calls: list[tuple[str, dict[str, Any]]], register: Register = register, *,
    together: bool = False,
) -> Iterator[tuple[ConversableAgent, ConversableAgent]]:
    """(executor, assistant): the assistant proposes one tool call per turn (or, ``together``, all
    in one reply), then says "done"."""
    assistant = ConversableAgent("assistant", llm_config=SCRIPTED, human_input_mode="NEVER")
    executor = ConversableAgent("executor", llm_config=False, human_input_mode="NEVER")
    for tool in tools:  # before TestAgent: registering for the LLM rebuilds the agent's client
        register(tool, assistant, executor)
    requests = [ToolCall(name, **args) for name, args in calls]
    replies: list[str | dict[str, Any]] = (
        [tools_message(*requests)] if together else [request.to_message() for request in requests]
    )
    with TestAgent(assistant, [*replies, "done"]):
        yield executor, assistant


def chat(tools: list[Tool], calls: list[tuple[str, dict[str, Any]]], *, sync: bool) -> Any:
    """One chat with no saga of its own: ``initiate_chat``, or ``a_initiate_chat`` on a new loop."""
    with pair(tools, calls) as (executor, assistant):
        if sync:
            return executor.initiate_chat(assistant, message="go", max_turns=len(calls) + 1, silent=True)
        return asyncio.run(executor.a_initiate_chat(assistant, message="go", max_turns=len(calls) + 1, silent=True))
