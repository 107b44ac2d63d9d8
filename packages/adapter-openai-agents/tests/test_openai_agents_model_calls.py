"""The OpenAI Agents SDK's own models call the patched OpenAI SDK: each model call of a run is a step.

``OpenAIChatCompletionsModel`` and ``OpenAIResponsesModel`` call ``AsyncOpenAI``'s
``chat.completions.create`` / ``responses.create``, which ``patch_all()`` makes saga steps
(agent_saga.runtime._model_steps). Here the real Runner asks a local Chat Completions server
(agent_saga.testing.ChatServer, which counts requests) and runs a wrapped function tool; a
``@durable`` run stopped after its first Runner run is resumed without asking the model again.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_saga_openai_agents import saga_run, wrap_tool
from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

import agent_saga
from agent_saga import MemoryWAL, durable
from agent_saga.log.file import read_records
from agent_saga.testing import ChatServer, Lookups, Reply, committed_tools, stop_run_if, stopped_then_resumed

set_tracing_disabled(True)

KEY = "sk-test-A6gF1hJk8lP3oI9u"
CHAT = "openai.chat.completions.create"
RESPONSES = "openai.responses.create"
SEEN = Lookups()


def lookup(city: str) -> str:
    """The weather in a city."""
    return SEEN.lookup(city)


def _agent(base_url: str, api: str) -> Agent[Any]:
    client = AsyncOpenAI(base_url=base_url, api_key=KEY, max_retries=0)
    kind = OpenAIResponsesModel if api == "responses" else OpenAIChatCompletionsModel
    return Agent(name="planner", instructions="plan", model=kind(model="planner", openai_client=client),
                 tools=[wrap_tool(function_tool(lookup), semantics="REVERSIBLE")])


@pytest.fixture
def server() -> Iterator[ChatServer]:
    script = [Reply(tool_calls=[("lookup", {"city": "oslo"})]), Reply(text="oslo it is"),
              Reply(tool_calls=[("lookup", {"city": "rome"})]), Reply(text="rome it is")]
    with ChatServer({"planner": script}, api_key=KEY) as running:
        yield running


@pytest.fixture(autouse=True)
def patched() -> Iterator[None]:
    agent_saga.patch_all({}, only=["openai"])
    yield
    agent_saga.unpatch_all()
    SEEN.clear()


@pytest.mark.parametrize(("api", "step"), [("chat", CHAT), ("responses", RESPONSES)])
async def test_each_model_call_of_a_runner_run_is_a_step_beside_its_tool_call(
    server: ChatServer, api: str, step: str,
) -> None:
    wal = MemoryWAL()
    result = await saga_run(_agent(server.base_url, api), "where to?", wal=wal)
    assert result.final_output == "oslo it is" and SEEN.looked_up == ["oslo"]
    assert committed_tools(wal.records()) == [step, "lookup", step]
    path = "/v1/responses" if api == "responses" else "/v1/chat/completions"
    assert [r.path for r in server.received] == [path, path]


@durable("openai_agents.two_runs")
async def two_runs(base_url: str, api: str) -> list[Any]:
    first = await saga_run(_agent(base_url, api), "where to?")
    stop_run_if(SEEN.stop.get("after_first"))
    second = await saga_run(_agent(base_url, api), "and then?")
    return [first.final_output, second.final_output]


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_a_resumed_durable_run_is_served_the_first_runs_model_calls_and_its_tool_call(
    server: ChatServer, tmp_path: Path, api: str,
) -> None:
    wal = tmp_path / "agents.wal"

    def first_run_only() -> None:
        assert len(server.received) == 2 and SEEN.looked_up == ["oslo"]

    value = stopped_then_resumed(two_runs, server.base_url, api, saga_id="oa-1", wal=wal, stop=SEEN.stop,
                                 after_stop=first_run_only)
    assert value == ["oslo it is", "rome it is"]
    # Only the second Runner run reached the server and the tool: the first was served from the log.
    assert len(server.received) == 4 and SEEN.looked_up == ["oslo", "rome"]
    records = list(read_records(wal))
    assert records[-1]["type"] == "SAGA_COMPLETED"
    assert KEY.encode() not in wal.read_bytes()
