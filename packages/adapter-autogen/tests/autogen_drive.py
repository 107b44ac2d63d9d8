"""Drive AutoGen's real agent loop offline: AssistantAgent over a ReplayChatCompletionClient."""

from __future__ import annotations

import json
from typing import Any

from autogen_agentchat.agents import AssistantAgent
from autogen_core import FunctionCall
from autogen_core.models import CreateResult, RequestUsage
from autogen_ext.models.replay import ReplayChatCompletionClient

__all__ = ["MODEL_INFO", "agent", "replay"]

MODEL_INFO: Any = {"function_calling": True, "vision": False, "json_output": False,
                   "family": "unknown", "structured_output": False}


def replay(calls: list[tuple[str, dict[str, Any]]], *, together: bool = False) -> ReplayChatCompletionClient:
    """One function call per model turn, in order (or, ``together``, all in one turn), then a final answer."""
    requests = [FunctionCall(id=f"call_{i}", name=name, arguments=json.dumps(args)) for i, (name, args) in enumerate(calls)]
    turns: list[Any] = [
        CreateResult(content=content, finish_reason="function_calls",
                     usage=RequestUsage(prompt_tokens=0, completion_tokens=0), cached=False)
        for content in ([requests] if together else [[r] for r in requests])
    ]
    turns.append("done")
    return ReplayChatCompletionClient(turns, model_info=MODEL_INFO)


def agent(
    tools: list[Any], calls: list[tuple[str, dict[str, Any]]], *, name: str = "worker", together: bool = False
) -> AssistantAgent:
    """An AssistantAgent that keeps calling tools until the script runs out."""
    return AssistantAgent(name, model_client=replay(calls, together=together), tools=tools, reflect_on_tool_use=True,
                          max_tool_iterations=len(calls) + 1)
