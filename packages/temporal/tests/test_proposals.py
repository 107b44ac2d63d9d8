"""The agent proposes, the workflow disposes: refusals, the gate, and a person's resolution.

Each test runs the real workflow on the session's Temporal server with a worker in
this process, driven by a script that forges what a misbehaving model might send.
What the workflow claims is checked against the provider's own record and against
the memo Temporal stores in the workflow's history.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
from agent_saga_temporal import FINISH, Proposal, resolve, settled
from agent_saga_temporal.examples.ecommerce.provider import Provider
from agent_saga_temporal.examples.ecommerce.run import checkout_job
from conftest import kinds, open_order, start, worker
from temporalio.client import WorkflowUpdateFailedError

from agent_saga import PreFlightGate
from agent_saga.gate import Rule, arg_exceeds

FORWARD = ["create reservation", "create charge", "create shipment"]
RESERVE_ARGS = {"sku": "SKU-42", "quantity": 2}


def reserve(order_id: str, **changes: object) -> dict[str, object]:
    return {"order_id": order_id, **RESERVE_ARGS, **changes}


def relaxed(max_refusals: int) -> object:
    job = checkout_job()
    return dataclasses.replace(job, limits=dataclasses.replace(job.limits, max_refusals=max_refusals))


async def test_a_step_not_allowed_now_a_forged_argument_and_a_low_confidence_are_refused_and_recorded(
    provider: Provider, temporal_address: str
) -> None:
    order_id = open_order(provider)
    script = [
        "charge_payment",  # not offered yet: nothing is reserved
        Proposal("reserve_inventory", reserve(order_id, quantity=200), 0.9, "forged"),
        Proposal("reserve_inventory", reserve(order_id), 0.2, "unsure"),
        "reserve_inventory", "charge_payment", "schedule_fulfillment", FINISH,
    ]
    async with worker(temporal_address, script) as (client, queue):
        handle = await start(client, queue, order_id, relaxed(max_refusals=3))  # type: ignore[arg-type]
        report = await handle.result()
        memo = await (await handle.describe()).memo()

    assert report.status == "succeeded_verified"
    assert [(p.choice, p.accepted, p.rule) for p in report.proposals] == [
        ("charge_payment", False, "not_allowed"),
        ("reserve_inventory", False, "forged_args"),
        ("reserve_inventory", False, "low_confidence"),
        ("reserve_inventory", True, ""), ("charge_payment", True, ""), ("schedule_fulfillment", True, ""),
        ("verify_order", True, ""),  # FINISH in a script is the job's finishing choice
    ]
    assert "'quantity': 200" in report.proposals[1].refusal
    # Recorded in the workflow's history (its memo), not only in the workflow's memory.
    assert memo["refusal.1"]["rule"] == "not_allowed"
    assert memo["refusal.2"]["args"]["quantity"] == 200 and memo["refusal.2"]["rule"] == "forged_args"
    assert memo["refusal.3"]["rule"] == "low_confidence"
    # The provider saw only the offered arguments, once each.
    assert kinds(provider, order_id) == FORWARD
    reservation = provider.find("reservation", report.steps[0].key)
    assert reservation is not None and reservation["quantity"] == 2


async def test_too_many_refusals_unwind_what_was_done(provider: Provider, temporal_address: str) -> None:
    order_id = open_order(provider)
    forged = Proposal("charge_payment", {"order_id": order_id, "amount_cents": 1, "customer": "cust-7"}, 1.0)
    async with worker(temporal_address, ["reserve_inventory", forged, forged, forged]) as (client, queue):
        report = await (await start(client, queue, order_id)).result()

    assert report.status == "compensated_verified"
    assert report.cause.startswith("3 proposals refused (the job allows 2)")
    assert report.undo_order == ["release_inventory"]
    assert kinds(provider, order_id) == ["create reservation", "release reservation"]


async def test_the_cores_gate_refuses_a_step_before_it_runs(provider: Provider, temporal_address: str) -> None:
    order_id = open_order(provider)
    gate = PreFlightGate([Rule("big-charge", arg_exceeds("amount_cents", 1000), "block", "charges over 10.00 need a person")])
    script = ["reserve_inventory", "charge_payment", "charge_payment", "charge_payment"]
    async with worker(temporal_address, script, gate=gate) as (client, queue):
        report = await (await start(client, queue, order_id)).result()

    refused = [p for p in report.proposals if not p.accepted]
    assert [p.rule for p in refused] == ["gate"] * 3
    assert "charges over 10.00 need a person" in refused[0].refusal
    assert report.status == "compensated_verified"
    assert kinds(provider, order_id) == ["create reservation", "release reservation"]  # no charge, ever


async def test_a_person_retries_a_repaired_undo_or_is_refused_with_the_reason(
    provider: Provider, temporal_address: str
) -> None:
    order_id = open_order(provider, "refund-fails")
    async with worker(temporal_address, ["reserve_inventory", "charge_payment", "schedule_fulfillment"]) as (
        client, queue,
    ):
        handle = await start(client, queue, order_id)
        waiting = await settled(handle)
        assert waiting.status == "waiting_for_person"

        # An update is validated: a resolution without a person is refused to the sender.
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update("resolve", {"decision": "accept", "by": " "}, result_type=str)
        assert "by must name the person who decides" in str(refused.value.cause)
        # A signal cannot be refused: a bad one is recorded, and the job keeps waiting.
        await handle.signal("resolve", {"decision": "ignore-it", "by": "mallory"})
        assert (await settled(handle)).rejected == [
            "'mallory': decision must be 'accept' or 'retry', got 'ignore-it'"
        ]
        with pytest.raises(ValueError, match="decision must be 'accept' or 'retry'"):
            await resolve(client, handle.id, decision="shrug", by="ops")

        # Retrying while the refund still lies changes nothing and waits again.
        assert await resolve(client, handle.id, decision="retry", by="ops") == "waiting_for_person"
        # Repaired: the retry's refund is checked in effect, then the older step is undone too.
        provider.set_faults(order_id, refund_lies=False)
        assert await resolve(client, handle.id, decision="retry", by="ops", note="refunds fixed") == (
            "compensated_verified"
        )
        report = await handle.result()

    assert report.undo_order == [
        "cancel_fulfillment", "refund_payment", "refund_payment", "refund_payment", "release_inventory",
    ]
    assert [r.decision for r in report.resolutions] == ["retry", "retry"]
    assert kinds(provider, order_id) == [
        *FORWARD, "cancel shipment", "refund charge", "release reservation",
    ]


async def test_an_operators_halt_reaches_a_job_through_the_default_gate(
    provider: Provider, temporal_address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_SAGA_SWITCH", str(tmp_path / "switch.json"))
    halted = subprocess.run(
        [str(Path(sys.executable).with_name("agent-saga")), "halt", "--scope", "tool:charge_payment",
         "--reason", "card network incident", "--by", "ops", "--wal-path", str(tmp_path / "ops.wal")],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert halted.returncode == 0, halted.stderr
    order_id = open_order(provider)
    script = ["reserve_inventory", "charge_payment", "charge_payment", "charge_payment"]
    async with worker(temporal_address, script) as (client, queue):  # no gate given: the core's default
        report = await (await start(client, queue, order_id)).result()

    assert [p.rule for p in report.proposals if not p.accepted] == ["gate"] * 3
    assert "card network incident" in report.proposals[1].refusal
    assert report.status == "compensated_verified"
    assert kinds(provider, order_id) == ["create reservation", "release reservation"]


async def test_a_job_whose_every_proposal_is_refused_ends_aborted_clean(
    provider: Provider, temporal_address: str
) -> None:
    order_id = open_order(provider)
    async with worker(temporal_address, ["schedule_fulfillment"] * 3) as (client, queue):
        report = await (await start(client, queue, order_id)).result()

    assert report.status == "aborted_clean"
    assert report.steps == [] and report.undo_order == []
    assert kinds(provider, order_id) == []
