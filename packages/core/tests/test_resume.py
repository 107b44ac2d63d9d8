"""Issue 41 in one process: durable runs, ``agent_saga.resume``, divergence, the race, each refusal.

A run is stopped here the way no end record gets written: the entry point raises
``SagaQuarantined`` where a crash would be (the boundary freezes the saga: no rollback, no end,
its lease let go). The runs killed for real are in ``test_resume_crash.py``.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import resume_trip as trip
from cli_support import run_cli

from agent_saga import (
    Compensation,
    ConfigurationError,
    NotApplied,
    ResumeRefused,
    SagaAborted,
    SagaQuarantined,
    compensator,
    durable,
    resume,
    saga_scope,
    tool,
)
from agent_saga.context import Boundary
from agent_saga.engine.resumed import DurableRun
from agent_saga.log.default import shared_log
from agent_saga.log.file import read_records
from agent_saga.recovery import RecoveryDaemon, fold
from agent_saga.recovery.escalations import queue_of
from agent_saga.testing import stop_run_if

CITIES = ["paris", "rome", "oslo"]


def later() -> float:
    return time.time() + 3600  # the stopped run's owner is long gone


@pytest.fixture(autouse=True)
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RESUME_WORLD", str(tmp_path))
    monkeypatch.delenv("RESUME_EDIT", raising=False)
    HOOK.clear()
    return tmp_path


HOOK: dict[str, Any] = {}  # stop: the city where the run stops; short: visit only the first city; fail; wait


@durable("test.trip")
def trip_until(cities: list[Any]) -> list[Any]:
    refs = []
    visits = cities[:1] if HOOK.get("short") else cities
    for city in reversed(visits) if HOOK.get("reverse") else visits:
        stop_run_if(HOOK.get("stop") == city)
        if HOOK.get("wait") == city:
            HOOK["entered"].set()
            assert HOOK["release"].wait(60)
        try:
            thought = trip.think(city)
        except Exception:
            if not HOOK.get("swallow"):  # a framework that turns a tool's error into a message
                raise
            continue
        if thought:
            refs.append(trip.book(city)["ref"])
    if HOOK.get("fail"):
        raise RuntimeError("the agent gave up after booking")
    return refs


@tool(semantics="REVERSIBLE")
def ask(prompt: str) -> str:  # a model call that may be refused before it is taken
    if HOOK.get("refuse") == prompt:
        raise NotApplied("the model endpoint answered 503 before taking the request")
    return f"ok {prompt}"


@durable("test.ask")
def ask_and_book(cities: list[Any]) -> list[Any]:
    refs = []
    for city in cities:
        stop_run_if(HOOK.get("stop") == city)
        try:
            ask(city)
        except NotApplied:
            continue  # the agent skips the city the model could not answer for
        refs.append(trip.book(city)["ref"])
    return refs


def _stopped(wal: Path, saga_id: str = "t-7", at: str = "oslo") -> None:
    HOOK["stop"] = at
    with pytest.raises(SagaQuarantined):
        trip_until(CITIES, saga_id=saga_id, wal=wal)
    HOOK.pop("stop")
    # Its records are on disk, as a dead process's flushed ones are: a daemon reads the file, and a
    # commit still queued would read as a step in flight (escalated, not resumed).
    shared_log(wal).barrier()


def _records(wal: Path) -> list[dict[str, Any]]:
    return list(read_records(wal))


def _seen(world: Path, ev: str) -> Counter[str]:
    return Counter(e.get("city") or e.get("ref") for e in trip.effects(world) if e["ev"] == ev)


def _one_line(err: BaseException) -> str:
    text = str(err)
    assert "\n" not in text and text
    return text


def test_the_issue_snippet_records_its_inputs_every_result_and_its_return_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_SAGA_WAL", str(tmp_path / "default.wal"))  # no wal=: the default log
    assert trip.plan_trip("t-42", ["paris", "rome", "oslo"], saga_id="t-42") == ["R-paris", "R-rome", "R-oslo"]
    records = _records(tmp_path / "default.wal")
    started = records[0]
    assert (started["type"], started["saga"]) == ("SAGA_STARTED", "t-42")
    assert started["body"]["durable"] == {
        "entry": "trip.plan", "args": ["t-42", ["paris", "rome", "oslo"]], "kwargs": {}, "on_crash": "resume",
    }
    commits = [r["body"]["result"] for r in records if r["type"] == "STEP_COMMITTED"]
    assert commits == ["go to paris", {"ref": "R-paris"}, "go to rome", {"ref": "R-rome"}, "go to oslo",
                       {"ref": "R-oslo"}]
    assert records[-1]["type"] == "SAGA_COMPLETED" and records[-1]["body"]["result"] == ["R-paris", "R-rome", "R-oslo"]


def test_an_async_entry_point_is_a_coroutine_function_and_records_the_same(tmp_path: Path) -> None:
    wal = tmp_path / "a.wal"
    assert asyncio.iscoroutinefunction(trip.aplan_trip)
    assert asyncio.run(trip.aplan_trip("t-1", ["rome"], saga_id="t-1", wal=wal)) == ["R-rome"]
    records = _records(wal)
    assert records[0]["body"]["durable"]["entry"] == "trip.plan_async"
    assert records[-1]["body"]["result"] == ["R-rome"]


def test_a_result_too_big_for_a_plain_saga_is_recorded_whole_in_a_durable_run(tmp_path: Path) -> None:
    page = "x" * 10_000  # over the 2 KiB bound of a plain saga's results, under a durable run's

    @tool(semantics="REVERSIBLE")
    def read_page() -> str:
        return page

    @durable("test.page")
    def reader() -> int:
        return len(read_page())

    with saga_scope(wal=tmp_path / "plain.wal"):
        read_page()
    reader(wal=tmp_path / "durable.wal")
    plain = [r for r in _records(tmp_path / "plain.wal") if r["type"] == "STEP_COMMITTED"]
    kept = [r for r in _records(tmp_path / "durable.wal") if r["type"] == "STEP_COMMITTED"]
    assert plain[0]["body"]["result"] == {"$shape": {"type": "str", "length": 10_000}}
    assert kept[0]["body"]["result"] == page


def test_resume_serves_the_recorded_steps_and_runs_the_rest(tmp_path: Path, world: Path) -> None:
    wal = tmp_path / "t.wal"
    _stopped(wal)
    assert resume("t-7", wal=wal, clock=later) == ["R-paris", "R-rome", "R-oslo"]
    assert _seen(world, "book") == {"paris": 1, "rome": 1, "oslo": 1}
    assert _seen(world, "think") == {"paris": 1, "rome": 1, "oslo": 1}
    types = [r["type"] for r in _records(wal)]
    assert types[types.index("SAGA_RESUMED"):] == ["SAGA_RESUMED", *["STEP_SERVED"] * 4, "STEP_COMMITTED",
                                                     "STEP_INTENT", "STEP_COMMITTED", "SAGA_COMPLETED"]
    graph = run_cli("graph", "--wal", str(wal)).stdout  # the picture says it was resumed, and by whom
    assert "RESUMED by resume@" in graph and "after 4 recorded step(s)" in graph


def test_a_failure_after_the_resume_undoes_the_served_steps_too_newest_first(tmp_path: Path, world: Path) -> None:
    wal = tmp_path / "t.wal"
    _stopped(wal)
    HOOK["fail"] = True
    with pytest.raises(SagaAborted):
        resume("t-7", wal=wal, clock=later)
    # The served bookings' undos were rebuilt from their recorded results, and run with oslo's, LIFO.
    assert [e["ref"] for e in trip.effects(world) if e["ev"] == "cancel"] == ["R-oslo", "R-rome", "R-paris"]
    assert [r["type"] for r in _records(wal)][-1] == "SAGA_ROLLED_BACK"


def test_returning_with_recorded_steps_not_asked_for_diverges_and_unwinds_them(tmp_path: Path, world: Path) -> None:
    wal = tmp_path / "t.wal"
    _stopped(wal)
    HOOK["short"] = True  # the code now visits one city: rome's recorded steps are never asked for
    with pytest.raises(SagaAborted):
        resume("t-7", wal=wal, clock=later)
    (diverged,) = [r["body"] for r in _records(wal) if r["type"] == "SAGA_DIVERGED"]
    assert diverged["position"] == 3 and diverged["got"] is None
    assert diverged["expected"] == {"step": 3, "tool": "think", "args": {"prompt": "rome"}}
    assert [e["ref"] for e in trip.effects(world) if e["ev"] == "cancel"] == ["R-rome", "R-paris"]
    assert _seen(world, "book") == {"paris": 1, "rome": 1}
    assert "DIVERGED at recorded position 3: the log has think" in run_cli("graph", "--wal", str(wal)).stdout


def test_a_divergence_the_code_swallows_still_unwinds_and_nothing_more_runs(tmp_path: Path, world: Path) -> None:
    wal = tmp_path / "t.wal"
    _stopped(wal)
    HOOK.update(reverse=True, swallow=True)  # edited code, and it carries on past the refusal
    with pytest.raises(SagaAborted):
        resume("t-7", wal=wal, clock=later)
    records = _records(wal)
    (diverged,) = [r["body"] for r in records if r["type"] == "SAGA_DIVERGED"]
    assert diverged["got"] == {"tool": "think", "args": {"prompt": "oslo"}}
    assert [r["body"]["rule"] for r in records if r["type"] == "STEP_REFUSED"] == ["stopped", "stopped"]
    assert _seen(world, "think") == {"paris": 1, "rome": 1} and _seen(world, "book") == {"paris": 1, "rome": 1}
    assert [e["ref"] for e in trip.effects(world) if e["ev"] == "cancel"] == ["R-rome", "R-paris"]


def test_a_recorded_call_that_failed_fails_again_from_the_log_so_the_run_takes_the_same_path(
    tmp_path: Path, world: Path
) -> None:
    wal = tmp_path / "t.wal"
    HOOK.update(stop="bergen", refuse="rome")
    with pytest.raises(SagaQuarantined):  # paris and oslo booked, rome skipped: its model call failed
        ask_and_book([*CITIES, "bergen"], saga_id="t-9", wal=wal)
    HOOK.clear()  # the endpoint would answer now, but the run already took the path without rome
    assert resume("t-9", wal=wal, clock=later) == ["R-paris", "R-oslo", "R-bergen"]
    records = _records(wal)
    (failed,) = [r for r in records if r["type"] == "STEP_NOT_APPLIED"]
    assert (failed["step"], failed["body"]["tool"], failed["body"]["args"]) == (3, "ask", {"prompt": "rome"})
    asked = [(r["step"], r["body"]["args"]["prompt"]) for r in records if r["type"] == "STEP_COMMITTED"
             and r["body"].get("tool") == "ask"]
    # Rome's failed call was matched at its position and failed again from the log (no new record),
    # oslo's recorded steps after it were served, and bergen ran live, numbered after the log's steps.
    assert asked == [(1, "paris"), (4, "oslo"), (6, "bergen")]
    assert _seen(world, "book") == {"paris": 1, "oslo": 1, "bergen": 1}


CALLS: Counter[str] = Counter()


@tool(semantics="REVERSIBLE")
def fetch_token() -> dict[str, str]:  # its result is hidden by the redaction rules: never served
    CALLS["fetch_token"] += 1
    return {"api_key": f"k-{CALLS['fetch_token']}"}


@compensator("test.close_account")
def close_account(account: str, idempotency_key: str = "") -> None:
    CALLS[f"close {account}"] += 1


@tool(semantics="COMPENSABLE", compensate=lambda r: Compensation(handler="test.close_account",
                                                                 kwargs={"account": r["id"]}))
def open_account(owner: str) -> dict[str, str]:
    CALLS["open_account"] += 1
    return {"id": f"acct-{owner}", "password": "initial"}


@durable("test.secrets")
def with_secrets(owner: str, needs_account: bool) -> str:
    key = fetch_token()["api_key"]
    account = open_account(owner)["id"] if needs_account else "-"
    trip.book("paris")
    stop_run_if(HOOK.get("stop"))
    return f"{key} {account}"


@pytest.mark.parametrize("needs_account", [False, True], ids=["reversible-runs-again", "compensable-diverges"])
def test_a_result_the_redaction_rules_hid_is_never_served(tmp_path: Path, world: Path, needs_account: bool) -> None:
    wal = tmp_path / "t.wal"
    CALLS.clear()
    HOOK["stop"] = True
    with pytest.raises(SagaQuarantined):
        with_secrets("ann", needs_account, saga_id="s-1", wal=wal)
    HOOK.clear()
    results = [r["body"]["result"] for r in _records(wal) if r["type"] == "STEP_COMMITTED"]
    assert results[0] == {"api_key": "<redacted: secret>"}
    if not needs_account:
        # The REVERSIBLE call runs again (its real value reaches the code); the booking is served.
        assert resume("s-1", wal=wal, clock=later) == "k-2 -"
        assert CALLS["fetch_token"] == 2 and _seen(world, "book") == {"paris": 1}
        return
    # The account cannot be served with a hidden password, nor opened twice: the run diverges, and
    # the account and the booking are undone through the undos their commit records name.
    with pytest.raises(SagaAborted):
        resume("s-1", wal=wal, clock=later)
    (diverged,) = [r["body"] for r in _records(wal) if r["type"] == "SAGA_DIVERGED"]
    assert diverged["expected"]["tool"] == "open_account" and "redacted" in diverged["detail"]
    assert (CALLS["open_account"], CALLS["close acct-ann"]) == (1, 1)
    assert [e["ref"] for e in trip.effects(world) if e["ev"] == "cancel"] == ["R-paris"]


def test_of_two_resumers_exactly_one_runs_and_takes_the_lease(tmp_path: Path, world: Path) -> None:
    wal = tmp_path / "t.wal"
    _stopped(wal)
    HOOK.update(wait="oslo", entered=threading.Event(), release=threading.Event())
    results: list[Any] = []
    first = threading.Thread(target=lambda: results.append(resume("t-7", wal=wal, clock=later)))
    first.start()
    try:
        assert HOOK["entered"].wait(60)  # the first resumer holds the claim, inside the run
        with pytest.raises(ResumeRefused) as busy:
            resume("t-7", wal=wal, clock=later)
        assert "being resumed or recovered by another process" in _one_line(busy.value)
        with RecoveryDaemon(wal, lease_grace=0, clock=later) as daemon:
            assert daemon.sweep().busy == ["t-7"]  # nor does a daemon unwind it meanwhile
        shared_log(wal).barrier()  # SAGA_RESUMED waits for the next intent's barrier, like any record
        view = fold(_records(wal))["t-7"]
        assert view.owner == f"{socket.gethostname()}:{os.getpid()}"  # the resumer's, as its lease says
        assert view.resumed_by and view.lease_ttl is not None
    finally:
        HOOK["release"].set()
        first.join(60)
    assert results == [["R-paris", "R-rome", "R-oslo"]]
    assert _seen(world, "book") == {"paris": 1, "rome": 1, "oslo": 1}
    assert [r["type"] for r in _records(wal)].count("SAGA_RESUMED") == 1


def test_of_two_daemons_sweeping_one_crashed_run_exactly_one_resumes_it(tmp_path: Path, world: Path) -> None:
    wal = tmp_path / "t.wal"
    _stopped(wal)
    HOOK.update(wait="oslo", entered=threading.Event(), release=threading.Event())
    reports: list[Any] = []

    def sweep() -> None:
        with RecoveryDaemon(wal, lease_grace=0, clock=later, name="daemon-a") as daemon:
            reports.append(daemon.sweep())

    first = threading.Thread(target=sweep)
    first.start()
    try:
        assert HOOK["entered"].wait(60)  # daemon A is inside the resumed run
        with RecoveryDaemon(wal, lease_grace=0, clock=later, name="daemon-b") as other:
            second = other.sweep()
        assert second.busy == ["t-7"] and not second.actions
    finally:
        HOOK["release"].set()
        first.join(60)
    assert reports[0].resumed == ["t-7"]
    assert _seen(world, "book") == {"paris": 1, "rome": 1, "oslo": 1}
    resumed = [r["body"]["by"] for r in _records(wal) if r["type"] == "SAGA_RESUMED"]
    assert resumed == ["daemon-a"]


def test_a_name_registered_twice_is_refused_in_one_line() -> None:
    def other(cities: list[Any]) -> list[Any]:
        return cities

    with pytest.raises(ConfigurationError) as taken:
        durable("test.trip")(other)
    assert "already registered to test_resume.trip_until" in _one_line(taken.value)


def test_inputs_that_are_not_json_are_refused_at_the_call_naming_the_argument(tmp_path: Path) -> None:
    wal = tmp_path / "t.wal"
    with pytest.raises(ConfigurationError) as refused:
        trip_until({"paris", "rome"}, saga_id="t-8", wal=wal)
    assert "argument 'cities' is not JSON" in _one_line(refused.value)
    assert not wal.exists() or not _records(wal)


def test_each_refusal_of_resume_is_one_line_and_runs_nothing(tmp_path: Path, world: Path) -> None:
    wal = tmp_path / "t.wal"
    trip_until(["rome"], saga_id="done", wal=wal)
    _stopped(wal, "t-7")
    with saga_scope(wal=wal, saga_id="plain"), pytest.raises(SagaQuarantined):
        raise SagaQuarantined("stopped")
    run = DurableRun("trip.plan_async", ["a-1", ["rome"]], {}, "resume")
    with pytest.raises(SagaQuarantined), Boundary(wal, saga_id="a-1", name="trip.plan_async", durable=run):
        raise SagaQuarantined("stopped")
    shared_log(wal).barrier()  # the stopped runs' last records are on disk before counting them
    before, effects = len(_records(wal)), trip.effects(world)

    async def in_a_loop() -> Any:
        return resume("a-1", wal=wal, clock=later)

    refusals = {
        "already ended": lambda: resume("done", wal=wal, clock=later),
        "is live": lambda: resume("t-7", wal=wal),  # its owner's lease has not run out
        "no saga nobody": lambda: resume("nobody", wal=wal, clock=later),
        "not started by a @durable entry point": lambda: resume("plain", wal=wal, clock=later),
        "cannot run inside this running event loop": lambda: asyncio.run(in_a_loop()),
    }
    for expected, attempt in refusals.items():
        with pytest.raises(ResumeRefused) as refused:
            attempt()
        assert expected in _one_line(refused.value)
    assert len(_records(wal)) == before and trip.effects(world) == effects


def _ghost(wal: Path) -> None:
    """A durable run of an entry point this process never imported, stopped mid-way."""
    run = DurableRun("test.ghost", [["paris"]], {}, "resume")
    with pytest.raises(SagaQuarantined), Boundary(wal, saga_id="g-1", name="test.ghost", durable=run):
        trip.book("paris")
        raise SagaQuarantined("stopped")
    shared_log(wal).barrier()


def test_an_entry_not_imported_is_refused_by_resume_and_left_open_by_the_daemon(tmp_path: Path, world: Path) -> None:
    wal = tmp_path / "t.wal"
    _ghost(wal)
    with pytest.raises(ResumeRefused) as missing:
        resume("g-1", wal=wal, clock=later)
    assert "import the module that defines @durable('test.ghost')" in _one_line(missing.value)

    with RecoveryDaemon(wal, lease_grace=0, clock=later) as daemon:
        report = daemon.sweep()
    assert report.held == ["g-1"] and not report.recovered
    (escalation,) = queue_of(wal).pending()
    assert escalation.kind == "resume-unavailable" and "--import" in escalation.detail
    types = [r["type"] for r in _records(wal)]
    assert "ROLLBACK_STARTED" not in types and "RECOVERY_CLAIMED" not in types
    assert not _seen(world, "cancel")  # never unwound behind its owner's back

    @durable("test.ghost")
    def ghost(cities: list[Any]) -> list[Any]:  # the daemon started again with the import it lacked
        return [trip.book(c)["ref"] for c in cities]

    with RecoveryDaemon(wal, lease_grace=0, clock=later) as daemon:
        again = daemon.sweep()
    assert again.resumed == ["g-1"] and not queue_of(wal).pending()
    assert _seen(world, "book") == {"paris": 1}  # the recorded booking was served, not run again
    assert [r["type"] for r in _records(wal)][-2:] == ["SAGA_COMPLETED", "ESCALATION_RESOLVED"]
