"""The checkout example's four scenarios, each run as the user runs it, checked at the provider.

What the example prints is compared with what the provider itself recorded: an
outcome line is only believed when the world agrees with it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from agent_saga_temporal import temporal_binary
from agent_saga_temporal.examples.ecommerce.provider import Provider
from conftest import kinds, run_example, succeeded

FORWARD = ["create reservation", "create charge", "create shipment"]


def order_of(out: dict[str, str]) -> str:
    return "order-" + out["Workflow"].split(" on ")[0]


@pytest.mark.parametrize("scenario", ["happy", "lost-response"])
def test_happy_and_lost_response_end_succeeded_verified_with_the_three_effects(
    scenario: str, state: Path, temporal_address: str
) -> None:
    # A lost response is reconciled, not charged twice: the provider holds the happy run's three effects.
    out = succeeded(run_example(scenario, state=state, address=temporal_address))
    assert out["Agent chose"] == "reserve_inventory -> charge_payment -> schedule_fulfillment -> verify_order"
    assert out["Undo order"] == "(nothing undone)"
    assert out["Outcome"] == "succeeded_verified"
    assert out["Provider effects"] == "3"
    assert kinds(Provider(state / "provider.json"), order_of(out)) == FORWARD


def test_business_failure_is_undone_newest_first_and_checked(state: Path, temporal_address: str) -> None:
    out = succeeded(run_example("business-failure", state=state, address=temporal_address))
    assert out["Undo order"] == "cancel_fulfillment -> refund_payment -> release_inventory"
    assert out["Outcome"] == "compensated_verified"
    assert "shipment_accepted does not hold" in out["Why"]
    provider = Provider(state / "provider.json")
    # The provider's own order of events: three effects, then their undos newest first, once each.
    assert kinds(provider, order_of(out)) == [
        *FORWARD, "cancel shipment", "refund charge", "release reservation",
    ]


def test_refund_that_cannot_be_proven_waits_then_a_signal_resolves_it(state: Path, temporal_address: str) -> None:
    out = succeeded(run_example("refund-fails", state=state, address=temporal_address))
    assert out["Outcome"] == "waiting_for_person"
    assert out["Undo order"] == "cancel_fulfillment -> refund_payment"
    assert "refund_payment is not in effect after 2 runs" in out["Waiting for a person"]
    workflow_id = out["Workflow"].split(" on ")[0]
    provider = Provider(state / "provider.json")
    standing = kinds(provider, order_of(out))
    assert standing == [*FORWARD, "cancel shipment"]  # the lying refund changed nothing

    # A person answers with the Temporal CLI's own signal command; no worker runs meanwhile.
    resolution = {"decision": "accept", "by": "ops@example.com", "note": "refunded by hand"}
    signal = subprocess.run(
        [str(temporal_binary()), "workflow", "signal", "--address", temporal_address, "--workflow-id", workflow_id,
         "--name", "resolve", "--input", json.dumps(resolution)],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert signal.returncode == 0, signal.stderr

    # The example run again on the same job: its worker lets the workflow act on the signal.
    out = succeeded(run_example("refund-fails", state=state, address=temporal_address,
                                extra_env={"AGENT_SAGA_TEMPORAL_WORKFLOW_ID": workflow_id}))
    assert out["Outcome"] == "resolved_by_person"
    assert out["Resolved by ops@example.com"] == "accept (refunded by hand)"
    assert kinds(provider, order_of(out)) == standing  # resolving ran nothing more


def test_without_an_address_the_example_starts_its_own_server_and_can_resolve(state: Path) -> None:
    done = run_example("refund-fails", "--resolve-as", "ops@example.com", state=state, address=None)
    out = succeeded(done)
    assert out["Workflow"].split(" on ")[1].startswith("127.0.0.1:")
    assert (state / "temporal.db").exists()  # the server it started kept its state there
    assert "Resolving as ops@example.com (accept) with the 'resolve' signal" in done.stdout
    assert out["Outcome"] == "resolved_by_person"
    assert out["Resolved by ops@example.com"] == "accept (checked by hand in the provider's dashboard)"


def test_unknown_scenario_is_a_usage_error(state: Path) -> None:
    done = run_example("sideways", state=state, address=None)
    assert done.returncode == 2
    assert "invalid choice: 'sideways'" in done.stderr
