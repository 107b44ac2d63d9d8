"""The measurements of bench_wal.py, independent of which agent-saga they measure.

This module never imports ``agent_saga``: the public agent-saga 2.3.x on the index
uses the same import name, so each side runs in its own interpreter and hands the
harness a :class:`Subject` that adapts its API. Both then run the very same code.

Figures (see docs/BENCHMARKS.md for the method):

* ``floor``: ``os.write`` + ``os.fdatasync`` of one log-sized line;
* ``durable``: one COMPENSABLE step (async tool, undo from the result with a
  registered handler), call to return, one saga at a time, in blocks alternating
  with the floor's so both see the same disk;
* ``durable_sync``: the same step through the blocking face (``execute_sync``)
  on a thread of its own, where the subject has one;
* ``throughput``: steps/s, fsyncs/step and process CPU (``getrusage``, user+sys,
  every thread) per step with 1, 8, 64, 256 sagas on one event loop and one log;
* ``reversible``: the overhead of a REVERSIBLE step over calling its tool directly,
  for an async tool, a sync tool run inline, a sync tool on a worker thread, and
  the bare worker-thread hop (``run_in_executor`` alone) for comparison.
"""

from __future__ import annotations

import asyncio
import gc
import os
import resource
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

__all__ = ["LINE", "SAGA_COUNTS", "BlockingSubject", "Subject", "async_tool", "call_async", "call_sync", "cpu_seconds", "floor_samples", "percentile", "run", "sync_tool", "throughput"]

SAGA_COUNTS = (1, 8, 64, 256)
# What a typical intent record weighs on disk; the floor writes one such line.
LINE = (
    b'{"digest":"' + b"d" * 64 + b'","prev":"' + b"p" * 64 + b'","saga":"' + b"s" * 32
    + b'","seq":1,"step":1,"ts":1700000000000000,"type":"STEP_INTENT","body":{"args":{},'
    b'"compensation":null,"fallback":false,"op":"' + b"o" * 32 + b'","semantics":"COMPENSABLE",'
    b'"tool":"stripe.charge"},"salt":"' + b"5" * 32 + b'","hash":"' + b"h" * 64 + b'"}\n'
)


class Subject(Protocol):
    """One agent-saga, as the harness drives it."""

    name: str
    #: Whether a sync tool can be run on the event loop (``inline=True``).
    inline_sync: bool

    def open_log(self, path: Path) -> Awaitable[Any]: ...

    def close_log(self, wal: Any) -> Awaitable[None]: ...

    def flushes(self, wal: Any) -> int: ...

    def scope(self, wal: Any) -> AbstractAsyncContextManager[Any]: ...

    def durable_step(self, saga: Any) -> Awaitable[Any]: ...

    def reversible_async(self, saga: Any, tool: Callable[[], Awaitable[int]]) -> Awaitable[Any]: ...

    def reversible_sync(self, saga: Any, tool: Callable[[], int], inline: bool) -> Awaitable[Any]: ...


class BlockingSubject(Subject, Protocol):
    """A subject that also has a blocking face."""

    def sync_scope(self, wal: Any) -> AbstractContextManager[Any]: ...

    def durable_step_sync(self, saga: Any) -> Any: ...


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def cpu_seconds() -> tuple[float, float]:
    """(user, sys) CPU seconds of this process so far, every thread included."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


def floor_samples(directory: Path, n: int) -> list[float]:
    fd = os.open(directory / "floor.bin", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    samples = []
    try:
        for _ in range(n):
            t0 = time.perf_counter()
            os.write(fd, LINE)
            os.fdatasync(fd)
            samples.append(time.perf_counter() - t0)
    finally:
        os.close(fd)
    return samples


async def _durable_block(subject: Subject, wal: Any, n: int) -> list[float]:
    samples = []
    async with subject.scope(wal) as saga:
        for _ in range(n):
            t0 = time.perf_counter()
            await subject.durable_step(saga)
            samples.append(time.perf_counter() - t0)
    return samples


def _durable_sync_block(subject: BlockingSubject, wal: Any, n: int) -> list[float]:
    samples = []
    with subject.sync_scope(wal) as saga:
        for _ in range(n):
            t0 = time.perf_counter()
            subject.durable_step_sync(saga)
            samples.append(time.perf_counter() - t0)
    return samples


async def throughput(subject: Subject, wal: Any, sagas: int, steps_each: int) -> dict[str, float]:
    async def one() -> None:
        async with subject.scope(wal) as saga:
            for _ in range(steps_each):
                await subject.durable_step(saga)

    total = sagas * steps_each
    flushes0 = subject.flushes(wal)
    user0, sys0 = cpu_seconds()
    t0 = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(sagas)))
    elapsed = time.perf_counter() - t0
    user1, sys1 = cpu_seconds()
    return {
        "steps_per_s": total / elapsed,
        "fsyncs_per_step": (subject.flushes(wal) - flushes0) / total,
        "cpu_us_per_step": (user1 - user0 + sys1 - sys0) / total * 1e6,
        "user_us_per_step": (user1 - user0) / total * 1e6,
    }


async def _overhead(direct: Callable[[], Awaitable[Any]], stepped: Callable[[], Awaitable[Any]], n: int) -> list[float]:
    """``stepped`` minus the median of ``direct``, sample by sample (interleaved)."""
    for _ in range(200):  # warm up caches, the allocator, a worker thread
        await stepped()
    plain, through = [], []
    for _ in range(n):
        t0 = time.perf_counter()
        await direct()
        t1 = time.perf_counter()
        await stepped()
        t2 = time.perf_counter()
        plain.append(t1 - t0)
        through.append(t2 - t1)
    base = statistics.median(plain)
    return [x - base for x in through]


async def async_tool() -> int:
    """The tool of the REVERSIBLE figures (async)."""
    return 1


def sync_tool() -> int:
    """The tool of the REVERSIBLE figures (sync)."""
    return 1


async def call_async() -> int:
    """``async_tool`` called directly: what a REVERSIBLE step's overhead is measured over."""
    return await async_tool()


