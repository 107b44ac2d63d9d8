"""A value the log cannot hold is refused at the step's door, and never breaks the log for others.

Issue 25, item 7: one ``NaN`` in a tool's arguments made FileWAL refuse every later
record (the flush that sealed it failed for every saga in the batch).
"""

from __future__ import annotations

import datetime
import json
import threading
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples

from agent_saga import (
    Compensation,
    CompensationError,
    ConfigurationError,
    FileWAL,
    MemoryWAL,
    SagaAborted,
    StepRefused,
    WALRefused,
    compensator,
    saga_scope,
    tool,
)
from agent_saga.audit import verify_log
from agent_saga.engine import saga as saga_module
from agent_saga.log.codec import seal
from agent_saga.log.encodable import encodable, unencodable
from agent_saga.log.group import Entry, GroupCommitWAL
from agent_saga.redaction import redact_args
from agent_saga.registry import unregister


def _body(wal: FileWAL, rtype: str, saga: str | None = None) -> list[dict[str, Any]]:
    return [r["body"] for r in wal.records() if r["type"] == rtype and (saga is None or r["saga"] == saga)]


def test_a_nan_argument_is_refused_at_the_door_and_the_log_serves_the_next_saga(wal: FileWAL) -> None:
    ran: list[str] = []
    args = json.loads('{"query": "shoes", "limit": NaN}')
    with pytest.raises(SagaAborted) as aborted:
        with saga_scope(wal) as s:
            s.execute(tool="search", forward=lambda: ran.append("search"), semantics="IRREVERSIBLE", args=args)
    assert ran == []  # refused before the tool body
    cause = aborted.value.cause
    assert isinstance(cause, StepRefused) and cause.rule == "unencodable"
    assert "args.limit is NaN" in str(cause) and "pass a finite number or a string" in str(cause)
    assert aborted.value.report.clean
    first = aborted.value.report.saga_id
    # What the door promises for it: one STEP_REFUSED, the bad value replaced by marked text.
    assert [r["type"] for r in wal.records() if r["saga"] == first and r.get("step") == 1] == ["STEP_REFUSED"]
    assert _body(wal, "STEP_REFUSED", first)[0]["args"] == {"query": "shoes", "limit": "<unencodable: NaN>"}

    with saga_scope(wal) as s:  # the same log still takes records
        assert s.execute(tool="ok", forward=lambda: 7, semantics="COMPENSABLE",
                         compensate=lambda r: Compensation(fn=print)) == 7
    wal.barrier()
    assert wal.broken is None
    assert verify_log(wal.path).ok


def test_dates_times_and_uuids_are_logged_as_their_text_and_other_objects_by_type(wal: FileWAL) -> None:
    class Stamp(datetime.datetime):
        def isoformat(self, *_: object, **__: object) -> str:
            raise AssertionError("the agent's code ran while the log was written")

    when = datetime.datetime(2026, 12, 6, 10, 0, tzinfo=datetime.UTC)
    with saga_scope(wal) as s:
        s.execute(tool="book", forward=lambda: None, semantics="REVERSIBLE", args={
            "when": when, "day": when.date(), "at": when.timetz(), "ref": uuid.UUID(int=5),
            "client": object(), "stamp": Stamp(2026, 1, 1),
        })
    wal.barrier()
    assert _body(wal, "STEP_COMMITTED")[0]["args"] == {
        "when": "<datetime 2026-12-06T10:00:00+00:00>", "day": "<date 2026-12-06>", "at": "<time 10:00:00+00:00>",
        "ref": "<UUID 00000000-0000-0000-0000-000000000005>", "client": "<object>", "stamp": "<Stamp>",
    }


@pytest.mark.parametrize(("args", "named"), [
    ({"a": [1, {"b": float("inf")}]}, "args.a[1].b is infinite"),
    ({"n": 10**5000}, "args.n is an int of"),
    ({"memo": "x\udc80"}, "args.memo holds a lone surrogate"),
    ({"by_id": {1: "x"}}, "args.by_id has a key 1 (int)"),
])
def test_other_values_the_log_cannot_hold_are_refused_by_path(wal: FileWAL, args: dict[str, Any], named: str) -> None:
    with pytest.raises(SagaAborted) as aborted:
        with saga_scope(wal) as s:
            s.execute(tool="t", forward=lambda: pytest.fail("ran"), semantics="COMPENSABLE",
                      compensate=lambda r: None, args=args)
    assert named in str(aborted.value.cause)
    wal.barrier()
    assert wal.broken is None and verify_log(wal.path).ok


