"""Where one durable step's time goes, one saga, blocking face: a timeline per step.

    python bench/trace_step.py [--dir DIR] [--steps N] [--json]

Runs bench_wal.py's durable step through ``execute_sync`` (one saga, so every step
waits for its own flush) with FileWAL's internal hand-offs timestamped, and prints
the median of each interval: the engine before the barrier, waking the flusher,
encoding and writing, the ``fdatasync`` itself, acknowledging, waking the caller,
and the engine after the barrier. A write + ``fdatasync`` floor on the same disk,
measured right after, is printed beside them.

A diagnostic: it wraps private FileWAL methods (and ``os.fdatasync``) to read the
clock, which costs about a microsecond per event; ``test_bench.py`` keeps it working.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import harness
from bench_wal import Ours

from agent_saga import FileWAL, saga_scope

_Events = list[tuple[str, float]]
# (label, from event, to event); "start" and "end" are the step's call and return.
INTERVALS = (
    ("engine before the barrier", "start", "barrier"),
    ("barrier -> flusher has the batch", "barrier", "took"),
    ("encode, chain, write", "write", "fdatasync"),
    ("fdatasync", "fdatasync", "synced"),
    ("flusher: after the sync, acknowledge", "synced", "acked"),
    ("acknowledged -> caller runs again", "acked", "returned"),
    ("engine after the barrier", "returned", "end"),
)


def _instrument(events: _Events) -> Callable[[], None]:
    """Timestamp FileWAL's hand-offs into ``events``; returns the undo."""
    clock = time.perf_counter
    saved: list[tuple[Any, str, Any]] = []

    def wrap(owner: Any, name: str, before: str | None, after: str | None) -> None:
        real = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            if before:
                events.append((before, clock()))
            result = real(*args, **kwargs)
            if after:
                events.append((after, clock()))
            return result

        saved.append((owner, name, real))
        setattr(owner, name, timed)

    wrap(FileWAL, "barrier", "barrier", "returned")
    wrap(FileWAL, "_next_batch", None, "took")
    wrap(FileWAL, "_write", "write", None)
    wrap(os, "fdatasync", "fdatasync", "synced")
    wrap(FileWAL, "_acknowledge", None, "acked")

    def undo() -> None:
        for owner, name, real in reversed(saved):
            setattr(owner, name, real)

    return undo


def run(directory: Path, steps: int) -> dict[str, Any]:
    ours = Ours()
    events: _Events = []
    spans: list[tuple[float, float]] = []
    wal = FileWAL(directory / "trace.wal")
    undo = _instrument(events)
    gc.disable()
    try:
        with saga_scope(wal) as saga:
            for _ in range(50):  # warm up
                ours.durable_step_sync(saga)
            events.clear()
            for _ in range(steps):
                t0 = time.perf_counter()
                ours.durable_step_sync(saga)
                spans.append((t0, time.perf_counter()))
    finally:
        gc.enable()
        undo()
        wal.close()
    timelines = []
    for t0, t1 in spans:
        marks = {"start": t0, "end": t1}
        for name, at in events:
            if t0 <= at <= t1:
                marks.setdefault(name, at)  # the first of each: the intent's barrier
        if all(a in marks and b in marks for _, a, b in INTERVALS):
            timelines.append(marks)
    floor = harness.percentile(harness.floor_samples(directory, steps), 0.5) * 1e6
    return {
        "steps_traced": len(timelines),
        "step_p50_us": statistics.median(t["end"] - t["start"] for t in timelines) * 1e6,
        "floor_p50_us": floor,
        "intervals_p50_us": {
            label: statistics.median(t[b] - t[a] for t in timelines) * 1e6 for label, a, b in INTERVALS
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", help="directory on the disk to measure (default: a temp dir)")
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        result = run(Path(tmp), args.steps)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"One durable step, blocking face, one saga: p50 {result['step_p50_us']:.0f} us "
          f"({result['steps_traced']} steps traced); write + fdatasync floor p50 {result['floor_p50_us']:.0f} us")
    for label, value in result["intervals_p50_us"].items():
        print(f"  {label:<40}{value:>8.0f} us")


if __name__ == "__main__":
    sys.exit(main())
