"""The decision drivers: what they show the agent, and how an answer becomes a proposal."""

from __future__ import annotations

import json

import pytest
from agent_saga_temporal import FINISH, ModelDriver, Proposal, ScriptedDriver, Situation
from agent_saga_temporal.examples.ecommerce.run import checkout_job
from agent_saga_temporal.model import ProposalRecord, allowed_options

from agent_saga import ConfigurationError

OPTIONS = allowed_options(checkout_job(), ["reserve_inventory"])


def situation(turn: int = 1) -> Situation:
    refused = [ProposalRecord(1, "schedule_fulfillment", {}, 0.9, "", False, "not_allowed", "not offered")]
    return Situation("wf-1", turn, "sell", {"order_id": "o-1"}, ["reserve_inventory"], OPTIONS, refused)


async def test_the_scripted_driver_picks_the_offered_arguments_then_finishes() -> None:
    driver = ScriptedDriver(["charge_payment", Proposal("x", {"a": 1}, 0.1)], confidence=0.8)
    first = await driver.decide(situation(1))
    assert first == Proposal("charge_payment", OPTIONS[0].args, 0.8, "scripted")
    assert await driver.decide(situation(2)) == Proposal("x", {"a": 1}, 0.1)
    assert (await driver.decide(situation(3))).choice == FINISH
    with pytest.raises(ConfigurationError, match="a script entry is a step name or a Proposal"):
        ScriptedDriver([42])  # type: ignore[list-item]


def test_the_model_sees_only_the_allowed_options_with_their_fixed_arguments() -> None:
    messages = ModelDriver(client=object(), model="m").messages(situation())  # type: ignore[arg-type]
    shown = json.loads(messages[1]["content"])
    assert [o["name"] for o in shown["options"]] == ["charge_payment", FINISH]
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
