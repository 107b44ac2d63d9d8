"""The same figures for a reference commit and the working tree, alternating in one run, as ratios.

    python bench/compare.py --ref 0ab27a5 [--figures reversible,durable,...] [--rounds 4] [--steps N] [--json]

A figure measured at another moment of a shared machine cannot tell a regression from
the machine's load; the same figure measured right after the reference's, on the same
disk, alternating, can. The reference's core (``packages/core/src`` at ``--ref``) is
extracted with ``git archive`` into a temporary directory (no worktree is registered);
each side then runs in an interpreter of its own (this one, with ``PYTHONPATH`` pointing
at that side's core), driven by this tree's ``bench_wal.Ours`` and ``harness.py``, so
only the core differs. Rounds alternate the order (ref, work / work, ref, ...) and the
table shows each side's median over the rounds and the ratio working / reference (below 1:
the working tree is cheaper).

Figures (each a few metrics):

* ``reversible``: a REVERSIBLE step with an async tool: CPU µs per step over a direct call
  (``getrusage``, alternating blocks) and the interleaved p50 overhead (wall);
* ``reversible-inline``: the same with a sync tool, ``inline=True``;
* ``durable``: a lone durable COMPENSABLE step: CPU µs per step and p50 ÷ the write+fsync floor; and
  the log alone (an intent-sized record appended and awaited durable, no engine) p50 ÷ that floor;
* ``durable-256``: 256 sagas at once on one log: CPU µs per step and steps/s;
* ``instructions``: instructions per REVERSIBLE and per durable step (``bench_instructions.py``,
  callgrind), which the machine's load does not move: one round per side whatever ``--rounds``.
  Needs valgrind; slow (minutes per side on a loaded machine).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import harness

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
# About a durable step's intent body (bench_wal.py's charge).
_INTENT = {"args": {"amount": 100, "currency": "usd"}, "compensation": None, "op": "0" * 32,
           "semantics": "COMPENSABLE", "tool": "stripe.charge"}
FIGURES = ("reversible", "reversible-inline", "durable", "durable-256", "instructions")
DEFAULT = ("reversible", "reversible-inline", "durable", "durable-256")


def _cpu() -> float:
    user, system = harness.cpu_seconds()
    return user + system


async def _cpu_over(direct: Callable[[], Awaitable[Any]], stepped: Callable[[], Awaitable[Any]], n: int) -> float:
    """CPU µs per call of ``stepped`` minus that of ``direct``, in 10 alternating blocks."""
    for _ in range(200):
        await stepped()
    block = max(1, n // 10)
    plain = through = 0.0
    for _ in range(10):
        c0 = _cpu()
        for _ in range(block):
            await direct()
        c1 = _cpu()
        for _ in range(block):
            await stepped()
        c2 = _cpu()
        plain += c1 - c0
        through += c2 - c1
    return (through - plain) / (10 * block) * 1e6


async def _reversible(inline: bool | None, directory: Path, steps: int) -> dict[str, float]:
    from bench_wal import Ours

    ours = Ours()
    wal = await ours.open_log(directory / "compare.wal")
    try:
        async with ours.scope(wal) as saga:
            if inline is None:
                direct, stepped = harness.call_async, (lambda: ours.reversible_async(saga, harness.async_tool))
            else:
                direct, stepped = harness.call_sync, (lambda: ours.reversible_sync(saga, harness.sync_tool, True))
            cpu = await _cpu_over(direct, stepped, steps * 10)
            wall = await harness._overhead(direct, stepped, steps * 4)
    finally:
        await ours.close_log(wal)
    return {"cpu_us_per_step": cpu, "p50_us": harness.percentile(wall, 0.5) * 1e6}


async def _durable(sagas: int, directory: Path, steps: int) -> dict[str, float]:
    from bench_wal import Ours

    ours = Ours()
    wal = await ours.open_log(directory / "compare.wal")
    try:
        await harness.throughput(ours, wal, min(sagas, 8), 10)  # warm up
        if sagas == 1:
            floor, lat, log = [], [], []
            block = max(10, steps // 10)
            for _ in range(steps // block):
                floor += harness.floor_samples(directory, block)
                lat += await harness._durable_block(ours, wal, block)
                log += await _log_round_trips(wal, block)
            tp = await harness.throughput(ours, wal, 1, steps)
            return {"cpu_us_per_step": tp["cpu_us_per_step"],
                    "p50_over_floor": harness.percentile(lat, 0.5) / harness.percentile(floor, 0.5),
                    "log_alone_p50_over_floor": harness.percentile(log, 0.5) / harness.percentile(floor, 0.5)}
        tp = await harness.throughput(ours, wal, sagas, max(4, steps * 4 // sagas))
        return {"cpu_us_per_step": tp["cpu_us_per_step"], "steps_per_s": tp["steps_per_s"]}
    finally:
        await ours.close_log(wal)


async def _log_round_trips(wal: Any, n: int) -> list[float]:
    """``n`` intent-sized records, each appended and awaited durable alone: the log's own round trip, no engine."""
    samples = []
    for i in range(n):
        t0 = time.perf_counter()
        await wal.barrier_async(wal.append("STEP_INTENT", "compare-log", _INTENT, i))
        samples.append(time.perf_counter() - t0)
    return samples


