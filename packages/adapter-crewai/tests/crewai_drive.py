"""Drive CrewAI's real agent loop offline: a BaseLLM that makes scripted native tool calls."""

from __future__ import annotations

import json
from typing import Any

from crewai import Agent, Crew, Task
from crewai.llms.base_llm import BaseLLM
from pydantic import Field

__all__ = ["ReActLLM", "ScriptedLLM", "crew", "react_crew"]


class ScriptedLLM(BaseLLM):
    """One tool call per model turn, in order, then a final answer."""

    script: list[tuple[str, dict[str, Any]]] = Field(default_factory=list)
    #: every call in the first turn (several native tool calls in one response)
    together: bool = False
    turn: int = 0

    def supports_function_calling(self) -> bool:
        return True

    def call(self, messages: Any, tools: Any = None, callbacks: Any = None,
             available_functions: Any = None, **kwargs: Any) -> Any:
        self.turn += 1
        calls = list(enumerate(self.script, 1))
        asked = (calls if self.turn == 1 else []) if self.together else calls[self.turn - 1:self.turn]
        if asked:
            return [{"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
                    for i, (name, args) in asked]
        return "done"

    async def acall(self, *args: Any, **kwargs: Any) -> Any:
        return self.call(*args, **kwargs)


def crew(tools: list[Any], calls: list[tuple[str, dict[str, Any]]], *, role: str = "worker",
         tool_failure_policy: str | None = None, together: bool = False) -> Crew:
    """A one-agent, one-task crew whose model makes ``calls`` (``together``: in one response)."""
    agent = Agent(role=role, goal="do the task", backstory="a scripted agent", tools=tools,
                  llm=ScriptedLLM(model="scripted", script=list(calls), together=together), verbose=False)
    task = Task(description="do the task", expected_output="done", agent=agent)
    options: dict[str, Any] = {}
    if tool_failure_policy is not None:
        options["tool_failure_policy"] = tool_failure_policy
    return Crew(agents=[agent], tasks=[task], **options)


class ReActLLM(BaseLLM):
    """The text protocol (no native function calling): CrewAI parses Action / Action Input."""

    script: list[tuple[str, dict[str, Any]]] = Field(default_factory=list)
    turn: int = 0

    def call(self, messages: Any, tools: Any = None, callbacks: Any = None,
             available_functions: Any = None, **kwargs: Any) -> Any:
        self.turn += 1
        if self.turn <= len(self.script):
            name, args = self.script[self.turn - 1]
            return f"Thought: use {name}\nAction: {name}\nAction Input: {json.dumps(args)}"
        return "Thought: I know it.\nFinal Answer: done"

    async def acall(self, *args: Any, **kwargs: Any) -> Any:
        return self.call(*args, **kwargs)


def react_crew(tools: list[Any], calls: list[tuple[str, dict[str, Any]]]) -> Crew:
    """A one-agent crew driven through CrewAI's ReAct text loop."""
    agent = Agent(role="worker", goal="do the task", backstory="a scripted agent", tools=tools,
                  llm=ReActLLM(model="scripted", script=list(calls)), verbose=False)
    return Crew(agents=[agent], tasks=[Task(description="do the task", expected_output="done", agent=agent)])
