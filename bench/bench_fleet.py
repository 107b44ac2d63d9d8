"""Durable steps per second and per-step latency on FileWAL, PostgresWAL and RedisWAL, at 1, 8 and 64
concurrent sagas, and (if a venv with ``dbos`` is given) DBOS's durable step on the same Postgres.

One durable step is one COMPENSABLE ``execute`` inside a saga: its intent is made durable before
the call (the caller waits for that), its commit record is queued for the next round. Every saga
runs STEPS steps then commits. Latency is per step, as the caller sees it.

usage: python bench/bench_fleet.py [--pg URL] [--redis URL] [--dbos-python PATH] [--steps N] [--lone | --bounds | --processes P]
       python bench/bench_fleet.py --ref REV [--rounds R] [--processes P] [--sagas S] [--steps N]
Needs agent-saga[postgres,redis]; the servers of `scripts/services start`. Prints a Markdown table.

``--ref REV`` measures the PostgreSQL figures (a lone step against a bare commit, and P processes x
S sagas, default 4 x 64) for the core at REV and for the working tree's, alternating in one run (each
side in processes of its own, its core extracted as bench/compare.py does), and prints each side's
median over the rounds and the ratio working / reference.

``--bounds`` measures the lone step as ``--lone`` does, and in the same rotation the same step on two logs
cheaper than any PostgresWAL: one whose commit does nothing (the engine and the log's thread hand-offs
alone) and one whose commit is a single autocommit ``INSERT`` of one line. Issue 43 asks a lone step for at
most 2x a bare commit; these say how much of that any log leaves to its own commit.
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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import agent_saga
from agent_saga import ActionSemantics, Compensation, saga_scope
from agent_saga.log.group import GroupCommitWAL
from agent_saga.log.resolve import open_log

STEPS = 5  # per saga
CONCURRENCY = (1, 8, 64)
DBOS_SCRIPT = Path(__file__).with_name("bench_dbos_step.py")
FLOOR_LINE = "x" * 400  # about one intent record's line


def _undo(result: object) -> Compensation:
    return Compensation(fn=lambda: None, description="undo")


async def _saga(wal: Any, latencies: list[float]) -> None:
    """One saga of STEPS durable steps; each step's latency, as its caller sees it, into ``latencies``."""
    async with saga_scope(wal, name="bench") as s:
        for _ in range(STEPS):
            started = time.perf_counter()
            await s.execute(tool="bench.step", semantics=ActionSemantics.COMPENSABLE,
                            forward=lambda: {"ok": True}, compensate=_undo)
            latencies.append(time.perf_counter() - started)


