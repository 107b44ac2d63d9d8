"""Counterfactual replay: a candidate agent run against the world one saga recorded.

``counterfactual_replay(records, candidate, saga_id=...)`` calls ``candidate`` with a
recording current (``agent_saga.engine.served``): every saga step it makes (``@tool``,
``safe_tool``, an adapter-wrapped tool, ``Saga.execute``) is answered from the log and
no forward, gate, undo or log write runs. The report compares the two paths step by step.

Matching is **positional and exact**: the candidate's n-th step matches the recording's
n-th step when the tool names are equal and the arguments, put through what the engine
does before it logs them (untagged, ``policy_args`` policed, secrets redacted, made
encodable), are equal as canonical JSON. In order, because a recorded outcome is the
world's answer after the recorded steps before it: serving it after another prefix
would assume the calls commute, which the log cannot vouch for; and order is what tells
two identical calls apart (a balance read twice). On the logged form, because that is
all the log holds: a value the engine redacted cannot be compared, and a row that
matched on a redacted argument says so.

What is served: a committed step is answered with the value its forward returned, as
the commit record holds it (``agent_saga.log.results``: redacted like the arguments, so a
secret-looking key reads ``REDACTED``; a deep copy, so the candidate cannot change the
recording). When the record holds no value (a log written before results were recorded,
``record_result="shape"`` or ``"none"``, a result too big or not plain JSON, which is
recorded as its shape), the step is answered with a :class:`RecordedResult` (the recorded
facts: the undo derived from the result, and its shape when recorded). A step that failed (raised, was
refused, or ran but its undo could not be built) raises :class:`RecordedFailure` with
the recorded error, as the recorded run saw it. A call the recording has no answer for
(another tool, other arguments, past the recorded end, or a step whose outcome was never
recorded because the process stopped during it) raises :class:`ReplayDiverged` in the
candidate, and the verdict is UNKNOWABLE naming that first call: never a guess. Every
later call is refused the same way (nothing it could be served would be the world's).
"""

from __future__ import annotations

import copy
import inspect
import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from agent_saga.context import use_saga
from agent_saga.engine.invoke import await_blocking
from agent_saga.engine.saga import Saga
from agent_saga.engine.served import use_recording
from agent_saga.engine.step_options import StepOptions
from agent_saga.engine.tagged import untag_args
from agent_saga.errors import StepRefused
from agent_saga.inert import inert, inert_json
from agent_saga.log.base import MemoryWAL
from agent_saga.log.encodable import encodable
from agent_saga.log.records import Record
from agent_saga.log.records import RecordType as R
from agent_saga.log.results import SHAPE_KEY
from agent_saga.log.source import log_records
from agent_saga.recovery.fold import StepView, fold
from agent_saga.redaction import REDACTED

__all__ = [
    "Divergence",
    "RecordedFailure",
    "RecordedResult",
    "RecordedStep",
    "ReplayDiverged",
    "ReplayReport",
    "ReplayRow",
    "counterfactual_replay",
]

#: SAME_PATH: every recorded step, in order, and nothing else; STOPPED_EARLY: the first
#: recorded steps only; UNKNOWABLE: a call the recording has no answer for.
Verdict = Literal["SAME_PATH", "STOPPED_EARLY", "UNKNOWABLE"]
RowStatus = Literal["served", "served failure", "diverged", "after divergence", "not reached"]


@dataclass(frozen=True, slots=True)
class RecordedStep:
    """One step of the recorded saga, as the log tells it."""

    index: int
    tool: str
    args: Mapping[str, Any]
    state: str  # committed | unknown | in-flight | not-applied | refused (``StepView.state``)
    settled: str | None  # what the unwind did to it later: compensated | kept | orphaned | unresolved
    error: str  # why it failed ("" when it did not)
    fallback: bool  # it ran as the fallback of the step before it
    seqs: tuple[int, ...]  # the records it was read from
    compensation: Mapping[str, Any] | None = None  # the undo its commit record describes
    result: Any = None  # what the forward returned, as its commit record holds it
    has_result: bool = False  # False: the record holds none (an older log, record_result="none")

    @property
    def failed(self) -> bool:
        """Whether the recorded run saw this call fail (it is served as that failure)."""
        return bool(self.error) or self.state in ("unknown", "not-applied", "refused")

    @property
    def answered(self) -> bool:
        """Whether the log says how the call ended (a crash during it leaves only its intent)."""
        return self.state != "in-flight"