def test_a_container_holding_itself_is_refused() -> None:
    looped: dict[str, Any] = {"x": 1}
    looped["self"] = [looped]
    assert unencodable(looped, "args") == (
        "args.self[0] contains itself: the log cannot hold a circular structure; pass a copy without the cycle"
    )
    assert encodable(looped) == {"x": 1, "self": ["<unencodable: circular>"]}


def test_a_reversible_tool_named_with_a_lone_surrogate_is_refused_before_its_effect(wal: FileWAL) -> None:
    # Issue 40 item 8: the name is checked at the door like the arguments. A REVERSIBLE step
    # writes nothing before its call, so a name the log cannot hold used to surface only at
    # the commit record: the effect ran and left no step record.
    ran: list[str] = []
    with pytest.raises(SagaAborted) as aborted:
        with saga_scope(wal) as s:
            s.execute(tool="pay\ud800", forward=lambda: ran.append("pay"), semantics="REVERSIBLE")
    assert ran == []
    cause = aborted.value.cause
    assert isinstance(cause, StepRefused) and cause.rule == "unencodable"
    assert "the tool's name holds a lone surrogate ('\\ud800' at index 3)" in str(cause)
    assert "\n" not in str(cause)
    assert aborted.value.report.clean
    saga = aborted.value.report.saga_id
    wal.barrier()
    assert [r["type"] for r in wal.records() if r["saga"] == saga and r.get("step") == 1] == ["STEP_REFUSED"]
    assert _body(wal, "STEP_REFUSED", saga)[0]["tool"] == "pay\\ud800"  # shown as marked text
    assert wal.broken is None and verify_log(wal.path).ok


def test_a_tool_declared_with_a_name_the_log_cannot_hold_is_refused_when_declared() -> None:
    # Checked once, at decoration: the wrapped tool's calls never reach the door with it.
    with pytest.raises(CompensationError, match=r"name holds a lone surrogate .* pass valid Unicode text"):
        @tool(name="pay\udc80", semantics="REVERSIBLE")
        def pay() -> None: ...


@pytest.mark.parametrize(("scope", "named"), [
    ({"saga_id": "trip\udc80"}, "saga_id holds a lone surrogate"),
    ({"name": "trip\udc80"}, "name= holds a lone surrogate"),
    ({"tags": {"ok", "bill\udc80"}}, "tags= holds a lone surrogate"),
])
def test_a_saga_named_with_a_lone_surrogate_is_refused_before_it_starts(
    wal: FileWAL, scope: dict[str, Any], named: str
) -> None:
    ran: list[str] = []
    with pytest.raises(ConfigurationError) as refused:
        with saga_scope(wal, **scope) as s:
            s.execute(tool="pay", forward=lambda: ran.append("pay"), semantics="REVERSIBLE")
    assert named in str(refused.value) and "pass valid Unicode text" in str(refused.value)
    assert "\n" not in str(refused.value)
    assert ran == []
    wal.barrier()
    assert list(wal.records()) == [] and wal.broken is None


@pytest.fixture
def refund() -> Iterator[list[dict[str, Any]]]:
    done: list[dict[str, Any]] = []

    @compensator("door.refund")
    def _refund(charge: str, fee: float) -> None:
        done.append({"charge": charge, "fee": fee})

    yield done
    unregister("door.refund")


def test_a_nan_in_a_result_still_commits_the_step_and_the_refund_runs_in_process(
    wal: FileWAL, refund: list[dict[str, Any]]
) -> None:
    def charge() -> dict[str, Any]:
        return {"id": "ch_1", "fee": float("nan")}  # what the provider answered

    with pytest.raises(SagaAborted) as aborted:
        with saga_scope(wal) as s:
            s.execute(tool="charge", forward=charge, semantics="COMPENSABLE",
                      compensate=lambda r: Compensation(handler="door.refund",
                                                        kwargs={"charge": r["id"], "fee": r["fee"]}))
            raise RuntimeError("a later step failed")
    assert [r["charge"] for r in refund] == ["ch_1"]  # undone here and now
    assert aborted.value.report.clean
    wal.barrier()
    assert wal.broken is None
    assert verify_log(wal.path).ok
    committed = _body(wal, "STEP_COMMITTED")
    assert len(committed) == 1  # the charge's commit record is not lost
    assert committed[0]["compensation"]["recoverable"] is False  # a daemon must not replay a guess
    assert committed[0]["compensation"]["kwargs"] is None
    assert "compensation.kwargs.fee is NaN" in committed[0]["problem"]
    assert len(_body(wal, "STEP_COMPENSATED")) == 1


