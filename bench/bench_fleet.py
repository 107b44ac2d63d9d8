"""Durable steps per second and per-step latency on FileWAL, PostgresWAL and RedisWAL, at 1, 8 and 64
concurrent sagas, and (if a venv with ``dbos`` is given) DBOS's durable step on the same Postgres.

One durable step is one COMPENSABLE ``execute`` inside a saga: its intent is made durable before
the call (the caller waits for that), its commit record is queued for the next round. Every saga
runs STEPS steps then commits. Latency is per step, as the caller sees it.

usage: python bench/bench_fleet.py [--pg URL] [--redis URL] [--dbos-python PATH] [--steps N]
Needs agent-saga[postgres,redis]; the servers of `scripts/services start`. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from agent_saga import ActionSemantics, Compensation, saga_scope
from agent_saga.log.resolve import open_log

STEPS = 5  # per saga
CONCURRENCY = (1, 8, 64)
DBOS_SCRIPT = Path(__file__).with_name("bench_dbos_step.py")


def _undo(result: object) -> Compensation:
    return Compensation(fn=lambda: None, description="undo")


async def _run(target: str, concurrency: int, total_steps: int) -> dict[str, float]:
    wal = open_log(target)
    latencies: list[float] = []
    sagas = max(1, total_steps // STEPS)
    queue: asyncio.Queue[int] = asyncio.Queue()
    for n in range(sagas):
        queue.put_nowait(n)

    async def worker() -> None:
        while not queue.empty():
            queue.get_nowait()
            async with saga_scope(wal, name="bench") as s:
                for _ in range(STEPS):
                    started = time.perf_counter()
                    await s.execute(tool="bench.step", semantics=ActionSemantics.COMPENSABLE,
                                    forward=lambda: {"ok": True}, compensate=_undo)
                    latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    wal.close()
    latencies.sort()
    return {
        "steps_per_s": len(latencies) / elapsed,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
    }


def _dbos(python: str, pg: str, concurrency: int, total_steps: int) -> dict[str, float]:
    out = subprocess.run([python, str(DBOS_SCRIPT), pg, str(concurrency), str(total_steps), str(STEPS)],
                         capture_output=True, text=True, timeout=1800, check=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pg", default=os.environ.get("AGENT_SAGA_TEST_PG_URL",
                                                        "postgresql://postgres@127.0.0.1:55432/postgres"))
    parser.add_argument("--redis", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6399/0"))
    parser.add_argument("--dbos-python", help="a python with `dbos` installed (its own venv)")
    parser.add_argument("--steps", type=int, default=600, help="durable steps per measurement")
    args = parser.parse_args()
    run = uuid.uuid4().hex[:8]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        targets = {
            "FileWAL": lambda c: str(Path(tmp) / f"bench-{c}.wal"),
            "PostgresWAL": lambda c: f"{args.pg}?log=bench-{run}-{c}",
            "RedisWAL": lambda c: f"{args.redis}?log=bench-{run}-{c}",
        }
        for concurrency in CONCURRENCY:
            for name, target in targets.items():
                result = asyncio.run(_run(target(concurrency), concurrency, args.steps))
                rows.append((name, concurrency, result))
                print(f"{name:12} x{concurrency:<3} {json.dumps(result)}", file=sys.stderr, flush=True)
            if args.dbos_python:
                result = _dbos(args.dbos_python, args.pg, concurrency, args.steps)
                rows.append(("DBOS step", concurrency, result))
                print(f"{'DBOS step':12} x{concurrency:<3} {json.dumps(result)}", file=sys.stderr, flush=True)
    print("| log | concurrent sagas | durable steps/s | p50 ms | p99 ms |")
    print("|---|---:|---:|---:|---:|")
    for name, concurrency, r in rows:
        print(f"| {name} | {concurrency} | {r['steps_per_s']:.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} |")


if __name__ == "__main__":
    main()