@dataclass(frozen=True, slots=True)
class RecordedResult:
    """What a replayed step returns when the log holds no value for it: the recorded facts.

    The commit record holds the outcome and the undo built from the result but not the
    value (an older log, ``record_result="shape"`` or ``"none"``, a result recorded as its
    shape): ``compensation`` is that undo as recorded (its kwargs often carry the ids the
    result held), ``shape`` the result's recorded shape (type, keys, length) or None.
    """

    tool: str
    step: int
    args: Mapping[str, Any]
    compensation: Mapping[str, Any] | None
    settled: str | None
    seqs: tuple[int, ...]
    shape: Mapping[str, Any] | None = None


class RecordedFailure(Exception):
    """A replayed step that failed in the recording: raised as the recorded run saw it fail."""

    def __init__(self, step: RecordedStep) -> None:
        self.step = step
        super().__init__(f"{step.tool} failed in the recording (step {step.index}, {step.state}): {step.error}")


@dataclass(frozen=True, slots=True)
class Divergence:
    """The first call the recording has no answer for."""

    call: int  # the candidate's n-th step, from 1
    tool: str
    args: Mapping[str, Any]  # as the engine would have logged them
    reason: str


class ReplayDiverged(Exception):
    """Raised in the candidate at a call the recording cannot answer: what follows is unknowable."""

    def __init__(self, divergence: Divergence) -> None:
        self.divergence = divergence
        super().__init__(
            f"call {divergence.call} ({divergence.tool}) has no recorded result: {divergence.reason}"
        )


@dataclass(frozen=True, slots=True)
class ReplayRow:
    """One line of the step-by-step comparison."""

    recorded: RecordedStep | None
    tool: str | None  # the candidate's call (None: it never made one here)
    args: Mapping[str, Any] | None
    status: RowStatus
    redacted: bool = False  # matched although a recorded argument was redacted (not comparable)


@dataclass(frozen=True, slots=True)
class ReplayReport:
    """How the candidate's path compares with the recorded one."""

    saga_id: str
    verdict: Verdict
    divergence: Divergence | None
    rows: tuple[ReplayRow, ...]
    recorded_end: str  # completed | rolled back | open (no end record: a crash, or still running)
    recorded_failure: RecordedStep | None  # the first recorded step that failed
    #: Whether the candidate was served the recorded failure: None when it diverged before
    #: reaching it (unknowable), False when the recording has none or the candidate stopped first.
    same_failure: bool | None
    returned: Any = None
    raised: BaseException | None = None

    @property
    def knowable(self) -> bool:
        return self.verdict != "UNKNOWABLE"

    def format_text(self) -> str:
        """The report for a terminal; every recorded or candidate value is made inert."""
        lines = [f"counterfactual replay of saga {inert(self.saga_id)}: {self.verdict}"]
        if self.divergence is not None:
            d = self.divergence
            lines.append(
                f"  first divergent call: #{d.call} {inert(d.tool)} {inert_json(d.args)}: {inert(d.reason)}"
            )
        failure = self.recorded_failure
        if failure is not None:
            hit = {True: "yes", False: "no", None: "unknowable (it diverged first)"}[self.same_failure]
            lines.append(f"  recorded failure: step {failure.index} {inert(failure.tool)}; candidate hit it: {hit}")
        lines.append(f"  recorded saga: {self.recorded_end}")
        if self.raised is not None:
            lines.append(f"  candidate raised: {inert(type(self.raised).__name__)}: {inert(self.raised)}")
        for row in self.rows:
            rec = row.recorded
            fate = f"{rec.state}, then {rec.settled}" if rec and rec.settled else rec.state if rec else ""
            left = f"{rec.index:>3} {inert(rec.tool)} {inert_json(rec.args)} [{fate}]" if rec else "  - (none)"
            right = f"{inert(row.tool)} {inert_json(row.args)}" if row.tool is not None else "(no call)"
            note = " (matched on a redacted argument)" if row.redacted else ""
            lines.append(f"  {left}  |  {right}  ->  {row.status}{note}")
        return "\n".join(lines)


