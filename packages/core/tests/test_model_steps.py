"""Issue 41 part 4: model calls are steps. The real openai client against a local Chat Completions server.

``patch_all()`` patches the SDK's ``create`` of chat completions and responses (sync and async);
inside a saga each call is a REVERSIBLE step whose request is its arguments and whose response
is its recorded result. The server (agent_saga.testing.ChatServer) counts what it was asked.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai import NOT_GIVEN, AsyncOpenAI, NotFoundError, OpenAI, omit
from openai.resources.chat.completions import AsyncCompletions, Completions
from openai.resources.responses import AsyncResponses, Responses
from openai.types.chat import ChatCompletion
from openai.types.responses import Response

import agent_saga
from agent_saga import FileWAL, MemoryWAL, OpenAICompatibleTier, SagaAborted, cascade, saga_scope
from agent_saga.credentials import credential_ref, set_credential_resolver
from agent_saga.runtime import Verdict
from agent_saga.testing import ChatServer, Reply, committed_steps

# A local HTTP server, and the SDK runs `uname -p` for its platform headers: not for the fast lane.
pytestmark = pytest.mark.slow

KEY = "sk-test-M4dL9qRt7wZ2xK8p"
HEADER_SECRET = "hdr-secret-5TgB8nJm3Q"
CHAT = "openai.chat.completions.create"
RESPONSES = "openai.responses.create"
ASK = [{"role": "user", "content": "plan the trip"}]


@pytest.fixture
def server() -> Iterator[ChatServer]:
    with ChatServer({"planner": [Reply(text="go to oslo", prompt_tokens=21, completion_tokens=4)],
                     "writer": [Reply(text="booked", prompt_tokens=30, completion_tokens=2)]}) as running:
        yield running


@pytest.fixture
def patched() -> Iterator[agent_saga.PatchReport]:
    report = agent_saga.patch_all({}, only=["openai"])
    yield report
    agent_saga.unpatch_all()


def _client(server: ChatServer) -> OpenAI:
    return OpenAI(base_url=server.base_url, api_key=KEY, max_retries=0)


def test_a_chat_call_inside_a_saga_is_a_reversible_step_recording_the_request_and_the_response(
    server: ChatServer, patched: agent_saga.PatchReport,
) -> None:
    wal = MemoryWAL()
    client = _client(server)
    with saga_scope(wal):
        answer = client.chat.completions.create(model="planner", messages=ASK, temperature=0)
    assert isinstance(answer, ChatCompletion) and answer.choices[0].message.content == "go to oslo"
    assert [r["type"] for r in wal.records()] == ["SAGA_STARTED", "STEP_COMMITTED", "SAGA_COMPLETED"]
    (step,) = committed_steps(wal.records())
    assert (step["tool"], step["semantics"], step["origin"]) == (CHAT, "REVERSIBLE", "openai")
    assert step["args"] == {"messages": ASK, "model": "planner", "temperature": 0}  # the request, as passed
    assert step["result"] == answer.model_dump(mode="json", exclude_unset=True)
    assert len(server.requests_for("planner")) == 1


def test_a_failed_model_call_is_not_applied_and_the_caller_gets_the_sdks_own_error(
    server: ChatServer, patched: agent_saga.PatchReport,
) -> None:
    wal = MemoryWAL()
    with pytest.raises(SagaAborted) as aborted, saga_scope(wal):
        _client(server).chat.completions.create(model="no-such-model", messages=ASK)
    assert isinstance(aborted.value.__cause__, NotFoundError)
    # Nothing is in doubt: the rollback is clean, where an UNKNOWN step would leave it unresolved.
    assert aborted.value.report.clean
    assert [r["type"] for r in wal.records()][1] == "STEP_NOT_APPLIED"


def test_outside_every_saga_the_call_passes_straight_through(server: ChatServer, patched: agent_saga.PatchReport) -> None:
    answer = _client(server).chat.completions.create(model="planner", messages=ASK)
    assert answer.choices[0].message.content == "go to oslo" and len(server.received) == 1


def test_a_responses_call_is_a_step_too(server: ChatServer, patched: agent_saga.PatchReport) -> None:
    wal = MemoryWAL()
    with saga_scope(wal):
        answer = _client(server).responses.create(model="writer", input="confirm R-oslo")
    assert isinstance(answer, Response) and answer.output_text == "booked"
    (step,) = committed_steps(wal.records())
    assert step["tool"] == RESPONSES and step["result"] == answer.model_dump(mode="json", exclude_unset=True)
    assert server.requests_for("writer")[0].path.endswith("/v1/responses")


def test_the_async_client_calls_are_steps(server: ChatServer, patched: agent_saga.PatchReport) -> None:
    wal = MemoryWAL()

    async def run() -> tuple[ChatCompletion, Response]:
        client = AsyncOpenAI(base_url=server.base_url, api_key=KEY, max_retries=0)
        async with saga_scope(wal):
            first = await client.chat.completions.create(model="planner", messages=ASK)
            second = await client.responses.create(model="writer", input="confirm")
        await client.close()
        return first, second

    first, second = asyncio.run(run())
    assert [s["tool"] for s in committed_steps(wal.records())] == [CHAT, RESPONSES]
    assert [s["result"] for s in committed_steps(wal.records())] == [first.model_dump(mode="json", exclude_unset=True),
                                                                  second.model_dump(mode="json", exclude_unset=True)]


def test_the_api_key_and_extra_headers_never_reach_the_log(
    server: ChatServer, patched: agent_saga.PatchReport, tmp_path: Path,
) -> None:
    wal = FileWAL(tmp_path / "models.wal")
    with saga_scope(wal):
        _client(server).chat.completions.create(model="planner", messages=ASK,
                                                extra_headers={"X-Team-Secret": HEADER_SECRET})
    wal.close()
    # The server saw both (so they were sent); the log holds neither, in any record.
    assert server.received[0].headers["authorization"] == f"Bearer {KEY}"
    assert server.received[0].headers["x-team-secret"] == HEADER_SECRET
    raw = (tmp_path / "models.wal").read_bytes()
    assert KEY.encode() not in raw and HEADER_SECRET.encode() not in raw
    assert b"chatcmpl-planner-0" in raw  # the response is there: the bytes read are the log's


def test_a_streamed_call_and_a_raw_response_call_pass_through_with_a_warning(
    server: ChatServer, patched: agent_saga.PatchReport,
) -> None:
    wal = MemoryWAL()
    client = _client(server)
    with saga_scope(wal), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        client.chat.completions.create(model="planner", messages=ASK, stream=True).close()
        raw = client.chat.completions.with_raw_response.create(model="planner", messages=ASK)
    assert raw.parse().choices[0].message.content == "go to oslo"
    said = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(said) == 2 and all(f"{CHAT} is not a saga step here" in s for s in said)
    assert "stream=True" in said[0] and "with_raw_response" in said[1]
    assert committed_steps(wal.records()) == [] and len(server.received) == 2


def test_patching_is_idempotent_and_unpatch_restores_the_sdks_own_methods() -> None:
    originals = [vars(owner)["create"] for owner in (Completions, AsyncCompletions, Responses, AsyncResponses)]
    first = agent_saga.patch_all({}, only=["openai"])
    again = agent_saga.patch_all({}, only=["openai"])
    assert first.patched == again.patched and len(first.patched["openai"]) == 4
    assert vars(Completions)["create"] is not originals[0]
    removed = agent_saga.unpatch_all()
    assert len(removed["openai"]) == 4
    assert [vars(owner)["create"] for owner in (Completions, AsyncCompletions, Responses, AsyncResponses)] == originals


def test_the_cascades_openai_tier_calls_are_steps_once_patched(server: ChatServer, patched: agent_saga.PatchReport) -> None:
    set_credential_resolver(lambda name: KEY if name == "llm" else None)
    wal = MemoryWAL()

    async def run() -> Any:
        tier = OpenAICompatibleTier("planner", "planner", base_url=server.base_url, api_key=credential_ref("llm"))
        async with saga_scope(wal):
            result = await cascade({"messages": ASK}, ladder=[tier], verify=lambda answer: Verdict.accept())
        await tier.aclose()
        return result

    try:
        result = asyncio.run(run())
    finally:
        set_credential_resolver(None)
    assert result.host == "planner"
    (step,) = committed_steps(wal.records())
    assert step["tool"] == CHAT and step["args"]["model"] == "planner" and step["args"]["messages"] == ASK
    assert KEY not in repr(list(wal.records()))


def test_the_logged_request_is_plain_json_and_a_one_shot_iterator_still_reaches_the_sdk(
    server: ChatServer, patched: agent_saga.PatchReport,
) -> None:
    wal = MemoryWAL()
    with saga_scope(wal):
        _client(server).chat.completions.create(model="planner", messages=iter(ASK), temperature=NOT_GIVEN,
                                                top_p=omit, timeout=30)
    assert server.received[0].body["messages"] == ASK  # read by the log and sent whole
    (step,) = committed_steps(wal.records())
    assert step["args"] == {"messages": ASK, "model": "planner"}  # unset values and transport left out


def test_patch_all_without_a_policy_does_not_name_the_sdk_among_frameworks_whose_tools_go_unprotected() -> None:
    with pytest.warns(UserWarning, match=r"^patch_all\(\) without a tool policy: in no framework \(none installed"):
        report = agent_saga.patch_all(only=["openai"])
    agent_saga.unpatch_all()
    assert list(report.patched) == ["openai"]
