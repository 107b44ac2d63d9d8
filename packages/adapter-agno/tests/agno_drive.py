"""Drive Agno's real agent loop offline: a scripted ``Model`` (Agno's model interface) makes the tool calls."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

from agno.agent import Agent
from agno.models.base import Model
from agno.models.response import ModelResponse
from agno.run.agent import RunOutput

__all__ = ["ScriptedModel", "new_agent", "run", "tool_results"]

Call = tuple[str, dict[str, Any]]


@dataclass
class ScriptedModel(Model):
    """One tool call per model turn, then "done"."""

    id: str = "scripted"
    name: str = "Scripted"
    provider: str = "scripted"
    calls: list[Call | list[Call]] = field(default_factory=list)
    turn: int = 0

    def _next(self) -> ModelResponse:
        turn, self.turn = self.turn, self.turn + 1
        if turn >= len(self.calls):
            return ModelResponse(role="assistant", content="done")
        asked = self.calls[turn]
        calls = [
            {"id": f"call_{turn}_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            for i, (name, args) in enumerate(asked if isinstance(asked, list) else [asked])
        ]
        return ModelResponse(role="assistant", tool_calls=calls)

    def invoke(self, *args: Any, **kwargs: Any) -> ModelResponse:
        return self._next()

    async def ainvoke(self, *args: Any, **kwargs: Any) -> ModelResponse:
        return self._next()

    def invoke_stream(self, *args: Any, **kwargs: Any) -> Iterator[ModelResponse]:
        yield self._next()

    async def ainvoke_stream(self, *args: Any, **kwargs: Any) -> AsyncIterator[ModelResponse]:
        yield self._next()

    def _parse_provider_response(self, response: Any, **kwargs: Any) -> ModelResponse:
        return response  # type: ignore[no-any-return]

    def _parse_provider_response_delta(self, response: Any) -> ModelResponse:
        return response  # type: ignore[no-any-return]


def new_agent(tools: list[Any], calls: list[Call | list[Call]]) -> Agent:
    return Agent(name="assistant", model=ScriptedModel(calls=calls), tools=tools, telemetry=False)


def run(agent: Agent, *, sync: bool) -> RunOutput:
    """One run with no saga of its own: ``agent.run``, or ``agent.arun`` on a new loop."""
    if sync:
        return agent.run("go", stream=False)
    return asyncio.run(agent.arun("go", stream=False))


def tool_results(output: RunOutput) -> list[str]:
    return [str(m.content) for m in output.messages or [] if m.role == "tool"]
