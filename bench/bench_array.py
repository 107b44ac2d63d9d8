"""What a saga.array capture costs, against a bare copy of the same bytes in the same run.

    python bench/bench_array.py [--sizes 1000,1000000,100000000] [--json] [--dir DIR]

A capture is a copy of the whole buffer (``bytes(arr)``); not copy-on-write of touched
pages. Per size (bytes of array data):

* ``floor_cpu_us``: CPU per ``bytes(buf)`` of a plain bytearray of that size,
  the memcpy any whole-buffer capture pays at least;
* ``capture_cpu_us`` / ``ratio_to_floor``: CPU per capture of a SagaArray (``bytes(arr)``,
  what the snapshot's capture runs) and its ratio to the floor;
* ``write_in_saga_cpu_us``: CPU of the first write after a step boundary inside a saga on a
  MemoryWAL: the capture plus the REVERSIBLE ``snapshot`` step that records it;
* ``restore_cpu_us``: CPU per ``rollback()`` (an in-place copy back).

CPU is ``getrusage`` (user + sys, the whole process): a loaded machine does not move it
the way it moves wall time. ``gc`` is disabled while measuring. ``--dir`` is accepted
for the benchmark harness's common interface; nothing is written.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from collections.abc import Callable
from typing import Any

import harness

import agent_saga
from agent_saga import MemoryWAL, saga_scope


def _cpu_per_op(op: Callable[[], Any], reps: int) -> float:
    """Process CPU microseconds per call of ``op``, over ``reps`` calls."""
    user0, sys0 = harness.cpu_seconds()
    for _ in range(reps):
        op()
    user1, sys1 = harness.cpu_seconds()
    return (user1 - user0 + sys1 - sys0) / reps * 1e6


def _reps(size: int) -> int:
    # Enough CPU per figure to rise above getrusage's granularity, bounded for the largest size.
    return max(10, min(20_000, 2_000_000_000 // max(size, 1) // 50))


def measure(size: int) -> dict[str, float]:
    reps = _reps(size)
    plain = bytearray(b"\1" * size)  # written, so its pages are real (not the shared zero page)
    arr = agent_saga.SagaArray("B", plain)
    # Floor and capture alternate (two blocks each) after a warm-up, so both see the same allocator.
    bytes(plain), bytes(arr)
    half = max(1, reps // 2)
    floors, captures = [], []
    for _ in range(2):
        floors.append(_cpu_per_op(lambda: bytes(plain), half))
        captures.append(_cpu_per_op(lambda: bytes(arr), half))
    floor, capture = min(floors), min(captures)  # the better half of each: the allocator's warm-up drops out
    plain = bytearray()  # free it before the saga figures
    wal = MemoryWAL()

    def write_in_saga() -> None:
        with saga_scope(wal, name="bench-array"):
            arr[0] = 1  # the first write after the boundary: captured whole, then written
        wal._records.clear()

    write_in_saga()  # warm: the first saga pays imports and the gate's set-up
    in_saga = _cpu_per_op(write_in_saga, reps)
    # Bare saga overhead (open, a REVERSIBLE step, complete) without a capture: subtract-able.
    empty = agent_saga.SagaArray("B", b"\0")

    def bare_saga() -> None:
        with saga_scope(wal, name="bench-array"):
            empty[0] = 1
        wal._records.clear()

    bare = _cpu_per_op(bare_saga, reps)
    restore = _cpu_per_op(arr.rollback, reps)
    return {
        "reps": reps, "floor_cpu_us": floor, "capture_cpu_us": capture,
        "ratio_to_floor": capture / floor if floor > 0 else float("nan"),
        "write_in_saga_cpu_us": in_saga, "saga_with_1_byte_array_cpu_us": bare, "restore_cpu_us": restore,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,1000000,100000000")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--dir", default=None, help="unused: nothing is written")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    gc.disable()
    try:
        rows = {str(size): measure(size) for size in sizes}
    finally:
        gc.enable()
    out = {"python": sys.version.split()[0], "sizes": rows}
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"{'bytes':>12} {'reps':>6} {'floor us':>11} {'capture us':>11} {'x floor':>8} "
          f"{'write in saga us':>17} {'(1-byte saga us)':>17} {'restore us':>11}")
    for size, row in rows.items():
        print(f"{int(size):>12,} {row['reps']:>6.0f} {row['floor_cpu_us']:>11.2f} {row['capture_cpu_us']:>11.2f} "
              f"{row['ratio_to_floor']:>8.2f} {row['write_in_saga_cpu_us']:>17.2f} "
              f"{row['saga_with_1_byte_array_cpu_us']:>17.2f} {row['restore_cpu_us']:>11.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
