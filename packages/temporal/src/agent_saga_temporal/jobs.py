"""The client side: start a job, watch it, resolve one that waits for a person, run a worker."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, Literal

from temporalio.client import Client, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.worker import Replayer, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from agent_saga import GatePort
from agent_saga_temporal.activities import SagaActivities
from agent_saga_temporal.drivers import Driver
from agent_saga_temporal.manifest import check_job
from agent_saga_temporal.model import JobReport, JobSpec, Resolution, Status
from agent_saga_temporal.workflow import WORKFLOW_NAME, SagaJob

__all__ = ["DEFAULT_TASK_QUEUE", "report", "resolve", "saga_replayer", "saga_worker", "settled", "start_job"]

DEFAULT_TASK_QUEUE = "agent-saga"


def saga_worker(
    client: Client,
    *,
    driver: Driver,
    task_queue: str = DEFAULT_TASK_QUEUE,
    gate: GatePort | Literal["default"] | None = "default",
    **options: Any,
) -> Worker:
    """A worker that runs saga jobs on ``task_queue``: the workflow and its activities.

    Import the modules that register your ``@effect``, ``@compensator``,
    ``@reconciler`` and ``@invariant`` functions before starting it. ``options`` go to
    :class:`temporalio.worker.Worker` (e.g. ``max_concurrent_activities``).
    """
    activities = SagaActivities(driver, gate=gate)
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[SagaJob],
        activities=activities.all(),
        workflow_runner=_runner(),
        **options,
    )


def _runner() -> SandboxedWorkflowRunner:
    # The core and this package hold no per-workflow state: import them once, outside
    # the sandbox, instead of again for every workflow run.
    restrictions = SandboxRestrictions.default.with_passthrough_modules("agent_saga", "agent_saga_temporal")
    return SandboxedWorkflowRunner(restrictions=restrictions)


def saga_replayer(**options: Any) -> Replayer:
    """A replayer that runs the saga workflow exactly as :func:`saga_worker` does.

    ``await saga_replayer().replay_workflow(history)`` raises if today's code would
    command something other than what the recorded history shows.
    """
    return Replayer(workflows=[SagaJob], workflow_runner=_runner(), **options)


async def start_job(
    client: Client,
    job: JobSpec,
    *,
    workflow_id: str,
    task_queue: str = DEFAULT_TASK_QUEUE,
    facts: dict[str, Any] | None = None,
) -> WorkflowHandle[Any, JobReport]:
    """Start the job under ``workflow_id``, or return the handle of the one already under it.

    The workflow id is the saga id: every idempotency key derives from it, so an id
    names one job for good (a closed job's id is never started again).
    """
    if facts:
        job = dataclasses.replace(job, facts={**job.facts, **facts})
    job = check_job(job)  # a job built in code meets the manifest's rules too
    try:
        return await client.start_workflow(
            WORKFLOW_NAME, job, id=workflow_id, task_queue=task_queue, result_type=JobReport,
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        )
    except WorkflowAlreadyStartedError:
        # Closed already (a finished run of the crash drill): its result is what there is.
        return client.get_workflow_handle(workflow_id, result_type=JobReport)


async def report(handle: WorkflowHandle[Any, Any]) -> JobReport:
    """The job's current report (a query: it needs a worker for the job's task queue)."""
    current: JobReport = await handle.query("report", result_type=JobReport)
    return current


async def settled(handle: WorkflowHandle[Any, Any], *, poll: float = 0.2) -> JobReport:
    """Wait until the job has ended or is waiting for a person, and return its report."""
    while True:
        description = await handle.describe()
        if description.status is not None and description.status.name != "RUNNING":
            final: JobReport = await handle.result(rpc_timeout=None)
            return final
        current = await report(handle)
        if current.status == Status.WAITING_FOR_PERSON:
            return current
        await asyncio.sleep(poll)


async def resolve(
    client: Client, workflow_id: str, *, decision: str, by: str, note: str = "", wait: bool = True
) -> str:
    """Resolve a job waiting for a person: ``accept`` what stands, or ``retry`` the undo.

    ``wait=True`` sends an update: a bad resolution is refused to the caller with the
    reason, and the answer is the job's status once it has acted on it. ``wait=False``
    sends a signal (the job records a bad one, and keeps waiting) and returns "sent".
    """
    resolution = Resolution(decision, by, note)
    problem = resolution.problem()
    if problem:
        raise ValueError(problem)
    handle = client.get_workflow_handle(workflow_id)
    if not wait:
        await handle.signal("resolve", resolution)
        return "sent"
    status: str = await handle.execute_update("resolve", resolution, result_type=str)
    return status
