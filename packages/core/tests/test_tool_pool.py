"""The bounded pool that runs async sagas' blocking tools (engine/tool_pool.py, issue 32 item 2).

No timing assertion: the tests block tools on events and assert what ran, what waited and
what finished first. A hang guard releases every blocked tool late, so that a regression
fails an assertion instead of hanging the run.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import agent_saga
from agent_saga import FileWAL, MemoryWAL, compensator, saga_scope
from agent_saga.engine.tool_pool import ToolPool, configure_tool_executor, tool_executor_stats
from agent_saga.log.source import log_records

HANG_GUARD = 20.0  # seconds after which a blocked tool is let go: only a broken pool ever gets there


@compensator("test_tool_pool.refund")
def _refund(charge_id: str) -> None:
    return None


def _undo(result: dict[str, str]) -> dict[str, Any]:
    return {"handler": "test_tool_pool.refund", "kwargs": {"charge_id": result["id"]}}


def _wait_until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + HANG_GUARD
    while not condition():
        assert time.monotonic() < deadline, "the pool never reached the state the test waits for"
        time.sleep(0.005)


async def test_a_burst_of_slow_blocking_tools_stalls_neither_an_unrelated_saga_nor_the_flusher(tmp_path: Path) -> None:
    # More slow blocking tools than asyncio's default executor has threads (min(32, CPUs + 4)),
    # each in a saga of its own. On that executor they took every thread, and an unrelated saga
    # whose async tool needed the loop's executor for a moment (asyncio.to_thread, the loop's
    # getaddrinfo) waited for the whole burst. The log's flusher is a thread of the log: the
    # unrelated saga's durable records are made durable while every tool thread is busy.
    release = threading.Event()
    guard = threading.Timer(HANG_GUARD, release.set)
    guard.start()
    burst_size = min(32, (os.cpu_count() or 1) + 4) + 2
    running: list[str] = []
    finished: list[str] = []

    def slow_charge() -> dict[str, str]:
        running.append(threading.current_thread().name)
        release.wait()
        return {"id": "ch_slow"}

    async def in_saga(wal: FileWAL) -> None:
        async with saga_scope(wal) as s:
            await s.execute(tool="crm.slow", semantics="COMPENSABLE", forward=slow_charge, compensate=_undo)
        finished.append("burst")

    async def lookup() -> dict[str, str]:
        return {"id": await asyncio.to_thread(lambda: "ch_fast")}

    wal = FileWAL(tmp_path / "burst.wal")
    other_wal = FileWAL(tmp_path / "other.wal")
    try:
        burst = [asyncio.create_task(in_saga(wal)) for _ in range(burst_size)]
        # (a thread waits, not the loop: asyncio.to_thread would queue behind the burst on main)
        waiter = threading.Thread(target=_wait_until, args=(lambda: len(running) >= min(burst_size - 2, 32),))
        waiter.start()
        while waiter.is_alive():
            await asyncio.sleep(0.005)
        async with saga_scope(other_wal) as s:
            assert await s.execute(tool="dns.lookup", semantics="COMPENSABLE", forward=lookup,
                                   compensate=_undo) == {"id": "ch_fast"}
        finished.append("unrelated")
        stats = tool_executor_stats()
        blocked = not release.is_set()
        release.set()
        await asyncio.gather(*burst)
    finally:
        release.set()
        guard.cancel()
        wal.close()
        other_wal.close()
    assert blocked, "the unrelated saga finished only once the burst was let go"
    assert finished[0] == "unrelated" and finished.count("burst") == burst_size
    assert stats.busy == stats.size and stats.queued == burst_size - stats.size
    assert stats.longest_wait > 0
    assert all(name.startswith("agent-saga-tool-") for name in running)
    committed = [r["type"] for r in log_records(tmp_path / "other.wal", caller="test")]
    assert committed[-1] == "SAGA_COMPLETED" and "STEP_COMMITTED" in committed


@given(size=st.integers(1, 5), calls=st.integers(0, 12))
def test_a_pool_runs_at_most_its_size_at_once_and_every_call_in_the_end(size: int, calls: int) -> None:
    pool = ToolPool(size, name="test-pool", idle_timeout=0.05)  # each example's threads end soon after it
    release = threading.Event()
    lock = threading.Lock()
    now = [0]
    peak = [0]

    def call(n: int) -> int:
        with lock:
            now[0] += 1
            peak[0] = max(peak[0], now[0])
        release.wait(HANG_GUARD)
        with lock:
            now[0] -= 1
        return n

    futures = [pool.submit(lambda n=n: call(n)) for n in range(calls)]  # type: ignore[misc]
    _wait_until(lambda: pool.stats().busy == min(size, calls))
    stats = pool.stats()
    assert (stats.size, stats.busy, stats.queued) == (size, min(size, calls), calls - min(size, calls))
    release.set()
    assert [f.result(HANG_GUARD) for f in futures] == list(range(calls))
    assert peak[0] == min(size, calls)
    _wait_until(lambda: pool.stats().busy == 0)


def test_growing_the_pool_starts_threads_for_waiting_calls_and_shrinking_never_cuts_a_call_short() -> None:
    pool = ToolPool(1, name="test-resize")
    gates = [threading.Event() for _ in range(4)]
    futures = [pool.submit(gate.wait) for gate in gates]
    _wait_until(lambda: pool.stats().busy == 1)
    assert pool.stats().queued == 3
    pool.resize(3)
    _wait_until(lambda: pool.stats().busy == 3)
    assert pool.stats().queued == 1
    pool.resize(1)  # three busy threads for a size of one: each finishes its call first
    for gate in gates[:3]:
        gate.set()
    assert all(f.result(HANG_GUARD) for f in futures[:3])
    _wait_until(lambda: pool.stats().busy == 1)  # the fourth call, on the one thread left
    gates[3].set()
    assert futures[3].result(HANG_GUARD) is True
    names = {t.name for t in threading.enumerate() if t.name.startswith("test-resize-")}
    _wait_until(lambda: len({t.name for t in threading.enumerate() if t.name.startswith("test-resize-")}) <= 1)
    assert len(names) >= 1


def test_idle_threads_end_and_the_next_call_starts_one_again() -> None:
    pool = ToolPool(2, name="test-idle", idle_timeout=0.05)

    def alive() -> int:
        return sum(t.name.startswith("test-idle-") for t in threading.enumerate())

    gate = threading.Event()
    futures = [pool.submit(gate.wait) for _ in range(2)]
    _wait_until(lambda: alive() == 2)
    gate.set()
    assert all(f.result(HANG_GUARD) for f in futures)
    _wait_until(lambda: alive() == 0)
    assert pool.submit(lambda: "again").result(HANG_GUARD) == "again"


def test_a_call_whose_saga_gave_up_before_it_started_never_runs() -> None:
    pool = ToolPool(1, name="test-cancel", idle_timeout=0.05)
    gate = threading.Event()
    ran: list[str] = []
    first = pool.submit(gate.wait)
    _wait_until(lambda: pool.stats().busy == 1)
    second = pool.submit(lambda: ran.append("second"))
    assert second.cancel()
    assert pool.stats().queued == 0
    gate.set()
    assert first.result(HANG_GUARD) is True
    assert pool.submit(lambda: "third").result(HANG_GUARD) == "third"
    assert ran == []


@pytest.mark.parametrize("bad", [0, -1, 2.5, "8", True, None])
def test_a_size_that_is_not_a_thread_count_is_refused_naming_it(bad: Any) -> None:
    with pytest.raises(ValueError, match=r"configure_tool_executor\(max_workers=...\) needs an int >= 1.*got"):
        configure_tool_executor(max_workers=bad)


def test_the_public_names_and_the_size_they_set() -> None:
    before = agent_saga.tool_executor_stats().size
    try:
        agent_saga.configure_tool_executor(max_workers=before + 3)
        assert agent_saga.tool_executor_stats() == agent_saga.ToolExecutorStats(before + 3, 0, 0,
                                                                              tool_executor_stats().longest_wait)
    finally:
        agent_saga.configure_tool_executor(max_workers=before)


async def test_a_blocking_tool_sees_the_saga_and_runs_on_a_named_tool_thread() -> None:
    seen: list[tuple[str, bool]] = []

    def charge() -> dict[str, str]:
        seen.append((threading.current_thread().name, agent_saga.current_saga() is not None))
        return {"id": "ch_1"}

    async with saga_scope(MemoryWAL()) as s:
        await s.execute(tool="payments.charge", semantics="COMPENSABLE", forward=charge, compensate=_undo)
    assert len(seen) == 1 and seen[0][0].startswith("agent-saga-tool-") and seen[0][1]


_INTERRUPTED = textwrap.dedent("""
    import asyncio, faulthandler, signal, sys, threading, time
    from pathlib import Path
    faulthandler.register(signal.SIGUSR1)  # the test asks for every thread's stack if this hangs
    from agent_saga import FileWAL, compensator, saga_scope

    @compensator("refund")
    def refund(charge_id: str) -> None:
        Path(sys.argv[2]).with_suffix(".refunded").write_text(charge_id)

    def slow_export() -> None:
        Path(sys.argv[2]).write_text("started")
        if sys.argv[3] == "thread":  # the race, made certain: the C handler runs on this thread
            signal.pthread_kill(threading.get_ident(), signal.SIGINT)
        time.sleep(600)  # far longer than the test waits for the process

    async def main() -> None:
        async with saga_scope(FileWAL(sys.argv[1])) as s:
            await s.execute(tool="charge", semantics="COMPENSABLE", forward=lambda: {"id": "ch_1"},
                            compensate=lambda r: {"handler": "refund", "kwargs": {"charge_id": r["id"]}})
            await s.execute(tool="export", semantics="IRREVERSIBLE", forward=slow_export)

    def main_sync() -> None:  # a sync saga: a step with a timeout runs its tool on a thread of its own
        with saga_scope(FileWAL(sys.argv[1])) as s:
            s.execute(tool="charge", semantics="COMPENSABLE", forward=lambda: {"id": "ch_1"},
                      compensate=lambda r: {"handler": "refund", "kwargs": {"charge_id": r["id"]}})
            s.execute(tool="export", semantics="IRREVERSIBLE", forward=slow_export, timeout=600)

    if sys.argv[4] == "sync":
        main_sync()
    else:
        asyncio.run(main())
