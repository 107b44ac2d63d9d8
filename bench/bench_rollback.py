"""What a rollback costs, against this machine's fsync floor measured in the same run.

    python bench/bench_rollback.py [--dir DIR] [--rollbacks N] [--undos 1,4,16] [--json]

One saga at a time on a FileWAL (default settings): ``k`` COMPENSABLE steps
(a sync tool run inline, the undo a registered handler taking the result's id),
all of it durable, then ``rollback_sync``; only the rollback is timed. Per ``k``:

* ``rollback_p50_ms`` / ``p99``: wall time of the whole rollback (call to return);
* ``ratio_to_floor``: that p50 over the floor's (``os.write`` + ``os.fdatasync``
  of one log line), measured in blocks alternating with the rollbacks' so both
  see the same disk: roughly how many flushes a rollback waits for
  (``floor_cpu_us`` is the CPU one such write + sync costs, for the next figure);
* ``fsyncs_per_rollback``: the log's write+sync rounds during the rollback;
* ``cpu_us_per_undo``: process CPU (``getrusage``, user+sys, every thread, the
  flusher's included) during the rollback, divided by ``k``.

Each undo's intent, with the previous undo's outcome, is made durable before the
undo is called (so a crash repeats at most the undo in flight): a rollback of
``k`` undos waits for ``k + 1`` flushes. Run this file against another checkout's
engine with ``PYTHONPATH=<checkout>/packages/core/src`` to compare (``source``
in the output says which engine was measured).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import harness

import agent_saga
from agent_saga import ActionSemantics, Compensation, FileWAL, Saga, compensator


@compensator("bench.rollback.refund")
def _refund(charge_id: str, idempotency_key: str | None = None) -> None:
    return None


def _undo(r: Any) -> Compensation:
    return Compensation(fn=_refund, handler="bench.rollback.refund", kwargs={"charge_id": r["id"]})


def _charge() -> dict[str, str]:
    return {"id": "ch_1"}


_CAUSE = RuntimeError("bench: the agent failed")


def _rollback(wal: FileWAL, undos: int) -> tuple[float, int, float]:
    """(seconds, flushes, CPU seconds) of one rollback of ``undos`` durable steps."""
    saga = Saga(wal, name="bench-rollback")
    saga.start()
    for _ in range(undos):
        saga.execute_sync(tool="bench.charge", forward=_charge, semantics=ActionSemantics.COMPENSABLE,
                          compensate=_undo, inline=True)
    wal.barrier()  # the forward part is on disk: only the rollback is measured
    flushes = wal.flushes
    user0, sys0 = harness.cpu_seconds()
    t0 = time.perf_counter()
    report = saga.rollback_sync(_CAUSE)
    elapsed = time.perf_counter() - t0
    user1, sys1 = harness.cpu_seconds()
    assert len(report.compensated) == undos, report.format_text()
    return elapsed, wal.flushes - flushes, user1 - user0 + sys1 - sys0


def run(directory: Path, rollbacks: int, sizes: list[int]) -> dict[str, Any]:
    block = max(5, rollbacks // 10)
    floor: list[float] = []
    floor_cpu = 0.0
    rows: dict[str, dict[str, float]] = {}
    with FileWAL(directory / "rollback.wal") as wal:
        for size in sizes:
            _rollback(wal, size)  # warm up (imports, caches, the file's first blocks)
        samples: dict[int, list[tuple[float, int, float]]] = {size: [] for size in sizes}
        for _ in range(max(1, rollbacks // block)):  # alternate, so every figure sees the same disk
            user0, sys0 = harness.cpu_seconds()
            floor += harness.floor_samples(directory, block)
            user1, sys1 = harness.cpu_seconds()
            floor_cpu += user1 - user0 + sys1 - sys0
            for size in sizes:
                samples[size] += [_rollback(wal, size) for _ in range(block)]
    floor_p50 = harness.percentile(floor, 0.5)
    for size in sizes:
        times = [s[0] for s in samples[size]]
        p50 = harness.percentile(times, 0.5)
        rows[str(size)] = {
            "rollback_p50_ms": p50 * 1e3,
            "rollback_p99_ms": harness.percentile(times, 0.99) * 1e3,
            "ratio_to_floor": p50 / floor_p50,
            "fsyncs_per_rollback": sum(s[1] for s in samples[size]) / len(times),
            "cpu_us_per_undo": sum(s[2] for s in samples[size]) / len(times) / size * 1e6,
        }
    return {
        "source": str(Path(agent_saga.__file__).parent),
        "rollbacks_per_size": len(floor),
        "floor_p50_ms": floor_p50 * 1e3,
        "floor_cpu_us": floor_cpu / len(floor) * 1e6,
        "undos": rows,
    }


def _table(result: dict[str, Any]) -> str:
    lines = [
        f"engine: {result['source']}",
        f"floor (write + fdatasync of one line): p50 {result['floor_p50_ms']:.3f} ms, "
        f"CPU {result['floor_cpu_us']:.1f} us; "
        f"{result['rollbacks_per_size']} rollbacks per size",
        f"{'undos':>6} {'p50 ms':>9} {'p99 ms':>9} {'x floor':>8} {'fsyncs':>7} {'CPU us/undo':>12}",
    ]
    for size, row in result["undos"].items():
        lines.append(
            f"{size:>6} {row['rollback_p50_ms']:>9.3f} {row['rollback_p99_ms']:>9.3f} "
            f"{row['ratio_to_floor']:>8.2f} {row['fsyncs_per_rollback']:>7.2f} {row['cpu_us_per_undo']:>12.1f}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", help="directory on the disk to measure (default: a temp dir)")
    parser.add_argument("--rollbacks", type=int, default=200, help="rollbacks measured per size")
    parser.add_argument("--undos", default="1,4,16", help="comma-separated rollback sizes (undos per rollback)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    try:
        sizes = [int(part) for part in args.undos.split(",")]
    except ValueError:
        parser.error(f"--undos takes comma-separated whole numbers like 1,4,16, got {args.undos!r}")
    if not sizes or min(sizes) < 1:
        parser.error(f"--undos takes sizes of at least 1, got {args.undos!r}")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        result = run(Path(tmp), args.rollbacks, sizes)
    print(json.dumps(result, indent=2) if args.json else _table(result))


if __name__ == "__main__":
    sys.exit(main())
