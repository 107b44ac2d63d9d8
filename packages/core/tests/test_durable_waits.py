"""Issue 41 part 5 in one process: durable sleeps, waits for events, signals, and each refusal.

Time is a test clock (``WaitClock``): it records every park and moves on without sleeping, so
"sleeps only the remainder" is a recorded wake-up time and a recorded park, never a measured
delay. Orderings (a signal before the wait, during it, racing its timeout) are forced with
events. A run is stopped the way no end record gets written by raising ``SagaQuarantined``
(as in ``test_resume.py``); the runs killed for real are in ``test_durable_waits_crash.py``.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli_support import run_cli

from agent_saga import (
    BoundaryRequired,
    ConfigurationError,
    EventTimedOut,
    FileWAL,
    MemoryWAL,
    SagaAborted,
    SagaQuarantined,
    SignalRefused,
    current_saga,
    durable,
    durable_sleep,
    durable_sleep_async,
    resume,
    saga_scope,
    signal,
    wait_for_event,
    wait_for_event_async,
)
from agent_saga.engine.waits import Wakeup
from agent_saga.log.file import read_records

T0 = 1_000_000.0
LONG = 3600.0  # a poll so long that only a nudge (or a signal already in the log) ends a wait in a test


class TestClock:
    """A WaitClock: ``now`` is ``t``; each park is recorded, then ``on_park`` runs (default: time moves on)."""

    __test__ = False

    def __init__(self, t: float = T0, on_park: Callable[[TestClock, float, Wakeup], None] | None = None) -> None:
        self.t = t
        self.parks: list[float] = []
        self.on_park = on_park

    def now(self) -> float:
        return self.t

    def park(self, seconds: float, wakeup: Wakeup) -> None:
        self.parks.append(seconds)
        if self.on_park is not None:
            self.on_park(self, seconds, wakeup)
        else:
            self.t += seconds

    async def park_async(self, seconds: float, wakeup: Wakeup) -> None:
        self.park(seconds, wakeup)


HOOK: dict[str, Any] = {}


@pytest.fixture(autouse=True)
def _clean() -> None:
    HOOK.clear()


def _bodies(wal: Path, rtype: str) -> list[dict[str, Any]]:
    return [r["body"] for r in read_records(wal) if r["type"] == rtype]


def _seq(wal: Path, rtype: str) -> list[int]:
    return [r["seq"] for r in read_records(wal) if r["type"] == rtype]


def _stopped(clock: TestClock, seconds: float, wakeup: Wakeup) -> None:
    raise SagaQuarantined("stopped while it waited, with no end record (a crash's stand-in)")


@durable("test.waits.nap")
def nap(seconds: float) -> str:
    durable_sleep(seconds, clock=HOOK["clock"])
    if HOOK.get("stop"):
        raise SagaQuarantined("stopped with no end record (a crash's stand-in)")
    return "rested"


@durable("test.waits.nap_async")
async def anap(seconds: float) -> str:
    await durable_sleep_async(seconds, clock=HOOK["clock"])
    return "rested"


def test_a_sleep_records_its_wake_up_time_before_it_parks_and_parks_until_it(tmp_path: Path) -> None:
    wal = tmp_path / "w.wal"
    HOOK["clock"] = TestClock()
    assert nap(LONG, saga_id="s-1", wal=str(wal)) == "rested"
    (started,) = _bodies(wal, "WAIT_STARTED")
    assert started == {"wait": "sleep", "name": "", "n": 1, "seconds": LONG, "until": T0 + LONG}
    assert HOOK["clock"].parks == [LONG]
    assert [b["outcome"] for b in _bodies(wal, "WAIT_ENDED")] == ["woke"]
    assert _seq(wal, "WAIT_STARTED")[0] < _seq(wal, "WAIT_ENDED")[0] < _seq(wal, "SAGA_COMPLETED")[0]


async def test_the_async_sleep_records_and_parks_the_same_way(tmp_path: Path) -> None:
    wal = tmp_path / "w.wal"
    HOOK["clock"] = TestClock()
    assert await anap(90, saga_id="s-1", wal=str(wal)) == "rested"
    assert _bodies(wal, "WAIT_STARTED")[0]["until"] == T0 + 90 and HOOK["clock"].parks == [90]


def test_a_resumed_sleep_parks_only_until_its_recorded_wake_up_time(tmp_path: Path) -> None:
    wal = tmp_path / "w.wal"
    HOOK["clock"] = TestClock(on_park=_stopped)  # stopped in its first park
    with pytest.raises(SagaQuarantined):
        nap(LONG, saga_id="s-1", wal=str(wal))
    assert _bodies(wal, "WAIT_ENDED") == []

    HOOK["clock"] = TestClock(T0 + 600)  # ten minutes later
    assert resume("s-1", wal=str(wal), clock=lambda: time.time() + LONG) == "rested"
    assert HOOK["clock"].parks == [LONG - 600]  # fifty minutes, not sixty
    assert len(_bodies(wal, "WAIT_STARTED")) == 1  # the wake-up time is the one recorded first
    assert [b["outcome"] for b in _bodies(wal, "WAIT_ENDED")] == ["woke"]


def test_a_sleep_that_ended_before_the_stop_is_served_from_the_log(tmp_path: Path) -> None:
    wal = tmp_path / "w.wal"
    HOOK.update(clock=TestClock(), stop=True)
    with pytest.raises(SagaQuarantined):
        nap(LONG, saga_id="s-1", wal=str(wal))
    HOOK.update(clock=TestClock(T0 + 10), stop=False)  # the recorded wake-up time has not come yet
    assert resume("s-1", wal=str(wal), clock=lambda: time.time() + LONG) == "rested"
    assert HOOK["clock"].parks == []  # it had ended: no park, no new record
    assert len(_bodies(wal, "WAIT_STARTED")) == len(_bodies(wal, "WAIT_ENDED")) == 1


@durable("test.waits.await")
def await_go(timeout: float | None) -> Any:
    if "before" in HOOK:
        HOOK["before"]()
    try:
        first = wait_for_event("go", timeout=timeout, clock=HOOK["clock"], poll=LONG)
    except EventTimedOut:
        first = "timed out"
    if "between" in HOOK:
        HOOK["between"]()
    if HOOK.get("again"):
        return [first, wait_for_event("go", timeout=0, clock=HOOK["clock"], poll=LONG)]
    return first


def test_a_signal_sent_before_the_wait_began_is_delivered(tmp_path: Path) -> None:
    wal = tmp_path / "w.wal"
    HOOK.update(clock=TestClock(), before=lambda: signal("s-1", "go", {"ok": True}, wal=str(wal)))
    assert await_go(60, saga_id="s-1", wal=str(wal)) == {"ok": True}
    (ended,) = _bodies(wal, "WAIT_ENDED")
    assert ended["outcome"] == "signalled" and ended["signal"] == _seq(wal, "EVENT_SIGNALLED")[0]
    assert HOOK["clock"].parks == []


def _parked_then(act: Callable[[], None]) -> Callable[[TestClock, float, Wakeup], None]:
    """A park that runs ``act`` (once) on another thread and really waits for the nudge, bounded."""

    def park(clock: TestClock, seconds: float, wakeup: Wakeup) -> None:
        if len(clock.parks) == 1:
            threading.Thread(target=act).start()
        HOOK["rung"] = wakeup.wait(60)  # a nudge ends this at once; 60 s only if the nudge never came

    return park


def test_a_signal_from_this_process_wakes_the_wait_at_once(tmp_path: Path) -> None:
    wal = tmp_path / "w.wal"
    HOOK["clock"] = TestClock(on_park=_parked_then(lambda: signal("s-1", "go", [1, 2], wal=str(wal))))
    assert await_go(None, saga_id="s-1", wal=str(wal)) == [1, 2]
    assert HOOK["rung"] is True and len(HOOK["clock"].parks) == 1  # one park, ended by the nudge
    assert _bodies(wal, "WAIT_STARTED")[0]["until"] is None


@durable("test.waits.await_async")
async def await_go_async() -> Any:
    return await wait_for_event_async("go", timeout=None, clock=HOOK["clock"], poll=LONG)


class _AsyncParked(TestClock):
    """Parks on the wakeup for real, in the event loop; the first park lets the test signal."""

    __test__ = False

    async def park_async(self, seconds: float, wakeup: Wakeup) -> None:
        self.parks.append(seconds)
        HOOK["parked"].set()
        HOOK["rung"] = await wakeup.wait_async(60)


async def test_a_signal_from_another_thread_wakes_an_async_wait(tmp_path: Path) -> None:
    wal = tmp_path / "w.wal"
    HOOK.update(clock=_AsyncParked(), parked=threading.Event())
    run = asyncio.ensure_future(await_go_async(saga_id="s-1", wal=str(wal)))
    assert await asyncio.to_thread(HOOK["parked"].wait, 60)
    await asyncio.to_thread(signal, "s-1", "go", "yes", wal=str(wal))
    assert await asyncio.wait_for(run, 60) == "yes"
    assert HOOK["rung"] is True and len(HOOK["clock"].parks) == 1


def test_a_signal_in_the_log_when_the_waiter_looks_wins_even_past_the_deadline(tmp_path: Path) -> None:
    wal = tmp_path / "w.wal"

    def late(clock: TestClock, seconds: float, wakeup: Wakeup) -> None:
        signal("s-1", "go", "just in time", wal=str(wal))  # first the signal, then the deadline passes
        clock.t += seconds + 30

    HOOK["clock"] = TestClock(on_park=late)
    assert await_go(10, saga_id="s-1", wal=str(wal)) == "just in time"
    assert [b["outcome"] for b in _bodies(wal, "WAIT_ENDED")] == ["signalled"]


def test_a_timeout_recorded_first_leaves_the_late_signal_for_the_next_wait(tmp_path: Path) -> None:
    wal = tmp_path / "w.wal"
    HOOK.update(clock=TestClock(), again=True, between=lambda: signal("s-1", "go", "late", wal=str(wal)))
    assert await_go(10, saga_id="s-1", wal=str(wal)) == ["timed out", "late"]
    ended = _bodies(wal, "WAIT_ENDED")
    assert [(b["n"], b["outcome"]) for b in ended] == [(1, "timed_out"), (2, "signalled")]
    assert ended[1]["signal"] == _seq(wal, "EVENT_SIGNALLED")[0]


def test_a_resumed_wait_replays_its_recorded_timeout_not_a_signal_sent_since(tmp_path: Path) -> None:
    wal = tmp_path / "w.wal"

    def stop() -> None:
        raise SagaQuarantined("stopped after the timeout (a crash's stand-in)")

    HOOK.update(clock=TestClock(), between=stop)
    with pytest.raises(SagaQuarantined):
        await_go(10, saga_id="s-1", wal=str(wal))
    signal("s-1", "go", "too late", wal=str(wal))
    HOOK.update(clock=TestClock(T0), between=lambda: None)
    assert resume("s-1", wal=str(wal), clock=lambda: time.time() + LONG) == "timed out"
    assert [b["outcome"] for b in _bodies(wal, "WAIT_ENDED")] == ["timed_out"]
    assert HOOK["clock"].parks == []


def test_a_resumed_wait_gets_the_signal_sent_while_its_run_was_stopped(tmp_path: Path) -> None:
    wal = tmp_path / "w.wal"
    HOOK["clock"] = TestClock(on_park=_stopped)
    with pytest.raises(SagaQuarantined):
        await_go(LONG, saga_id="s-1", wal=str(wal))
    signal("s-1", "go", {"while": "dead"}, wal=str(wal))
    HOOK["clock"] = TestClock(T0 + 60)
    assert resume("s-1", wal=str(wal), clock=lambda: time.time() + LONG) == {"while": "dead"}
    assert len(_bodies(wal, "WAIT_STARTED")) == 1 and HOOK["clock"].parks == []
    assert [b["outcome"] for b in _bodies(wal, "WAIT_ENDED")] == ["signalled"]


# -- refusals ------------------------------------------------------------------------------------


def test_waits_outside_a_durable_run_are_refused_in_one_line(tmp_path: Path) -> None:
    for call in (lambda: durable_sleep(1), lambda: wait_for_event("go", timeout=1)):
        with pytest.raises(BoundaryRequired, match="not inside a @durable run") as outside:
            call()
        assert "\n" not in str(outside.value)
        with saga_scope(MemoryWAL()), pytest.raises(BoundaryRequired, match="not inside a @durable run"):
            call()  # a plain saga is not a durable run: nothing would resume it


@durable("test.waits.bad")
def bad_wait(what: str) -> str:
    try:
        {"sleep": lambda: durable_sleep(-1), "nan": lambda: durable_sleep(float("nan")),
         "name": lambda: wait_for_event("", timeout=1), "timeout": lambda: wait_for_event("go", timeout=-5),
         "poll": lambda: wait_for_event("go", timeout=1, poll=0)}[what]()
    except ConfigurationError as err:
        return str(err)
    return "not refused"


@pytest.mark.parametrize(("what", "says"), [
    ("sleep", r"durable_sleep\(seconds\) must be a finite number of seconds >= 0, got -1"),
    ("nan", "got nan"),
    ("name", "the event's name must be a non-empty str"),
    ("timeout", r"timeout=\) must be a finite number"),
    ("poll", r"poll=\) must be more than 0"),
])
def test_bad_wait_arguments_are_refused_in_one_line(what: str, says: str) -> None:
    refused = bad_wait(what, wal=MemoryWAL())
    assert re.search(says, refused) and "\n" not in refused, refused


@durable("test.waits.done")
def done() -> str:
    return "done"


def test_signals_that_no_wait_could_take_are_refused_in_one_line(tmp_path: Path) -> None:
    wal = tmp_path / "w.wal"
    done(saga_id="s-done", wal=str(wal))
    with saga_scope(FileWAL(wal), saga_id="s-plain"):
        pass
    cases: list[tuple[Callable[[], None], str]] = [
        (lambda: signal("nobody", "go", 1, wal=str(wal)), "no saga nobody in"),
        (lambda: signal("s-done", "go", 1, wal=str(wal)), r"already ended \(SAGA_COMPLETED\)"),
        (lambda: signal("s-plain", "go", 1, wal=str(wal)), "was not started by a @durable entry point"),
        (lambda: signal("s-done", "go", {1, 2}, wal=str(wal)), "the data is not JSON"),
        (lambda: signal("s-done", "go", "x" * 70_000, wal=str(wal)), "more than the 65536"),
        (lambda: signal("s-done", "", 1, wal=str(wal)), "the event's name must be a non-empty str"),
        (lambda: signal("s-done", "go", 1, wal=str(tmp_path / "none.wal")), "no log at"),
    ]
    before = len(list(read_records(wal)))
    for call, says in cases:
        with pytest.raises(SignalRefused, match=says) as refused:
            call()
        assert "\n" not in str(refused.value)
    assert len(list(read_records(wal))) == before  # nothing written
    assert not (tmp_path / "none.wal").exists()


# -- agent-saga signal ---------------------------------------------------------------------------


def _stopped_waiting(wal: Path) -> None:
    """A run stopped in its wait for "go" (no end record): open, waiting to be signalled and resumed."""
    HOOK["clock"] = TestClock(on_park=_stopped)
    with pytest.raises(SagaQuarantined):
        await_go(LONG, saga_id="s-1234567", wal=str(wal))


def test_the_signal_verb_sends_json_data_that_the_resumed_wait_returns(tmp_path: Path) -> None:
    wal = tmp_path / "w.wal"
    _stopped_waiting(wal)
    sent = run_cli("signal", "s-123", "go", "--data", '{"approved": [1, 2]}', "--wal-path", str(wal))
    assert sent.returncode == 0, sent.stderr
    assert "signalled go to saga s-1234567" in sent.stdout  # a prefix names the saga, as for every verb
    (body,) = _bodies(wal, "EVENT_SIGNALLED")
    assert body["name"] == "go" and body["data"] == {"approved": [1, 2]} and body["by"].startswith("signal@")
    HOOK["clock"] = TestClock(T0 + 1)
    assert resume("s-1234567", wal=str(wal), clock=lambda: time.time() + LONG) == {"approved": [1, 2]}


@pytest.mark.parametrize(("argv", "code", "says"), [
    (["s-1234567", "go", "--data", "{not json"], 2, "--data is not JSON"),
    (["s-1234567", "go", "--data", "NaN"], 2, "NaN is not a JSON number"),
    (["nobody", "go"], 2, "no saga in"),
    (["s-done", "go"], 1, r"already ended \(SAGA_COMPLETED\)"),
])
def test_the_signal_verb_refuses_in_one_line_with_the_usual_exit_codes(
    tmp_path: Path, argv: list[str], code: int, says: str
) -> None:
    wal = tmp_path / "w.wal"
    _stopped_waiting(wal)
    done(saga_id="s-done", wal=str(wal))
    before = len(list(read_records(wal)))
    refused = run_cli("signal", *argv, "--wal-path", str(wal))
    assert refused.returncode == code and re.search(says, refused.stderr), refused.stderr
    assert refused.stderr.count("\n") == 1 and refused.stdout == ""
    assert len(list(read_records(wal))) == before


def test_the_signal_verb_without_a_log_could_not_check(tmp_path: Path) -> None:
    missing = run_cli("signal", "s-1", "go", "--wal-path", str(tmp_path / "none.wal"))
    assert missing.returncode == 3 and "no log at" in missing.stderr


# -- the pictures --------------------------------------------------------------------------------


def test_graph_and_the_flight_recorder_show_each_wait_and_signal_as_a_line(tmp_path: Path) -> None:
    from agent_saga.ui import FileSource, RunStore

    wal = tmp_path / "w.wal"
    HOOK.update(clock=TestClock(), before=lambda: signal("s-1", "go", {"ok": True}, wal=str(wal)))
    await_go(60, saga_id="s-1", wal=str(wal))
    graph = run_cli("graph", "--wal", str(wal)).stdout
    assert "wait for 'go' #1 until 1970-01-12T13:47:40Z" in graph
    assert "signal 'go' sent by signal@" in graph and "wait for 'go' #1 ended: signalled (seq 2)" in graph
    store = RunStore(FileSource(wal))
    store.refresh()
    run = store.run("s-1")
    assert run is not None
    assert [v["type"] for v in run["verdicts"]] == ["EVENT_SIGNALLED", "WAIT_STARTED", "WAIT_ENDED"]


# -- a signal approves nothing -------------------------------------------------------------------


class SignalsItsWayIn:
    """A notifier through which the agent, told of the approval request, signals its own run "approved"."""

    def __init__(self, wal: Path) -> None:
        self.wal = wal
        self.sent: list[str] = []

    def notify(self, notification: Any) -> None:
        entry = notification.entry
        for name in ("approved", entry.id, "APPROVAL_GRANTED"):
            signal("s-wire", name, {"request": entry.id, "decision": "approved", "approver": "ops"}, wal=str(self.wal))
            self.sent.append(name)


@durable("test.waits.wire")
def wire() -> None:
    saga = current_saga()
    assert saga is not None
    saga.execute_sync(tool="wire.send", semantics="IRREVERSIBLE", forward=lambda: HOOK.setdefault("sent", True),
                      args={"amount": 80_000})


def test_a_signal_never_approves_a_step_the_gate_holds_for_a_person(tmp_path: Path) -> None:
    from approval_support import gateway, policy

    from agent_saga import FileApprovalStore, PreFlightGate
    from agent_saga.context import set_default_gate

    wal = tmp_path / "w.wal"
    agent = SignalsItsWayIn(wal)
    gw = gateway(FileApprovalStore(tmp_path / "approvals"), agent, FileWAL(wal), policy(0.3))
    previous = set_default_gate(PreFlightGate(approval_provider=gw))
    try:
        with pytest.raises(SagaAborted, match="expir"):
            wire(saga_id="s-wire", wal=str(wal))
    finally:
        set_default_gate(previous)
    assert "sent" not in HOOK and len(agent.sent) == 3  # three signals in the log, and still no wire
    types = [r["type"] for r in read_records(wal)]
    assert types.count("EVENT_SIGNALLED") == 3 and "APPROVAL_EXPIRED" in types and "APPROVAL_GRANTED" not in types


# -- the inbox: how a wait reads signals another process wrote -------------------------------------


def test_the_inbox_follows_a_file_log_another_writer_appends_to(tmp_path: Path) -> None:
    from agent_saga.engine.inbox import Inbox

    path = tmp_path / "w.wal"
    mine, theirs = FileWAL(path), FileWAL(path)  # two writers of one file, as two processes are
    mine.barrier(mine.append("SAGA_STARTED", "s-1", {}))
    inbox = Inbox(mine, "s-1")
    assert inbox.first("go") is None
    theirs.barrier(theirs.append("EVENT_SIGNALLED", "s-10", {"name": "go", "data": "not for s-1"}))
    theirs.barrier(theirs.append("EVENT_SIGNALLED", "s-1", {"name": "go", "data": 1}))
    first = inbox.first("go")
    assert first is not None and first[1] == 1
    theirs.barrier(theirs.append("WAIT_ENDED", "s-1", {"wait": "event", "name": "go", "n": 1, "outcome": "signalled",
                                                       "signal": first[0]}))
    assert inbox.first("go") is None  # taken
    theirs.barrier(theirs.append("EVENT_SIGNALLED", "s-1", {"name": "go", "data": 2}))
    again = inbox.first("go")
    assert again is not None and again[1] == 2 and inbox.first("other") is None
    mine.close()
    theirs.close()


def test_the_inbox_reads_a_complete_last_record_without_its_newline_once(tmp_path: Path) -> None:
    from agent_saga.engine.inbox import Inbox

    path = tmp_path / "w.wal"
    wal = FileWAL(path)
    wal.barrier(wal.append("EVENT_SIGNALLED", "s-1", {"name": "go", "data": "a"}))
    wal.close()
    whole = path.read_bytes()
    path.write_bytes(whole[:-1])  # the newline never reached the disk: the record counts, as everywhere
    inbox = Inbox(FileWAL(path), "s-1")
    first = inbox.first("go")
    assert first is not None and first[1] == "a"
    path.write_bytes(whole)
    assert inbox.first("go") == first  # read again from the same place, not a second signal


def test_the_inbox_starts_over_when_the_log_is_rewritten(tmp_path: Path) -> None:
    from agent_saga.engine.inbox import Inbox

    path, other = tmp_path / "w.wal", tmp_path / "other.wal"
    wal = FileWAL(path)
    wal.barrier(wal.append("EVENT_SIGNALLED", "s-1", {"name": "go", "data": "old"}))
    inbox = Inbox(wal, "s-1")
    assert inbox.first("go") is not None
    rewrite = FileWAL(other)
    rewrite.barrier(rewrite.append("EVENT_SIGNALLED", "s-1", {"name": "go", "data": "new"}))
    rewrite.barrier(rewrite.append("EVENT_SIGNALLED", "s-1", {"name": "go", "data": "newer"}))
    rewrite.close()
    other.replace(path)  # a compaction renames a new file over the log
    first = inbox.first("go")
    assert first is not None and first[1] == "new"
    wal.close()


def test_a_signal_to_a_log_that_does_not_verify_is_refused(tmp_path: Path) -> None:
    wal = tmp_path / "w.wal"
    _stopped_waiting(wal)
    text = wal.read_text()
    assert '"seconds":3600' in text
    wal.write_text(text.replace('"seconds":3600', '"seconds":3601', 1))  # a body edited after the fact
    before = wal.read_bytes()
    refused = run_cli("signal", "s-1234567", "go", "--wal-path", str(wal))
    assert refused.returncode == 1 and "does not verify" in refused.stderr, refused.stderr
    assert wal.read_bytes() == before


def test_the_inbox_reads_signals_from_an_encrypted_log(tmp_path: Path) -> None:
    import base64

    pytest.importorskip("cryptography")
    from agent_saga.engine.inbox import Inbox
    from agent_saga.log.crypto import AESGCMEncryptor, generate_key

    key = base64.b64decode(generate_key())
    path = tmp_path / "w.wal"
    mine, theirs = FileWAL(path, encryptor=AESGCMEncryptor(key)), FileWAL(path, encryptor=AESGCMEncryptor(key))
    theirs.barrier(theirs.append("EVENT_SIGNALLED", "s-1", {"name": "go", "data": {"secret": "sealed"}}))
    assert b"sealed" not in path.read_bytes()
    first = Inbox(mine, "s-1").first("go")
    assert first is not None and first[1] == {"secret": "sealed"}
    mine.close()
    theirs.close()


def test_a_run_on_a_memory_log_is_signalled_through_that_log(tmp_path: Path) -> None:
    wal = MemoryWAL()
    HOOK.update(clock=TestClock(), before=lambda: signal("s-mem", "go", "in memory", wal=wal))
    assert await_go(60, saga_id="s-mem", wal=wal) == "in memory"
    assert [r["body"]["outcome"] for r in wal.records() if r["type"] == "WAIT_ENDED"] == ["signalled"]
