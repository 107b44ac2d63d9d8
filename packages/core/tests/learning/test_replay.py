"""Counterfactual replay (issue 28 part 2) on logs written by real sagas on a FileWAL.

Every forward and every undo here fails the test if it is called while ``ARMED`` is set:
the recordings are made first, unarmed, then every replay runs armed.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from gadgets import Gadget, Gadgets
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples

import agent_saga
from agent_saga import (
    AgentKit,
    Compensation,
    FileWAL,
    NotApplied,
    SagaAborted,
    compensator,
    counterfactual_replay,
    saga_scope,
    tool,
)
from agent_saga.learning import ReplayReport
from agent_saga.learning._replay import RecordedFailure, RecordedResult, ReplayDiverged
from agent_saga.log.file import read_records
from agent_saga.plugins.manager import plugins
from agent_saga.redaction import REDACTED

ARMED = {"on": False}
CALLED: list[str] = []


def _forward(name: str) -> None:
    CALLED.append(name)
    if ARMED["on"]:
        pytest.fail(f"the replay called the forward of {name}")


@compensator("test_replay.refund")
def refund(charge_id: str) -> None:
    _forward(f"refund {charge_id}")


def _refund_of(result: dict[str, Any]) -> Compensation:
    return Compensation(handler="test_replay.refund", kwargs={"charge_id": result["id"]})


@tool(semantics="COMPENSABLE", compensate=_refund_of)
def charge(amount: int) -> dict[str, Any]:
    _forward("charge")
    return {"id": f"ch_{amount}"}


@tool(semantics="COMPENSABLE", compensate=lambda r: Compensation(fn=lambda: _forward("release")))
async def reserve(seat: str) -> str:
    _forward("reserve")
    await asyncio.sleep(0)
    return f"seat {seat}"


@tool(semantics="IRREVERSIBLE")
def notify(to: str, fails: str = "") -> str:
    _forward("notify")
    if fails == "unknown":
        raise ConnectionError("the mail server hung up")
    if fails == "not applied":
        raise NotApplied("the mail server refused the message")
    return "sent"


def _backup_route(to: str) -> str:
    _forward("backup")
    return "sent by the backup route"


@tool(semantics="IRREVERSIBLE", fallback_action=_backup_route)
def page(to: str) -> str:
    _forward("page")
    raise NotApplied("the pager is down")


@tool(semantics="REVERSIBLE")
def login(user: str, api_key: str) -> str:
    _forward("login")
    return "ok"


# -- a framework tool, wrapped by agent_saga.wrap_tool through a real adapter plugin ------------------


def _ship(box: str) -> str:
    _forward("ship")
    return f"shipped {box}"


@pytest.fixture(autouse=True)
def _disarmed() -> Iterator[None]:
    ARMED["on"] = False
    CALLED.clear()
    yield
    ARMED["on"] = False


@pytest.fixture
def ship() -> Gadget:
    plugins().register(Gadgets(), "gadgets")
    wrapped: Gadget = agent_saga.wrap_tool(Gadget("ship", _ship), semantics="COMPENSABLE",
                                           compensate=lambda r: Compensation(fn=lambda: _forward("unship")))
    return wrapped


def _record(path: Path, agent: Callable[[], Any], name: str = "saga") -> str:
    """Run ``agent`` in a real saga on a FileWAL at ``path``; return the saga's id."""
    wal = FileWAL(path)
    try:
        with saga_scope(wal, name=name) as s:
            saga_id = s.saga_id
            agent()
    except SagaAborted:
        pass
    finally:
        wal.close()
    return saga_id


def _replay(path: Path, candidate: Callable[[], Any], saga_id: str | None = None) -> ReplayReport:
    ARMED["on"] = True
    CALLED.clear()
    report = counterfactual_replay(read_records(path), candidate, saga_id=saga_id)
    assert CALLED == [], f"forwards ran during the replay: {CALLED}"
    return report


