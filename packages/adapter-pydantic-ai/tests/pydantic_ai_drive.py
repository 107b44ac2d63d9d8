"""Drive Pydantic AI's real agent loop offline: its own ``FunctionModel`` answers with scripted tool calls."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, RetryPromptPart, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

__all__ = ["agent", "scripted", "tool_results"]


def scripted(calls: Sequence[tuple[str, dict[str, Any]]], *, together: bool = False) -> FunctionModel:
    """A model that makes one call per turn, in order (or, ``together``, all in one response), then answers "done"."""
    pending = list(calls)

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not pending:
            return ModelResponse(parts=[TextPart("done")])
        turn = list(pending) if together else pending[:1]
        del pending[:len(turn)]
        return ModelResponse(parts=[
            ToolCallPart(name, args, tool_call_id=f"call_{len(messages)}_{i}") for i, (name, args) in enumerate(turn)
        ])

    return FunctionModel(respond)


def agent(
    tools: Sequence[Any], calls: Sequence[tuple[str, dict[str, Any]]], *, together: bool = False, **options: Any
) -> Agent[None, str]:
    """An agent with ``tools`` whose model makes ``calls`` (``together``: in one response)."""
    return Agent(scripted(calls, together=together), tools=list(tools), **options)


def tool_results(result: Any) -> list[str]:
    """What the model was given back for its calls: tool returns and retry prompts (errors)."""
    shown = []
    for message in result.all_messages():
        for part in getattr(message, "parts", ()):
            if part.part_kind == "tool-return" or isinstance(part, RetryPromptPart):
                shown.append(str(part.model_response() if isinstance(part, RetryPromptPart) else part.content))
    return shown
