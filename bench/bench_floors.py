"""What a durable step cannot cost less than on this machine, part by part.

    python bench/bench_floors.py [--dir DIR] [--n N] [--json]

bench_wal.py measures agent-saga; this measures the parts it is built from, with
no agent-saga logic around them, in one run on one disk, so that each of its
figures can be read against what the design must pay anyway:

* ``inline``: ``os.write`` + ``os.fdatasync`` of one log line on the calling
  thread (the floor);
* ``thread``: the same done by a writer thread that the caller wakes with a lock
  and waits for on another lock (the least a flusher thread adds);
* ``loop, parked``: an asyncio task wakes the writer thread and awaits a future
  that the writer completes with ``call_soon_threadsafe`` (the event loop sleeps
  in its poll meanwhile);
* ``loop, held``: the task waits on a lock on the loop's own thread instead
  (the "spin briefly before parking" idea, without the spinning);
* ``durable step``: one COMPENSABLE step through ``await saga.execute`` on a
  ``FileWAL`` in the same directory, one saga at a time (bench_wal.py's step), in
  blocks that alternate with the rows above. Its p50 is judged against the
  ``loop, parked`` row, the bare loop -> thread -> loop write + fdatasync round
  trip that any durable step of an async saga makes (issue 32's target: at most
  1.2x), and against the raw write + fdatasync (``inline``);
* ``engine, no disk``: one COMPENSABLE step through ``await saga.execute`` on a
  ``MemoryWAL`` (no encoding, no disk, no thread), 1 and 256 sagas: the engine's
  own Python. A MemoryWAL's barrier returns at once, so its sagas never yield to
  one another; ``engine, no disk, one await`` makes each intent's barrier await
  a future the loop completes, as a durable log's barrier does;
* ``codec``: encoding, salting, digesting and chaining one record;
* ``asyncio``: one ``await`` of a future completed by the loop, 256 tasks.

Latencies are p50 over alternating blocks; CPU is ``getrusage`` user+sys of the
whole process per operation. No figure here involves agent-saga's flusher.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import harness
from bench_wal import Ours

from agent_saga.log import FileWAL, MemoryWAL
from agent_saga.log.codec import chain_lines, prepare_lines

_Op = Callable[[], Any]
DURABLE = "durable step"
#: Issue 32: the lone durable step's p50 at most this many times the loop -> thread -> loop floor.
TARGET = 1.2


class _Writer:
    """A thread that appends one line and syncs each time it is woken."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.kick = threading.Lock()
        self.kick.acquire()
        self.done = threading.Lock()
        self.done.acquire()
        self.on_done: Callable[[], None] = self.done.release
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            self.kick.acquire()
            os.write(self.fd, harness.LINE)
            os.fdatasync(self.fd)
            self.on_done()


def _measure(op: _Op, n: int) -> tuple[list[float], float]:
    """Latency samples of ``n`` calls and the process CPU seconds they took."""
    samples = []
    user0, sys0 = harness.cpu_seconds()
    for _ in range(n):
        t0 = time.perf_counter()
        op()
        samples.append(time.perf_counter() - t0)
    user1, sys1 = harness.cpu_seconds()
    return samples, user1 - user0 + sys1 - sys0


def _durable_steps(loop: asyncio.AbstractEventLoop, wal: FileWAL, n: int) -> tuple[list[float], float]:
    """``n`` lone durable steps in one saga: latency samples and CPU seconds (the steps only).

    Timed inside one coroutine (a saga's scope belongs to one task), so, unlike the loop
    rows, no ``run_until_complete`` is in the samples.
    """
    ours = Ours()

    async def block() -> tuple[list[float], float]:
        samples = []
        async with ours.scope(wal) as saga:
            user0, sys0 = harness.cpu_seconds()
            for _ in range(n):
                t0 = time.perf_counter()
                await ours.durable_step(saga)
                samples.append(time.perf_counter() - t0)
            user1, sys1 = harness.cpu_seconds()
        return samples, user1 - user0 + sys1 - sys0

    return loop.run_until_complete(block())