def _note(text: str) -> str:
    _forward("note")
    return "noted"


note = AgentKit("replay-tests").safe_tool(_note, semantics="REVERSIBLE", name="note")


def _happy(ship: Gadget) -> Callable[[], list[Any]]:
    def agent() -> list[Any]:
        got = [charge(10), asyncio.run(reserve("12A"))]
        got.append(ship.fn(box="b1"))
        got.append(note("done"))
        return got

    return agent


# -- served, never run ----------------------------------------------------------------------------


def test_the_recorded_path_is_served_step_by_step_and_no_forward_runs(tmp_path: Path, ship: Gadget) -> None:
    log = tmp_path / "saga.wal"
    saga_id = _record(log, _happy(ship))
    assert CALLED == ["charge", "reserve", "ship", "note"]  # the recording really ran them

    report = _replay(log, _happy(ship))

    assert report.verdict == "SAME_PATH" and report.knowable and report.divergence is None
    assert report.saga_id == saga_id and report.recorded_end == "completed"
    assert [row.status for row in report.rows] == ["served"] * 4
    assert [row.recorded.tool for row in report.rows if row.recorded] == ["charge", "reserve", "ship", "note"]
    assert report.raised is None
    # The commit records hold what each forward returned: that is what is served.
    assert report.returned == [{"id": "ch_10"}, "seat 12A", "shipped b1", "noted"]
    assert report.same_failure is False and report.recorded_failure is None


def _without_results(path: Path) -> list[dict[str, Any]]:
    """The log's records as a log written before results were recorded holds them (json.loads of each line)."""
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for record in records:
        if isinstance(record.get("body"), dict):
            record["body"].pop("result", None)
    return records


def test_an_older_log_without_results_is_served_the_recorded_facts(tmp_path: Path, ship: Gadget) -> None:
    log = tmp_path / "saga.wal"
    _record(log, _happy(ship))
    ARMED["on"] = True
    CALLED.clear()
    report = counterfactual_replay(_without_results(log), _happy(ship))
    assert CALLED == [] and report.verdict == "SAME_PATH"
    first, second, third, _ = report.returned
    assert all(isinstance(r, RecordedResult) for r in report.returned)
    # Such a log keeps the undo derived from the result, not the result: that is what is served.
    assert first.tool == "charge" and first.step == 1 and first.args == {"amount": 10}
    assert first.compensation["kwargs"] == {"charge_id": "ch_10"}
    assert first.shape is None
    assert (second.tool, second.step, third.tool, third.step) == ("reserve", 2, "ship", 3)
    assert first.seqs and all(isinstance(seq, int) for seq in first.seqs)


@tool(semantics="IRREVERSIBLE", record_result="shape")
def lookup(key: str) -> dict[str, Any]:
    _forward("lookup")
    return {"key": key, "owner": "ann"}


@tool(semantics="IRREVERSIBLE", record_result="none")
def ping(host: str) -> str:
    _forward("ping")
    return "pong"


@tool(semantics="IRREVERSIBLE")
def fetch_page(url: str) -> str:
    _forward("fetch")
    return "<html>" + "x" * 5000


def test_a_result_recorded_as_a_shape_or_not_at_all_is_served_the_recorded_facts(tmp_path: Path) -> None:
    log = tmp_path / "saga.wal"

    def agent() -> list[Any]:
        return [lookup("k1"), ping("db"), fetch_page("https://example.com"), charge(4)]

    _record(log, agent)
    report = _replay(log, agent)
    assert report.verdict == "SAME_PATH", report.format_text()
    shaped, none, big, value = report.returned
    assert isinstance(shaped, RecordedResult)
    assert shaped.shape == {"type": "dict", "length": 2, "keys": {"key": "str", "owner": "str"}}
    assert isinstance(none, RecordedResult) and none.shape is None
    assert isinstance(big, RecordedResult) and big.shape == {"type": "str", "length": 5006}
    assert value == {"id": "ch_4"}