async def call_sync() -> int:
    """``sync_tool`` called directly."""
    return sync_tool()


async def _reversible(subject: Subject, wal: Any, n: int) -> dict[str, dict[str, float] | None]:
    loop = asyncio.get_running_loop()

    async def hop() -> int:
        return await loop.run_in_executor(None, sync_tool)

    out: dict[str, dict[str, float] | None] = {}
    async with subject.scope(wal) as saga:
        kinds: dict[str, tuple[Callable[[], Awaitable[Any]], Callable[[], Awaitable[Any]] | None]] = {
            "async": (call_async, lambda: subject.reversible_async(saga, async_tool)),
            "sync_inline": (call_sync, (lambda: subject.reversible_sync(saga, sync_tool, True))
                            if subject.inline_sync else None),
            "sync_thread": (call_sync, lambda: subject.reversible_sync(saga, sync_tool, False)),
            "thread_hop_alone": (call_sync, hop),
        }
        for kind, (direct, stepped) in kinds.items():
            if stepped is None:
                out[kind] = None
                continue
            samples = await _overhead(direct, stepped, n)
            out[kind] = {"p50_us": percentile(samples, 0.5) * 1e6, "p99_us": percentile(samples, 0.99) * 1e6}
    return out


async def run(subject: Subject, directory: Path, steps: int) -> dict[str, Any]:
    """Every figure for ``subject``, measured in ``directory`` (one disk, one run)."""
    results: dict[str, Any] = {
        "subject": subject.name, "python": sys.version.split()[0], "cpus": os.cpu_count(),
        "loadavg_before": os.getloadavg()[0],
    }
    wal = await subject.open_log(directory / f"bench-{os.getpid()}.wal")
    try:
        gc.disable()
        floor: list[float] = []
        lat: list[float] = []
        block = max(10, steps // 10)
        for _ in range(steps // block):
            floor += floor_samples(directory, block)
            lat += await _durable_block(subject, wal, block)
        results["floor_p50_ms"] = percentile(floor, 0.5) * 1e3
        results["floor_p99_ms"] = percentile(floor, 0.99) * 1e3
        results["durable_p50_ms"] = percentile(lat, 0.5) * 1e3
        results["durable_p99_ms"] = percentile(lat, 0.99) * 1e3
        results["durable_ratio_to_floor"] = results["durable_p50_ms"] / results["floor_p50_ms"]
        results["durable_sync"] = None
        if hasattr(subject, "durable_step_sync"):
            floor, lat = [], []
            for _ in range(steps // block):
                floor += floor_samples(directory, block)
                lat += await asyncio.to_thread(_durable_sync_block, subject, wal, block)
            results["durable_sync"] = {
                "p50_ms": percentile(lat, 0.5) * 1e3, "p99_ms": percentile(lat, 0.99) * 1e3,
                "ratio_to_floor": percentile(lat, 0.5) / percentile(floor, 0.5),
            }
        results["throughput"] = {}
        for sagas in SAGA_COUNTS:
            steps_each = max(4, (steps * 4) // sagas)
            results["throughput"][str(sagas)] = await throughput(subject, wal, sagas, steps_each)
        results["reversible"] = await _reversible(subject, wal, steps * 4)
    finally:
        gc.enable()
        await subject.close_log(wal)
    results["loadavg_after"] = os.getloadavg()[0]
    return results