def _disk(directory: Path, n: int) -> dict[str, dict[str, float]]:
    fd = os.open(directory / "floors.bin", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    writer = _Writer(fd)
    loop = asyncio.new_event_loop()
    wal = FileWAL(directory / "durable.wal")

    def inline() -> None:
        os.write(fd, harness.LINE)
        os.fdatasync(fd)

    def thread() -> None:
        writer.kick.release()
        writer.done.acquire()

    async def parked() -> None:
        future = loop.create_future()
        writer.on_done = lambda: loop.call_soon_threadsafe(future.set_result, None)
        writer.kick.release()
        await future

    async def held() -> None:
        writer.on_done = writer.done.release
        writer.kick.release()
        writer.done.acquire()

    ops: dict[str, _Op] = {
        "inline": inline,
        "thread": thread,
        "loop, parked": lambda: loop.run_until_complete(parked()),
        "loop, held": lambda: loop.run_until_complete(held()),
    }
    # run_until_complete costs a few µs of its own: measured, and taken off both loop rows.
    async def nothing() -> None:
        return None

    rows = [*ops, DURABLE]
    lat: dict[str, list[float]] = {k: [] for k in rows}
    cpu: dict[str, float] = dict.fromkeys(rows, 0.0)
    block = max(10, n // 10)
    _durable_steps(loop, wal, block)  # warm up: the first saga imports and registers what it uses
    for _ in range(n // block):  # alternate, so that every row sees the same disk
        for name, op in ops.items():
            samples, seconds = _measure(op, block)
            lat[name] += samples
            cpu[name] += seconds
        samples, seconds = _durable_steps(loop, wal, block)
        lat[DURABLE] += samples
        cpu[DURABLE] += seconds
    base, base_cpu = _measure(lambda: loop.run_until_complete(nothing()), n)
    wal.close()
    loop.close()
    os.close(fd)
    out = {}
    for name in rows:
        extra = harness.percentile(base, 0.5) if name.startswith("loop") else 0.0
        extra_cpu = base_cpu / n if name.startswith("loop") else 0.0
        out[name] = {
            "p50_us": (harness.percentile(lat[name], 0.5) - extra) * 1e6,
            "cpu_us": (cpu[name] / len(lat[name]) - extra_cpu) * 1e6,
        }
    floor = out["inline"]["p50_us"]
    for row in out.values():
        row["ratio"] = row["p50_us"] / floor
    out[DURABLE]["ratio_to_loop_floor"] = out[DURABLE]["p50_us"] / out["loop, parked"]["p50_us"]
    return out


class _AwaitingMemoryWAL(MemoryWAL):
    """A MemoryWAL whose barrier suspends the saga once, as a durable log's does."""

    async def barrier_async(self, ticket: int | None = None, timeout: float | None = None) -> None:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        loop.call_soon(future.set_result, None)
        await future


async def _engine(sagas: int, steps: int, wal: MemoryWAL) -> float:
    ours = Ours()
    ours.flushes = lambda wal: 0  # type: ignore[method-assign]
    await harness.throughput(ours, wal, sagas, 20)
    return (await harness.throughput(ours, wal, sagas, max(4, steps // sagas)))["cpu_us_per_step"]


def _codec(n: int) -> float:
    body = {"tool": "stripe.charge", "semantics": "COMPENSABLE", "op": "o" * 64, "args": {},
            "compensation": {"handler": "bench.refund", "kwargs": {"charge_id": "ch_1"}, "key": "k" * 64,
                             "description": "bench.refund(charge_id='ch_1')", "recoverable": True},
            "fallback": False}
    entries = [(1_700_000_000_000_000, "STEP_INTENT", "s" * 32, 1, body)] * 64
    t0 = time.process_time()
    for _ in range(n // 64):
        chain_lines(prepare_lines(entries), 1, "0" * 64)
    return (time.process_time() - t0) / (n // 64 * 64) * 1e6


async def _awaits(tasks: int, each: int) -> float:
    loop = asyncio.get_running_loop()

    async def one() -> None:
        for _ in range(each):
            future = loop.create_future()
            loop.call_soon(future.set_result, None)
            await future

    t0 = time.process_time()
    await asyncio.gather(*(one() for _ in range(tasks)))
    return (time.process_time() - t0) / (tasks * each) * 1e6


def run(directory: Path, n: int) -> dict[str, Any]:
    gc.disable()
    try:
        return {
            "python": sys.version.split()[0], "cpus": os.cpu_count(), "loadavg_before": os.getloadavg()[0],
            "disk": _disk(directory, n),
            "engine_no_disk_cpu_us": {str(s): asyncio.run(_engine(s, n * 4, MemoryWAL())) for s in (1, 256)},
            "engine_no_disk_await_cpu_us": {
                str(s): asyncio.run(_engine(s, n * 4, _AwaitingMemoryWAL())) for s in (1, 256)
            },
            "codec_us_per_record": _codec(n * 4),
            "asyncio_await_cpu_us": asyncio.run(_awaits(256, max(4, n // 64))),
            "loadavg_after": os.getloadavg()[0],
        }
    finally:
        gc.enable()


def _table(r: dict[str, Any]) -> str:
    lines = [
        f"Floors (Python {r['python']}, {r['cpus']} CPUs, load {r['loadavg_before']:.2f} / {r['loadavg_after']:.2f})",
        f"  {'write + fdatasync of one line':<44}{'p50':>10}{'x floor':>10}{'CPU/op':>12}",
    ]
    for name, row in r["disk"].items():
        lines.append(f"  {name:<44}{row['p50_us']:>8.0f}us{row['ratio']:>9.2f}x{row['cpu_us']:>10.0f}us")
    judged = r["disk"][DURABLE]["ratio_to_loop_floor"]
    lines.append(f"  {'durable step p50 / loop, parked p50':<44}{judged:>9.2f}x "
                 f"(target <= {TARGET}x: {'met' if judged <= TARGET else 'not met'})")
    engine, waits = r["engine_no_disk_cpu_us"], r["engine_no_disk_await_cpu_us"]
    lines += [
        f"  {'engine, no disk: CPU per step, 1 / 256 sagas':<44}{engine['1']:>8.1f}us / {engine['256']:.1f}us",
        f"  {'engine, no disk, one await: same':<44}{waits['1']:>8.1f}us / {waits['256']:.1f}us",
        f"  {'codec: CPU per record':<44}{r['codec_us_per_record']:>8.1f}us",
        f"  {'asyncio: CPU per await, 256 tasks':<44}{r['asyncio_await_cpu_us']:>8.1f}us",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", help="directory on the disk to measure (default: a temp dir)")
    parser.add_argument("--n", type=int, default=1000, help="samples per latency figure")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        result = run(Path(tmp), args.n)
    print(json.dumps(result, indent=2) if args.json else _table(result))


if __name__ == "__main__":
    sys.exit(main())
