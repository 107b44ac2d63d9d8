"""A LangChain chat model's calls as saga steps (``wrap_chat_model``), through LangGraph's real tool-calling loop.

The scripted model answers from the conversation and counts its calls; it binds its tools as
chat models do (``bind(tools=...)``), so the bound tools reach the step. A ``@durable`` run
stopped after its first graph run is resumed, and that run's model calls and tool call are served.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_saga_langgraph import SagaChatModel, saga_run, saga_run_sync, wrap_chat_model, wrap_tool
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph_drive import agent_graph

from agent_saga import MemoryWAL, durable, saga_scope
from agent_saga.log.file import read_records
from agent_saga.testing import Lookups, committed_steps, committed_tools, stop_run_if, stopped_then_resumed

STEP = "langchain.chat_model.generate"
SEEN = Lookups()


class Planner(BaseChatModel):
    """Looks up the city the prompt names, then names it; notes each call it answers."""

    @property
    def _llm_type(self) -> str:
        return "planner-scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Runnable[Any, AIMessage]:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        city = str(messages[0].content).split()[-1]
        turn = sum(isinstance(m, AIMessage) for m in messages) + 1
        SEEN.asked.append(f"{city} turn {turn} tools={[t['function']['name'] for t in kwargs.get('tools', [])]}")
        reply = (AIMessage(content="", tool_calls=[{"name": "lookup", "args": {"city": city}, "id": f"call_{city}"}])
                 if turn == 1 else AIMessage(content=f"{city} it is"))
        return ChatResult(generations=[ChatGeneration(message=reply)])


@tool
def lookup(city: str) -> str:
    """The weather in a city."""
    return SEEN.lookup(city)


def _graph() -> Any:
    tools = [wrap_tool(lookup, semantics="REVERSIBLE")]
    return agent_graph(wrap_chat_model(Planner()).bind_tools(tools), tools)


def _ask(city: str) -> dict[str, Any]:
    return {"messages": [HumanMessage(f"go to {city}")]}


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    yield
    SEEN.clear()


def test_each_model_call_of_a_graph_run_is_a_step_beside_its_tool_call() -> None:
    wal = MemoryWAL()
    out = saga_run_sync(_graph(), _ask("oslo"), wal=wal)
    assert out["messages"][-1].content == "oslo it is"
    assert SEEN.asked == ["oslo turn 1 tools=['lookup']", "oslo turn 2 tools=['lookup']"]  # the bound tools reached it
    steps = committed_steps(list(wal.records()))
    assert [s["tool"] for s in steps] == [STEP, "lookup", STEP]
    first = steps[0]
    assert (first["semantics"], first["origin"]) == ("REVERSIBLE", "langchain")
    assert first["args"]["messages"] == [{"type": "human", "data": {**first["args"]["messages"][0]["data"], "content": "go to oslo"}}]
    assert "id" not in first["args"]["messages"][0]["data"]  # LangGraph's fresh message id is left out
    assert [t["function"]["name"] for t in first["args"]["options"]["tools"]] == ["lookup"]
    assert first["result"]["generations"][0]["message"]["data"]["tool_calls"][0]["args"] == {"city": "oslo"}


async def test_an_async_graph_run_records_its_model_calls_too() -> None:
    wal = MemoryWAL()
    out = await saga_run(_graph(), _ask("rome"), wal=wal)
    assert out["messages"][-1].content == "rome it is"
    assert [s["tool"] for s in committed_steps(list(wal.records()))] == [STEP, "lookup", STEP]


def test_a_graph_streaming_messages_gets_whole_answers_each_a_step() -> None:
    """The wrapper has no ``_stream``: LangChain asks it for whole answers, so a streamed graph's calls are steps too."""
    wal = MemoryWAL()
    with saga_scope(wal):
        chunks = list(_graph().stream(_ask("oslo"), stream_mode="messages"))
    assert [type(message).__name__ for message, _ in chunks] == ["AIMessage", "ToolMessage", "AIMessage"]
    assert committed_tools(list(wal.records())) == [STEP, "lookup", STEP]


def test_outside_every_saga_a_call_passes_straight_through() -> None:
    assert _graph().invoke(_ask("rome"))["messages"][-1].content == "rome it is"
    assert len(SEEN.asked) == 2 and SEEN.looked_up == ["rome"]


def test_wrap_chat_model_takes_a_saga_chat_model_as_it_is() -> None:
    model = wrap_chat_model(Planner())
    assert isinstance(model, SagaChatModel) and wrap_chat_model(model) is model


@durable("langgraph.two_runs")
def two_runs(first: str, second: str) -> list[str]:
    out = [str(_graph().invoke(_ask(first))["messages"][-1].content)]
    stop_run_if(SEEN.stop.get("after_first"))
    out.append(str(_graph().invoke(_ask(second))["messages"][-1].content))
    return out


def test_a_resumed_durable_run_is_served_the_first_graph_runs_model_calls_and_its_tool_call(tmp_path: Path) -> None:
    wal = tmp_path / "lg.wal"

    def first_run_only() -> None:
        assert len(SEEN.asked) == 2 and SEEN.looked_up == ["oslo"]

    value = stopped_then_resumed(two_runs, "oslo", "rome", saga_id="lg-1", wal=wal, stop=SEEN.stop, after_stop=first_run_only)
    assert value == ["oslo it is", "rome it is"]
    # Only the second graph run reached the model and the tool: the first run's were served from the log.
    assert [a.split(" tools")[0] for a in SEEN.asked] == ["oslo turn 1", "oslo turn 2", "rome turn 1", "rome turn 2"]
    assert SEEN.looked_up == ["oslo", "rome"]
    records = list(read_records(wal))
    assert records[-1]["type"] == "SAGA_COMPLETED"
    assert committed_tools(records) == [STEP, "lookup", STEP] * 2
