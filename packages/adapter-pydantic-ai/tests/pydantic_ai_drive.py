"""Drive Pydantic AI's real agent loop offline: its own ``FunctionModel`` answers with scripted tool calls."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, RetryPromptPart, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

__all__ = ["agent", "scripted", "tool_results"]


def scripted(calls: Sequence[tuple[str, dict[str, Any]]]) -> FunctionModel:
    """A model that makes one call per turn, in order, then answers "done"."""
    pending = list(calls)

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not pending:
            return ModelResponse(parts=[TextPart("done")])
        name, args = pending.pop(0)
        return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=f"call_{len(messages)}")])

    return FunctionModel(respond)


def agent(tools: Sequence[Any], calls: Sequence[tuple[str, dict[str, Any]]], **options: Any) -> Agent[None, str]:
    """An agent with ``tools`` whose model makes ``calls``."""
    return Agent(scripted(calls), tools=list(tools), **options)


def tool_results(result: Any) -> list[str]:
    """What the model was given back for its calls: tool returns and retry prompts (errors)."""
    shown = []
    for message in result.all_messages():
        for part in getattr(message, "parts", ()):
            if part.part_kind == "tool-return" or isinstance(part, RetryPromptPart):
                shown.append(str(part.model_response() if isinstance(part, RetryPromptPart) else part.content))
    return shown
