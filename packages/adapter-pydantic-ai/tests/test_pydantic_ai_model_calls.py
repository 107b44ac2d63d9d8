"""Pydantic AI's model requests as saga steps (``wrap_model``), through the real agent loop and a ``FunctionModel``.

The scripted model counts the requests it gets; a ``@durable`` run stopped after its first
agent run is resumed, and the first run's model requests and tool call are served from the log.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_saga_pydantic_ai import SagaModel, saga_run_sync, wrap_model, wrap_tool
from pydantic_ai import Agent, Tool
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from agent_saga import MemoryWAL, SagaAborted, durable, saga_scope
from agent_saga.log.file import read_records
from agent_saga.testing import Lookups, committed_steps, committed_tools, stop_run_if, stopped_then_resumed

STEP = "pydantic_ai.model.request"
KEY = "sk-test-Qw3rTy7uI9oP1aS5"
SEEN = Lookups()


def lookup(city: str) -> str:
    """The weather in a city."""
    return SEEN.lookup(city)


def planner(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Look up the city the prompt names, then name it: the answer follows from the conversation alone."""
    first = messages[0].parts[0]
    city = str(getattr(first, "content", "")).split()[-1]
    SEEN.asked.append(f"{city} turn {sum(m.kind == 'response' for m in messages) + 1}")
    if not any(m.kind == "response" for m in messages):
        # No tool_call_id given: Pydantic AI makes up a fresh one each run, which a served response keeps.
        return ModelResponse(parts=[ToolCallPart("lookup", {"city": city})])
    return ModelResponse(parts=[TextPart(f"{city} it is")])


def _agent() -> Agent[None, str]:
    return Agent(wrap_model(FunctionModel(planner)), instructions="plan",
                 tools=[wrap_tool(Tool(lookup), semantics="REVERSIBLE")])


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    yield
    SEEN.clear()


def _requests(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [step for step in committed_steps(records) if step["tool"] == STEP]


def test_each_model_request_of_a_run_is_a_step_beside_its_tool_call() -> None:
    wal = MemoryWAL()
    result = saga_run_sync(_agent(), "go to oslo", wal=wal, model_settings={"temperature": 0.5, "extra_headers": {"x-key": KEY}})
    assert result.output == "oslo it is" and SEEN.asked == ["oslo turn 1", "oslo turn 2"]
    records = list(wal.records())
    assert committed_tools(records) == [STEP, "lookup", STEP]
    first_step = _requests(records)[0]
    assert (first_step["semantics"], first_step["origin"]) == ("REVERSIBLE", "pydantic_ai")
    assert first_step["result"]["parts"][0]["args"] == {"city": "oslo"}  # the response, as Pydantic AI dumps it
    first = first_step["args"]
    # The request as JSON: the prompt and instructions, the settings less the transport's, the tool definitions.
    assert first["messages"][0]["parts"][0]["content"] == "go to oslo"
    assert first["messages"][0]["instructions"] == "plan"
    assert first["settings"] == {"temperature": 0.5}
    assert [t["name"] for t in first["parameters"]["function_tools"]] == ["lookup"]
    assert KEY not in repr(records)


def test_the_request_leaves_out_what_pydantic_ai_sets_afresh_each_run() -> None:
    """Two runs of the same code record the same requests: no clock reading, no generated run id."""
    runs = []
    for _ in range(2):
        wal = MemoryWAL()
        saga_run_sync(_agent(), "go to oslo", wal=wal)
        runs.append([step["args"] for step in _requests(wal.records())])
    # The second request holds the first response, whose fresh tool_call_id differs per live run: compare the first.
    assert runs[0][0] == runs[1][0]
    assert "timestamp" not in runs[0][0]["messages"][0] and "run_id" not in runs[0][0]["messages"][0]
    assert "timestamp" not in runs[0][0]["messages"][0]["parts"][0]


def test_outside_every_saga_a_request_passes_straight_through() -> None:
    assert _agent().run_sync("go to rome").output == "rome it is"
    assert SEEN.asked == ["rome turn 1", "rome turn 2"] and SEEN.looked_up == ["rome"]


async def test_a_streamed_run_passes_through_unrecorded() -> None:
    """``run_stream`` asks the model through ``request_stream``: the caller's as it arrives, no step (asked again on resume)."""
    wal = MemoryWAL()
    async with saga_scope(wal):
        async with Agent(wrap_model(TestModel(custom_output_text="streamed"))).run_stream("go") as run:
            assert await run.get_output() == "streamed"
    assert committed_tools(list(wal.records())) == []


def test_a_failed_request_is_not_applied_and_the_run_gets_pydantic_ais_own_error() -> None:
    def failing(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise ModelHTTPError(503, "planner", "overloaded")

    wal = MemoryWAL()
    with pytest.raises(SagaAborted) as caught:
        saga_run_sync(Agent(wrap_model(FunctionModel(failing))), "go", wal=wal)
    assert isinstance(caught.value.__cause__, ModelHTTPError)
    # Nothing is in doubt: the rollback is clean, where an UNKNOWN step would leave it unresolved.
    assert caught.value.report.clean
    assert [(r["type"], r["body"].get("tool")) for r in wal.records()][1] == ("STEP_NOT_APPLIED", STEP)


def test_wrap_model_takes_a_saga_model_as_it_is() -> None:
    model = wrap_model(FunctionModel(planner))
    assert isinstance(model, SagaModel) and wrap_model(model) is model


@durable("pydantic_ai.two_runs")
def two_runs(first: str, second: str) -> list[str]:
    out = [_agent().run_sync(first).output]
    stop_run_if(SEEN.stop.get("after_first"))
    out.append(_agent().run_sync(second).output)
    return out


def test_a_resumed_durable_run_is_served_the_first_runs_model_requests_and_its_tool_call(tmp_path: Path) -> None:
    wal = tmp_path / "pai.wal"

    def first_run_only() -> None:
        assert SEEN.asked == ["oslo turn 1", "oslo turn 2"] and SEEN.looked_up == ["oslo"]

    value = stopped_then_resumed(two_runs, "go to oslo", "go to rome", saga_id="pai-1", wal=wal, stop=SEEN.stop,
                                 after_stop=first_run_only)
    assert value == ["oslo it is", "rome it is"]
    # Only the second agent run reached the model and the tool: the first run's were served from the log.
    assert SEEN.asked == ["oslo turn 1", "oslo turn 2", "rome turn 1", "rome turn 2"]
    assert SEEN.looked_up == ["oslo", "rome"]
    records = list(read_records(wal))
    assert records[-1]["type"] == "SAGA_COMPLETED"
    assert committed_tools(records) == [STEP, "lookup", STEP] * 2
