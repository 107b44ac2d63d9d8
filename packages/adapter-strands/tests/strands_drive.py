"""Drive Strands' real agent loop offline: a ``strands.models.Model`` subclass streams scripted tool calls."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterable, Sequence
from typing import Any

from strands import Agent
from strands.models import Model

__all__ = ["ScriptedModel", "agent", "tool_results"]

Call = tuple[str, dict[str, Any]]


class ScriptedModel(Model):
    """One tool call per turn, in order, then the text "done" (no network, no AWS).

    A turn given as a list of calls asks for all of them in one response.
    """

    def __init__(self, calls: Sequence[Call | list[Call]]) -> None:
        self.pending = list(calls)
        self.turn = 0

    def update_config(self, **model_config: Any) -> None:
        pass

    def get_config(self) -> Any:
        return {}

    def structured_output(self, output_model: Any, prompt: Any, system_prompt: str | None = None,
                          **kwargs: Any) -> AsyncGenerator[dict[str, Any], None]:
        raise NotImplementedError

    async def stream(self, messages: Any, tool_specs: Any = None, system_prompt: str | None = None,
                     **kwargs: Any) -> AsyncIterable[Any]:
        self.turn += 1
        yield {"messageStart": {"role": "assistant"}}
        if self.pending:
            turn = self.pending.pop(0)
            for i, (name, args) in enumerate(turn if isinstance(turn, list) else [turn]):
                use = {"toolUseId": f"call_{self.turn}_{i}", "name": name}
                yield {"contentBlockStart": {"start": {"toolUse": use}}}
                yield {"contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps(args)}}}}
                yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": "tool_use"}}
        else:
            yield {"contentBlockStart": {"start": {}}}
            yield {"contentBlockDelta": {"delta": {"text": "done"}}}
            yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": "end_turn"}}


def agent(tools: Sequence[Any], calls: Sequence[Call | list[Call]], **options: Any) -> Agent:
    """An agent with ``tools`` whose model makes ``calls``; quiet (no printing callback)."""
    return Agent(model=ScriptedModel(calls), tools=list(tools), callback_handler=None, **options)


def tool_results(worker: Agent) -> list[str]:
    """What the model was given back for its calls, error results included."""
    return [
        "".join(c.get("text", "") for c in block["toolResult"]["content"])
        for message in worker.messages for block in message["content"] if "toolResult" in block
    ]