@tool(semantics="IRREVERSIBLE")
def sign_in(user: str) -> dict[str, Any]:
    _forward("sign_in")
    return {"user": user, "session_token": "tok-very-secret-1234"}


def test_a_served_value_is_the_redacted_one_and_a_copy(tmp_path: Path) -> None:
    log = tmp_path / "saga.wal"
    _record(log, lambda: sign_in("ann"))
    assert "tok-very-secret-1234" not in log.read_text()
    records = list(read_records(log))

    def candidate() -> dict[str, Any]:
        got: dict[str, Any] = sign_in("ann")
        got["user"] = "changed by the candidate"
        return got

    ARMED["on"] = True
    first = counterfactual_replay(records, candidate)  # the same records, replayed twice
    assert first.returned == {"user": "changed by the candidate", "session_token": REDACTED}
    again = counterfactual_replay(records, lambda: sign_in("ann"))
    assert again.returned == {"user": "ann", "session_token": REDACTED}


def test_an_async_candidate_and_saga_execute_are_served_too(tmp_path: Path) -> None:
    log = tmp_path / "saga.wal"

    def agent() -> None:
        charge(3)

    saga_id = _record(log, agent)

    async def candidate() -> Any:
        async with saga_scope() as s:  # a boundary inside the replay joins it: nothing is written
            direct = await s.execute(tool="charge", forward=lambda: _forward("direct"), args={"amount": 3},
                                     semantics="COMPENSABLE")
        return direct

    report = _replay(log, candidate)
    assert report.verdict == "SAME_PATH", report.format_text()
    assert report.returned == {"id": "ch_3"}
    assert not Path("agent-saga.wal").exists()  # the candidate's saga_scope wrote no default log
    assert report.saga_id == saga_id


# -- failures, served as they were recorded ---------------------------------------------------------


@pytest.mark.parametrize(("fails", "state"), [("unknown", "unknown"), ("not applied", "not-applied")])
def test_a_recorded_failure_is_served_as_that_failure(tmp_path: Path, fails: str, state: str) -> None:
    log = tmp_path / "saga.wal"

    def agent() -> None:
        charge(7)
        notify("a@example.com", fails)

    _record(log, agent)
    assert CALLED == ["charge", "notify", "refund ch_7"]  # the recording compensated step 1

    seen: list[BaseException] = []

    def candidate() -> None:
        charge(7)
        try:
            notify("a@example.com", fails)
        except RecordedFailure as failure:
            seen.append(failure)
            raise

    report = _replay(log, candidate)
    assert report.verdict == "SAME_PATH" and report.recorded_end == "rolled back"
    assert [row.status for row in report.rows] == ["served", "served failure"]
    assert isinstance(report.raised, RecordedFailure) and seen == [report.raised]
    assert report.raised.step.state == state and report.raised.step.index == 2
    recorded_error = {"unknown": "the mail server hung up", "not applied": "refused the message"}[fails]
    assert recorded_error in str(report.raised)
    assert report.recorded_failure is not None and report.recorded_failure.index == 2
    assert report.same_failure is True
    assert "[committed, then compensated]" in report.format_text()


def test_a_recorded_fallback_is_served_within_the_same_call(tmp_path: Path) -> None:
    log = tmp_path / "saga.wal"
    _record(log, lambda: page("ops"))
    assert CALLED == ["page", "backup"]  # the primary failed, its fallback answered

    report = _replay(log, lambda: page("ops"))
    assert report.verdict == "SAME_PATH" and report.raised is None
    assert [row.status for row in report.rows] == ["served failure", "served"]
    assert [row.recorded.fallback for row in report.rows if row.recorded] == [False, True]
    assert report.returned == "sent by the backup route"


