"""The Pydantic AI decision driver, through Pydantic AI's own test models; OpenRouter on a local server.

No network: ``FunctionModel`` answers as a test writes, ``TestModel`` as Pydantic AI
generates, and the OpenRouter configurations speak the real Chat Completions protocol
(the openai SDK, and Pydantic AI's OpenRouter provider) to ``ChatServer`` on 127.0.0.1.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from agent_saga_temporal import (
    OPENROUTER_BASE_URL,
    ModelDriver,
    Proposal,
    PydanticAIDriver,
    Situation,
    saga_worker,
)
from agent_saga_temporal.examples.ecommerce.provider import Provider
from agent_saga_temporal.examples.ecommerce.run import checkout_job
from agent_saga_temporal.model import ProposalRecord, allowed_options
from conftest import kinds, open_order, start
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from temporalio.client import Client

from agent_saga import ConfigurationError
from agent_saga.testing import ChatServer, Reply

OPTIONS = allowed_options(checkout_job(), ["reserve_inventory"])
KEY = "sk-or-test-Jq2f8"


def situation(turn: int = 2) -> Situation:
    refused = [ProposalRecord(1, "schedule_fulfillment", {}, 0.9, "", False, "not_allowed", "not offered")]
    return Situation("wf-1", turn, "sell", {"order_id": "o-1"}, ["reserve_inventory"], OPTIONS, refused)


def answering(*picks: dict[str, Any], seen: list[tuple[AgentInfo, list[ModelMessage]]] | None = None,
              ) -> FunctionModel:
    """A model that answers each request with the next pick, through Pydantic AI's output tool."""
    answers = iter(picks)

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if seen is not None:
            seen.append((info, list(messages)))
        pick = next(answers)
        if "text" in pick:
            return ModelResponse(parts=[TextPart(pick["text"])])
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, pick)])

    return FunctionModel(respond)


async def test_the_model_names_an_option_and_the_proposal_carries_its_offered_arguments() -> None:
    seen: list[tuple[AgentInfo, list[ModelMessage]]] = []
    driver = PydanticAIDriver(answering({"choice": "charge_payment", "confidence": 0.7, "reason": "next"}, seen=seen))
    proposal = await driver.decide(situation())
    assert proposal == Proposal("charge_payment", OPTIONS[0].args, 0.7, "next")

    ((info, messages),) = seen
    # The output form asks for a name, a confidence and a reason: no arguments to write.
    (form,) = info.output_tools
    assert set(form.parameters_json_schema["properties"]) == {"choice", "confidence", "reason"}
    assert info.instructions is not None and "Choose 'verify_order' when the goal is reached" in info.instructions
    (request,) = [m for m in messages if isinstance(m, ModelRequest)]
    (prompt,) = [p for p in request.parts if isinstance(p, UserPromptPart)]
    shown = json.loads(str(prompt.content))
    assert [o["name"] for o in shown["options"]] == ["charge_payment", "verify_order"]
    assert shown["options"][0]["arguments"] == {"order_id": "order-1001", "amount_cents": 4200, "customer": "cust-7"}
    assert shown["refused_before"] == [{"choice": "schedule_fulfillment", "why": "not offered"}]


async def test_a_name_not_offered_keeps_no_arguments_and_is_left_to_the_workflow_to_refuse() -> None:
    driver = PydanticAIDriver(answering({"choice": "refund_everything", "confidence": 1.0}))
    assert await driver.decide(situation()) == Proposal("refund_everything", {}, 1.0, "")


async def test_an_answer_that_never_fits_the_form_is_a_proposal_that_will_be_refused() -> None:
    # Prose, then a confidence that is not a number: Pydantic AI asks again once (retries=1), then gives up.
    driver = PydanticAIDriver(answering({"text": "sure, charge it"}, {"choice": "x", "confidence": "very"},
                                        {"choice": "x", "confidence": "very"}))
    proposal = await driver.decide(situation())
    assert proposal.choice == "<unreadable>" and proposal.confidence == 0.0 and proposal.args == {}
    assert all(o.choice != proposal.choice for o in OPTIONS)


async def test_pydantic_ais_test_model_drives_it() -> None:
    model = TestModel(custom_output_args={"choice": "verify_order", "confidence": 0.95, "reason": "all done"})
    assert await PydanticAIDriver(model).decide(situation()) == Proposal("verify_order", {}, 0.95, "all done")