""")


@pytest.mark.slow
@pytest.mark.parametrize("face", ["async", "sync"])
@pytest.mark.parametrize("delivered", ["process", "thread"])
def test_ctrl_c_during_a_blocking_tool_records_the_rollback_and_exits_without_waiting_for_it(
    tmp_path: Path, delivered: str, face: str,
) -> None:
    # asyncio's default executor is joined at exit: after Ctrl-C had recorded the rollback,
    # the process waited for the abandoned tool (here ten minutes). The pool's threads are
    # daemons: the process exits once the rollback is recorded; the step stays UNKNOWN.
    # "thread": the signal lands on the tool's thread, as it did about once in 500 runs
    # under load; asyncio.run's handler then stayed pending while the loop slept with
    # nothing due, until the tool returned (engine/invoke.py, _Heartbeat). A sync saga's
    # step with a timeout waited in one join(timeout), which a signal handled on another
    # thread does not wake: Ctrl-C then took the whole timeout (invoke.py, _in_thread).
    script, log, started = tmp_path / "run.py", tmp_path / "agent-saga.wal", tmp_path / "started"
    script.write_text(_INTERRUPTED)
    # SIGINT back to its default in the child, so Python turns it into KeyboardInterrupt
    # even when this test runs with SIGINT ignored.
    child = subprocess.Popen([sys.executable, str(script), str(log), str(started), delivered, face],
                             stderr=subprocess.PIPE, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        _wait_until(lambda: started.exists() or child.poll() is not None)
        if delivered == "process":
            assert child.poll() is None, child.communicate()[1].decode()
            child.send_signal(signal.SIGINT)
        try:
            _stdout, stderr = child.communicate(timeout=120)  # the tool would take 600 s
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGUSR1)  # where it hangs, before it is killed
            time.sleep(1)
            child.kill()
            raise AssertionError("still running 120 s after Ctrl-C:\n" + child.communicate()[1].decode()) from None
    finally:
        child.kill()
        child.wait()
    assert "KeyboardInterrupt" in stderr.decode()
    records = log_records(log, caller="test")
    states = [(r["type"], r.get("step")) for r in records]
    assert ("STEP_UNKNOWN", 2) in states and ("STEP_COMMITTED", 2) not in states
    assert ("STEP_COMPENSATED", 1) in states and states[-2:] in ([("SAGA_ROLLED_BACK", None), ("ESCALATED", 2)],
                                                                [("ESCALATED", 2), ("SAGA_ROLLED_BACK", None)])
    assert started.with_suffix(".refunded").read_text() == "ch_1"