async def _run(target: str, concurrency: int, total_steps: int) -> dict[str, float]:
    wal = open_log(target)
    began = time.time()  # the wall clock, comparable between processes; the log's opening not counted
    cpu = time.process_time()  # every thread's, the flusher's included
    latencies: list[float] = []
    sagas = max(1, total_steps // STEPS)
    queue: asyncio.Queue[int] = asyncio.Queue()
    for n in range(sagas):
        queue.put_nowait(n)

    async def worker() -> None:
        while not queue.empty():
            queue.get_nowait()
            await _saga(wal, latencies)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu
    wal.close()
    latencies.sort()
    return {
        "steps_per_s": len(latencies) / elapsed,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
        "began": began, "ended": began + elapsed, "cpu_us_per_step": cpu / len(latencies) * 1e6,
    }


def _bare_commits(conn: Any, n: int) -> list[float]:
    """``n`` round trips of one ``INSERT`` of a log-sized line and its ``COMMIT``: the floor of any durable
    write to this server."""
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        conn.execute("INSERT INTO agent_saga_bench_floor (line) VALUES (%s)", (FLOOR_LINE,))
        conn.commit()
        samples.append(time.perf_counter() - started)
    return samples


class _FreeCommit(GroupCommitWAL):
    """A log whose commit does nothing: what the engine and the log's thread hand-offs cost around any commit."""

    def __init__(self) -> None:
        super().__init__("free-commit")
        self._start()

    def _commit(self, batch: list[Any]) -> None:
        pass

    def records(self) -> Iterator[Any]:
        return iter(())


class _OneInsert(GroupCommitWAL):
    """A log whose commit is one autocommit INSERT of one line, whatever the batch: one round trip to the
    server, no chain, no head row, no marker. No durable PostgreSQL log commits for less."""

    def __init__(self, pg: str) -> None:
        import psycopg

        super().__init__("one-insert")
        self._conn = psycopg.connect(pg, autocommit=True)
        self._start()

    def _commit(self, batch: list[Any]) -> None:
        self._conn.execute("INSERT INTO agent_saga_bench_floor (line) VALUES (%s)", (FLOOR_LINE,))

    def _release(self, clean: bool) -> None:
        self._conn.close()

    def records(self) -> Iterator[Any]:
        return iter(())


async def _lone_pg(pg: str, run: str, total_steps: int, bounds: bool = False) -> dict[str, float]:
    """A lone saga's durable step on PostgresWAL against a bare INSERT + COMMIT, in alternating blocks.

    ``bounds``: the same step on :class:`_FreeCommit` and :class:`_OneInsert` too, in the same rotation
    (the working tree's core only: they use its log's backend seam).
    """
    import psycopg

    conn = psycopg.connect(pg)
    conn.execute("CREATE TABLE IF NOT EXISTS agent_saga_bench_floor (id bigserial PRIMARY KEY, line text)")
    conn.commit()
    logs = {"step": open_log(f"{pg}?log=bench-{run}-lone")}
    if bounds:
        logs |= {"free": _FreeCommit(), "insert": _OneInsert(pg)}
    floor: list[float] = []
    steps: dict[str, list[float]] = {name: [] for name in logs}
    try:
        for block in range(max(1, total_steps // 50)):
            floor += _bare_commits(conn, 50)
            for name, wal in (list(logs.items()) if block % 2 == 0 else list(logs.items())[::-1]):
                for _ in range(50 // STEPS):
                    await _saga(wal, steps[name])
    finally:
        for wal in logs.values():
            wal.close()
        conn.execute("DROP TABLE agent_saga_bench_floor")
        conn.commit()
        conn.close()
    bare = statistics.median(floor)
    out = {"floor_p50_ms": bare * 1000}
    for name, samples in steps.items():
        out[f"{name}_p50_ms"] = statistics.median(samples) * 1000
        out[f"{name}_ratio"] = statistics.median(samples) / bare
    return out


def _fleet(pg: str, run: str, processes: int, concurrency: int, total_steps: int) -> dict[str, float]:
    """``processes`` processes at once, each ``concurrency`` sagas on its own PostgresWAL of one shared log."""
    children = [
        subprocess.Popen([sys.executable, __file__, "--pg", pg, "--one-process", f"{run}:{concurrency}:{total_steps}"],
                         stdout=subprocess.PIPE, text=True)
        for _ in range(processes)
    ]
    results = [json.loads(child.communicate(timeout=1800)[0]) for child in children]
    # From the first process's first step to the last one's end: their start-ups are not counted,
    # and a process that began late only stretches the span.
    elapsed = max(r["ended"] for r in results) - min(r["began"] for r in results)
    return {
        "steps_per_s": processes * total_steps / elapsed,
        "p50_ms": statistics.median(r["p50_ms"] for r in results),
        "p99_ms": max(r["p99_ms"] for r in results),
        "cpu_us_per_step": statistics.mean(r["cpu_us_per_step"] for r in results),
    }


def _side(src: Path, pg: str, processes: int, sagas: int, steps: int) -> dict[str, float]:
    """Both PostgreSQL figures with the core at ``src``, each in processes of its own."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    figures: dict[str, float] = {}
    for mode in (["--lone"], ["--processes", str(processes), "--sagas", str(sagas)]):
        done = subprocess.run([sys.executable, __file__, "--pg", pg, "--steps", str(steps), "--json", *mode],
                              env=env, capture_output=True, text=True, timeout=1800, check=False)
        if done.returncode != 0:
            raise SystemExit(f"bench_fleet.py {' '.join(mode)} failed with {src}:\n{done.stderr.strip()}")
        out = json.loads(done.stdout)
        if not Path(out.pop("core")).resolve().is_relative_to(src.resolve()):
            raise SystemExit(f"the side meant to run {src} imported another agent_saga")
        figures.update(out)
    return figures


def _compare(ref: str, pg: str, processes: int, sagas: int, steps: int, rounds: int) -> None:
    """The PostgreSQL figures for ``ref``'s core and the working tree's, alternating; medians and ratios."""
    from compare import ROOT, _extract

    values: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory(prefix="agent-saga-fleet-") as tmp:
        sides = {"ref": _extract(ref, Path(tmp)), "work": ROOT / "packages" / "core" / "src"}
        for r in range(rounds):
            for name in (("ref", "work") if r % 2 == 0 else ("work", "ref")):
                for metric, value in _side(sides[name], pg, processes, sagas, steps).items():
                    values.setdefault(metric, {"ref": [], "work": []})[name].append(value)
    print(f"working tree / {ref}: {rounds} alternating rounds, {processes} processes x {sagas} sagas, "
          f"load average {os.getloadavg()[0]:.2f}")
    print("| figure | ref (median) | work (median) | work / ref | by round |")
    print("|---|---:|---:|---:|---|")
    for metric, per in values.items():
        ref_m, work_m = statistics.median(per["ref"]), statistics.median(per["work"])
        by_round = ", ".join(f"{w / x:.2f}" for w, x in zip(per["work"], per["ref"], strict=True))
        print(f"| {metric} | {ref_m:,.2f} | {work_m:,.2f} | {work_m / ref_m:.2f}x | {by_round} |")


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
    parser.add_argument("--lone", action="store_true",
                        help="only a lone saga's PostgresWAL step against a bare INSERT + COMMIT, alternating")
    parser.add_argument("--bounds", action="store_true",
                        help="--lone, and the same step on a log whose commit does nothing and on one whose commit "
                             "is one autocommit INSERT, in the same rotation: what any PostgreSQL log's step costs")
    parser.add_argument("--processes", type=int, default=0,
                        help="only PostgresWAL: this many processes at once, --sagas each, on one log")
    parser.add_argument("--sagas", type=int, default=64, help="concurrent sagas per process with --processes (64)")
    parser.add_argument("--ref", help="compare the PostgreSQL figures with the core at this git revision")
    parser.add_argument("--rounds", type=int, default=4, help="with --ref: rounds per side, alternating (default 4)")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--one-process", help=argparse.SUPPRESS)
    args = parser.parse_args()
    run = uuid.uuid4().hex[:8]
    if args.one_process:
        name, concurrency, total = args.one_process.split(":")
        print(json.dumps(asyncio.run(_run(f"{args.pg}?log=bench-{name}-fleet", int(concurrency), int(total)))))
        return
    if args.ref:
        _compare(args.ref, args.pg, args.processes or 4, args.sagas, args.steps, args.rounds)
        return
    if args.processes:
        fleet = _fleet(args.pg, run, args.processes, args.sagas, args.steps)
        if args.json:
            print(json.dumps({"fleet steps/s": fleet["steps_per_s"], "fleet p50 ms": fleet["p50_ms"],
                              "fleet client CPU us/step": fleet["cpu_us_per_step"], "core": agent_saga.__file__}))
            return
        print(f"PostgresWAL, {args.processes} processes x {args.sagas} sagas, one log: {fleet['steps_per_s']:.0f} durable "
              f"steps/s in total, p50 {fleet['p50_ms']:.2f} ms, p99 {fleet['p99_ms']:.2f} ms")
        return
    if args.lone or args.bounds:
        lone = asyncio.run(_lone_pg(args.pg, run, args.steps, bounds=args.bounds))
        if args.json:
            figures = {"bare commit p50 ms": lone["floor_p50_ms"], "lone step p50 ms": lone["step_p50_ms"],
                       "lone step / bare commit": lone["step_ratio"]}
            if args.bounds:
                figures |= {"free commit step / bare commit": lone["free_ratio"],
                            "one INSERT step / bare commit": lone["insert_ratio"]}
            print(json.dumps({**figures, "core": agent_saga.__file__}))
            return
        print(f"bare INSERT + COMMIT p50 {lone['floor_p50_ms']:.3f} ms; lone PostgresWAL durable step p50 "
              f"{lone['step_p50_ms']:.3f} ms; step / floor {lone['step_ratio']:.2f}x")
        if args.bounds:
            print(f"the same step on a log whose commit does nothing: p50 {lone['free_p50_ms']:.3f} ms "
                  f"({lone['free_ratio']:.2f}x); whose commit is one autocommit INSERT: p50 "
                  f"{lone['insert_p50_ms']:.3f} ms ({lone['insert_ratio']:.2f}x)")
        return
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