@dataclass(slots=True)
class _Recording:
    """The recorded steps, served in order; what the seam in ``Saga._step`` asks."""

    steps: list[RecordedStep]
    cursor: int = 0
    calls: int = 0
    rows: list[ReplayRow] = field(default_factory=list)
    divergence: Divergence | None = None
    served_failure: int | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def serve(self, tool: str, args: Mapping[str, Any] | None, opts: StepOptions) -> Any:
        logged = _logged(tool, args, opts)
        with self.lock:
            self.calls += 1
            if self.divergence is not None:
                self.rows.append(ReplayRow(None, tool, logged, "after divergence"))
                raise ReplayDiverged(Divergence(self.calls, tool, logged, "the replay already diverged"))
            step = self.steps[self.cursor] if self.cursor < len(self.steps) else None
            reason = _mismatch(step, tool, logged, len(self.steps))
            if reason is not None:
                self.divergence = Divergence(self.calls, tool, logged, reason)
                self.rows.append(ReplayRow(step, tool, logged, "diverged"))
                if step is not None:
                    self.cursor += 1  # shown in the diverged row, not again as "not reached"
                raise ReplayDiverged(self.divergence)
            assert step is not None
            self.cursor += 1
            redacted = _holds_redacted(step.args)
            if not step.failed:
                self.rows.append(ReplayRow(step, tool, logged, "served", redacted))
                return _result(step)
            self.rows.append(ReplayRow(step, tool, logged, "served failure", redacted))
            if self.served_failure is None:
                self.served_failure = step.index
            follow = self.steps[self.cursor] if self.cursor < len(self.steps) else None
            if opts.fallback_action is None or follow is None or not follow.fallback:
                raise RecordedFailure(step)
            # The recorded run went on to the fallback within this same call (same tool, same
            # arguments, a step of its own): it answers the call, as it did when recorded.
            self.cursor += 1
            if not follow.answered:
                self.divergence = Divergence(self.calls, tool, logged, _mismatch(follow, follow.tool, follow.args, 0) or "")
                self.rows.append(ReplayRow(follow, tool, logged, "diverged", redacted))
                raise ReplayDiverged(self.divergence)
            if not follow.failed:
                self.rows.append(ReplayRow(follow, tool, logged, "served", redacted))
                return _result(follow)
            self.rows.append(ReplayRow(follow, tool, logged, "served failure", redacted))
            raise RecordedFailure(follow)


def _logged(tool: str, args: Mapping[str, Any] | None, opts: StepOptions) -> dict[str, Any]:
    """The arguments as the engine would have logged them (``Saga._admit``)."""
    if not args and not opts.policy_args:
        return {}
    plain, _ = untag_args(args) if args else (args, None)
    try:
        policed = Saga._policed(tool, plain, opts)
    except StepRefused:
        return {}  # the engine refuses such a call with nothing logged as its arguments
    value: dict[str, Any] = encodable(policed)
    return value


def _canonical(args: Mapping[str, Any]) -> str:
    return json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=repr)


def _mismatch(step: RecordedStep | None, tool: str, logged: Mapping[str, Any], recorded: int) -> str | None:
    """Why the recording cannot answer this call (None: it can)."""
    if step is None:
        return f"the recording has no step beyond its {recorded}"
    if step.tool != tool:
        return f"the recording's step {step.index} is another tool ({step.tool})"
    if _canonical(step.args) != _canonical(logged):
        return f"the recording's step {step.index} called {step.tool} with other arguments"
    if not step.answered:
        return (
            f"the recording has no outcome for step {step.index}: its process stopped during the call "
            "and nothing recorded how it ended"
        )
    return None


def _holds_redacted(value: Any) -> bool:
    if value == REDACTED:
        return True
    if isinstance(value, Mapping):
        return any(_holds_redacted(v) for v in value.values())
    if isinstance(value, list):
        return any(_holds_redacted(v) for v in value)
    return False


def _result(step: RecordedStep) -> Any:
    """The recorded value when the log holds one, else the recorded facts."""
    recorded = step.result
    shape = recorded.get(SHAPE_KEY) if isinstance(recorded, dict) else None
    if step.has_result and shape is None:
        return copy.deepcopy(recorded)
    return RecordedResult(
        step.tool, step.index, step.args, step.compensation, step.settled, step.seqs,
        shape if isinstance(shape, dict) else None,
    )


