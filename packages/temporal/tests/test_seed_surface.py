"""Seed 002's own forms, run as its reader types them (issue 33, "Seed 002").

``try_saga.py`` saved in the repository's root and run; ``python -m examples.ecommerce.run
lost-response`` printing the workflow's numbered timeline and its closing sentence;
``agent-saga-temporal demo --scenario lost-response --open`` serving the flight recorder
on the run; every printing verb of the CLI ending quietly when its reader goes away.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_saga_temporal import Status
from agent_saga_temporal.examples.ecommerce import run as example
from agent_saga_temporal.examples.ecommerce import steps
from agent_saga_temporal.examples.ecommerce.provider import Provider
from agent_saga_temporal.model import ProposalRecord
from conftest import kinds, open_order
from temporalio.client import Client

REPO = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent
CLI = str(BIN / "agent-saga-temporal")

# The seed's try_saga.py, character for character.
TRY_SAGA = '''import asyncio

from examples.ecommerce.demo import run_scenario

run = asyncio.run(run_scenario("business-failure"))

print("Agent chose:", " -> ".join(run.proposals))
print("Undo order: ", " -> ".join(run.compensation_order))
print("Outcome:    ", run.state.status.value)
'''
FORWARD = ["create reservation", "create charge", "create shipment"]
TIMELINE_LINE = re.compile(r"^(\d{2,})  ([a-z_]+)(?:  ([^\s(]\S*))?(?:  \((.*)\))?$")


def env_for(state: Path, address: str | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TEMPORAL_ADDRESS", steps.CRASH_AT, "BROWSER")}
    env[steps.STATE] = str(state)
    if address is not None:
        env["TEMPORAL_ADDRESS"] = address
    env.update(extra)
    return env


def test_try_saga_runs_as_the_seed_writes_it(tmp_path: Path) -> None:
    # Saved next to the repository's examples/ and run as a script: the script's folder is the
    # repository's root, which PYTHONPATH stands for here (the test does not write into the checkout).
    script = tmp_path / "try_saga.py"
    script.write_text(TRY_SAGA, encoding="utf-8")
    state = tmp_path / "state"
    # No TEMPORAL_ADDRESS, as for the reader: the example starts its own dev server.
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=240,
                          env=env_for(state, None, PYTHONPATH=str(REPO)), check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "Agent chose: reserve_inventory -> charge_payment -> schedule_fulfillment -> verify_order",
        "Undo order:  cancel_fulfillment -> refund_payment -> release_inventory",
        "Outcome:     compensated_verified",
    ]
    (order,) = json.loads((state / "provider.json").read_text())["orders"]
    assert kinds(Provider(state / "provider.json"), order) == [
        *FORWARD, "cancel shipment", "refund charge", "release reservation",
    ]


async def test_the_result_has_the_seeds_names_and_todays(state: Path, temporal_address: str) -> None:
    run = await example.run_scenario("business-failure", address=temporal_address)
    assert isinstance(run, example.CheckoutRun)
    assert run.proposals == ["reserve_inventory", "charge_payment", "schedule_fulfillment", "verify_order"]
    assert run.compensation_order == run.undo_order == ["cancel_fulfillment", "refund_payment", "release_inventory"]
    assert run.state.status is Status.COMPENSATED_VERIFIED and run.state.status.value == "compensated_verified"
    assert run.status == "compensated_verified" and run.report.status == "compensated_verified"
    assert all(isinstance(p, ProposalRecord) for p in run.proposal_records)
    assert [p.choice for p in run.proposal_records] == run.proposals
    assert "shipment_accepted does not hold" in run.cause and run.effects == 6
    # The unwind is in the timeline too, newest first, each undo checked in effect.
    assert [(e.kind, e.step, e.detail) for e in run.events if e.kind == "compensation_recorded"] == [
        ("compensation_recorded", "cancel_fulfillment", "in effect"),
        ("compensation_recorded", "refund_payment", "in effect"),
        ("compensation_recorded", "release_inventory", "in effect"),
    ]
    assert run.events[-1].kind == "terminal_assigned" and run.events[-1].detail == "compensated_verified"


async def test_a_refused_proposal_reads_as_refused_in_the_seeds_strings(state: Path, temporal_address: str) -> None:
    from agent_saga_temporal import ScriptedDriver, saga_worker, start_job
    from agent_saga_temporal.examples.ecommerce.run import checkout_job

    client = await Client.connect(temporal_address)
    order_id = open_order(steps.provider())
    queue = f"seed-refused-{order_id}"
    async with saga_worker(client, driver=ScriptedDriver(["charge_payment\x1b[2K", "reserve_inventory"]),
                           task_queue=queue):
        handle = await start_job(client, checkout_job(), workflow_id=f"wf-{order_id}", task_queue=queue,
                                 facts={"order_id": order_id})
        run = example.CheckoutRun(await handle.result(), effects=0, workflow_id=handle.id, address=temporal_address)
    # The agent's text is printed inert: the escape shows as text, it does not act on a terminal.
    assert run.proposals[0] == "charge_payment\\x1b[2K (refused: not_allowed)"
    assert run.proposals[1:] == ["reserve_inventory", "verify_order"]


def test_lost_response_prints_the_workflows_own_timeline(state: Path, temporal_address: str) -> None:
    # The seed's command, from the repository's root.
    done = subprocess.run([sys.executable, "-m", "examples.ecommerce.run", "lost-response"], cwd=REPO,
                          env=env_for(state, temporal_address), capture_output=True, text=True, timeout=240,
                          check=False)
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    workflow_id = out[0].removeprefix("Workflow: ").split(" on ")[0]
    timeline = [m.groups() for m in map(TIMELINE_LINE.match, out) if m]
    assert [int(n) for n, *_ in timeline] == list(range(1, len(timeline) + 1))
    # What the seed shows, in its order, named as the engine named it.
    seed_shows = [("saga_started", None), ("effect_outcome_recorded", "reserve_inventory"),
                  ("effect_outcome_recorded", "charge_payment"), ("reconciliation_recorded", "charge_payment"),
                  ("effect_outcome_recorded", "schedule_fulfillment"), ("invariant_evaluated", "verify_order"),
                  ("terminal_assigned", None)]
    shown = iter((kind, step) for _, kind, step, _ in timeline)
    assert all(any(event == wanted for event in shown) for wanted in seed_shows), timeline
    assert ("06", "reconciliation_recorded", "charge_payment", "landed") in timeline
    assert out[-1] == "Order succeeded. Verified complete."
    assert "Outcome: succeeded_verified" in out and "Provider effects: 3" in out

    # Every printed event is one the workflow recorded: its result, read back from the server.
    async def recorded() -> list[tuple[str, str, str | None, str | None]]:
        client = await Client.connect(temporal_address)
        report = await client.get_workflow_handle(workflow_id).result()
        return [(f"{e['seq']:02d}", e["kind"], e["step"] or None, e["detail"] or None) for e in report["events"]]

    import asyncio

    assert asyncio.run(recorded()) == timeline


# -- agent-saga-temporal demo --------------------------------------------------------------------


def _lines(process: subprocess.Popen[str]) -> queue.Queue[str]:
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line.rstrip("\n"))
        lines.put("")  # end of output

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _until(lines: queue.Queue[str], prefix: str) -> tuple[str, list[str]]:
    seen = []
    while True:
        line = lines.get(timeout=240)
        seen.append(line)
        if line.startswith(prefix):
            return line, seen
        assert line, f"the demo ended before printing {prefix!r}: {seen}"


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as response:
        body: bytes = response.read()
        return body


@pytest.fixture
def demo(tmp_path: Path, state: Path, temporal_address: str) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    opened = tmp_path / "opened.txt"
    browser = tmp_path / "browser.sh"
    browser.write_text(f'#!/bin/sh\nprintf "%s" "$1" > {opened}\n', encoding="utf-8")
    browser.chmod(0o755)
    process = start_demo(["--scenario", "lost-response", "--open"], env_for(state, temporal_address,
                                                                           BROWSER=str(browser)), tmp_path)
    try:
        yield process, opened
    finally:
        stop(process)


def start_demo(args: list[str], env: dict[str, str], tmp_path: Path) -> subprocess.Popen[str]:
    with open(tmp_path / "demo.stderr", "w") as err:  # a file: an unread pipe could fill and stall it
        return subprocess.Popen([CLI, "demo", *args], env=env, stdout=subprocess.PIPE, stderr=err, text=True)


def stop(process: subprocess.Popen[str]) -> int:
    process.terminate()
    try:
        return process.wait(timeout=60)
    finally:
        assert process.stdout is not None
        process.stdout.close()


def test_demo_runs_exports_and_opens_the_flight_recorder_on_the_run(
    demo: tuple[subprocess.Popen[str], Path], state: Path, tmp_path: Path
) -> None:
    process, opened = demo
    lines = _lines(process)
    line, before = _until(lines, "Flight recorder: ")
    url = line.removeprefix("Flight recorder: ").split("  ")[0]
    workflow_id = before[0].removeprefix("Workflow: ").split(" on ")[0]
    assert "Order succeeded. Verified complete." in before
    assert any(b.startswith("Exported: ") and b.endswith(str(state / "demo.wal")) for b in before)
    page, _, fragment = url.partition("#")
    assert page.startswith("http://127.0.0.1:")
    assert fragment == f"run={workflow_id}&watch=1"
    # The browser was handed that URL (the script BROWSER names is a real process).
    _until_file(opened)
    assert opened.read_text() == url

    assert b"Watch from start" in _get(page)
    runs = json.loads(_get(page + "api/runs"))
    (run,) = [r for r in runs["runs"] if r["id"] == workflow_id]
    assert run["status"] == "completed"
    replay = json.loads(_get(page + f"api/runs/{workflow_id}/replay"))
    assert replay["total"] > 0 and replay["frames"][0]["type"] == "SAGA_STARTED"

    chromium = os.environ.get("AGENT_SAGA_TEST_CHROMIUM")
    if chromium:  # the page itself, in a real browser: it opens the run and plays it from the start
        dom = subprocess.run(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'chromium'}",
             "--virtual-time-budget=8000", "--dump-dom", url],
            capture_output=True, text=True, timeout=120, check=False,
        ).stdout
        assert f'data-run="{workflow_id}"' in dom and 'aria-current="true"' in dom
        assert re.search(r'id="replay-status"[^>]*>record \d+ of \d+', dom), dom[-2000:]

    assert stop(process) == 0  # SIGTERM stops the server as Ctrl+C does


def _until_file(path: Path) -> None:
    # The browser script runs in the demo's process tree; wait for what it wrote (a bound, not a timing claim).
    deadline = 600
    while not path.exists() and deadline:
        threading.Event().wait(0.1)
        deadline -= 1
    assert path.exists(), "the demo did not run the browser"


def test_demo_without_a_browser_prints_the_url(state: Path, temporal_address: str, tmp_path: Path) -> None:
    # BROWSER names a command that fails: what webbrowser meets where no browser can open.
    process = start_demo(["--scenario", "happy", "--open"],
                         env_for(state, temporal_address, BROWSER=shutil.which("false") or "false"), tmp_path)
    try:
        lines = _lines(process)
        line, _ = _until(lines, "Flight recorder: ")
        url = line.removeprefix("Flight recorder: ").split("  ")[0]
        said, _ = _until(lines, "No browser")
        assert said == "No browser could be opened here: open the URL above in one."
        assert b"flight recorder" in _get(url.partition("#")[0])
    finally:
        assert stop(process) == 0


def test_demo_names_an_unknown_scenario() -> None:
    done = subprocess.run([CLI, "demo", "--scenario", "sideways"], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 2
    assert done.stderr.strip() == ("error: unknown scenario 'sideways': choose one of happy, business-failure, "
                                   "lost-response, refund-fails")


# -- a reader that goes away: `agent-saga-temporal schema | head` ---------------------------------


@pytest.mark.parametrize("args", [
    ["schema"],
    ["check", str(REPO / "packages/temporal/src/agent_saga_temporal/examples/ecommerce/saga.yaml")],
    ["--help"],
    ["demo", "--help"],
], ids=lambda a: a[0] if a[0] != "demo" else "demo-help")
def test_a_closed_pipe_ends_the_command_quietly(args: list[str]) -> None:
    # A real pipe whose reading end is closed before the command writes: every write fails with EPIPE.
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([CLI, *args], stdout=write, stderr=subprocess.PIPE, text=True, timeout=60, check=False)
    finally:
        os.close(write)
    assert done.stderr == ""
    assert done.returncode in (0, 141)  # 141: as a shell reports a command ended by SIGPIPE
    if args == ["schema"]:
        assert done.returncode == 141


def test_schema_through_head_prints_its_first_lines() -> None:
    pipeline = subprocess.run(f"'{CLI}' schema | head -n 3", shell=True, capture_output=True, text=True,
                              timeout=60, check=False)
    assert pipeline.stdout.splitlines()[0] == "{"
    assert "Traceback" not in pipeline.stderr and "BrokenPipeError" not in pipeline.stderr