def _nan_fee_step(log: Any) -> None:
    """A COMPENSABLE charge whose undo, built from the result, holds a NaN; then a later failure."""
    def charge() -> dict[str, Any]:
        return {"id": "ch_1", "fee": float("nan")}

    with pytest.raises(SagaAborted):
        with saga_scope(log) as s:
            with pytest.raises(CompensationError, match=r"'charge' ran, but its undo cannot be recorded "
                               r"\(compensation\.kwargs\.fee is NaN: .*\); it is undone in this process"):
                s.execute(tool="charge", forward=charge, semantics="COMPENSABLE",
                          compensate=lambda r: Compensation(handler="door.refund",
                                                            kwargs={"charge": r["id"], "fee": r["fee"]}))
            raise RuntimeError("a later step failed")


def test_an_unrecordable_undo_is_refused_alike_on_a_log_that_does_not_encode_on_append(
    wal: FileWAL, refund: list[dict[str, Any]]
) -> None:
    # FileWAL encodes the commit record as it is appended, and that encoding checks the undo;
    # a MemoryWAL keeps the body as it is given, so the engine walks the undo first. Same door,
    # same message, same record, either way.
    mem = MemoryWAL()
    for log in (wal, mem):
        _nan_fee_step(log)
    assert [r["charge"] for r in refund] == ["ch_1", "ch_1"]
    committed = [_body(wal, "STEP_COMMITTED")[0], next(r["body"] for r in mem.records() if r["type"] == "STEP_COMMITTED")]
    for body in committed:
        assert body["compensation"]["recoverable"] is False and body["compensation"]["kwargs"] is None
        assert "compensation.kwargs.fee is NaN" in body["problem"]
    assert committed[0]["problem"] == committed[1]["problem"]


