"""Google ADK's model turns as saga steps (``wrap_llm``), through ADK's real ``Runner`` and a scripted ``BaseLlm``.

The scripted model answers from the request's contents and counts its turns; a ``@durable`` run
stopped after its first ADK run is resumed, and that run's model turns and tool call are served.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_saga_google_adk import SagaLlm, saga_run_sync, wrap_llm, wrap_tool
from google.adk.agents import Agent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import InMemoryRunner
from google.genai import types
from google_adk_drive import message

from agent_saga import MemoryWAL, durable
from agent_saga.log.file import read_records
from agent_saga.testing import Lookups, committed_steps, committed_tools, stop_run_if, stopped_then_resumed

STEP = "google_adk.generate_content"
SEEN = Lookups()


class Planner(BaseLlm):
    """Looks up the city the user named (giving no call id: ADK makes one up), then names it."""

    model: str = "planner"

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        city = str(llm_request.contents[0].parts[0].text).split()[-1]  # type: ignore[index]
        turn = sum(c.role == "model" for c in llm_request.contents) + 1
        SEEN.asked.append(f"{city} turn {turn}")
        part = (types.Part(function_call=types.FunctionCall(name="lookup", args={"city": city})) if turn == 1
                else types.Part(text=f"{city} it is"))
        yield LlmResponse(content=types.Content(role="model", parts=[part]))


def lookup(city: str) -> str:
    """The weather in a city."""
    return SEEN.lookup(city)


def _runner() -> InMemoryRunner:
    agent = Agent(name="planner", model=wrap_llm(Planner()), instruction="Plan.",
                  tools=[wrap_tool(lookup, semantics="REVERSIBLE")])
    return InMemoryRunner(agent=agent, app_name="saga")


def _run_kwargs(runner: InMemoryRunner) -> dict[str, Any]:
    async def create() -> str:
        return (await runner.session_service.create_session(app_name=runner.app_name, user_id="user")).id

    return {"user_id": "user", "session_id": asyncio.run(create())}


def _final(events: list[Any]) -> str:
    return next(str(p.text) for e in reversed(events) if e.content and e.content.parts for p in e.content.parts if p.text)


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    yield
    SEEN.clear()


def test_each_model_turn_of_a_run_is_a_step_beside_its_tool_call() -> None:
    wal = MemoryWAL()
    runner = _runner()
    events = saga_run_sync(runner, message("go to oslo"), wal=wal, **_run_kwargs(runner))
    assert _final(events) == "oslo it is" and SEEN.asked == ["oslo turn 1", "oslo turn 2"]
    steps = committed_steps(list(wal.records()))
    assert [s["tool"] for s in steps] == [STEP, "lookup", STEP]
    first, second = steps[0], steps[2]
    assert (first["semantics"], first["origin"]) == ("REVERSIBLE", "google_adk")
    assert first["args"]["contents"][0]["parts"][0]["text"] == "go to oslo"
    assert first["result"][0]["content"]["parts"][0]["function_call"]["args"] == {"city": "oslo"}
    # The id ADK made up for the call (adk-..., new every run) is not in the next request: ADK takes it out.
    call = second["args"]["contents"][1]["parts"][0]["function_call"]
    assert call["name"] == "lookup" and "id" not in call


def test_outside_every_saga_a_turn_passes_straight_through() -> None:
    runner = _runner()
    events = list(runner.run(new_message=message("go to rome"), **_run_kwargs(runner)))
    assert _final(events) == "rome it is" and SEEN.asked == ["rome turn 1", "rome turn 2"] and SEEN.looked_up == ["rome"]


def test_wrap_llm_takes_a_saga_llm_as_it_is() -> None:
    model = wrap_llm(Planner())
    assert isinstance(model, SagaLlm) and wrap_llm(model) is model and model.model == "planner"


def _one_run(city: str) -> str:
    runner = _runner()
    return _final(list(runner.run(new_message=message(f"go to {city}"), **_run_kwargs(runner))))


@durable("google_adk.two_runs")
def two_runs(first: str, second: str) -> list[str]:
    out = [_one_run(first)]
    stop_run_if(SEEN.stop.get("after_first"))
    out.append(_one_run(second))
    return out


def test_a_resumed_durable_run_is_served_the_first_runs_model_turns_and_its_tool_call(tmp_path: Path) -> None:
    wal = tmp_path / "adk.wal"

    def first_run_only() -> None:
        assert SEEN.asked == ["oslo turn 1", "oslo turn 2"] and SEEN.looked_up == ["oslo"]

    value = stopped_then_resumed(two_runs, "oslo", "rome", saga_id="adk-1", wal=wal, stop=SEEN.stop, after_stop=first_run_only)
    assert value == ["oslo it is", "rome it is"]
    # Only the second ADK run reached the model and the tool: the first run's were served from the log.
    assert SEEN.asked == ["oslo turn 1", "oslo turn 2", "rome turn 1", "rome turn 2"]
    assert SEEN.looked_up == ["oslo", "rome"]
    records = list(read_records(wal))
    assert records[-1]["type"] == "SAGA_COMPLETED"
    assert committed_tools(records) == [STEP, "lookup", STEP] * 2