def test_a_driver_needs_a_model() -> None:
    with pytest.raises(ConfigurationError, match="PydanticAIDriver needs a model"):
        PydanticAIDriver(None)


async def test_a_checkout_decided_by_a_pydantic_ai_agent_on_the_real_workflow(
    provider: Provider, temporal_address: str
) -> None:
    order_id = open_order(provider)
    turns: list[tuple[AgentInfo, list[ModelMessage]]] = []
    model = answering(*({"choice": c, "confidence": 0.9, "reason": "next"} for c in [
        "charge_payment",  # not offered yet: refused, recorded, and shown to the model on its next turn
        "reserve_inventory", "charge_payment", "schedule_fulfillment", "verify_order",
    ]), seen=turns)
    client = await Client.connect(temporal_address)
    queue = f"test-{uuid.uuid4().hex}"
    async with saga_worker(client, driver=PydanticAIDriver(model), task_queue=queue):
        report = await (await start(client, queue, order_id)).result()

    assert report.status == "succeeded_verified"
    assert [(p.choice, p.accepted) for p in report.proposals] == [
        ("charge_payment", False), ("reserve_inventory", True), ("charge_payment", True),
        ("schedule_fulfillment", True), ("verify_order", True),
    ]
    assert kinds(provider, order_id) == ["create reservation", "create charge", "create shipment"]
    second = json.loads(str(next(p for p in turns[1][1][0].parts if isinstance(p, UserPromptPart)).content))
    assert [r["choice"] for r in second["refused_before"]] == ["charge_payment"]


# -- OpenRouter: a base URL and a model name ----------------------------------------------------


def picked(choice: str) -> Reply:
    return Reply(text=json.dumps({"choice": choice, "confidence": 0.8, "reason": "via openrouter"}))


async def test_model_driver_on_openrouter_is_a_base_url_a_key_and_a_model_name() -> None:
    with ChatServer({"openai/gpt-4.1-mini": [picked("charge_payment")]}, api_key=KEY) as server:
        driver = ModelDriver.openrouter("openai/gpt-4.1-mini", api_key=KEY, base_url=server.base_url,
                                        app_url="https://example.com/shop", app_title="checkout")
        proposal = await driver.decide(situation())
    assert proposal == Proposal("charge_payment", OPTIONS[0].args, 0.8, "via openrouter")
    (sent,) = server.received
    assert sent.path == "/v1/chat/completions"
    assert sent.body["model"] == "openai/gpt-4.1-mini" and sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.headers["http-referer"] == "https://example.com/shop" and sent.headers["x-title"] == "checkout"
    assert sent.body["messages"] == driver.messages(situation())
    assert OPENROUTER_BASE_URL == "https://openrouter.ai/api/v1"


async def test_model_driver_on_openrouter_reads_the_key_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENROUTER_API_KEY", KEY)
    with ChatServer({"m": [picked("verify_order")]}, api_key=KEY) as server:
        proposal = await ModelDriver.openrouter("m", base_url=server.base_url).decide(situation())
    assert proposal.choice == "verify_order"
    monkeypatch.delenv("OPENROUTER_API_KEY")
    with pytest.raises(ConfigurationError, match="set OPENROUTER_API_KEY or pass api_key="):
        ModelDriver.openrouter("m")


async def test_pydantic_ai_through_its_openrouter_provider() -> None:
    from openai import AsyncOpenAI
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openrouter import OpenRouterProvider

    # The model answers through Pydantic AI's output tool, as a tool call over the wire.
    answer = Reply(tool_calls=[("final_result", {"choice": "charge_payment", "confidence": 0.6, "reason": "r"})])
    with ChatServer({"anthropic/claude-sonnet-4": [answer]}, api_key=KEY) as server:
        provider = OpenRouterProvider(openai_client=AsyncOpenAI(base_url=server.base_url, api_key=KEY))
        driver = PydanticAIDriver(OpenAIChatModel("anthropic/claude-sonnet-4", provider=provider))
        proposal = await driver.decide(situation())
    assert proposal == Proposal("charge_payment", OPTIONS[0].args, 0.6, "r")
    (sent,) = server.received
    assert sent.body["model"] == "anthropic/claude-sonnet-4"
    assert [t["function"]["name"] for t in sent.body["tools"]] == ["final_result"]