def _child(figure: str, directory: Path, steps: int) -> dict[str, Any]:
    import agent_saga

    gc.disable()
    runs: dict[str, Callable[[], Coroutine[Any, Any, dict[str, float]]]] = {
        "reversible": lambda: _reversible(None, directory, steps),
        "reversible-inline": lambda: _reversible(True, directory, steps),
        "durable": lambda: _durable(1, directory, steps),
        "durable-256": lambda: _durable(256, directory, steps),
    }
    return {**asyncio.run(runs[figure]()), "core": agent_saga.__file__}  # which core ran: the parent checks


def _extract(ref: str, into: Path) -> Path:
    """``packages/core/src`` at ``ref``, written under ``into``; the path of that src."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "packages/core/src"],
                             capture_output=True, check=False)
    if archive.returncode != 0:
        raise SystemExit(f"--ref {ref!r}: git archive failed: {archive.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into / "packages" / "core" / "src"


def _side(src: Path, figure: str, directory: Path, steps: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{BENCH}"}
    if figure == "instructions":
        done = subprocess.run([sys.executable, str(BENCH / "bench_instructions.py"), "--json",
                               "--kinds", "reversible", "durable"], env=env, capture_output=True, text=True,
                              check=False, cwd=directory)
        if done.returncode != 0:
            raise SystemExit(f"bench_instructions.py failed with {src}:\n{done.stderr.strip()}")
        return {f"{r['kind']} instructions": r["instructions_per_step"] for r in json.loads(done.stdout)}
    done = subprocess.run([sys.executable, __file__, "--child", figure, "--dir", str(directory),
                           "--steps", str(steps)], env=env, capture_output=True, text=True, check=False,
                          cwd=directory)
    if done.returncode != 0:
        raise SystemExit(f"{figure} failed with {src}:\n{done.stderr.strip()}")
    out: dict[str, Any] = json.loads(done.stdout)
    core = Path(out.pop("core")).resolve()
    if not core.is_relative_to(src.resolve()):
        raise SystemExit(f"{figure}: the side meant to run {src} imported agent_saga from {core}")
    return out


def compare(ref: str, figures: list[str], rounds: int, steps: int) -> dict[str, Any]:
    """Every figure, ``rounds`` times per side, alternating; per metric each side's values."""
    results: dict[str, dict[str, dict[str, list[float]]]] = {}
    with tempfile.TemporaryDirectory(prefix="agent-saga-compare-") as tmp:
        sides = {"ref": _extract(ref, Path(tmp)), "work": ROOT / "packages" / "core" / "src"}
        for figure in figures:
            # An instruction count does not move with the machine's load: one round of it is enough.
            for r in range(1 if figure == "instructions" else rounds):
                for name in (("ref", "work") if r % 2 == 0 else ("work", "ref")):
                    for metric, value in _side(sides[name], figure, Path(tmp), steps).items():
                        per = results.setdefault(f"{figure}: {metric}", {"ref": {}, "work": {}})
                        per[name].setdefault("values", []).append(value)
    table = {}
    for metric, per in results.items():
        ref_v, work_v = per["ref"]["values"], per["work"]["values"]
        table[metric] = {
            "ref": ref_v, "work": work_v,
            "ref_median": statistics.median(ref_v), "work_median": statistics.median(work_v),
            "ratio": statistics.median(work_v) / statistics.median(ref_v),
            # Round by round (each round ran both sides back to back): the spread of the ratio.
            "ratio_by_round": [w / x for w, x in zip(work_v, ref_v, strict=True)],
        }
    return {"ref": ref, "rounds": rounds, "steps": steps, "loadavg": os.getloadavg()[0], "figures": table}


def _print(run: dict[str, Any]) -> None:
    print(f"working tree / {run['ref']}: {run['rounds']} alternating rounds, load average {run['loadavg']:.2f}")
    print(f"  {'figure: metric':<48}{'ref (median)':>14}{'work (median)':>15}{'work/ref':>10}  by round")
    for metric, row in run["figures"].items():
        rounds = ", ".join(f"{x:.2f}" for x in row["ratio_by_round"])
        print(f"  {metric:<48}{row['ref_median']:>14,.2f}{row['work_median']:>15,.2f}{row['ratio']:>9.2f}x  {rounds}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ref", help="the reference commit (any git revision)")
    parser.add_argument("--figures", default=",".join(DEFAULT),
                        help=f"comma-separated, of {', '.join(FIGURES)} (default: {','.join(DEFAULT)})")
    parser.add_argument("--rounds", type=int, default=4, help="rounds per side, alternating (default 4)")
    parser.add_argument("--steps", type=int, default=1000, help="samples per figure and round (default 1000)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.child, Path(args.dir), args.steps)))
        return
    if not args.ref:
        parser.error("--ref REV is required (the commit to compare the working tree against)")
    figures = [f.strip() for f in args.figures.split(",") if f.strip()]
    unknown = [f for f in figures if f not in FIGURES]
    if unknown:
        parser.error(f"unknown figure {unknown[0]!r}: choose from {', '.join(FIGURES)}")
    run = compare(args.ref, figures, args.rounds, args.steps)
    if args.json:
        print(json.dumps(run, indent=2))
    else:
        _print(run)


if __name__ == "__main__":
    main()