def test_an_undo_the_log_can_hold_is_checked_once_by_the_commit_records_encoding(
    wal: FileWAL, refund: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 43: the check is done once. On a log that encodes each record as it is appended,
    # the undo is not walked before that encoding; on one that does not, it is.
    walked: list[str] = []
    real = saga_module.unencodable

    def counted(value: Any, where: str = "value") -> str | None:
        walked.append(where)
        return real(value, where)

    monkeypatch.setattr(saga_module, "unencodable", counted)
    for log in (wal, MemoryWAL()):
        with saga_scope(log) as s:
            s.execute(tool="charge", forward=lambda: {"id": "ch_1"}, semantics="COMPENSABLE",
                      compensate=lambda r: Compensation(handler="door.refund", kwargs={"charge": r["id"], "fee": 1.5}))
        if log is wal:
            assert walked == []
    assert walked == ["compensation"]


def test_a_direct_append_the_log_cannot_encode_fails_for_that_caller_only(tmp_path: Path) -> None:
    # A long linger: everything appended below is taken by one flush.
    log = FileWAL(tmp_path / "batch.wal", linger=0.5)
    try:
        good = [log.append("NOTE", "saga-a", {"n": 1})]
        with pytest.raises(WALRefused, match=r"body\.limit is NaN.*Nothing was written"):
            log.append("NOTE", "saga-b", {"limit": float("nan")})
        with pytest.raises(WALRefused, match="lone surrogate"):
            log.append("NOTE", "saga-b", {"memo": "\ud800"})
        # A step Python would not even write out: refused in one line that says how long it is.
        with pytest.raises(WALRefused, match=r"its step must be an int of at most 4300 digits or None, got an int "
                                             r"of 14285 bits; nothing was written"):
            log.append("NOTE", "saga-b", {"n": 0}, 10**4300)
        with pytest.raises(WALRefused, match=r"got 'one'; nothing was written"):
            log.append("NOTE", "saga-b", {"n": 0}, "one")  # type: ignore[arg-type]
        good += [log.append("NOTE", "saga-c", {"n": 2}), log.append("NOTE", "saga-a", {"n": 3})]
        log.barrier(good[-1])
        assert log.broken is None
        assert [(r["saga"], r["body"]) for r in log.records()] == [
            ("saga-a", {"n": 1}), ("saga-c", {"n": 2}), ("saga-a", {"n": 3}),
        ]
        assert [r["seq"] for r in log.records()] == [1, 2, 3]
    finally:
        log.close()
    assert verify_log(tmp_path / "batch.wal").ok


class _ListWAL(GroupCommitWAL):
    """A group-commit log whose "server" is a list: the real queue, flusher and sealer."""

    def __init__(self) -> None:
        super().__init__("list", linger=0.5, barrier_timeout=10.0, max_pending=1000, backpressure="refuse")
        self.lines: list[bytes] = []
        self.head = "0" * 64
        self._start()

    def _commit(self, batch: list[Entry]) -> None:
        data, self.head, _ = seal(
            ((len(self.lines) + 1 + i, *entry) for i, entry in enumerate(batch)), self.head
        )
        self.lines.extend(data.splitlines())

    def _transient(self, err: BaseException) -> bool:
        return False

    def records(self) -> Iterator[dict[str, Any]]:
        return iter([json.loads(line) for line in self.lines])


def test_group_commit_refuses_the_bad_record_and_commits_the_batch_around_it() -> None:
    log = _ListWAL()
    try:
        tickets: list[int] = []
        refused: list[BaseException] = []

        def writer(i: int) -> None:
            tickets.append(log.append("NOTE", f"saga-{i}", {"i": i}))

        threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        try:
            log.append("NOTE", "saga-bad", {"x": [float("-inf")]})
        except WALRefused as err:
            refused.append(err)
        for t in threads:
            t.join()
        log.barrier(max(tickets))
        assert log.broken is None
        assert len(refused) == 1 and "body.x[0] is -infinite" in str(refused[0])
        assert sorted(r["body"]["i"] for r in log.records()) == [0, 1, 2, 3]
    finally:
        log.close()


# -- the property: any JSON-ish value is refused at the door, or round-trips and verifies ----

_scalars = st.one_of(
    st.none(), st.booleans(),
    st.integers() | st.sampled_from([2**63, -(2**200)])
    | st.sampled_from([4299, 4300, -4300]).map(lambda d: (10 ** abs(d)) * (1 if d > 0 else -1)),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8) | st.sampled_from(["\ud800", "a\udfffb", "\u202e", "\x00\x1b[2A", "é"]),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner)
    | st.dictionaries(st.text(max_size=5) | st.integers(0, 3) | st.just("k\udc80"), inner, max_size=3),
    max_leaves=12,
)


def _as_json(value: Any) -> Any:
    """What a JSON reader gets back for ``value`` (tuples become lists)."""
    if isinstance(value, Mapping):
        return {k: _as_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_as_json(v) for v in value]
    return value


def _fits(value: Any) -> bool:
    """An independent oracle: the strict encoder and the UTF-8 codec accept it, and keys are str."""
    def keys_are_str(v: Any) -> bool:
        if isinstance(v, dict):
            return all(isinstance(k, str) and keys_are_str(x) for k, x in v.items())
        if isinstance(v, (list, tuple)):
            return all(keys_are_str(x) for x in v)
        return True

    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False)
        text.encode("utf-8")
        json.loads(text)
    except (ValueError, TypeError):
        return False
    return keys_are_str(value)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(st.text(max_size=6), _values, max_size=4))
def test_any_value_is_refused_at_the_door_or_round_trips_and_verifies(wal: FileWAL, args: dict[str, Any]) -> None:
    try:
        with saga_scope(wal) as s:
            s.execute(tool="t", forward=lambda: None, semantics="IRREVERSIBLE", args=args)
        refused = None
        saga = s.saga_id
    except SagaAborted as aborted:
        refused = aborted.cause  # the door's refusal
        saga = aborted.report.saga_id
    logged = redact_args(args)
    assert (refused is None) == _fits(logged), (refused, logged)
    wal.barrier()
    if refused is None:
        intent = _body(wal, "STEP_INTENT", saga)[0]
        assert intent["args"] == _as_json(logged)
    else:
        assert isinstance(refused, StepRefused) and refused.rule == "unencodable"
        assert "\n" not in str(refused)
    assert wal.broken is None
    report = verify_log(wal.path)
    assert report.ok, report.reason
