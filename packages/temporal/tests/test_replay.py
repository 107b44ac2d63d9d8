"""Determinism: recorded histories replay through Temporal's Replayer against today's workflow.

The histories in ``histories/`` were recorded by ``histories/record.py``; a change
to the workflow that would command something else on replay (and so strand the
jobs already running) fails here. A deliberately different workflow shows the
check can fail.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from agent_saga_temporal import WORKFLOW_NAME, JobReport, JobSpec, saga_replayer
from agent_saga_temporal.model import ACTIVITY, Situation
from conftest import open_order, start, worker
from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))


def load(path: Path) -> WorkflowHistory:
    return WorkflowHistory.from_json(path.stem, path.read_text())


def test_the_recorded_histories_are_all_there() -> None:
    assert [p.stem for p in HISTORIES] == [
        "business-failure", "happy", "lost-response", "refund-fails", "refused-proposal",
    ], "record them with: python packages/temporal/tests/histories/record.py"


@pytest.mark.parametrize("path", HISTORIES, ids=lambda p: p.stem)
async def test_a_recorded_history_replays(path: Path) -> None:
    await saga_replayer().replay_workflow(load(path))


async def test_a_fresh_history_replays(provider: object, temporal_address: str) -> None:
    order_id = open_order(provider, "business-failure")  # type: ignore[arg-type]
    async with worker(temporal_address, ["reserve_inventory", "charge_payment", "schedule_fulfillment"]) as (
        client, queue,
    ):
        handle = await start(client, queue, order_id)
        assert (await handle.result()).status == "compensated_verified"
        history = await handle.fetch_history()
    await saga_replayer().replay_workflow(history)


@workflow.defn(name=WORKFLOW_NAME, sandboxed=False)
class DecidesBeforeAdmission:
    """The same workflow type, but it asks the driver before the gate admits the job."""

    @workflow.run
    async def run(self, job: JobSpec) -> JobReport:
        situation = Situation(workflow.info().workflow_id, 1, job.goal, job.facts, [], [], [])
        await workflow.execute_activity(ACTIVITY.DECIDE, situation, start_to_close_timeout=timedelta(seconds=5))
        return JobReport(workflow.info().workflow_id, job.name)


async def test_a_workflow_that_commands_differently_fails_replay() -> None:
    changed = Replayer(workflows=[DecidesBeforeAdmission], workflow_runner=UnsandboxedWorkflowRunner())
    with pytest.raises(workflow.NondeterminismError, match="Nondeterminism error"):
        await changed.replay_workflow(load(HISTORIES[0]))
