"""Durable-path and fast-path cost of agent-saga, against this machine's own floor.

    python bench/bench_wal.py [--dir DIR] [--steps N] [--json]

Everything is measured in one run, on one disk, so the ratios travel between
machines even when the absolute numbers do not:

* floor: p50 of ``os.write`` + ``os.fdatasync`` of one log-sized line (what any
  durable append must pay at least once);
* durable step: one COMPENSABLE step through ``saga.execute`` (the default gate,
  a trivial async tool, an undo derived from the result), from call to return,
  one saga at a time; ratio = p50 / floor. The two are measured in alternating
  blocks so that both see the same disk;
* throughput: durable steps per second and fsyncs per step with 1, 8, 64 and 256
  sagas running concurrently on one event loop, sharing one FileWAL;
* fast path: the overhead of a REVERSIBLE step (``execute`` minus a direct await of
  the same tool), in microseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agent_saga import Compensation, FileWAL, compensator, saga_scope
from agent_saga.log.codec import seal
from agent_saga.log.records import GENESIS


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def fsync_floor(directory: Path, n: int) -> list[float]:
    line, _, _ = seal([(1, 1, "STEP_INTENT", "x" * 32, 1, {"tool": "stripe.charge", "args": {"amount": 4200}})],
                      GENESIS)
    path = directory / "floor.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    samples = []
    try:
        for _ in range(n):
            t0 = time.perf_counter()
            os.write(fd, line)
            os.fdatasync(fd)
            samples.append(time.perf_counter() - t0)
    finally:
        os.close(fd)
    return samples


@compensator("bench.refund")
def _refund(charge_id: str, idempotency_key: str | None = None) -> None:
    return None


def _undo(r: Any) -> Compensation:
    # The seed's shape: a registered handler, its argument taken from the result.
    return Compensation(fn=_refund, handler="bench.refund", kwargs={"charge_id": r["id"]})


async def _charge() -> dict[str, str]:
    return {"id": "ch_1"}


async def durable_latency(wal: FileWAL, n: int) -> list[float]:
    samples = []
    async with saga_scope(wal) as s:
        for _ in range(n):
            t0 = time.perf_counter()
            await s.execute(tool="stripe.charge", semantics="COMPENSABLE", forward=_charge, compensate=_undo)
            samples.append(time.perf_counter() - t0)
    return samples


async def throughput(wal: FileWAL, sagas: int, steps_each: int) -> tuple[float, float]:
    async def one() -> None:
        async with saga_scope(wal) as s:
            for _ in range(steps_each):
                await s.execute(tool="stripe.charge", semantics="COMPENSABLE", forward=_charge, compensate=_undo)

    flushes0 = wal.flushes
    t0 = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(sagas)))
    elapsed = time.perf_counter() - t0
    total = sagas * steps_each
    return total / elapsed, (wal.flushes - flushes0) / total


async def reversible_overhead(wal: FileWAL, n: int) -> list[float]:
    async def tool() -> int:
        return 1

    direct, stepped = [], []
    async with saga_scope(wal) as s:
        for _ in range(200):  # warm up caches and the allocator
            await s.execute(tool="cart.add", semantics="REVERSIBLE", forward=tool)
        for _ in range(n):
            t0 = time.perf_counter()
            await tool()
            t1 = time.perf_counter()
            await s.execute(tool="cart.add", semantics="REVERSIBLE", forward=tool)
            t2 = time.perf_counter()
            direct.append(t1 - t0)
            stepped.append(t2 - t1)
    med = statistics.median(direct)
    return [x - med for x in stepped]


async def run(directory: Path, steps: int) -> dict[str, Any]:
    results: dict[str, Any] = {"python": sys.version.split()[0], "cpus": os.cpu_count()}
    wal = FileWAL(directory / "bench.wal")
    try:
        gc.disable()
        # The floor and the durable step are measured in alternating blocks, so
        # both see the same disk: a virtual disk's latency drifts over seconds.
        floor: list[float] = []
        lat: list[float] = []
        block = max(10, steps // 10)
        for _ in range(steps // block):
            floor += fsync_floor(directory, block)
            lat += await durable_latency(wal, block)
        results["floor_p50_ms"] = percentile(floor, 0.5) * 1e3
        results["floor_p99_ms"] = percentile(floor, 0.99) * 1e3
        results["durable_p50_ms"] = percentile(lat, 0.5) * 1e3
        results["durable_p99_ms"] = percentile(lat, 0.99) * 1e3
        results["durable_ratio_to_floor"] = results["durable_p50_ms"] / results["floor_p50_ms"]
        results["throughput"] = {}
        for sagas in (1, 8, 64, 256):
            steps_each = max(4, (steps * 4) // sagas)
            rate, fsyncs = await throughput(wal, sagas, steps_each)
            results["throughput"][sagas] = {"steps_per_s": rate, "fsyncs_per_step": fsyncs}
        overhead = await reversible_overhead(wal, steps * 4)
        results["reversible_overhead_p50_us"] = percentile(overhead, 0.5) * 1e6
        results["reversible_overhead_p99_us"] = percentile(overhead, 0.99) * 1e6
    finally:
        gc.enable()
        wal.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", help="directory on the disk to measure (default: a temp dir)")
    parser.add_argument("--steps", type=int, default=1000, help="samples per latency measurement")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        results = asyncio.run(run(Path(tmp), args.steps))
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"agent-saga WAL benchmark (Python {results['python']}, {results['cpus']} CPUs)")
    print(f"  floor  write+fdatasync        p50 {results['floor_p50_ms']:.3f} ms   p99 {results['floor_p99_ms']:.3f} ms")
    print(f"  durable step, 1 saga          p50 {results['durable_p50_ms']:.3f} ms   p99 {results['durable_p99_ms']:.3f} ms"
          f"   = {results['durable_ratio_to_floor']:.2f} x floor")
    for sagas, row in results["throughput"].items():
        print(f"  {sagas:>3} concurrent sagas          {row['steps_per_s']:>9,.0f} durable steps/s"
              f"   {row['fsyncs_per_step']:.3f} fsyncs/step")
    print(f"  REVERSIBLE step overhead      p50 {results['reversible_overhead_p50_us']:.1f} us"
          f"   p99 {results['reversible_overhead_p99_us']:.1f} us")


if __name__ == "__main__":
    main()
