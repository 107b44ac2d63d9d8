"""SagaFleet with LangGraph's real loop, and the pluggy wrap_tool hook."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langchain_core.messages import HumanMessage
from langchain_core.tools import StructuredTool
from langgraph_drive import agent_graph, script

from agent_saga.testing import assert_fleet_undone, assert_wrap_tool_hook, send_confirmation, trip_world


def publish_draft(title: str) -> dict[str, Any]:
    """Publish the draft."""
    return {"doc_id": "doc_1"}


def test_the_fleet_snippet_through_a_real_langgraph_run(tmp_path: Path) -> None:
    def tools_of(publish: Any) -> list[StructuredTool]:  # the registered callable is an ordinary tool
        tools = [StructuredTool.from_function(publish), StructuredTool.from_function(send_confirmation)]
        assert tools[0].name == "publish_draft"
        return tools

    def run(tools: list[StructuredTool], calls: list[Any]) -> Any:
        return agent_graph(script(calls), tools).ainvoke({"messages": [HumanMessage("write it up")]})

    with trip_world():
        assert_fleet_undone("langgraph", tmp_path, tools_of, run)  # a sync tool: on LangChain's executor thread


def test_the_wrap_tool_hook_answers_for_its_own_tool_type_only() -> None:
    tool = StructuredTool.from_function(publish_draft)
    wrapped = assert_wrap_tool_hook("langgraph", tool, "publish_draft")
    assert wrapped.args_schema is tool.args_schema
