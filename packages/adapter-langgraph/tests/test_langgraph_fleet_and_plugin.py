"""SagaFleet with LangGraph's real loop, and the pluggy wrap_tool hook."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langchain_core.tools import StructuredTool
from langgraph_drive import agent_graph, script

from agent_saga import FileWAL, SagaAborted, SagaFleet, StepOptions, compensator
from agent_saga.plugins.manager import plugins

DONE: list[str] = []


@compensator("lg_fleet.release")
def release(reservation_id: str) -> None:
    DONE.append(f"release {reservation_id}")


@compensator("lg_fleet.unpublish")
def unpublish(doc_id: str) -> None:
    DONE.append(f"unpublish {doc_id}")


async def reserve_budget(amount: int) -> dict[str, Any]:
    """Reserve research budget."""
    DONE.append(f"reserve {amount}")
    return {"reservation_id": "res_1"}


def publish_draft(title: str) -> dict[str, Any]:
    """Publish the draft."""
    DONE.append(f"publish {title} on {threading.current_thread().name}")
    return {"doc_id": "doc_1"}


def notify(channel: str) -> str:
    """Notify reviewers."""
    raise ConnectionError("notification service unreachable")


def test_the_fleet_snippet_through_a_real_langgraph_run(tmp_path: Path) -> None:
    DONE.clear()
    fleet = SagaFleet("content-pipeline")
    reserve = fleet.register(reserve_budget, framework="crewai", name="research.reserve",
                             semantics="COMPENSABLE", compensate=release)
    publish = fleet.register(publish_draft, framework="langgraph", name="writer.publish",
                             semantics="COMPENSABLE", compensate=unpublish)
    fleet.assert_fully_covered(["research.reserve", "writer.publish"])  # CI gate
    # The registered callables go into LangGraph as ordinary tools (same name and schema).
    tools = [StructuredTool.from_function(publish), StructuredTool.from_function(notify)]
    assert tools[0].name == "publish_draft"
    graph = agent_graph(script([("publish_draft", {"title": "Q3"}), ("notify", {"channel": "ops"})]), tools)
    wal = FileWAL(tmp_path / "fleet.wal")

    async def main() -> None:
        async with fleet.transaction(wal=wal):
            await reserve(amount=5000)
            await graph.ainvoke({"messages": [HumanMessage("write it up")]})

    with pytest.raises(SagaAborted) as caught:
        asyncio.run(main())
    assert DONE[0] == "reserve 5000"
    assert DONE[1].startswith("publish Q3 on ")
    assert DONE[2:] == ["unpublish doc_1", "release res_1"]
    assert [s.tool for s in caught.value.report.compensated] == ["writer.publish", "research.reserve"]
    assert len({r["saga"] for r in wal.records()}) == 1
    wal.close()


def test_the_wrap_tool_hook_answers_for_its_own_tool_type_only() -> None:
    from agent_saga_langgraph import adapter

    plugins().register(adapter, "langgraph")
    tool = StructuredTool.from_function(publish_draft)
    options = StepOptions("REVERSIBLE")
    wrapped = plugins().wrap_tool(tool, options)
    assert type(wrapped) is StructuredTool
    assert wrapped.args_schema is tool.args_schema
    assert adapter.spec_of(wrapped) is not None and adapter.spec_of(wrapped).name == "publish_draft"
    assert plugins().wrap_tool(object(), options) is None