def test_a_candidate_that_stops_before_the_recorded_failure_did_not_hit_it(tmp_path: Path) -> None:
    log = tmp_path / "saga.wal"

    def agent() -> None:
        charge(7)
        notify("a@example.com", "unknown")

    _record(log, agent)
    report = _replay(log, lambda: charge(7))
    assert report.verdict == "STOPPED_EARLY" and report.knowable
    assert [row.status for row in report.rows] == ["served", "not reached"]
    assert report.same_failure is False and report.raised is None


# -- divergence: unknowable, never a guess ------------------------------------------------------------


def test_other_arguments_are_unknowable_naming_the_first_divergent_call(tmp_path: Path) -> None:
    log = tmp_path / "saga.wal"

    def agent() -> None:
        charge(7)
        notify("a@example.com", "unknown")

    _record(log, agent)
    later: list[BaseException] = []

    def candidate() -> None:
        try:
            charge(8)  # the recording charged 7: the world's answer to 8 is not in it
        except ReplayDiverged:
            pass
        try:
            notify("a@example.com", "unknown")  # even a recorded call: the world has moved on
        except ReplayDiverged as err:
            later.append(err)

    report = _replay(log, candidate)
    assert report.verdict == "UNKNOWABLE" and not report.knowable
    assert report.divergence is not None
    assert (report.divergence.call, report.divergence.tool, report.divergence.args) == (1, "charge", {"amount": 8})
    assert "other arguments" in report.divergence.reason
    assert [row.status for row in report.rows] == ["diverged", "after divergence", "not reached"]
    assert len(later) == 1
    assert report.same_failure is None  # it diverged before the recorded failure: unknowable
    assert "first divergent call: #1 charge" in report.format_text()


def test_a_call_past_the_recorded_end_is_unknowable(tmp_path: Path) -> None:
    log = tmp_path / "saga.wal"
    _record(log, lambda: charge(1))

    def candidate() -> None:
        charge(1)
        charge(2)

    report = _replay(log, candidate)
    assert report.verdict == "UNKNOWABLE"
    assert report.divergence is not None and report.divergence.call == 2
    assert "no step beyond its 1" in report.divergence.reason
    assert isinstance(report.raised, ReplayDiverged)


CALLS = st.lists(st.sampled_from([("charge", 1), ("charge", 2), ("notify", 1), ("notify", 2)]), max_size=5)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(recorded=st.lists(st.sampled_from([("charge", 1), ("charge", 2), ("notify", 1)]), min_size=1, max_size=4),
       calls=CALLS)
def test_the_verdict_is_the_first_position_where_the_paths_differ(
    tmp_path_factory: pytest.TempPathFactory, recorded: list[tuple[str, int]], calls: list[tuple[str, int]]
) -> None:
    ARMED["on"] = False
    log = tmp_path_factory.mktemp("prop") / "saga.wal"

    def run(plan: list[tuple[str, int]]) -> None:
        for name, n in plan:
            try:
                charge(n) if name == "charge" else notify(f"user{n}")
            except (ReplayDiverged, RecordedFailure):
                pass  # a candidate that swallows what it is served and goes on

    _record(log, lambda: run(recorded))
    report = _replay(log, lambda: run(calls))
    first = next((i for i, call in enumerate(calls) if i >= len(recorded) or call != recorded[i]), None)
    if first is None:
        assert report.divergence is None
        assert report.verdict == ("SAME_PATH" if len(calls) == len(recorded) else "STOPPED_EARLY")
        assert [r.status for r in report.rows] == ["served"] * len(calls) + ["not reached"] * (len(recorded) - len(calls))
    else:
        assert report.verdict == "UNKNOWABLE" and report.divergence is not None
        assert report.divergence.call == first + 1 and report.divergence.tool == calls[first][0]
        statuses = [r.status for r in report.rows]
        assert statuses[:first] == ["served"] * first and statuses[first] == "diverged"
        assert statuses[first + 1:len(calls)] == ["after divergence"] * (len(calls) - first - 1)


