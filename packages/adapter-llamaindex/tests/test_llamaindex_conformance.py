"""The shared adapter promises, checked through LlamaIndex's real FunctionAgent workflow."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from agent_saga_llamaindex import saga_run
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ToolCallBlock
from llama_index.core.llms import ChatMessage, MessageRole
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool

from agent_saga.log.file import FileWAL
from agent_saga.testing import AdapterConformance, Call

# llama-index-workflows walks the agent with inspect.getmembers(), which touches pydantic's
# deprecated __fields__ / model_fields accessors. That is the framework's warning, not ours.
pytestmark = [
    pytest.mark.filterwarnings("ignore:The `__fields__` attribute is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:The `__fields_set__` attribute is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:Accessing the 'model_.*' attribute on the instance is deprecated:DeprecationWarning"),
]


def scripted(calls: list[Call], *, together: bool = False) -> MockFunctionCallingLLM:
    """One tool call per turn (the turn is how many tool results the model has seen), or all in the first."""

    def respond(messages: list[ChatMessage], **_: Any) -> ChatMessage:
        turn = sum(1 for m in messages if m.role == MessageRole.TOOL)
        if turn >= len(calls):
            return ChatMessage(role=MessageRole.ASSISTANT, content="done")
        asked = list(enumerate(calls)) if together else [(turn, calls[turn])]
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=[
            ToolCallBlock(tool_call_id=f"call_{i}", tool_name=call.tool, tool_kwargs=call.args) for i, call in asked])

    return MockFunctionCallingLLM(response_generator=respond)


class TestLlamaIndexConformance(AdapterConformance):
    framework = "llamaindex"
    error_modes = (True,)  # FunctionAgent always hands a tool exception to the model as is_error output
    # The workflow's call_tool step takes one event per call of a response, on several workers
    # (a sync tool on an executor thread), and the model is asked again once all have answered.
    parallel = "threads"

    def make_tool(self, fn: Callable[..., Any]) -> FunctionTool:
        if asyncio.iscoroutinefunction(fn):
            return FunctionTool.from_defaults(async_fn=fn)
        return FunctionTool.from_defaults(fn)

    def shape(self, tool: Any) -> tuple[str, str, Any]:
        md = tool.metadata
        return md.name, md.description, md.get_parameters_dict()

    def _agent(self, tools: list[Any], calls: list[Call], together: bool = False) -> FunctionAgent:
        return FunctionAgent(tools=tools, llm=scripted(calls, together=together))

    def run(
        self, tools: list[Any], calls: list[Call], *, wal: FileWAL, errors_as_results: bool | None = None, **saga: Any
    ) -> Any:
        return asyncio.run(saga_run(self._agent(tools, calls), user_msg="go", wal=wal, **saga))

    def run_parallel(
        self, tools: list[Any], calls: list[Call], *, wal: FileWAL, errors_as_results: bool | None = None, **saga: Any
    ) -> Any:
        return asyncio.run(saga_run(self._agent(tools, calls, together=True), user_msg="go", wal=wal, **saga))

    def run_parallel_async(self, tools: list[Any], calls: list[Call], *, wal: FileWAL, **saga: Any) -> Any:
        return saga_run(self._agent(tools, calls, together=True), user_msg="go", wal=wal, **saga)

    def run_plain(self, tools: list[Any], calls: list[Call]) -> Any:
        async def main() -> Any:
            return await self._agent(tools, calls).run(user_msg="go")

        return asyncio.run(main())

    def tool_results(self, result: Any) -> list[str] | None:
        return [str(c.tool_output.content) for c in result.tool_calls]
