"""The decision drivers: what they show the agent, and how an answer becomes a proposal."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
from agent_saga_temporal import FINISH, ModelDriver, Proposal, ScriptedDriver, Situation, saga_worker
from agent_saga_temporal.examples.ecommerce.provider import Provider
from agent_saga_temporal.examples.ecommerce.run import checkout_job
from agent_saga_temporal.model import ProposalRecord, allowed_options
from conftest import kinds, open_order, start
from temporalio.client import Client

from agent_saga import ConfigurationError, OpenAICompatibleTier
from agent_saga.credentials import credential_ref, set_credential_resolver
from agent_saga.testing import ChatServer, Reply

OPTIONS = allowed_options(checkout_job(), ["reserve_inventory"])


def situation(turn: int = 1) -> Situation:
    refused = [ProposalRecord(1, "schedule_fulfillment", {}, 0.9, "", False, "not_allowed", "not offered")]
    return Situation("wf-1", turn, "sell", {"order_id": "o-1"}, ["reserve_inventory"], OPTIONS, refused)


async def test_the_scripted_driver_picks_the_offered_arguments_then_finishes() -> None:
    driver = ScriptedDriver(["charge_payment", Proposal("x", {"a": 1}, 0.1)], confidence=0.8)
    first = await driver.decide(situation(1))
    assert first == Proposal("charge_payment", OPTIONS[0].args, 0.8, "scripted")
    assert await driver.decide(situation(2)) == Proposal("x", {"a": 1}, 0.1)
    # Past the script's end it proposes the job's finishing choice, whatever the job calls it.
    assert (await driver.decide(situation(3))).choice == "verify_order"
    assert (await ScriptedDriver([FINISH]).decide(situation(1))).choice == "verify_order"
    with pytest.raises(ConfigurationError, match="a script entry is a step name or a Proposal"):
        ScriptedDriver([42])  # type: ignore[list-item]


def test_the_model_sees_only_the_allowed_options_with_their_fixed_arguments() -> None:
    messages = ModelDriver(client=object(), model="m").messages(situation())  # type: ignore[arg-type]
    shown = json.loads(messages[1]["content"])
    assert [o["name"] for o in shown["options"]] == ["charge_payment", "verify_order"]
    assert "Choose 'verify_order' when the goal is reached" in messages[0]["content"]
    assert shown["options"][0]["arguments"] == {"order_id": "order-1001", "amount_cents": 4200, "customer": "cust-7"}
    assert shown["refused_before"] == [{"choice": "schedule_fulfillment", "why": "not offered"}]
    assert "not yours to change" in messages[0]["content"]


@pytest.mark.parametrize(("answer", "expected"), [
    ('{"choice": "charge_payment", "confidence": 0.7, "reason": "next"}',
     Proposal("charge_payment", OPTIONS[0].args, 0.7, "next")),
    # A name not offered keeps no arguments: the workflow refuses it as not allowed.
    ('{"choice": "refund_everything", "confidence": 1}', Proposal("refund_everything", {}, 1.0, "")),
])
def test_a_model_answer_becomes_a_proposal(answer: str, expected: Proposal) -> None:
    assert ModelDriver.parse(answer, OPTIONS) == expected


@pytest.mark.parametrize("answer", ["sure, charge it", '{"confidence": 1}', "[]", '{"choice": "x", "confidence": "high"}'])
def test_an_unreadable_model_answer_is_a_proposal_that_will_be_refused(answer: str) -> None:
    proposal = ModelDriver.parse(answer, OPTIONS)
    assert proposal.choice == "<unreadable>" and proposal.confidence == 0.0
    assert all(o.choice != proposal.choice for o in OPTIONS)


# -- a proposal from a real model: a cascade tier through the openai SDK --------------------------

KEY = "sk-test-temporal-Zq81vX"


def chosen(choice: str, confidence: float = 0.9) -> Reply:
    return Reply(text=json.dumps({"choice": choice, "confidence": confidence, "reason": f"{choice} next"}))


@pytest.fixture
def llm_key() -> Iterator[dict[str, str]]:
    set_credential_resolver(lambda name: KEY)
    yield credential_ref("llm")
    set_credential_resolver(None)


async def test_the_model_driver_takes_a_tier_and_asks_it_through_the_sdk(llm_key: dict[str, str]) -> None:
    with ChatServer({"qwen-7b": [chosen("charge_payment", 0.7)]}, api_key=KEY) as server:
        tier = OpenAICompatibleTier("local-7b", "qwen-7b", base_url=server.base_url, api_key=llm_key)
        proposal = await ModelDriver(tier=tier).decide(situation())
        await tier.aclose()
    assert proposal == Proposal("charge_payment", OPTIONS[0].args, 0.7, "charge_payment next")
    (sent,) = server.received
    assert sent.body["model"] == "qwen-7b" and sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.body["response_format"] == {"type": "json_object"}
    assert sent.body["messages"] == ModelDriver(tier=tier).messages(situation())


def test_a_model_driver_takes_a_tier_or_a_client_not_both() -> None:
    tier = OpenAICompatibleTier("t", "m", base_url="http://127.0.0.1:9/v1")
    with pytest.raises(ConfigurationError, match="tier= or client=/model=, not both"):
        ModelDriver(tier=tier, model="m")
    with pytest.raises(ConfigurationError, match=r"needs tier=<a cascade tier> or model="):
        ModelDriver()
    with pytest.raises(ConfigurationError, match="needs a tier"):
        ModelDriver(tier=object())  # type: ignore[arg-type]


async def test_a_checkout_run_by_a_model_behind_a_tier_on_the_real_workflow(
    provider: Provider, temporal_address: str, llm_key: dict[str, str]
) -> None:
    order_id = open_order(provider)
    answers = [chosen("schedule_fulfillment"),  # not offered yet: the workflow refuses and records it
               chosen("reserve_inventory"), chosen("charge_payment"), chosen("schedule_fulfillment"), chosen("verify_order")]
    with ChatServer({"qwen-7b": answers}, api_key=KEY) as server:
        tier = OpenAICompatibleTier("local-7b", "qwen-7b", base_url=server.base_url, api_key=llm_key)
        client = await Client.connect(temporal_address)
        queue = f"test-{uuid.uuid4().hex}"
        async with saga_worker(client, driver=ModelDriver(tier=tier), task_queue=queue):
            report = await (await start(client, queue, order_id)).result()
        await tier.aclose()

    assert report.status == "succeeded_verified"
    assert [(p.choice, p.accepted) for p in report.proposals] == [
        ("schedule_fulfillment", False), ("reserve_inventory", True), ("charge_payment", True),
        ("schedule_fulfillment", True), ("verify_order", True),
    ]
    assert kinds(provider, order_id) == ["create reservation", "create charge", "create shipment"]
    # every proposal came from the model over HTTP, and the model was shown what it had been refused
    assert len(server.received) == 5
    shown = json.loads(server.received[1].body["messages"][1]["content"])
    assert [r["choice"] for r in shown["refused_before"]] == ["schedule_fulfillment"]