def _recorded(records: list[Record], saga_id: str | None) -> tuple[str, str, list[RecordedStep]]:
    sagas = fold(records)
    if saga_id is None:
        if len(sagas) != 1:
            named = ", ".join(sorted(sagas)[:3]) + (", ..." if len(sagas) > 3 else "")
            raise ValueError(
                f"the log holds {len(sagas)} sagas ({named or 'none'}); pass saga_id= to say which to replay"
            )
        saga_id = next(iter(sagas))
    view = sagas.get(saga_id)
    if view is None:
        raise ValueError(f"saga {saga_id!r} is not in the log; 'agent-saga list' shows the sagas a log holds")
    seqs: dict[int, list[int]] = {}
    fallback: set[int] = set()
    for record in records:
        index = record.get("step")
        if record.get("saga") != saga_id or not isinstance(index, int):
            continue
        if isinstance(record.get("seq"), int):
            seqs.setdefault(index, []).append(record["seq"])
        body = record.get("body")
        if record.get("type") == R.STEP_INTENT and isinstance(body, dict) and body.get("fallback") is True:
            fallback.add(index)
    steps: list[RecordedStep] = []
    for index in sorted(view.steps):
        sv: StepView = view.steps[index]
        if sv.tool is None:
            continue  # only approval or runtime notes: no call was ever made at this index
        error = sv.error or sv.refusal or sv.problem
        steps.append(RecordedStep(
            index, sv.tool, sv.args or {}, sv.state, sv.settled, error, index in fallback, tuple(seqs.get(index, ())),
            sv.committed_compensation if sv.committed else None, sv.result, sv.has_result,
        ))
    end = {R.SAGA_COMPLETED.value: "completed", R.SAGA_ROLLED_BACK.value: "rolled back"}.get(view.ended or "", "open")
    return saga_id, end, steps


def counterfactual_replay(
    records: Any, candidate: Callable[[], Any], *, saga_id: str | None = None
) -> ReplayReport:
    """Run ``candidate`` (no arguments, sync or async) against the recorded saga ``saga_id``.

    ``records``: the log's records (``read_records(path)``, ``json.loads`` of each line of
    a FileWAL file, a WAL, or a path). ``saga_id`` may be left out when the log holds one
    saga. Nothing the candidate calls as a saga step runs (see the module docstring for
    what is served and how calls are matched); any boundary it opens joins the replay.
    """
    if not callable(candidate):
        raise TypeError(
            f"candidate must be a callable taking no arguments (the agent to replay), got {type(candidate).__name__}"
        )
    listed = log_records(records, caller="counterfactual_replay")
    chosen, end, steps = _recorded(listed, saga_id)
    recording = _Recording(steps)
    # A saga that is never started: a step never reaches it (the recording answers first),
    # and a boundary inside the candidate joins it instead of writing to a real log.
    saga = Saga(MemoryWAL("replay"), name="replay", saga_id=f"replay-of-{chosen}")
    returned: Any = None
    raised: BaseException | None = None
    serving = use_recording(recording)
    current = use_saga(saga)
    try:
        try:
            returned = candidate()
            if inspect.isawaitable(returned):
                returned = await_blocking(returned)
        except Exception as err:  # noqa: BLE001 - the candidate's failure is part of the report
            raised = err
    finally:
        current.var.reset(current)
        serving.var.reset(serving)
    return _report(chosen, end, recording, returned, raised)


def _report(saga_id: str, end: str, recording: _Recording, returned: Any, raised: BaseException | None) -> ReplayReport:
    rows = list(recording.rows)
    rows.extend(ReplayRow(step, None, None, "not reached") for step in recording.steps[recording.cursor:])
    failure = next((s for s in recording.steps if s.failed), None)
    divergence = recording.divergence
    if divergence is not None:
        verdict: Verdict = "UNKNOWABLE"
    elif recording.cursor == len(recording.steps):
        verdict = "SAME_PATH"
    else:
        verdict = "STOPPED_EARLY"
    same: bool | None
    if failure is None:
        same = False
    elif recording.served_failure == failure.index:
        same = True
    else:
        same = None if divergence is not None else False
    return ReplayReport(saga_id, verdict, divergence, tuple(rows), end, failure, same, returned, raised)
