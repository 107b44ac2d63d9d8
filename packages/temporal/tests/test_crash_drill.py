"""The crash drill: the worker process dies right after a step's effect; a second run finishes the job.

The first process really dies (``os._exit`` inside the activity, right after the
provider applied the change and before Temporal heard of it). The count that
matters is the provider's own, read from its file: every effect exactly once.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from agent_saga_temporal.examples.ecommerce import steps
from agent_saga_temporal.examples.ecommerce.provider import Provider
from conftest import kinds, lines, run_example, succeeded

FORWARD = ["create reservation", "create charge", "create shipment"]


@pytest.mark.parametrize(("crash_at", "applied"), [
    ("reserve_inventory", 1), ("charge_payment", 2), ("schedule_fulfillment", 3),
])
def test_worker_killed_after_an_effect_resumes_without_doubling_it(
    state: Path, temporal_address: str, crash_at: str, applied: int
) -> None:
    workflow_id = f"drill-{crash_at}-{uuid.uuid4().hex[:8]}"
    order_id = f"order-{workflow_id}"
    same_job = {"AGENT_SAGA_TEMPORAL_WORKFLOW_ID": workflow_id}
    provider = Provider(state / "provider.json")

    first = run_example("happy", state=state, address=temporal_address,
                        extra_env={**same_job, steps.CRASH_AT: crash_at})
    assert first.returncode == 70, (first.stdout, first.stderr)  # died inside the activity
    assert "Outcome" not in lines(first)
    assert kinds(provider, order_id) == FORWARD[:applied]  # the effect landed; nobody was told

    out = succeeded(run_example("happy", state=state, address=temporal_address, extra_env=same_job))
    assert out["Outcome"] == "succeeded_verified"
    assert out["Provider effects"] == "3"
    assert kinds(provider, order_id) == FORWARD  # the crashed step was reconciled, not run again
