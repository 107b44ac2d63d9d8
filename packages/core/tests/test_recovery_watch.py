"""recovery.watch: what counts as an outage, the backoff's bounds, and one line per outage.

The real thing (servers killed and restarted under a real `recover --watch`) is in
tests/fleet/test_watch_outages.py; here the loop is driven by a scripted sweep.
"""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st

from agent_saga import FileWAL, RecoveryDaemon
from agent_saga.errors import WALError
from agent_saga.log.server import LogNotFound
from agent_saga.recovery.watch import Backoff, Watch, is_outage


def wrapped(err: BaseException) -> WALError:
    try:
        raise WALError("cannot open the log") from err
    except WALError as outer:
        return outer


@pytest.mark.parametrize("err", [
    ConnectionRefusedError(111, "refused"), ConnectionResetError(), BrokenPipeError(), TimeoutError(),
    redis.ConnectionError("Error 111"), redis.TimeoutError(), redis.BusyLoadingError("LOADING"),
    wrapped(redis.ConnectionError("Error 111")), wrapped(ConnectionRefusedError()),
])
def test_lost_refused_and_timed_out_connections_are_outages(err: BaseException) -> None:
    assert is_outage(err)


@pytest.mark.parametrize("err", [
    ValueError("bug"), WALError("the chain is broken"), redis.ResponseError("WRONGTYPE"), FileNotFoundError(),
    OSError(28, "No space left on device"), wrapped(ValueError("bug")),
])
def test_faults_are_not_outages(err: BaseException) -> None:
    assert not is_outage(err)


@given(st.lists(st.floats(0, 1, exclude_max=True), min_size=1, max_size=40))
def test_the_backoff_doubles_from_a_tenth_to_five_seconds_jittered_down_by_at_most_half(draws: list[float]) -> None:
    rng = iter([*draws, 0.5])
    backoff = Backoff(rng=lambda: next(rng))
    for n, _ in enumerate(draws):
        ceiling = min(5.0, 0.1 * 2**n)
        assert ceiling / 2 <= backoff.next() <= ceiling
    backoff.reset()
    assert backoff.next() <= 0.1


def test_one_line_as_an_outage_begins_and_one_as_it_ends_never_one_per_retry() -> None:
    down = redis.ConnectionError("Error 111 connecting")
    # sweeps: fine, 6 failures, fine, 3 failures, a fault, fine; then the watch is stopped
    script: list[Any] = ["ok", *[down] * 6, "ok", *[wrapped(down)] * 3, ValueError("a bug"), "ok"]
    lines: list[str] = []
    errors: list[Exception] = []
    waits: list[float] = []
    stop = threading.Event()
    daemon: Any = SimpleNamespace(location="redis://h/0", store=SimpleNamespace(exists=lambda: True),
                                  close=lambda: None)

    def sweep(_: Any) -> Any:
        step = script.pop(0)
        if not script:
            stop.set()
        if isinstance(step, Exception):
            raise step
        return SimpleNamespace()

    watch = Watch(lambda: daemon, interval=2.0, say=lines.append, on_error=lambda d, e: errors.append(e),
                  sweep=sweep, backoff=Backoff(rng=lambda: 0.999), close=False)
    real_wait = stop.wait
    stop.wait = lambda timeout=None: waits.append(timeout) or real_wait(0)  # type: ignore[method-assign,func-returns-value]
    watch.run(stop)
    assert [line.split(" ")[1:3] for line in lines] == [["is", "unreachable"], ["answers", "again"]] * 2, lines
    assert watch.outages == 2 and [str(e) for e in errors] == ["a bug"]
    # the retries back off (0.1, 0.2, 0.4 ...), and sweeping resumes at the interval
    assert waits[1:7] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 3.2], rel=0.01)
    assert waits[7] == 2.0 and waits[8:11] == pytest.approx([0.1, 0.2, 0.4], rel=0.01)


def test_a_log_not_there_yet_is_one_line_then_a_wait() -> None:
    lines: list[str] = []
    stop = threading.Event()
    opened = []

    def open_daemon() -> Any:
        opened.append(1)
        if len(opened) < 4:
            raise LogNotFound("no log named 'orders' at redis://h/0 (nothing was created)")
        stop.set()
        return SimpleNamespace(location="redis://h/0", store=SimpleNamespace(exists=lambda: True), close=lambda: None)

    Watch(open_daemon, interval=0.01, say=lines.append, on_error=lambda d, e: None,
          sweep=lambda d: SimpleNamespace(), close=False).run(stop)
    assert len(opened) == 4 and len(lines) == 1 and lines[0].endswith("yet: waiting for it to appear"), lines


@pytest.mark.parametrize("how", ["rename", "delete"])
def test_a_log_moved_or_deleted_after_a_sweep_is_named_as_such(tmp_path: Path, how: str) -> None:
    # Issue 40 item 12: the watcher of a renamed log said only "waiting for it to appear".
    path = tmp_path / "agent.wal"
    with FileWAL(path) as wal:
        wal.append("SAGA_STARTED", "s1", {})
    lines: list[str] = []
    stop = threading.Event()
    sweeps: list[int] = []

    def sweep(daemon: RecoveryDaemon) -> Any:
        report = daemon.sweep()
        sweeps.append(1)
        if how == "rename":
            path.rename(tmp_path / "elsewhere.wal")
        else:
            path.unlink()
        return report

    def say(line: str) -> None:
        lines.append(line)
        stop.set()

    Watch(lambda: RecoveryDaemon(path), interval=0.01, say=say, on_error=lambda d, e: stop.set(),
          sweep=sweep).run(stop)
    assert sweeps == [1] and len(lines) == 1, lines
    assert lines[0].startswith(f"the log this daemon swept at {path} was moved or deleted: "), lines
    assert "waiting for it to appear" not in lines[0]
