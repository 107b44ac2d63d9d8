"""What a step served from the log on resume costs, next to the same step run live (issue 41).

    python bench/bench_resume.py [--steps 1000] [--rounds 7] [--json]

One ``@durable`` entry point calls a REVERSIBLE tool ``--steps`` times. A *live* block runs it
as a fresh durable run; a *served* block runs the same entry as a resumed run whose replay holds
the live run's recorded steps (the log answers every call: nothing runs; each served step
appends its STEP_SERVED record). Blocks alternate, live then served, ``--rounds`` times, on a MemoryWAL (the engine's
own Python) and on a FileWAL (as a user gets it); each figure is the median over the rounds of
the process CPU time (``time.process_time``) per step.

It also times ``agent_saga.resume`` end to end on a FileWAL for a run of 100 recorded steps
stopped before its end (claim, chain-checked read of the log, the replay, the end record):
wall and CPU time of the whole call, the median of ``--rounds``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agent_saga import FileWAL, MemoryWAL, SagaQuarantined, durable, resume, tool
from agent_saga.durable_run import entry, run_sync
from agent_saga.engine.resumed import RecordedStep, Replay
from agent_saga.recovery import fold

STOP: dict[str, int] = {}


@tool(semantics="REVERSIBLE")
def think(i: int) -> str:
    return f"thought {i}"


@durable("bench.think")
def thinker(steps: int) -> int:
    for i in range(steps):
        if STOP.get("at") == i:
            raise SagaQuarantined("the run stops here with no end record")
        think(i)
    return steps


def _recorded(records: list[dict[str, Any]], saga_id: str) -> Replay:
    view = fold(records)[saga_id]
    steps = [RecordedStep(s.index, s.tool or "", s.args or {}, "committed", s.semantics or "REVERSIBLE", s.result, True,
                          s.compensation) for s in (view.steps[i] for i in sorted(view.steps))]
    return Replay(steps, last_index=max(view.steps), by="bench")


def _cpu(registered: Any, steps: int, **how: Any) -> float:
    """Process CPU seconds of one durable run of ``steps`` steps (``how``: saga_id, wal, replay)."""
    began = time.process_time()
    run_sync(registered, [steps], {}, **how)
    return time.process_time() - began


def per_step(make_wal: Any, steps: int, rounds: int) -> dict[str, float]:
    """Median CPU microseconds per step, live and served, in alternating blocks."""
    registered = entry("bench.think")
    assert registered is not None
    live: list[float] = []
    served: list[float] = []
    for n in range(rounds):
        wal = make_wal(n)
        saga_id = f"live-{n}"
        live.append(_cpu(registered, steps, saga_id=saga_id, wal=wal))
        wal.barrier()
        replay = _recorded(list(wal.records()), saga_id)
        served.append(_cpu(registered, steps, saga_id=f"served-{n}", wal=wal, replay=replay))
        assert replay.served == steps
        wal.close()
    return {
        "live_us": statistics.median(live) / steps * 1e6,
        "served_us": statistics.median(served) / steps * 1e6,
    }


def resume_whole(directory: Path, steps: int, rounds: int) -> dict[str, float]:
    """``agent_saga.resume`` of a run stopped after ``steps`` recorded steps: median wall and CPU ms."""
    walls, cpus = [], []
    for n in range(rounds):
        path = directory / f"resume-{n}.wal"
        STOP["at"] = steps
        try:
            thinker(steps + 1, saga_id=f"stopped-{n}", wal=path)
        except SagaQuarantined:
            pass
        STOP.clear()
        wall, cpu = time.perf_counter(), time.process_time()
        assert resume(f"stopped-{n}", wal=path, clock=lambda: time.time() + 3600) == steps + 1
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return {"wall_ms": statistics.median(walls) * 1e3, "cpu_ms": statistics.median(cpus) * 1e3}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        figures = {
            "memory": per_step(lambda n: MemoryWAL(), args.steps, args.rounds),
            "file": per_step(lambda n: FileWAL(directory / f"steps-{n}.wal"), args.steps, args.rounds),
            "resume_100": resume_whole(directory, 100, args.rounds),
        }
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    for log in ("memory", "file"):
        row = figures[log]
        print(f"{log:6}  live REVERSIBLE step {row['live_us']:7.1f} us CPU   served step {row['served_us']:7.1f} us CPU"
              f"   ({row['served_us'] / row['live_us']:.2f}x)")
    whole = figures["resume_100"]
    print(f"resume() of a 100-step run: {whole['wall_ms']:.1f} ms wall, {whole['cpu_ms']:.1f} ms CPU (median)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
