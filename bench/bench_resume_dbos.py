"""Resuming a crashed 100-step run here, next to DBOS recovering the same workflow (issue 41).

    python bench/bench_resume_dbos.py [--pg URL] [--dbos-python PATH] [--rounds 5] [--steps 100] [--after 50] [--json]

The shape on both sides: an entry point (a ``@durable`` function; a ``@DBOS.workflow``) that
calls one step (a REVERSIBLE ``@tool``; a ``@DBOS.step``) ``--steps`` times, each returning a
short string, stopped after ``--after`` steps and then recovered: the first ``--after`` calls
are answered from the record, the rest run live. Each round runs, in this order:

* **DBOS** (only with ``--dbos-python``, a python with ``dbos`` installed, and ``--pg``): a
  process starts the workflow and SIGKILLs itself after step ``--after`` (``dbos_recovery.py
  crash``); a second process launches DBOS and times ``DBOS._recover_pending_workflows`` plus
  the handle's ``get_result()`` (``dbos_recovery.py recover``).
* **FileWAL**, each step REVERSIBLE (like a model call: nothing waits on the disk) and then
  COMPENSABLE (its intent and, in a durable run, its commit record flushed around the call):
  the run stops after step ``--after`` in this process (it raises out with no end record: the
  log holds what a kill there leaves), then ``agent_saga.resume`` is timed.
* **PostgresWAL** (with ``--pg``): the same, each on a fresh log on that server.

Each recovery is timed end to end (wall, and this process's CPU), its entry point's body from
its first line to its return (wall), and each step call inside the recovered run (wall, and the
calling thread's CPU); medians over the rounds. DBOS's end to end includes two waits of its own:
the recovered workflow is re-enqueued and started by a queue thread that polls (1 s by default:
``to_body_ms``), and ``get_result()`` polls the outcome (1 s by default).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from agent_saga import Compensation, SagaQuarantined, compensator, durable, resume, tool

DBOS_SCRIPT = Path(__file__).with_name("dbos_recovery.py")
STOP: dict[str, int] = {}
CALLS: list[tuple[float, float]] = []  # (wall, calling thread's CPU) of each step call, in order
BODY: list[float] = []  # when the entry point's body started and returned


@tool(semantics="REVERSIBLE")
def think(i: int) -> str:
    return f"thought {i}"


@compensator("bench.unbook")
def unbook(i: int, idempotency_key: str = "") -> None:
    """Never called here: the runs end completed."""


@tool(semantics="COMPENSABLE", compensate=lambda r: Compensation(handler="bench.unbook", kwargs={"i": 0}))
def book(i: int) -> str:
    return f"booked {i}"


KINDS = {"REVERSIBLE": think, "COMPENSABLE": book}


@durable("bench.hundred")
def thinker(steps: int, kind: str) -> int:
    step = KINDS[kind]
    BODY.append(time.perf_counter())
    for i in range(steps):
        wall, cpu = time.perf_counter(), time.thread_time()
        step(i)
        CALLS.append((time.perf_counter() - wall, time.thread_time() - cpu))
        if STOP.get("after") == i + 1:
            raise SagaQuarantined("the run stops here with no end record")
    BODY.append(time.perf_counter())
    return steps


def per_call(calls: list[tuple[float, float]], after: int) -> dict[str, float]:
    """Median wall and CPU microseconds of the served calls (the first ``after``) and of the live ones."""
    figures = {}
    for name, rows in (("served", calls[:after]), ("live", calls[after:])):
        if rows:  # none live when the run was crashed after its last step
            figures[f"{name}_wall_us"] = statistics.median(row[0] for row in rows) * 1e6
            figures[f"{name}_cpu_us"] = statistics.median(row[1] for row in rows) * 1e6
    return figures


def ours(wal: str, kind: str, steps: int, after: int) -> dict[str, float]:
    """Stop a run of ``steps`` ``kind`` steps after ``after`` on ``wal``, then time ``resume`` of it."""
    saga_id = f"hundred-{uuid.uuid4().hex[:8]}"
    STOP["after"] = after
    try:
        thinker(steps, kind, saga_id=saga_id, wal=wal)
    except SagaQuarantined:
        pass
    STOP.clear()
    CALLS.clear()
    BODY.clear()
    wall, cpu = time.perf_counter(), time.process_time()
    assert resume(saga_id, wal=wal, clock=lambda: time.time() + 3600) == steps  # past the dead owner's lease
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert len(CALLS) == steps
    return {"wall_ms": wall * 1e3, "cpu_ms": cpu * 1e3, "body_ms": (BODY[1] - BODY[0]) * 1e3, **per_call(CALLS, after)}


def dbos(python: str, pg: str, steps: int, after: int) -> dict[str, float]:
    """One DBOS workflow killed after ``after`` steps, then recovered in a new process."""
    workflow_id, executor = f"hundred-{uuid.uuid4().hex[:8]}", f"crashed-{uuid.uuid4().hex[:8]}"
    argv = [pg, workflow_id, executor, str(steps), str(after)]
    crashed = subprocess.run([python, str(DBOS_SCRIPT), "crash", *argv], capture_output=True, text=True,
                             timeout=300, check=False)
    if crashed.returncode != -9:
        raise SystemExit(f"the DBOS crash process ended with {crashed.returncode}, not SIGKILL: {crashed.stderr}")
    recovered = subprocess.run([python, str(DBOS_SCRIPT), "recover", *argv], capture_output=True, text=True,
                               timeout=300, check=False)
    if recovered.returncode != 0:
        raise SystemExit(f"the DBOS recovery failed: {recovered.stderr}")
    row = json.loads(recovered.stdout.splitlines()[-1])
    calls = [tuple(call) for call in row.pop("calls")]
    assert len(calls) == steps
    return {**row, **per_call(calls, after)}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pg", default=os.environ.get("AGENT_SAGA_TEST_PG_URL"),
                        help="a PostgreSQL URL (default $AGENT_SAGA_TEST_PG_URL): PostgresWAL and DBOS run on it")
    parser.add_argument("--dbos-python", help="a python with `dbos` installed (its own venv); without it, no DBOS rows")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--after", type=int, default=50, help="the run is crashed after this many steps")
    parser.add_argument("--dir", type=Path, help="where the FileWAL logs go (default a temporary directory)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if not 0 < args.after <= args.steps:
        parser.error(f"--after {args.after}: give a number of steps from 1 to --steps ({args.steps})")
    sides: dict[str, list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for n in range(args.rounds):
            if args.dbos_python and args.pg:
                sides.setdefault("DBOS", []).append(dbos(args.dbos_python, args.pg, args.steps, args.after))
            for kind in KINDS:
                path = str(Path(tmp) / f"run-{n}-{kind}.wal")
                sides.setdefault(f"FileWAL {kind}", []).append(ours(path, kind, args.steps, args.after))
                if args.pg:
                    log = f"{args.pg}{'&' if '?' in args.pg else '?'}log=resume-{uuid.uuid4().hex[:8]}"
                    sides.setdefault(f"PostgresWAL {kind}", []).append(ours(log, kind, args.steps, args.after))
    figures = {side: {key: statistics.median(row[key] for row in rows) for key in rows[0]}
               for side, rows in sides.items()}
    if args.json:
        print(json.dumps({"steps": args.steps, "after": args.after, "rounds": args.rounds, "sides": figures}, indent=2))
        return 0
    print(f"a {args.steps}-step run crashed after {args.after} steps, recovered; medians of {args.rounds} rounds")
    for side, row in figures.items():
        print(f"{side:23} recovery {row['wall_ms']:8.1f} ms wall {row['cpu_ms']:7.1f} ms CPU, body {row['body_ms']:6.1f} ms"
              + (f", started after {row['to_body_ms']:6.1f} ms" if "to_body_ms" in row else "")
              + "".join(f" | {name} step {row[f'{name}_wall_us']:7.0f} us wall {row[f'{name}_cpu_us']:6.0f} us CPU"
                        for name in ("served", "live") if f"{name}_wall_us" in row))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