# -- the log's own forms, and which saga ----------------------------------------------------------------


def test_json_lines_of_the_file_and_a_path_are_read_like_read_records(tmp_path: Path) -> None:
    log = tmp_path / "saga.wal"
    _record(log, lambda: charge(5))
    lines = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line.strip()]
    ARMED["on"] = True
    CALLED.clear()
    for source in (lines, log, str(log)):
        report = counterfactual_replay(source, lambda: charge(5))
        assert report.verdict == "SAME_PATH"
    assert CALLED == []


def test_a_log_of_several_sagas_needs_saga_id(tmp_path: Path) -> None:
    log = tmp_path / "saga.wal"
    first = _record(log, lambda: charge(1))
    second = _record(log, lambda: charge(2))
    with pytest.raises(ValueError, match=r"holds 2 sagas.*pass saga_id="):
        counterfactual_replay(read_records(log), lambda: None)
    with pytest.raises(ValueError, match=r"'nope' is not in the log"):
        counterfactual_replay(read_records(log), lambda: None, saga_id="nope")
    assert _replay(log, lambda: charge(2), saga_id=second).verdict == "SAME_PATH"
    assert _replay(log, lambda: charge(2), saga_id=first).verdict == "UNKNOWABLE"


def test_bad_input_is_a_one_line_error(tmp_path: Path) -> None:
    log = tmp_path / "saga.wal"
    _record(log, lambda: charge(1))
    with pytest.raises(TypeError, match="candidate must be a callable"):
        counterfactual_replay(read_records(log), "agent")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="counterfactual_replay: int is not a log"):
        counterfactual_replay(42, lambda: None)


def test_a_match_on_a_redacted_argument_says_so_and_the_report_is_inert(tmp_path: Path) -> None:
    log = tmp_path / "saga.wal"
    _record(log, lambda: login("ann\x1b[2K", "sk-live-one"))
    report = _replay(log, lambda: login("ann\x1b[2K", "sk-live-two"))  # the log cannot tell the keys apart
    assert report.verdict == "SAME_PATH"
    row = report.rows[0]
    assert row.redacted and row.recorded is not None and row.recorded.args["api_key"] == REDACTED
    text = report.format_text()
    assert "\x1b" not in text and "\\x1b[2K" in text and "matched on a redacted argument" in text


# -- a crashed saga: the step in flight has no recorded outcome ---------------------------------------

CRASH = textwrap.dedent("""
    import os, sys
    from agent_saga import FileWAL, saga_scope, tool

    @tool(semantics="IRREVERSIBLE")
    def pay(amount: int) -> str:
        if amount == 2:
            os._exit(9)  # the process dies during the call: no outcome is ever recorded
        return "paid"

    with saga_scope(FileWAL(sys.argv[1])) as s:
        print(s.saga_id, flush=True)
        pay(1)
        pay(2)
""")


@pytest.mark.slow  # a real process, really killed during a step
def test_a_step_whose_process_died_during_it_is_unknowable(tmp_path: Path) -> None:
    log = tmp_path / "saga.wal"
    done = subprocess.run([sys.executable, "-c", CRASH, str(log)], capture_output=True, text=True, check=False)
    assert done.returncode == 9, done.stderr
    saga_id = done.stdout.strip()

    @tool(semantics="IRREVERSIBLE")
    def pay(amount: int) -> str:
        _forward("pay")
        return "paid"

    def candidate() -> None:
        pay(1)
        pay(2)

    report = _replay(log, candidate)
    assert report.saga_id == saga_id and report.recorded_end == "open"
    assert report.verdict == "UNKNOWABLE" and report.divergence is not None
    assert report.divergence.call == 2 and "no outcome for step 2" in report.divergence.reason
    assert [row.status for row in report.rows] == ["served", "diverged"]
    assert report.rows[1].recorded is not None and report.rows[1].recorded.state == "in-flight"
