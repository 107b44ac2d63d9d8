"""The flight recorder's replay ("Watch from start") of one long run: CPU time, and how it grows.

    python bench/bench_replay.py [--steps 1000 10000] [--dir DIR] [--json]

For each size, writes a log holding one saga of ``--steps`` COMPENSABLE steps that
then rolls back (about four records per step: intent, commit, compensation started,
compensated), opens it in the debugger's ``RunStore`` and reads the run's whole
replay the way the page does, page after page, with the process CPU time
(``time.process_time``) of the replay alone, apart from reading the log. It also
reports the frames, the pages, the step entries served (what a page must apply),
the bytes of JSON sent (encoding them is inside the CPU time) and, from the second size on, the ratio of each figure to the first size's: a
linear replay's CPU ratio is about the size ratio, a quadratic one's its square.

Against a checkout whose ``replay`` returned one list of full frames (before the
fix), the same script reads that list: ``PYTHONPATH=<old>/packages/core/src``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agent_saga import FileWAL
from agent_saga.ui import FileSource, RunStore

try:
    from agent_saga.inert import inert_json
except ImportError:  # measuring a checkout from before it
    inert_json = None

SAGA = "5a" * 16


def write_run(path: Path, steps: int) -> int:
    """One saga of ``steps`` compensable steps, unwound newest first; returns the records written."""
    with FileWAL(path, linger=0.05) as wal:
        wal.append("SAGA_STARTED", SAGA, {"name": "long-run", "owner": "bench:1", "lease_ttl": 30.0})
        for n in range(1, steps + 1):
            comp = {"handler": "stripe.refund", "kwargs": {"charge": f"ch_{n}"}, "key": f"k.{n}", "recoverable": True}
            wal.append("STEP_INTENT", SAGA, {"tool": "stripe.charge", "semantics": "COMPENSABLE", "op": f"op-{n}",
                                             "args": {"amount": n}, "compensation": comp}, n)
            wal.append("STEP_COMMITTED", SAGA, {"op": f"op-{n}", "compensation": comp}, n)
        wal.append("ROLLBACK_STARTED", SAGA, {"cause": "the bench asked for it"})
        for n in range(steps, 0, -1):
            wal.append("COMPENSATION_STARTED", SAGA, {"attempt": 1, "key": f"k.{n}"}, n)
            wal.append("STEP_COMPENSATED", SAGA, {"key": f"k.{n}"}, n)
        wal.append("SAGA_ROLLED_BACK", SAGA, {})
    return 4 * steps + 3


def _served(answer: Any) -> str:
    """The page as the server sends it: every string inert, then JSON (ui/_debugger.py)."""
    if inert_json is None:  # a checkout from before the inert rendering
        return json.dumps(answer, ensure_ascii=False, default=str)
    return inert_json(answer)


def replay(store: RunStore) -> dict[str, Any]:
    """Every frame of the run, as the page reads them; with what that took."""
    started = time.process_time()
    pages = frames = entries = 0
    truncated = None
    answer: Any = store.replay(SAGA)
    sent = len(_served(answer))
    if isinstance(answer, list):  # before the fix: one list of full frames
        pages, frames = 1, len(answer)
        entries = sum(len(f["steps"]) for f in answer)
        verdict = answer[-1]["verdict"]
    else:
        while True:
            pages += 1
            frames += len(answer["frames"])
            entries += sum(len(f["changed"]) for f in answer["frames"])
            verdict = answer["frames"][-1]["verdict"] if answer["frames"] else verdict
            truncated = answer["truncated"]
            if answer["next"] is None:
                break
            answer = store.replay(SAGA, answer["next"])
            sent += len(_served(answer))
    cpu = time.process_time() - started
    return {"replay_cpu_s": round(cpu, 4), "frames": frames, "pages": pages, "step_entries": entries,
            "json_bytes": sent, "verdict": verdict, "truncated": truncated}


def measure(directory: Path, steps: int) -> dict[str, Any]:
    path = directory / f"replay-{steps}.wal"
    records = write_run(path, steps)
    store = RunStore(FileSource(path))
    started = time.process_time()
    store.refresh()
    load = time.process_time() - started
    row = {"steps": steps, "records": records, "load_cpu_s": round(load, 4)}
    row.update(replay(store))
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[1000, 10000], help="run sizes, in steps")
    parser.add_argument("--dir", type=Path, default=None, help="where to write the logs (default: a temp dir)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        rows = [measure(Path(tmp), n) for n in args.steps]
    first = rows[0]
    for row in rows[1:]:
        row["ratio_to_first"] = {key: round(row[key] / first[key], 2) if first[key] else None
                                 for key in ("steps", "replay_cpu_s", "step_entries", "json_bytes")}
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        print()
        return 0
    for row in rows:
        ratio = row.get("ratio_to_first")
        print(f"{row['steps']:>6} steps, {row['records']:>6} records: replay {row['replay_cpu_s']:.3f} s CPU "
              f"({row['frames']} frames in {row['pages']} page(s), {row['step_entries']} step entries, "
              f"{row['json_bytes'] / 1e6:.1f} MB of JSON), "
              f"log read {row['load_cpu_s']:.3f} s; verdict {row['verdict']!r}"
              + (f"; x{ratio['steps']} steps -> x{ratio['replay_cpu_s']} CPU" if ratio else ""))
        if row["truncated"]:
            print(f"        truncated: {row['truncated']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
