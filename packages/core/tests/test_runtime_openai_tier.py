"""OpenAICompatibleTier through the real openai SDK, against a local server that speaks Chat Completions.

The server (agent_saga.testing._chat_server) keeps every request, so these tests assert
what the SDK actually sent: the model, the messages (with the cascade's feedback on
escalation), the tools and the Authorization header.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agent_saga import (
    CascadeExhausted,
    MemoryWAL,
    OpenAICompatibleTier,
    cascade,
    saga_scope,
    tools_must_exist,
)
from agent_saga.credentials import CredentialError, credential_ref, set_credential_resolver
from agent_saga.testing import ChatServer, Reply

# A local HTTP server, and the SDK runs `uname -p` for its platform headers: not for the fast lane.
pytestmark = pytest.mark.slow

KEY = "sk-test-Q7mN2pLx9vR4tY8w"
TOOLS = [{"type": "function", "function": {"name": name, "description": name,
                                           "parameters": {"type": "object", "properties": {"to": {"type": "string"}}}}}
         for name in ("send_email", "lookup_customer")]
REQUEST = {"messages": [{"role": "system", "content": "You are the billing agent."},
                        {"role": "user", "content": "email Ann the invoice"}], "tools": TOOLS}


@pytest.fixture
def resolver() -> Iterator[None]:
    set_credential_resolver(lambda name: KEY if name == "llm" else None)
    yield
    set_credential_resolver(None)


def script() -> dict[str, list[Reply]]:
    return {
        "qwen-7b": [Reply(tool_calls=[("send_emial", {"to": "ann@example.com"})], prompt_tokens=100,
                          completion_tokens=10)],
        "gpt-frontier": [Reply(tool_calls=[("send_email", {"to": "ann@example.com"})], prompt_tokens=500,
                               completion_tokens=50)],
    }


async def test_a_ladder_of_openai_tiers_escalates_past_send_emial_with_the_reason_sent(resolver: None) -> None:
    with ChatServer(script(), api_key=KEY) as server:
        small = OpenAICompatibleTier("local-7b", "qwen-7b", base_url=server.base_url, api_key=credential_ref("llm"))
        big = OpenAICompatibleTier("frontier", "gpt-frontier", base_url=server.base_url,
                                   api_key=credential_ref("llm"))
        wal = MemoryWAL()
        async with saga_scope(wal, name="billing"):
            result = await cascade(REQUEST, ladder=[small, big], verify=tools_must_exist(["send_email"]))
        await small.aclose()
        await big.aclose()

    assert (result.host, result.escalations, result.tokens_used) == ("frontier", 1, 660)
    (call,) = result.tool_calls
    assert (call.name, dict(call.arguments), call.raw_arguments) == ("send_email", {"to": "ann@example.com"},
                                                                     '{"to": "ann@example.com"}')
    (first,) = server.requests_for("qwen-7b")
    (second,) = server.requests_for("gpt-frontier")
    for sent in (first, second):
        assert sent.path == "/v1/chat/completions"
        assert sent.headers["authorization"] == f"Bearer {KEY}"
        assert sent.body["tools"] == TOOLS
        assert sent.body["messages"][:2] == REQUEST["messages"]
    assert len(first.body["messages"]) == 2  # the first tier gets the request alone
    feedback = second.body["messages"][2]
    assert feedback["role"] == "user"
    assert "called tool(s) that do not exist: ['send_emial']" in feedback["content"]
    (record,) = [r for r in wal.records() if r["type"] == "CASCADE_RESOLVED"]
    assert [t["tokens"] for t in record["body"]["ladder"]] == [110, 550]
    assert KEY not in repr(list(wal.records()))


async def test_a_tier_the_server_refuses_is_escalated_past_and_the_key_never_shows(resolver: None) -> None:
    with ChatServer(script(), api_key="sk-test-another-key-000") as server:
        tier = OpenAICompatibleTier("local-7b", "qwen-7b", base_url=server.base_url, api_key=credential_ref("llm"),
                                    max_retries=0)
        with pytest.raises(CascadeExhausted) as caught:
            await cascade("hi", ladder=[tier], verify=tools_must_exist(["send_email"]))
        await tier.aclose()
    (attempt,) = caught.value.attempts
    assert attempt.reason.startswith("the tier failed: AuthenticationError: ")
    assert KEY not in caught.value.format_text() and KEY not in str(caught.value)


async def test_a_plain_text_answer_is_text_with_no_tool_calls() -> None:
    with ChatServer({"m": [Reply(text="4200 kPa [s1]", prompt_tokens=3, completion_tokens=4)]}) as server:
        tier = OpenAICompatibleTier("t", "m", base_url=server.base_url)
        answer = await tier.complete("the limit?")
        await tier.aclose()
    assert (answer.text, answer.tool_calls, answer.tokens) == ("4200 kPa [s1]", (), 7)
    assert server.received[0].body["messages"] == [{"role": "user", "content": "the limit?"}]
    assert server.received[0].body["model"] == "m"


def test_api_key_takes_a_credential_reference_never_the_secret() -> None:
    with pytest.raises(CredentialError, match=r"api_key takes credential_ref\('<name>'\), not a value"):
        OpenAICompatibleTier("t", "m", api_key=KEY)  # type: ignore[arg-type]


async def test_an_unresolvable_reference_is_a_configuration_error_not_an_escalation() -> None:
    tier = OpenAICompatibleTier("t", "m", base_url="http://127.0.0.1:9/v1", api_key=credential_ref("nowhere"))
    with pytest.raises(CredentialError, match=r"credential\(s\) \['nowhere'\] but no resolver is set"):
        await cascade("hi", ladder=[tier], verify=tools_must_exist([]))
